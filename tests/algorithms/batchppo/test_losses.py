"""KL, returns, GAE, advantages, the beta rule and the PPO loss on hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Categorical, Independent, Normal, kl_divergence

from batchenv.algorithms.batchppo.losses import (
    adapt_penalty,
    discounted_returns,
    gae_advantages,
    normalize_advantages,
    policy_loss,
)
from batchenv.algorithms.batchppo.networks import (
    CategoricalHead,
    GaussianHead,
    categorical_kl,
    diag_normal_kl,
)

GEN = torch.Generator().manual_seed(0)


def _gaussian(mean, std):
    return Independent(Normal(mean, std), 1)


@pytest.mark.parametrize("shape", [(1,), (7, 3), (2, 5, 6)], ids=["1", "7x3", "2x5x6"])
def test_diag_normal_kl_matches_torch_distributions(shape):
    mean0, mean1 = torch.randn(shape, generator=GEN), torch.randn(shape, generator=GEN)
    std0 = torch.rand(shape, generator=GEN) + 0.1
    std1 = torch.rand(shape, generator=GEN) + 0.1
    expected = kl_divergence(_gaussian(mean0, std0), _gaussian(mean1, std1))
    torch.testing.assert_close(diag_normal_kl(mean0, std0, mean1, std1), expected)


def test_categorical_kl_matches_torch_distributions():
    logits0, logits1 = torch.randn(6, 4, generator=GEN), torch.randn(6, 4, generator=GEN)
    expected = kl_divergence(Categorical(logits=logits0), Categorical(logits=logits1))
    torch.testing.assert_close(categorical_kl(logits0, logits1), expected)


def test_heads_log_prob_and_entropy_match_torch_distributions():
    gaussian = GaussianHead(4, 3, init_std=0.35, init_output_factor=0.1)
    params = gaussian(torch.randn(5, 4, generator=GEN)).detach()
    mean, std = gaussian.split(params)
    torch.testing.assert_close(std, torch.full((5, 3), 0.35))
    action = torch.randn(5, 3, generator=GEN)
    torch.testing.assert_close(
        gaussian.log_prob(params, action), _gaussian(mean, std).log_prob(action)
    )
    torch.testing.assert_close(gaussian.entropy(params), _gaussian(mean, std).entropy())
    categorical = CategoricalHead(4, 3, init_output_factor=0.1)
    logits = torch.randn(5, 3, generator=GEN)
    action = torch.tensor([0, 1, 2, 1, 0])
    torch.testing.assert_close(
        categorical.log_prob(logits, action), Categorical(logits=logits).log_prob(action)
    )
    torch.testing.assert_close(categorical.entropy(logits), Categorical(logits=logits).entropy())


def test_masked_returns_by_hand():
    # Episode 0 terminated after 3 steps; episode 1 truncated after 2 (bootstrap 4), its
    # padding holds garbage that must be ignored.
    reward = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 7.0]])
    length = torch.tensor([3, 2])
    bootstrap = torch.tensor([0.0, 4.0])
    returns = discounted_returns(reward, length, 0.5, bootstrap)
    # R2 = 3, R1 = 2 + 0.5 * 3 = 3.5, R0 = 1 + 0.5 * 3.5 = 2.75
    # R1 = 1 + 0.5 * 4 = 3, R0 = 1 + 0.5 * 3 = 2.5, padding 0
    torch.testing.assert_close(returns, torch.tensor([[2.75, 3.5, 3.0], [2.5, 3.0, 0.0]]))


def test_truncation_bootstraps_and_termination_does_not():
    reward = torch.ones(2, 4)
    length = torch.tensor([2, 2])
    value_after = torch.tensor([10.0, 10.0])
    truncated = torch.tensor([True, False])
    bootstrap = torch.where(truncated, value_after, 0.0)
    returns = discounted_returns(reward, length, 0.9, bootstrap)
    # Truncated: R1 = 1 + 0.9 * 10 = 10, R0 = 1 + 0.9 * 10 = 10. Terminated: 1.9, 1.
    torch.testing.assert_close(returns[0, :2], torch.tensor([10.0, 10.0]))
    torch.testing.assert_close(returns[1, :2], torch.tensor([1.9, 1.0]))


def test_gae_by_hand_never_reads_padding():
    reward = torch.tensor([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0]])
    value = torch.tensor([[0.5, 1.0, 100.0], [0.5, 1.0, 100.0]])  # 100: padding garbage
    length = torch.tensor([2, 2])
    bootstrap = torch.tensor([0.0, 2.0])  # terminated, truncated with V(next) = 2
    advantages = gae_advantages(reward, value, length, 0.5, 0.5, bootstrap)
    # Terminated: d1 = 2 + 0 - 1 = 1, d0 = 1 + 0.5 * 1 - 0.5 = 1; A1 = 1, A0 = 1 + 0.25 * 1.
    # Truncated:  d1 = 2 + 0.5 * 2 - 1 = 2;                      A1 = 2, A0 = 1 + 0.25 * 2.
    torch.testing.assert_close(advantages, torch.tensor([[1.25, 1.0, 0.0], [1.5, 2.0, 0.0]]))


def test_gae_with_lambda_one_is_the_return_minus_the_value():
    reward, value = torch.randn(4, 6, generator=GEN), torch.randn(4, 6, generator=GEN)
    length = torch.tensor([6, 1, 3, 5])
    bootstrap = torch.randn(4, generator=GEN)
    returns = discounted_returns(reward, length, 0.9, bootstrap)
    mask = torch.arange(6) < length[:, None]
    expected = torch.where(mask, returns - value, 0.0)
    torch.testing.assert_close(gae_advantages(reward, value, length, 0.9, 1.0, bootstrap), expected)


def test_advantages_normalised_over_valid_steps_only():
    advantage = torch.tensor([[1.0, 2.0, 3.0], [5.0, 50.0, 50.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    out = normalize_advantages(advantage, mask)
    valid = out[mask]
    torch.testing.assert_close(valid.mean(), torch.tensor(0.0))
    torch.testing.assert_close(valid.var(unbiased=False), torch.tensor(1.0), rtol=1e-6, atol=1e-6)
    assert out[1, 1:].eq(0).all()


@pytest.mark.parametrize(
    "kl, expected",
    [(0.02, 1.5), (0.0131, 1.5), (0.013, 1.0), (0.01, 1.0), (0.007, 1.0), (0.0069, 1 / 1.5)],
)
def test_beta_adaptation_rule(kl, expected):
    beta = adapt_penalty(torch.tensor(1.0), torch.tensor(kl), 0.01)
    torch.testing.assert_close(beta, torch.tensor(expected))


def test_policy_loss_by_hand_with_cutoff():
    head = GaussianHead(1, 1, init_std=1.0, init_output_factor=0.1)
    # One episode of 2 steps (packed rows, no padding). Old N(0, 1); new N(1, 1); actions 0;
    # A = 1.
    old = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    new = torch.tensor([[1.0, 1.0], [1.0, 1.0]], requires_grad=True)
    loss, stats = policy_loss(
        head,
        old,
        new,
        torch.zeros(2, 1),
        torch.ones(2),
        episode=torch.tensor([0, 0]),
        length=torch.tensor([2]),
        beta=torch.tensor(2.0),
        kl_target=0.01,
        kl_cutoff_factor=2,
        kl_cutoff_coef=1000,
    )
    # KL = 1/2 per step; ratio = exp(-1/2); cutoff = 1000 * (0.5 - 0.02)^2.
    expected = -math.exp(-0.5) + 2.0 * 0.5 + 1000 * (0.5 - 0.02) ** 2
    torch.testing.assert_close(loss, torch.tensor(expected))
    torch.testing.assert_close(stats["kl"], torch.tensor(0.5))
    assert stats["kl_cutoff_fraction"].item() == 1.0
    loss.backward()
    # d/dmean of -exp(-(mean - 0)^2 / 2) + (2 + 2000 (KL - 0.02)) KL, KL = mean^2 / 2, per
    # step (each is half of the episode mean): exp(-1/2) + 2 + 2000 * 0.48, halved.
    expected_grad = (math.exp(-0.5) + 2.0 + 2000 * 0.48) / 2
    torch.testing.assert_close(new.grad[:, 0], torch.full((2,), expected_grad))


def test_policy_loss_of_an_unchanged_policy_is_minus_the_mean_advantage():
    head = CategoricalHead(1, 3, init_output_factor=0.1)
    # Two episodes packed: 4 steps, then 2.
    logits = torch.randn(6, 3, generator=GEN)
    advantage = torch.randn(6, generator=GEN)
    action = torch.randint(0, 3, (6,), generator=GEN)
    loss, stats = policy_loss(
        head,
        logits,
        logits.clone(),
        action,
        advantage,
        torch.tensor([0, 0, 0, 0, 1, 1]),
        torch.tensor([4, 2]),
        torch.tensor(1.0),
        0.01,
        2,
        1000,
        entropy_coef=0.0,
    )
    expected = -(advantage[:4].mean() + advantage[4:].mean()) / 2
    torch.testing.assert_close(loss, expected)
    assert stats["kl"].abs().item() < 1e-6
