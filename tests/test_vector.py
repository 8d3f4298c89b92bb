"""BatchVectorEnv against gymnasium.vector.SyncVectorEnv: identical results in every mode."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from batchenv.vector import BatchVectorEnv

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


def _pair(env_id: str, num_envs: int, mode: AutoresetMode):
    fns = [lambda: gym.make(env_id)] * num_envs
    ours = BatchVectorEnv(fns, autoreset_mode=mode, num_workers=2)
    return SyncVectorEnv(fns, autoreset_mode=mode), ours


def _same_infos(a, b) -> None:
    """Infos equal key by key, recursing into nested info dicts and object arrays."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for key in a:
            _same_infos(a[key], b[key])
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object and a.shape == b.shape
        for x, y in zip(a, b):
            _same_infos(x, y)
    elif a is None:
        assert b is None
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("env_id,num_envs", [("CartPole-v1", 5), ("Pendulum-v1", 3)])
def test_equals_sync_vector_env(env_id, num_envs, mode):
    sync, ours = _pair(env_id, num_envs, mode)
    try:
        observ_a, info_a = sync.reset(seed=7)
        observ_b, info_b = ours.reset(seed=7)
        np.testing.assert_array_equal(observ_a, observ_b)
        _same_infos(info_a, info_b)
        sync.action_space.seed(0)
        episodes_ended = 0
        for _ in range(400):
            actions = sync.action_space.sample()
            result_a, result_b = sync.step(actions), ours.step(actions)
            for x, y in zip(result_a[:4], result_b[:4]):
                np.testing.assert_array_equal(x, y)
                assert x.dtype == y.dtype
            _same_infos(result_a[4], result_b[4])
            done = result_a[2] | result_a[3]
            episodes_ended += int(done.sum())
            if mode == AutoresetMode.DISABLED and done.any():
                observ_a, _ = sync.reset(options={"reset_mask": done})
                observ_b, _ = ours.reset(options={"reset_mask": done})
                np.testing.assert_array_equal(observ_a, observ_b)
        assert episodes_ended > 0
    finally:
        sync.close()
        ours.close()


def test_vector_env_metadata_and_attrs():
    envs = BatchVectorEnv([lambda: gym.make("CartPole-v1")] * 3, num_workers=2)
    try:
        assert isinstance(envs, gym.vector.VectorEnv)
        assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert envs.observation_space.shape == (3, 4)
        assert envs.single_action_space == gym.spaces.Discrete(2)
        assert envs.get_attr("spec")[0].id == "CartPole-v1"
        envs.set_attr("custom_flag", [1, 2, 3])
        assert envs.get_attr("custom_flag") == (1, 2, 3)
        assert len(envs.call("reset", seed=1)) == 3
    finally:
        envs.close()
    assert envs.closed


def test_reset_mask_is_validated():
    envs = BatchVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1)
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match="numpy array"):
            envs.reset(options={"reset_mask": [True, False]})
        with pytest.raises(ValueError, match="at least one"):
            envs.reset(options={"reset_mask": np.zeros(2, bool)})
        with pytest.raises(ValueError, match="shape"):
            envs.reset(options={"reset_mask": np.ones(3, bool)})
    finally:
        envs.close()
