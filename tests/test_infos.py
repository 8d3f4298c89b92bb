"""batch_infos builds exactly the dict Gymnasium's VectorEnv._add_info builds."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import VectorEnv

from batchenv.infos import batch_infos


def gymnasium_merge(num_envs: int, pairs) -> dict:
    holder = type("Holder", (), {"num_envs": num_envs, "_add_info": VectorEnv._add_info})()
    merged: dict = {}
    for index, info in pairs:
        merged = holder._add_info(merged, info, index)
    return merged


def assert_same(have, want) -> None:
    assert have.keys() == want.keys()
    for key in want:
        if isinstance(want[key], dict):
            assert_same(have[key], want[key])
            continue
        assert type(have[key]) is type(want[key]), key
        if not isinstance(want[key], np.ndarray):  # Gymnasium's odd merges keep odd leaves
            assert have[key] == want[key], key
            continue
        assert have[key].dtype == want[key].dtype, key
        assert have[key].shape == want[key].shape, key
        for a, b in zip(have[key], want[key]):
            np.testing.assert_array_equal(a, b)


CASES = {
    "mujoco scalars": [
        (0, {"x_position": np.float64(0.5), "reward_ctrl": -0.1}),
        (2, {"x_position": np.float64(1.5), "reward_ctrl": -0.3}),
    ],
    "int then float is truncated": [(0, {"n": 1}), (1, {"n": 2.7}), (3, {"n": True})],
    "bool first": [(1, {"flag": True}), (2, {"flag": 0})],
    "float32 arrays": [(0, {"a": np.ones(3, np.float32)}), (2, {"a": np.zeros(3, np.float32)})],
    "objects": [(0, {"name": "x"}), (1, {"name": [1, 2]}), (2, {"name": None})],
    "episode statistics": [
        (1, {"episode": {"r": 10.0, "l": 10, "t": 0.5}}),
        (3, {"episode": {"r": 22.0, "l": 22, "t": 1.5}}),
    ],
    "final obs and info": [
        (0, {"final_obs": np.arange(4.0), "final_info": {"k": 1}}),
        (2, {"final_obs": np.arange(4.0) + 1, "final_info": {"k": 3}}),
    ],
    "a dict in one env, a value in another": [(0, {"d": {"a": 1}}), (1, {"d": 5})],
    "keys in different envs": [(0, {"a": 1}), (1, {"b": 2.0}), (2, {"a": 3, "b": 4.0})],
    "numpy int32 scalars": [(0, {"c": np.int32(7)}), (1, {"c": np.int32(-7)})],
    "nothing": [],
}


@pytest.mark.parametrize("name", CASES)
def test_matches_gymnasium(name):
    pairs = CASES[name]
    assert_same(batch_infos(4, pairs), gymnasium_merge(4, pairs))
