"""V-trace against an explicit double-sum ground truth (mirrors scalable_agent's vtrace_test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchenv.algorithms.impala import vtrace

TOLERANCES = {torch.float64: dict(rtol=1e-6, atol=1e-5), torch.float32: dict(rtol=1e-5, atol=1e-4)}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().numpy().astype(np.float64)


def _shaped_inputs(T: int, B: int) -> dict[str, np.ndarray]:
    """The inputs of scalable_agent's vtrace_test, float64."""
    log_rhos = 5.0 * (np.arange(T * B, dtype=np.float64) / (T * B) - 0.5)
    return dict(
        log_rhos=log_rhos.reshape(T, B),
        discounts=np.array([[0.9 / (b + 1) for b in range(B)] for _ in range(T)]),
        rewards=np.arange(T * B, dtype=np.float64).reshape(T, B),
        values=np.arange(T * B, dtype=np.float64).reshape(T, B) / B,
        bootstrap_value=np.arange(B, dtype=np.float64) + 1.0,
    )


def _torch(inputs: dict[str, np.ndarray], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {key: torch.as_tensor(value, dtype=dtype) for key, value in inputs.items()}


def _ground_truth(
    log_rhos: np.ndarray,
    discounts: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    clip_rho_threshold: float | None,
    clip_pg_rho_threshold: float | None,
    lambda_: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The explicit double sum, term by term (no recursion):

    v_s = V_s + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i c_i) rho_bar_t (r_t + gamma_t V_{t+1} - V_t),

    then the policy-gradient advantages from v_{s+1}."""
    T = values.shape[0]
    rhos = np.exp(log_rhos)
    rho_bar = rhos if clip_rho_threshold is None else np.minimum(clip_rho_threshold, rhos)
    cs = lambda_ * np.minimum(1.0, rhos)
    values_next = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    vs = np.zeros_like(values)
    for s in range(T):
        total = values[s].copy()
        for t in range(s, T):
            trace = np.ones_like(values[0])
            for i in range(s, t):
                trace = trace * discounts[i] * cs[i]
            td = rewards[t] + discounts[t] * values_next[t] - values[t]
            total = total + trace * rho_bar[t] * td
        vs[s] = total
    vs_next = np.concatenate([vs[1:], bootstrap_value[None]], axis=0)
    pg_rho = rhos if clip_pg_rho_threshold is None else np.minimum(clip_pg_rho_threshold, rhos)
    pg_advantages = pg_rho * (rewards + discounts * vs_next - values)
    return vs, pg_advantages


@DTYPES
@pytest.mark.parametrize("batch_size", [1, 5], ids=["B=1", "B=5"])
def test_from_importance_weights_matches_double_sum(batch_size: int, dtype: torch.dtype) -> None:
    inputs = _shaped_inputs(T=5, B=batch_size)
    out = vtrace.from_importance_weights(
        **_torch(inputs, dtype), clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2
    )
    vs, pg_advantages = _ground_truth(**inputs, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2)
    assert out.vs.dtype == dtype and out.pg_advantages.dtype == dtype
    np.testing.assert_allclose(_np(out.vs), vs, **TOLERANCES[dtype])
    np.testing.assert_allclose(_np(out.pg_advantages), pg_advantages, **TOLERANCES[dtype])


def test_reference_values_batch_one() -> None:
    """The published numbers (the V-trace reference code, Espeholt et al. 2018), B=1, float64."""
    out = vtrace.from_importance_weights(
        **_torch(_shaped_inputs(T=5, B=1), torch.float64),
        clip_rho_threshold=3.7,
        clip_pg_rho_threshold=2.2,
    )
    expected_vs = [0.200182, 2.709682, 8.513628, 11.932397, 7.33]
    expected_pg = [0.200182, 1.709682, 6.513628, 10.876614, 1.98]
    np.testing.assert_allclose(out.vs[:, 0].numpy(), expected_vs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages[:, 0].numpy(), expected_pg, rtol=0, atol=1e-5)


def _random_inputs(shape: tuple[int, ...], seed: int, log_rho_scale: float = 1.0):
    rng = np.random.default_rng(seed)
    return dict(
        log_rhos=log_rho_scale * rng.standard_normal(shape),
        discounts=rng.uniform(0.0, 1.0, shape) * (rng.uniform(size=shape) > 0.1),
        rewards=rng.standard_normal(shape),
        values=rng.standard_normal(shape),
        bootstrap_value=rng.standard_normal(shape[1:]),
    )


@pytest.mark.parametrize(
    "clip_rho, clip_pg_rho",
    [(None, None), (None, 2.2), (3.7, None), (1.0, 1.0)],
    ids=["none-none", "none-2.2", "3.7-none", "1-1"],
)
def test_thresholds_none_means_no_clipping(clip_rho, clip_pg_rho) -> None:
    inputs = _random_inputs((6, 4), seed=0, log_rho_scale=2.0)  # many rhos far above 1
    out = vtrace.from_importance_weights(
        **_torch(inputs, torch.float64),
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
    )
    vs, pg_advantages = _ground_truth(**inputs, clip_rho_threshold=clip_rho,
                                      clip_pg_rho_threshold=clip_pg_rho)  # fmt: skip
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg_advantages, rtol=1e-6, atol=1e-5)


def test_no_clipping_differs_from_clipping() -> None:
    inputs = _torch(_random_inputs((6, 4), seed=1, log_rho_scale=2.0), torch.float64)
    clipped = vtrace.from_importance_weights(**inputs)
    unclipped = vtrace.from_importance_weights(
        **inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None
    )
    assert not torch.allclose(clipped.vs, unclipped.vs)
    assert not torch.allclose(clipped.pg_advantages, unclipped.pg_advantages)


@pytest.mark.parametrize("lambda_", [0.0, 0.5, 0.95], ids=lambda v: f"lambda={v}")
@pytest.mark.parametrize("batch_size", [1, 5], ids=["B=1", "B=5"])
def test_lambda_scales_traces(lambda_: float, batch_size: int) -> None:
    inputs = _shaped_inputs(T=5, B=batch_size)
    out = vtrace.from_importance_weights(
        **_torch(inputs, torch.float64),
        clip_rho_threshold=3.7,
        clip_pg_rho_threshold=2.2,
        lambda_=lambda_,
    )
    vs, pg_advantages = _ground_truth(
        **inputs, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2, lambda_=lambda_
    )
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg_advantages, rtol=1e-6, atol=1e-5)


def test_lambda_zero_is_one_step_target() -> None:
    inputs = _torch(_random_inputs((4, 3), seed=2), torch.float64)
    out = vtrace.from_importance_weights(**inputs, lambda_=0.0)
    rho_bar = inputs["log_rhos"].exp().clamp(max=1.0)
    values_next = torch.cat([inputs["values"][1:], inputs["bootstrap_value"][None]])
    one_step = inputs["values"] + rho_bar * (
        inputs["rewards"] + inputs["discounts"] * values_next - inputs["values"]
    )
    torch.testing.assert_close(out.vs, one_step)


def test_on_policy_without_clipping_is_discounted_return() -> None:
    T, B, gamma = 6, 3, 0.9
    rewards = torch.arange(T * B, dtype=torch.float64).reshape(T, B)
    bootstrap = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    out = vtrace.from_importance_weights(
        log_rhos=torch.zeros(T, B, dtype=torch.float64),
        discounts=torch.full((T, B), gamma, dtype=torch.float64),
        rewards=rewards,
        values=torch.randn(T, B, dtype=torch.float64),
        bootstrap_value=bootstrap,
    )
    returns = torch.empty(T, B, dtype=torch.float64)
    running = bootstrap
    for t in reversed(range(T)):
        running = rewards[t] + gamma * running
        returns[t] = running
    torch.testing.assert_close(out.vs, returns)


@pytest.mark.parametrize("shape", [(1, 3), (7, 1), (4, 2, 3)], ids=["T=1", "T=7,B=1", "T,B,K"])
def test_odd_shapes_match_double_sum(shape: tuple[int, ...]) -> None:
    inputs = _random_inputs(shape, seed=3)
    out = vtrace.from_importance_weights(
        **_torch(inputs, torch.float64), clip_rho_threshold=1.5, clip_pg_rho_threshold=0.8
    )
    vs, pg_advantages = _ground_truth(**inputs, clip_rho_threshold=1.5, clip_pg_rho_threshold=0.8)
    assert out.vs.shape == shape
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg_advantages, rtol=1e-6, atol=1e-5)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("batch_size", [1, 5], ids=["B=1", "B=5"])
def test_from_logits_equals_importance_weights(batch_size: int) -> None:
    T, A = 5, 3
    rng = np.random.default_rng(4)
    behavior_logits = rng.standard_normal((T, batch_size, A))
    target_logits = rng.standard_normal((T, batch_size, A))
    actions = rng.integers(0, A, size=(T, batch_size))
    inputs = _shaped_inputs(T, batch_size)
    del inputs["log_rhos"]

    out = vtrace.from_logits(
        behavior_policy_logits=torch.as_tensor(behavior_logits),
        target_policy_logits=torch.as_tensor(target_logits),
        actions=torch.as_tensor(actions),
        **_torch(inputs, torch.float64),
        clip_rho_threshold=3.7,
        clip_pg_rho_threshold=2.2,
    )

    rows = np.arange(T)[:, None], np.arange(batch_size)[None, :], actions
    behavior_log_probs = _log_softmax(behavior_logits)[rows]
    target_log_probs = _log_softmax(target_logits)[rows]
    log_rhos = target_log_probs - behavior_log_probs
    np.testing.assert_allclose(out.behavior_action_log_probs.numpy(), behavior_log_probs)
    np.testing.assert_allclose(out.target_action_log_probs.numpy(), target_log_probs)
    np.testing.assert_allclose(out.log_rhos.numpy(), log_rhos)

    expected = vtrace.from_importance_weights(
        torch.as_tensor(log_rhos),
        **_torch(inputs, torch.float64),
        clip_rho_threshold=3.7,
        clip_pg_rho_threshold=2.2,
    )
    torch.testing.assert_close(out.vs, expected.vs)
    torch.testing.assert_close(out.pg_advantages, expected.pg_advantages)
    vs, pg_advantages = _ground_truth(
        log_rhos, **inputs, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2
    )
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg_advantages, rtol=1e-6, atol=1e-5)


def test_no_gradient_through_outputs() -> None:
    inputs = {
        key: value.requires_grad_()
        for key, value in _torch(_random_inputs((4, 3), seed=5), torch.float64).items()
    }
    out = vtrace.from_importance_weights(**inputs)
    assert not out.vs.requires_grad and out.vs.grad_fn is None
    assert not out.pg_advantages.requires_grad and out.pg_advantages.grad_fn is None


def test_from_logits_no_gradient_through_targets() -> None:
    T, B, A = 4, 2, 3
    behavior_logits = torch.randn(T, B, A, requires_grad=True)
    target_logits = torch.randn(T, B, A, requires_grad=True)
    values = torch.randn(T, B, requires_grad=True)
    bootstrap = torch.randn(B, requires_grad=True)
    out = vtrace.from_logits(
        behavior_logits,
        target_logits,
        torch.randint(0, A, (T, B)),
        torch.full((T, B), 0.99),
        torch.randn(T, B),
        values,
        bootstrap,
    )
    assert not out.vs.requires_grad
    assert not out.pg_advantages.requires_grad
    # Like scalable_agent/TorchBeast, the log-probabilities stay differentiable.
    out.target_action_log_probs.sum().backward()
    assert target_logits.grad is not None and behavior_logits.grad is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"bootstrap_value": torch.zeros(2)}, "bootstrap_value must have rank 2"),
        ({"log_rhos": torch.zeros(5, 2)}, "log_rhos must have rank 3"),
        ({"discounts": torch.zeros(5, 2, 3, 1)}, "discounts must have rank 3"),
        ({"rewards": torch.zeros(5, 2)}, "rewards must have rank 3"),
        ({"rewards": torch.zeros(5, 2, 4)}, "rewards must have the shape of values"),
        ({"bootstrap_value": torch.zeros(2, 4)}, "bootstrap_value must have the shape"),
    ],
    ids=["bootstrap-rank1", "log_rhos-rank2", "discounts-rank4", "rewards-rank2", "rewards-shape",
         "bootstrap-shape"],
)  # fmt: skip
def test_rank_and_shape_checks(overrides: dict, message: str) -> None:
    T, B, K = 5, 2, 3
    inputs = dict(
        log_rhos=torch.zeros(T, B, K),
        discounts=torch.zeros(T, B, K),
        rewards=torch.zeros(T, B, K),
        values=torch.zeros(T, B, K),
        bootstrap_value=torch.zeros(B, K),
    )
    inputs.update(overrides)
    with pytest.raises(ValueError, match=message):
        vtrace.from_importance_weights(**inputs)


def test_from_logits_rank_checks() -> None:
    T, B, A = 5, 2, 3
    args = dict(
        behavior_policy_logits=torch.zeros(T, B, A),
        target_policy_logits=torch.zeros(T, B, A),
        actions=torch.zeros(T, B, dtype=torch.long),
        discounts=torch.zeros(T, B),
        rewards=torch.zeros(T, B),
        values=torch.zeros(T, B),
        bootstrap_value=torch.zeros(B),
    )
    with pytest.raises(ValueError, match="behavior_policy_logits must have rank 3"):
        vtrace.from_logits(**{**args, "behavior_policy_logits": torch.zeros(T, A)})
    with pytest.raises(ValueError, match="actions must have rank 2"):
        vtrace.from_logits(**{**args, "actions": torch.zeros(T, B, 1, dtype=torch.long)})
    with pytest.raises(ValueError, match="target_policy_logits must have the shape"):
        vtrace.from_logits(**{**args, "target_policy_logits": torch.zeros(T, B, A + 1)})
    with pytest.raises(ValueError, match="actions must be integers"):
        vtrace.from_logits(**{**args, "actions": torch.zeros(T, B)})
    with pytest.raises(ValueError, match="bootstrap_value must have rank 1"):
        vtrace.from_logits(**{**args, "bootstrap_value": torch.zeros(1, B)})


@pytest.mark.parametrize(
    "kwargs",
    [{"clip_rho_threshold": 0.0}, {"clip_pg_rho_threshold": -1.0}, {"lambda_": 1.5}],
    ids=["clip_rho=0", "clip_pg_rho=-1", "lambda=1.5"],
)
def test_invalid_parameters(kwargs: dict) -> None:
    inputs = _torch(_random_inputs((3, 2), seed=6), torch.float32)
    with pytest.raises(ValueError):
        vtrace.from_importance_weights(**inputs, **kwargs)


def test_docstring_examples() -> None:
    import doctest

    from batchenv.algorithms.impala import vtrace as module

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
