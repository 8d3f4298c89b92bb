"""The SAC class on the four methods: acting, storing, update cadence, state round trips."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from batchenv.algorithms.sac import SAC, SACConfig, target_entropy

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
SMALL = dict(hidden_layers=(8,), batch_size=8, buffer_size=64)


PENDULUM_ACTIONS = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def make(action_space=PENDULUM_ACTIONS, **values) -> SAC:
    return SAC(BOX, action_space, SACConfig(**{**SMALL, **values}))


def step(algo: SAC, rows: int, done=None, truncated=None):
    observ = torch.randn(rows, 3)
    action = algo.perform(observ)
    done = torch.zeros(rows, dtype=torch.bool) if done is None else done
    truncated = torch.zeros(rows, dtype=torch.bool) if truncated is None else truncated
    return action, algo.experience(observ, action, torch.ones(rows), done, observ, truncated)


def test_truncation_is_stored_apart_from_termination():
    algo = make(learning_starts=100)
    done, truncated = torch.tensor([True, True, False]), torch.tensor([True, False, False])
    step(algo, 3, done=done, truncated=truncated)
    assert algo.memory.terminated[0].tolist() == [False, True, False]
    assert algo.memory.truncated[0].tolist() == [True, False, False]
    batch = algo.memory.sample(64, torch.Generator().manual_seed(0))
    # Only the terminated column (1) loses its bootstrap.
    for column, discount in zip(batch.indices.tolist(), batch.discount.tolist()):
        assert discount == pytest.approx(0.0 if column == 1 else 0.99)


def test_random_actions_before_learning_starts_then_updates_by_replay_ratio():
    algo = make(learning_starts=8, replay_ratio=0.5)
    actions = [step(algo, 4)[0] for _ in range(2)]  # env steps 4 and 8: no update yet
    assert all(bool((a.abs() <= 2).all()) for a in actions)
    assert algo.q_steps == 0
    _, summaries = step(algo, 4)  # 12 > 8: 0.5 * 4 gradient steps
    assert algo.q_steps == 2 and summaries["updates"].item() == 2
    assert set(summaries) == {"q_loss", "q_value", "policy_loss", "alpha", "entropy", "updates"}
    _, summaries = step(algo, 4, done=torch.ones(4, dtype=torch.bool))
    assert algo.q_steps == 4


def test_policy_steps_follow_cleanrl_delay():
    algo = make(learning_starts=0, replay_ratio=0.25, policy_frequency=2)
    step(algo, 4)  # Q step 1: no policy step
    assert algo.policy_optimizer.state == {}
    step(algo, 4)  # Q step 2: two policy (and temperature) steps
    first = next(iter(algo.policy_optimizer.state.values()))
    assert int(first["step"]) == 2
    assert int(next(iter(algo.alpha_optimizer.state.values()))["step"]) == 2


def test_fixed_alpha_without_autotune_and_log_alpha_clamp():
    fixed = make(learning_starts=0, autotune=False, alpha=0.05)
    for _ in range(3):
        step(fixed, 4)
    assert fixed.alpha.item() == pytest.approx(0.05) and fixed.alpha_optimizer.state == {}
    # The entropy starts above the target -1: Adam (lr 1) lowers log alpha by ~1 per step.
    clamped = make(learning_starts=0, log_alpha_range=(-0.5, 0.0), alpha_lr=1.0)
    for _ in range(3):
        step(clamped, 4)
    assert clamped.log_alpha.item() == -0.5


@pytest.mark.parametrize("variant", ["expectation", "gumbel"])
def test_discrete_actions_keep_the_space_start(variant):
    algo = make(gym.spaces.Discrete(3, start=-1), discrete=variant, learning_starts=4)
    seen = set()
    for _ in range(6):
        action, _ = step(algo, 4)
        seen.update(action.tolist())
    assert seen <= {-1, 0, 1} and algo.q_steps > 0
    assert algo.memory.action.min().item() >= 0  # stored 0-based
    assert algo.eval_mode().perform(torch.zeros(2, 3)).dtype == torch.int64


def test_target_entropy_per_action_space():
    assert target_entropy(gym.spaces.Box(-1, 1, (6,)), SACConfig()) == -6.0
    discrete = target_entropy(gym.spaces.Discrete(3), SACConfig(target_entropy_scale=0.89))
    assert discrete == pytest.approx(0.89 * np.log(3))


def test_misuse_raises_with_what_to_do():
    algo = make()
    with pytest.raises(RuntimeError, match="before any perform"):
        algo.experience(torch.zeros(2, 3), torch.zeros(2, 1), torch.zeros(2),
                        torch.zeros(2, dtype=torch.bool), torch.zeros(2, 3),
                        torch.zeros(2, dtype=torch.bool))  # fmt: skip
    algo.perform(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="got 3 rows, but this SAC serves 2"):
        algo.perform(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="has infinite bounds"):
        make(gym.spaces.Box(-np.inf, np.inf, (1,), np.float32))
    with pytest.raises(TypeError, match="bounded float Box .* or a Discrete"):
        make(gym.spaces.MultiBinary(2))


@pytest.mark.parametrize(
    "action_space, variant",
    [
        (gym.spaces.Box(-2.0, 2.0, (1,), np.float32), "expectation"),
        (gym.spaces.Discrete(2), "expectation"),
        (gym.spaces.Discrete(2), "gumbel"),
    ],
    ids=["box", "discrete-expectation", "discrete-gumbel"],
)
def test_state_dict_round_trip_continues_bit_identically(action_space, variant):
    config = SACConfig(**SMALL, learning_starts=16, discrete=variant)
    inputs = torch.Generator().manual_seed(5)

    def run(algo, calls, seed):
        inputs.manual_seed(seed)
        for _ in range(calls):
            observ = torch.randn(4, 3, generator=inputs)
            done = torch.rand(4, generator=inputs) < 0.2
            truncated = done & (torch.rand(4, generator=inputs) < 0.5)
            action = algo.perform(observ)
            algo.experience(observ, action, torch.randn(4, generator=inputs), done,
                            torch.randn(4, 3, generator=inputs), truncated)  # fmt: skip

    straight = SAC(BOX, action_space, config)
    run(straight, 10, seed=1)
    saved = copy.deepcopy(straight.state_dict())
    run(straight, 10, seed=2)

    resumed = SAC(BOX, action_space, config.replace(seed=99))  # other init: all is restored
    resumed.load_state_dict(saved)
    run(resumed, 10, seed=2)
    assert resumed.q_steps == straight.q_steps > 0
    for name in ("policy", "q1", "q2", "q1_target", "q2_target"):
        for a, b in zip(getattr(straight, name).parameters(), getattr(resumed, name).parameters()):
            assert torch.equal(a, b), name
    assert torch.equal(straight.log_alpha, resumed.log_alpha)
    assert torch.equal(straight.memory.observ, resumed.memory.observ)
