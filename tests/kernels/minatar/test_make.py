"""``batchenv.make("MinAtar/<Game>-v1", n)``: the reference games in worker processes."""

from __future__ import annotations

import sys

import gymnasium
import numpy as np
import pytest

import batchenv
from batchenv.kernels.minatar import Breakout


def test_make_runs_the_reference_in_workers(minatar):
    env = batchenv.make("MinAtar/Breakout-v1", 2, num_workers=1)
    try:
        observ, _ = env.reset(seed=0)
        assert env.observation_space == Breakout(1).single_observation_space
        assert env.action_space == gymnasium.spaces.Discrete(3)
        assert observ.shape == (2, 10, 10, 4) and observ.dtype == bool
        assert observ[:, 9, 4, 0].all()  # the paddle starts in column 4
        for _ in range(30):
            observ, reward, terminated, truncated, _ = env.step(np.array([1, 2]))
            done = np.flatnonzero(terminated | truncated)
            if done.size:
                env.reset(indices=done)
        assert not truncated.any()  # MinAtar has no time limit
    finally:
        env.close()


def test_full_action_set_id(minatar):
    env = batchenv.make("MinAtar/Freeway-v0", 1, num_workers=1)
    try:
        assert env.action_space == gymnasium.spaces.Discrete(6)
    finally:
        env.close()


def test_missing_package_names_the_extra(monkeypatch):
    for env_id in [i for i in gymnasium.registry if i.startswith("MinAtar/")]:
        monkeypatch.delitem(gymnasium.registry, env_id)
    monkeypatch.setitem(sys.modules, "minatar.gym", None)  # import fails
    with pytest.raises(ImportError, match=r"pip install 'batchenv\[minatar\]'"):
        batchenv.make("MinAtar/Breakout-v1", 2)


def test_unknown_minatar_id_is_refused_before_workers_start(minatar):
    with pytest.raises(ValueError, match=r"no such MinAtar id; known ids: \['MinAtar/Asterix-v0'"):
        batchenv.make("MinAtar/Pong-v1", 2)
