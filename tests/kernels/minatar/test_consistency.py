"""The MinAtar checker itself: it finds a broken rule (in the observation or in hidden
state), names undeclared draws, and refuses bad arguments."""

from __future__ import annotations

import pytest
import torch

from batchenv.kernels.minatar import Breakout, Freeway
from batchenv.kernels.minatar.consistency import check_minatar


class NoRewardBreakout(Breakout):
    def _act(self, state, action, draws):
        moved, reward, terminal = super()._act(state, action, draws)
        return moved, torch.zeros_like(reward), terminal


class ForgetfulBreakout(Breakout):
    """Never remembers a strike: differs from MinAtar only in hidden state at first."""

    def _act(self, state, action, draws):
        moved, reward, terminal = super()._act(state, action, draws)
        return {**moved, "strike": torch.zeros_like(moved["strike"])}, reward, terminal


class UndeclaredFreeway(Freeway):
    """Draws the new car speeds without declaring them."""

    step_draws = ()

    def _act(self, state, action, draws):
        fixed = torch.full((self.num_envs, 8), 0.5)
        return super()._act(state, action, {**draws, "speeds": fixed, "directions": fixed})


def test_a_broken_reward_is_found(minatar):
    report = check_minatar(NoRewardBreakout, num_envs=8, steps=500, seed=0)
    assert not report.passed
    mismatch = report.mismatch
    assert (mismatch.field, mismatch.value_a, mismatch.value_b) == ("reward", 1.0, 0.0)
    assert "reward differs at step" in str(report)


def test_a_broken_hidden_state_is_found(minatar):
    report = check_minatar(ForgetfulBreakout, num_envs=8, steps=500, seed=0)
    assert not report.passed
    assert (report.mismatch.field, report.mismatch.value_a) == ("state.strike", 1.0)


def test_an_undeclared_draw_is_named(minatar):
    with pytest.raises(ValueError, match=r"2 random call\(s\) from Env._randomize_cars, but "):
        check_minatar(UndeclaredFreeway, num_envs=4, steps=300, action_probs=(0, 1, 0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env_class": Breakout(1)}, r"env_class must be a MinAtarEnv subclass"),
        ({"num_envs": 0}, r"num_envs=0\): must be an int >= 1"),
        ({"action_probs": (0.5, 0.5)}, r"needs 3 probabilities summing to 1"),
    ],
)
def test_bad_arguments_fail_fast(minatar, kwargs, message):
    kwargs = {"env_class": Breakout, "steps": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        check_minatar(**kwargs)
