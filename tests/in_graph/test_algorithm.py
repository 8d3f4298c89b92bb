"""The Algorithm protocol and RandomAlgorithm."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from batchenv.in_graph.algorithm import Algorithm, RandomAlgorithm, overrides


class OnlyPerform(Algorithm):
    def perform(self, observ):
        return torch.zeros(len(observ), dtype=torch.int64)


class DuckTyped:
    def begin_episodes(self, agent_indices):
        return None

    def perform(self, observ):
        return observ

    def experience(self, observ, action, reward, done, next_observ, truncated):
        return None

    def end_episodes(self, agent_indices):
        return {"x": torch.tensor(1.0)}


def test_base_class_gives_no_op_callbacks():
    algo = OnlyPerform()
    rows = torch.tensor([0, 2])
    assert algo.begin_episodes(rows) is None and algo.end_episodes(rows) is None
    batch = torch.zeros(3)
    assert algo.experience(batch, batch, batch, batch.bool(), batch, batch.bool()) is None
    assert isinstance(algo, Algorithm) and isinstance(DuckTyped(), Algorithm)
    assert not overrides(algo, "end_episodes") and overrides(DuckTyped(), "end_episodes")
    with pytest.raises(TypeError):
        Algorithm()


def test_perform_is_required():
    class Nothing(Algorithm):
        pass

    with pytest.raises(NotImplementedError, match="Nothing must implement perform"):
        Nothing().perform(torch.zeros(1))


SPACES = {
    "discrete": gym.spaces.Discrete(3, start=2),
    "multi_discrete": gym.spaces.MultiDiscrete([2, 5]),
    "multi_binary": gym.spaces.MultiBinary(3),
    "box": gym.spaces.Box(-2.0, np.array([1.0, 4.0], np.float32)),
    "box_int": gym.spaces.Box(0, 3, (2,), np.int64),
}


@pytest.mark.parametrize("name", SPACES)
def test_random_actions_cover_the_space(name):
    space = SPACES[name]
    algo = RandomAlgorithm(space, seed=0)
    action = algo.perform(torch.zeros(4000, 1))
    assert action.shape == (4000, *space.shape)
    assert action.dtype == (torch.float32 if isinstance(space, gym.spaces.Box) else torch.int64)
    values = action.numpy().astype(space.dtype)
    assert all(space.contains(value) for value in values[:500])
    if name == "discrete":
        assert sorted(np.unique(values).tolist()) == [2, 3, 4]
        assert np.bincount(values - 2).min() > 1200  # roughly uniform
    if name == "box":
        assert values.min(0) == pytest.approx([-2, -2], abs=0.01)
        assert values.max(0) == pytest.approx([1, 4], abs=0.01)


def test_unbounded_box_is_normal_and_half_bounded_is_shifted_exponential():
    space = gym.spaces.Box(
        np.array([-np.inf, 1.0, -np.inf], np.float32), np.array([np.inf, np.inf, -1.0], np.float32)
    )
    action = RandomAlgorithm(space, seed=1).perform(torch.zeros(20000, 1))
    assert action[:, 0].mean().item() == pytest.approx(0, abs=0.05)
    assert action[:, 0].std().item() == pytest.approx(1, abs=0.05)
    assert action[:, 1].min().item() >= 1.0 and action[:, 1].mean().item() == pytest.approx(
        2, abs=0.05
    )
    assert action[:, 2].max().item() <= -1.0


def test_seeded_streams_repeat_and_calls_differ():
    def actions(seed):
        algo = RandomAlgorithm(gym.spaces.Discrete(10), seed=seed)
        return [algo.perform(torch.zeros(50, 2)) for _ in range(2)]

    first, second = actions(7)
    again, _ = actions(7)
    other, _ = actions(8)
    assert torch.equal(first, again)
    assert not torch.equal(first, second) and not torch.equal(first, other)


def test_multi_agent_actions_follow_the_observation_axes():
    observation_space = gym.spaces.Box(-1, 1, (6,), np.float32)
    algo = RandomAlgorithm(
        gym.spaces.MultiDiscrete([3, 3]), seed=0, observation_space=observation_space
    )
    assert algo.perform(torch.zeros(8, 5, 6)).shape == (8, 5, 2)


def test_unsupported_space_is_refused():
    with pytest.raises(TypeError, match="RandomAlgorithm samples Box, Discrete"):
        RandomAlgorithm(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))
