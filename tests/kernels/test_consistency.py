"""check_consistency: the three implementations agree, and a broken one is caught where it
breaks (the first mismatch: step, env, agent, feature and both values)."""

from __future__ import annotations

import doctest
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from batchenv.kernels import Acrobot, CartPole, MountainCarContinuous, Pendulum, cartpole
from batchenv.kernels import consistency as consistency_module
from batchenv.kernels.consistency import ConsistencyReport, Mismatch, check_consistency

ENVS = [
    pytest.param(CartPole, id="CartPole-v1"),
    pytest.param(Pendulum, id="Pendulum-v1"),
    pytest.param(MountainCarContinuous, id="MountainCarContinuous-v0"),
    pytest.param(Acrobot, id="Acrobot-v1"),
]


def _assert_passed(report: ConsistencyReport, steps: int) -> None:
    assert report.passed, str(report)
    assert report.mismatch is None
    assert report.steps_compared == steps
    assert report.values_compared > 0
    assert "consistent over" in str(report)


@pytest.mark.parametrize("cls", ENVS)
def test_triton_vs_torch(cls, triton_device):
    triton_env = functools.partial(cls, device=triton_device, backend="triton")
    torch_env = functools.partial(cls, device=triton_device)
    report = check_consistency(triton_env, torch_env, num_envs=7, steps=40, seed=0)
    _assert_passed(report, 40)
    if cls is CartPole:  # random CartPole episodes end within 40 steps: resets were compared
        assert report.episodes > 0


@pytest.mark.parametrize("cls", ENVS)
def test_triton_vs_gymnasium(cls, triton_device):
    triton_env = functools.partial(cls, device=triton_device, backend="triton", dtype=torch.float64)
    report = check_consistency(triton_env, cls.gym_id, num_envs=7, steps=40, seed=1)
    _assert_passed(report, 40)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cls", ENVS)
def test_torch_vs_gymnasium(cls, dtype):
    report = check_consistency(
        functools.partial(cls, dtype=dtype), cls.gym_id, num_envs=7, steps=60, seed=2
    )
    _assert_passed(report, 60)
    obs_dim = gym.make(cls.gym_id).observation_space.shape[0]
    assert report.values_compared == 60 * 7 * (obs_dim + 3)  # features, reward, two flags


def test_gymnasium_can_lead():
    report = check_consistency("CartPole-v1", CartPole, num_envs=3, steps=30, seed=0)
    _assert_passed(report, 30)
    assert report.episodes > 0


def _cartpole_from(states):
    def make(num_envs, seed):
        env = CartPole(num_envs, seed=seed)
        env.set_state({"state": torch.tensor(states, dtype=torch.float32)})
        return env

    return make


def test_wrong_gravity_is_caught_at_the_first_mismatch(monkeypatch):
    """Gravity 98 instead of 9.8 only acts through sin(theta): rows 0 and 1 start upright and
    still, so they agree at step 0; row 2 (theta = 0.03) is the first to disagree, in theta_dot
    (feature 3) -- x_dot's error is below the tolerance there, x and theta move with the old
    velocities."""
    monkeypatch.setattr(cartpole, "GRAVITY", 98.0)  # the torch step reads the module global
    states = [[0.0, 0.0, 0.0, 0.0], [0.01, 0.0, 0.0, 0.0], [0.0, 0.0, 0.03, 0.0], [0.0] * 4]
    report = check_consistency(_cartpole_from(states), "CartPole-v1", 4, steps=20, seed=0)
    assert not report.passed
    mismatch = report.mismatch
    assert (mismatch.step, mismatch.env, mismatch.agent) == (0, 2, None)
    assert (mismatch.field, mismatch.feature) == ("observ", 3)
    diff = abs(mismatch.value_a - mismatch.value_b)
    assert diff >= 0.01 and diff >= 0.01 * max(abs(mismatch.value_a), abs(mismatch.value_b))
    assert report.steps_compared == 1
    assert "observ[3] differs at step 0, env 2" in str(report)


def test_broken_triton_side_is_caught(monkeypatch, triton_device):
    """The same wrong gravity on the torch side, the triton kernel leading."""
    monkeypatch.setattr(cartpole, "GRAVITY", 98.0)
    triton_env = functools.partial(CartPole, device=triton_device, backend="triton")
    report = check_consistency(
        triton_env, functools.partial(CartPole, device=triton_device), 7, 30, 0
    )
    assert not report.passed
    assert report.mismatch.field == "observ" and report.mismatch.feature in (1, 3)


def test_done_flag_mismatch_is_exact():
    class ShortCartPole(CartPole):
        max_episode_steps = 5

    report = check_consistency(ShortCartPole, "CartPole-v1", 3, steps=20, seed=0)
    assert report.mismatch == Mismatch(
        step=4, env=0, agent=None, field="truncated", feature=None, value_a=True, value_b=False
    )
    assert report.steps_compared == 5


def test_tolerances(monkeypatch):
    """Gravity 9.81: within WarpDrive's tolerance step by step, not within 1e-6."""
    monkeypatch.setattr(cartpole, "GRAVITY", 9.81)
    kwargs = {"num_envs": 4, "steps": 30, "seed": 0, "teacher_forcing": True}
    assert check_consistency(CartPole, "CartPole-v1", **kwargs).passed
    strict = check_consistency(CartPole, "CartPole-v1", atol=1e-6, rtol=1e-6, **kwargs)
    assert not strict.passed and strict.mismatch.field == "observ"
    assert (strict.atol, strict.rtol) == (1e-6, 1e-6)
    lax_rtol = check_consistency(CartPole, "CartPole-v1", atol=1e-6, **kwargs)
    assert lax_rtol.rtol == 0.01  # a tolerance left as None keeps WarpDrive's value


class TwoAgentCartPole:
    """A multi-agent in-graph env for the checker: two agents see the same CartPole, the
    second one's observation scaled by ``scale``; the first agent's action drives."""

    num_agents = 2
    single_observation_space = CartPole(1).single_observation_space
    single_action_space = gym.spaces.Discrete(2)

    def __init__(self, num_envs, seed, scale=1.0):
        self.env = CartPole(num_envs, seed=seed)
        self.env.set_state({"state": torch.full((num_envs, 4), 0.04)})
        self.num_envs, self.device, self.scale = num_envs, self.env.device, scale

    def step(self, action):
        assert action.shape == (self.num_envs, 2)
        observ, reward, terminated, truncated = self.env.step(action[:, 0])
        observ = torch.stack((observ, observ * self.scale), dim=1)
        return observ, torch.stack((reward, reward), dim=1), terminated, truncated

    def reset(self, indices):
        return self.env.reset(indices)

    def get_state(self):
        return self.env.get_state()

    def set_state(self, state, indices=None):
        self.env.set_state(state, indices)


def test_multi_agent_mismatch_names_the_agent():
    same = check_consistency(TwoAgentCartPole, TwoAgentCartPole, 3, 20, seed=0)
    _assert_passed(same, 20)
    broken = functools.partial(TwoAgentCartPole, scale=2.0)
    report = check_consistency(TwoAgentCartPole, broken, 3, 20, seed=0)
    assert report.mismatch.agent == 1 and report.mismatch.env == 0
    assert report.mismatch.field == "observ" and report.mismatch.feature == 0
    assert report.mismatch.value_b == pytest.approx(2 * report.mismatch.value_a)
    assert "agent 1" in str(report)


def test_argument_validation():
    with pytest.raises(ValueError, match="num_envs"):
        check_consistency(CartPole, "CartPole-v1", 0, 5, seed=0)
    with pytest.raises(ValueError, match="steps"):
        check_consistency(CartPole, "CartPole-v1", 2, -1, seed=0)
    with pytest.raises(ValueError, match="Gymnasium id or a factory"):
        check_consistency(CartPole, 3, 2, 5, seed=0)
    with pytest.raises(ValueError, match="action spaces differ"):
        check_consistency(CartPole, "Pendulum-v1", 2, 5, seed=0)
    with pytest.raises(ValueError, match="unwrapped.state"):
        check_consistency(CartPole, "Blackjack-v1", 2, 5, seed=0)
    report = check_consistency(CartPole, "CartPole-v1", 2, 0, seed=0)
    assert report.passed and report.steps_compared == 0


def test_close_rule_is_warpdrives():
    close = consistency_module._close
    a = np.array([1.0, 100.0, 0.0, np.inf, np.nan, 0.0])
    b = np.array([1.009, 100.9, 0.011, np.inf, np.nan, -0.009])
    assert close(a, b, 0.01, 0.01).tolist() == [True, True, False, True, False, True]


def test_docstring_examples_run():
    result = doctest.testmod(consistency_module)
    assert result.attempted > 0 and result.failed == 0
