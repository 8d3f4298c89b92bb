"""The random baseline: plausible, deterministic, cached atomically, robust to a bad cache."""

import json

import gymnasium as gym
import pytest
import torch

from batchenv.experiment import baseline
from batchenv.experiment.baseline import (
    cache_key,
    default_cache_path,
    is_in_graph,
    measure_random_return,
    random_return,
)

EPISODES = 20


class RowLengthEnv:
    """In-graph test env: row r's episodes last r + 1 steps, reward 1 per step."""

    max_episode_steps = 1000

    def __init__(self, num_envs, device="cpu", seed=None):
        self.num_envs = num_envs
        self.single_action_space = gym.spaces.Discrete(2)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int64)
        self.lengths = torch.arange(1, num_envs + 1)

    def reset(self, indices):
        self.elapsed[indices] = 0
        return torch.zeros(len(indices), 1)

    def step(self, action):
        assert action.shape == (self.num_envs,) and action.dtype == torch.int64
        self.elapsed += 1
        done = self.elapsed >= self.lengths
        return torch.zeros(self.num_envs, 1), torch.ones(self.num_envs), done, done & False


class NeverEnds(RowLengthEnv):
    """Never terminates nor truncates itself: only the cap ends its episodes."""

    max_episode_steps = 7

    def step(self, action):
        observ, reward, done, _ = super().step(action)
        return observ, reward, done & False, done & False


class NoLimit(NeverEnds):
    max_episode_steps = None


def test_gymnasium_cartpole_is_plausible_and_deterministic(tmp_path):
    first = random_return("CartPole-v1", EPISODES, cache=tmp_path / "a.json")
    second = random_return("CartPole-v1", EPISODES, cache=tmp_path / "b.json")
    assert 15 <= first <= 30
    assert first == second
    assert measure_random_return("CartPole-v1", EPISODES, seed=1) != first  # seed matters


def test_in_graph_cartpole_is_plausible_and_deterministic():
    first = measure_random_return("batchenv.kernels:CartPole", EPISODES)
    assert 15 <= first <= 30
    assert measure_random_return("batchenv.kernels:CartPole", EPISODES) == first


def test_cache_is_written_and_reused(tmp_path, monkeypatch):
    cache = tmp_path / "deeper" / "random_returns.json"
    value = random_return("CartPole-v1", 5, seed=3, cache=cache)
    assert json.loads(cache.read_text()) == {"CartPole-v1|episodes=5|seed=3": value}
    assert [p.name for p in cache.parent.iterdir()] == ["random_returns.json"]  # no tmp left

    def fail(*args):
        raise AssertionError("measured again although cached")

    monkeypatch.setattr(baseline, "measure_random_return", fail)
    assert random_return("CartPole-v1", 5, seed=3, cache=cache) == value
    # episodes and seed are part of the key: a new entry is measured and added
    monkeypatch.setattr(baseline, "measure_random_return", lambda env, episodes, seed: 1.5)
    assert random_return("CartPole-v1", 6, seed=3, cache=cache) == 1.5
    assert random_return("CartPole-v1", 5, seed=4, cache=cache) == 1.5
    assert set(json.loads(cache.read_text())) == {
        cache_key("CartPole-v1", 5, 3),
        cache_key("CartPole-v1", 6, 3),
        cache_key("CartPole-v1", 5, 4),
    }


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_corrupt_cache_is_measured_again_and_overwritten(tmp_path, monkeypatch, content):
    cache = tmp_path / "random_returns.json"
    cache.write_text(content)
    monkeypatch.setattr(baseline, "measure_random_return", lambda env, episodes, seed: 21.5)
    with pytest.warns(RuntimeWarning, match="is not a JSON object; measuring again"):
        assert random_return("CartPole-v1", 5, cache=cache) == 21.5
    assert json.loads(cache.read_text()) == {"CartPole-v1|episodes=5|seed=0": 21.5}


def test_default_cache_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHENV_CACHE", str(tmp_path))
    assert default_cache_path() == tmp_path / "random_returns.json"
    monkeypatch.delenv("BATCHENV_CACHE")
    assert default_cache_path().parts[-3:] == (".cache", "batchenv", "random_returns.json")


def test_in_graph_rows_play_a_fixed_share_of_the_episodes():
    # 150 episodes on 100 rows: rows 0-49 play 2 episodes, rows 50-99 one; row r lasts r + 1
    # (2 * (1 + ... + 50) + (51 + ... + 100)) / 150 = (2550 + 3775) / 150
    assert measure_random_return(f"{__name__}:RowLengthEnv", 150) == pytest.approx(6325 / 150)
    # 3 episodes on 3 rows: lengths 1, 2, 3
    assert measure_random_return(f"{__name__}:RowLengthEnv", 3) == pytest.approx(2.0)


def test_episodes_are_capped(monkeypatch):
    assert measure_random_return(f"{__name__}:NeverEnds", 4) == 7.0  # the env's limit
    monkeypatch.setattr(baseline, "DEFAULT_MAX_STEPS", 13)
    assert measure_random_return(f"{__name__}:NoLimit", 4) == 13.0  # no limit: the default


def test_env_kinds_are_told_apart():
    assert is_in_graph("batchenv.kernels:CartPole")
    assert not is_in_graph("CartPole-v1")
    assert not is_in_graph("ale_py:ALE/Pong-v5")  # Gymnasium's module:id form
    with pytest.raises(ValueError, match="episodes must be an int >= 1"):
        measure_random_return("CartPole-v1", 0)
