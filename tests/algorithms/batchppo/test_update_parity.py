"""The packed update equals the padded one it replaced (same parameters, same batch).

BatchPPO's update used to run its networks on episodes padded to ``[N, T]`` and mask the
losses; it now runs them on the valid steps only (``Episodes.pack``). ``_padded_update``
below is the old code, kept as the reference: one update from the same state and the same
episodes must leave the same parameters, Adam state, beta and summaries, to float32
rounding (the sums run in another order).
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from batchenv.algorithms.batchppo import BatchPPO, BatchPPOConfig
from batchenv.algorithms.batchppo.losses import adapt_penalty, masked_mean
from batchenv.algorithms.batchppo.memory import Episodes

TOLERANCE = dict(rtol=1e-5, atol=1e-5)

CASES = {
    "categorical": (gym.spaces.Discrete(2), {}),
    "gaussian-gae": (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), {"gae_lambda": 0.95}),
    "gaussian-minibatches-entropy": (
        gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
        {"minibatches": 3, "entropy_coef": 0.01},
    ),
    "categorical-recurrent": (gym.spaces.Discrete(3), {"recurrent": True, "chunk_length": 7}),
}


def _padded_policy_loss(head, old, new, action, advantage, mask, beta, config):
    """The padded loss as it was: means over valid steps of ``[N, T]`` batches."""
    old = torch.where(mask.unsqueeze(-1), old, new.detach())
    kl = masked_mean(head.kl(old, new), mask, dim=1)
    ratio = torch.exp(head.log_prob(new, action) - head.log_prob(old, action))
    surrogate = -masked_mean(ratio * advantage, mask, dim=1)
    threshold = config.kl_cutoff_factor * config.kl_target
    cutoff = config.kl_cutoff_coef * torch.relu(kl - threshold).square()
    entropy = masked_mean(head.entropy(new), mask, dim=1)
    loss = surrogate + beta * kl + cutoff - config.entropy_coef * entropy
    return loss.mean(), {"kl": kl.mean().detach(), "entropy": entropy.mean().detach()}


def _padded_update(algo: BatchPPO, episodes: Episodes) -> dict[str, torch.Tensor]:
    """BatchPPO._update before packing: every network call on the padded batch."""
    config = algo.config
    observ = algo.observ_norm.transform(episodes.observ)
    target, advantage = algo.targets(episodes)
    totals: dict[str, torch.Tensor] = {}
    steps = 0
    for _ in range(config.update_epochs):
        if config.minibatches == 1:
            indices = [torch.arange(len(episodes))]
        else:
            order = torch.randperm(len(episodes), generator=algo.generator)
            indices = list(order.chunk(min(config.minibatches, len(episodes))))
        for index in indices:
            batch = episodes.select(index)
            mask = batch.mask
            params = algo.policy.sequence(observ[index], config.chunk_length)
            loss_policy, stats = _padded_policy_loss(
                algo.policy.head,
                batch.params,
                params,
                batch.action,
                advantage[index],
                mask,
                algo.beta,
                config,
            )
            value = algo.value(observ[index]).squeeze(-1)
            loss_value = 0.5 * masked_mean((target[index] - value).square(), mask)
            algo.optimizer.zero_grad(set_to_none=True)
            (loss_policy + loss_value).backward()
            algo.optimizer.step()
            stats.update(policy_loss=loss_policy.detach(), value_loss=loss_value.detach())
            for name, value_ in stats.items():
                totals[name] = totals.get(name, 0.0) + value_
            steps += 1
    with torch.no_grad():
        params = algo.policy.sequence(observ, config.chunk_length)
        old = torch.where(episodes.mask.unsqueeze(-1), episodes.params, params)
        kl = masked_mean(algo.policy.head.kl(old, params), episodes.mask)
    algo.beta = adapt_penalty(algo.beta, kl, config.kl_target)
    return {**{name: total / steps for name, total in totals.items()}, "kl": kl}


def _episodes(algo: BatchPPO, action_space: gym.Space, seed: int) -> Episodes:
    """Eight episodes of 1 to 40 steps (two truncated) drawn from the policy's own
    distributions, zero-padded to the longest, as EpisodeMemory.take() makes them."""
    generator = torch.Generator().manual_seed(seed)
    count, steps = 8, 40
    length = torch.randint(1, steps + 1, (count,), generator=generator)
    length[0], length[1] = steps, 1
    mask = torch.arange(steps) < length.unsqueeze(1)
    observ = torch.randn(count, steps, algo.observ_size, generator=generator) * 2 + 0.5
    with torch.no_grad():
        params = algo.policy.sequence(algo.observ_norm.transform(observ))
        params = params + 0.05 * torch.randn(params.shape, generator=generator)
        if isinstance(action_space, gym.spaces.Box):
            size = algo.policy.head.action_size
            params[..., size:] = params[..., size:].abs() + 0.1  # positive stds
            action = torch.randn(count, steps, size, generator=generator)
        else:
            action = torch.randint(0, int(action_space.n), (count, steps), generator=generator)
    reward = torch.rand(count, steps, generator=generator) * 3 - 1
    step_mask = mask.reshape(count, steps, *[1] * (action.dim() - 2))
    return Episodes(
        observ=observ * mask.unsqueeze(-1),
        action=torch.where(step_mask, action, torch.zeros((), dtype=action.dtype)),
        reward=reward * mask,
        params=params * mask.unsqueeze(-1),
        length=length,
        truncated=torch.tensor([False, True, False, True, False, False, False, False]),
        last_observ=torch.randn(count, algo.observ_size, generator=generator),
    )


def _algo(action_space: gym.Space, overrides: dict) -> BatchPPO:
    config = BatchPPOConfig(
        policy_layers=(32, 16), value_layers=(32, 16), update_epochs=4, seed=3, **overrides
    )
    algo = BatchPPO(gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), action_space, config)
    algo.beta = torch.tensor(0.5)
    with torch.no_grad():  # stats of 200 observations and rewards, as after some training
        algo.observ_norm.update(torch.randn(200, 3) * 2 + 0.5)
        algo.reward_norm.update(torch.rand(200) * 3 - 1)
    return algo


def parameters(algo: BatchPPO) -> list[torch.Tensor]:
    return [*algo.policy.parameters(), *algo.value.parameters()]


@pytest.mark.parametrize("case", list(CASES))
def test_packed_update_equals_the_padded_update(case):
    action_space, overrides = CASES[case]
    packed = _algo(action_space, overrides)
    padded = copy.deepcopy(packed)
    start = [p.detach().clone() for p in parameters(packed)]
    for seed in range(3):  # three updates in a row, so Adam's moments matter too
        episodes = _episodes(packed, action_space, seed)
        summaries = packed._update(episodes)
        expected = _padded_update(padded, episodes)
        for name, value in expected.items():
            torch.testing.assert_close(summaries[name], value, **TOLERANCE, msg=name)
        torch.testing.assert_close(packed.beta, padded.beta)
    for (name, mine), (_, theirs) in zip(
        [*packed.policy.named_parameters(), *packed.value.named_parameters()],
        [*padded.policy.named_parameters(), *padded.value.named_parameters()],
        strict=True,
    ):
        torch.testing.assert_close(mine, theirs, **TOLERANCE, msg=name)
    moved = [(mine - first).abs().max() for mine, first in zip(parameters(packed), start)]
    assert min(moved) > 1e-4  # the updates did change every parameter
    for mine, theirs in zip(
        packed.optimizer.state.values(), padded.optimizer.state.values(), strict=True
    ):
        torch.testing.assert_close(mine["exp_avg"], theirs["exp_avg"], **TOLERANCE)
        torch.testing.assert_close(mine["exp_avg_sq"], theirs["exp_avg_sq"], **TOLERANCE)


def test_one_packed_step_has_the_padded_loss_and_gradients():
    action_space, overrides = CASES["categorical"]
    algo = _algo(action_space, overrides)
    episodes = _episodes(algo, action_space, seed=7)
    observ = algo.observ_norm.transform(episodes.observ)
    target, advantage = algo.targets(episodes, observ)
    steps = episodes.pack(observ, advantage, target)
    assert steps.observ.shape[0] == int(episodes.length.sum()) < episodes.mask.numel()

    def gradients(loss):
        algo.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        return [p.grad.clone() for p in [*algo.policy.parameters(), *algo.value.parameters()]]

    from batchenv.algorithms.batchppo.losses import policy_loss, value_loss

    config = algo.config
    packed_policy, _ = policy_loss(
        algo.policy.head,
        steps.params,
        algo.policy.sequence(steps.observ),
        steps.action,
        steps.advantage,
        steps.episode,
        steps.length,
        algo.beta,
        config.kl_target,
        config.kl_cutoff_factor,
        config.kl_cutoff_coef,
    )
    packed_loss = packed_policy + value_loss(algo.value(steps.observ).squeeze(-1), steps.target)
    packed_grads = gradients(packed_loss)
    padded_policy, _ = _padded_policy_loss(
        algo.policy.head,
        episodes.params,
        algo.policy.sequence(observ),
        episodes.action,
        advantage,
        episodes.mask,
        algo.beta,
        config,
    )
    value = algo.value(observ).squeeze(-1)
    padded_loss = padded_policy + 0.5 * masked_mean((target - value).square(), episodes.mask)
    padded_grads = gradients(padded_loss)
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-6, atol=1e-6)
    for mine, theirs in zip(packed_grads, padded_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
