"""IMPALA losses: values, closed-form gradients and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from batchenv.algorithms.impala import losses, vtrace

SHAPES = pytest.mark.parametrize("shape", [(1, 1), (5, 3), (7,)], ids=["T=1,B=1", "T=5,B=3", "N=7"])


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@SHAPES
def test_baseline_loss_value(shape: tuple[int, ...]) -> None:
    advantages = torch.randn(shape, dtype=torch.float64)
    expected = 0.5 * sum(float(a) ** 2 for a in advantages.flatten())
    assert losses.compute_baseline_loss(advantages).item() == pytest.approx(expected)


def test_baseline_loss_gradient_is_minus_vtrace_advantage() -> None:
    T, B = 5, 3
    values = torch.randn(T, B, dtype=torch.float64, requires_grad=True)
    bootstrap = torch.randn(B, dtype=torch.float64, requires_grad=True)
    returns = vtrace.from_importance_weights(
        log_rhos=torch.randn(T, B, dtype=torch.float64),
        discounts=torch.full((T, B), 0.99, dtype=torch.float64),
        rewards=torch.randn(T, B, dtype=torch.float64),
        values=values,
        bootstrap_value=bootstrap,
    )
    loss = losses.compute_baseline_loss(returns.vs - values)
    loss.backward()
    torch.testing.assert_close(values.grad, -(returns.vs - values.detach()))
    assert bootstrap.grad is None  # no gradient through the targets


def test_baseline_loss_gradcheck() -> None:
    advantages = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(losses.compute_baseline_loss, (advantages,))


@SHAPES
def test_entropy_loss_is_negative_entropy(shape: tuple[int, ...]) -> None:
    logits = torch.randn(*shape, 4, dtype=torch.float64)
    entropy = torch.distributions.Categorical(logits=logits).entropy().sum()
    torch.testing.assert_close(losses.compute_entropy_loss(logits), -entropy)


def test_entropy_loss_uniform_and_extreme_logits() -> None:
    uniform = torch.zeros(2, 3, 5)
    assert losses.compute_entropy_loss(uniform).item() == pytest.approx(-6 * math.log(5.0))
    # A near-deterministic policy has entropy ~0 and no NaN from 0 * log 0.
    peaked = torch.tensor([[[1000.0, 0.0, 0.0]]], requires_grad=True)
    loss = losses.compute_entropy_loss(peaked)
    loss.backward()
    assert abs(loss.item()) < 1e-6 and torch.isfinite(peaked.grad).all()


def test_entropy_loss_gradcheck() -> None:
    logits = torch.randn(3, 2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(losses.compute_entropy_loss, (logits,))


@SHAPES
def test_policy_gradient_loss_value(shape: tuple[int, ...]) -> None:
    A = 4
    logits = torch.randn(*shape, A, dtype=torch.float64)
    actions = torch.randint(0, A, shape)
    advantages = torch.randn(shape, dtype=torch.float64)
    log_probs = F.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    expected = torch.sum(-log_probs * advantages)
    torch.testing.assert_close(
        losses.compute_policy_gradient_loss(logits, actions, advantages), expected
    )


def test_policy_gradient_loss_gradient_closed_form() -> None:
    T, B, A = 5, 3, 4
    logits = torch.randn(T, B, A, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, A, (T, B))
    advantages = torch.randn(T, B, dtype=torch.float64, requires_grad=True)
    losses.compute_policy_gradient_loss(logits, actions, advantages).backward()
    expected = (F.softmax(logits.detach(), -1) - F.one_hot(actions, A)) * advantages.detach()[
        ..., None
    ]
    torch.testing.assert_close(logits.grad, expected)
    assert advantages.grad is None  # advantages are constants


def test_policy_gradient_loss_gradcheck() -> None:
    T, B, A = 3, 2, 4
    actions = torch.randint(0, A, (T, B))
    advantages = torch.randn(T, B, dtype=torch.float64)
    logits = torch.randn(T, B, A, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: losses.compute_policy_gradient_loss(x, actions, advantages), (logits,)
    )


def test_policy_gradient_loss_matches_vtrace_log_probs() -> None:
    """The loss equals -sum(target_action_log_probs * pg_advantages) from from_logits."""
    T, B, A = 4, 3, 5
    target_logits = torch.randn(T, B, A, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, A, (T, B))
    out = vtrace.from_logits(
        torch.randn(T, B, A, dtype=torch.float64),
        target_logits,
        actions,
        torch.full((T, B), 0.99, dtype=torch.float64),
        torch.randn(T, B, dtype=torch.float64),
        torch.randn(T, B, dtype=torch.float64),
        torch.randn(B, dtype=torch.float64),
    )
    loss = losses.compute_policy_gradient_loss(target_logits, actions, out.pg_advantages)
    torch.testing.assert_close(loss, -torch.sum(out.target_action_log_probs * out.pg_advantages))


def test_policy_gradient_loss_shape_errors() -> None:
    logits = torch.zeros(5, 3, 4)
    with pytest.raises(ValueError, match="logits must be actions' shape"):
        losses.compute_policy_gradient_loss(logits, torch.zeros(5, 2, dtype=torch.long),
                                            torch.zeros(5, 2))  # fmt: skip
    with pytest.raises(ValueError, match="advantages must have the shape"):
        losses.compute_policy_gradient_loss(logits, torch.zeros(5, 3, dtype=torch.long),
                                            torch.zeros(5))  # fmt: skip


def test_docstring_examples() -> None:
    import doctest

    from batchenv.algorithms.impala import losses as module

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
