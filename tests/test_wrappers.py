"""Exact behaviour of batchenv.wrappers on scripted envs, Pendulum-v1 and CartPole-v1."""

from __future__ import annotations

import copy
import doctest

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit

import batchenv.wrappers
from batchenv.wrappers import (
    ActionRepeat,
    ClipAction,
    ClipReward,
    ConvertTo32Bit,
    EpisodicLife,
    FrameDelta,
    FrameHistory,
    GrayResize,
    MaxAndSkip,
    NoopReset,
    RandomStart,
    RangeNormalize,
    make_atari,
)
from batchenv.wrappers.atari import _area_taps, _area_weights
from tests.atari_fakes import FakeAtari


class ScriptedEnv(gymnasium.Env):
    """Plays back ``observations``: reset returns the first, step ``t`` the ``t``-th.

    Step ``t`` returns reward ``rewards[t - 1]`` and info ``{"t": t}``; the episode
    terminates on the last observation (or is truncated there, with ``truncate=True``).
    Every action received is recorded in ``actions``; ``resets`` counts resets. With
    ``reuse_buffer=True`` the env returns the same array object every time, overwritten in
    place, as some simulators do.
    """

    def __init__(
        self,
        observations,
        rewards=None,
        observation_space=None,
        action_space=None,
        truncate=False,
        reuse_buffer=False,
    ):
        self.observations = list(observations)
        self.rewards = list(rewards) if rewards is not None else [1.0] * len(observations)
        first = np.asarray(self.observations[0])
        self.observation_space = observation_space or spaces.Box(
            -np.inf, np.inf, first.shape, first.dtype
        )
        self.action_space = action_space or spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.truncate = truncate
        self.buffer = np.array(first) if reuse_buffer else None
        self.actions: list = []
        self.resets = 0
        self.t = 0

    def _observ(self):
        if self.buffer is None:
            return copy.deepcopy(self.observations[self.t])
        self.buffer[...] = self.observations[self.t]
        return self.buffer

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.resets += 1
        return self._observ(), {"t": 0}

    def step(self, action):
        self.actions.append(np.array(action))
        self.t += 1
        last = self.t == len(self.observations) - 1
        reward = self.rewards[self.t - 1]
        terminated, truncated = last and not self.truncate, last and self.truncate
        return self._observ(), reward, terminated, truncated, {"t": self.t}


def counting_env(length=1000, **kwargs) -> ScriptedEnv:
    """Observation after ``t`` steps is ``[t, -2t]`` (float64), reward ``t``; ends at ``length``."""
    observations = [np.array([t, -2.0 * t]) for t in range(length + 1)]
    return ScriptedEnv(observations, rewards=[float(t) for t in range(1, length + 1)], **kwargs)


def rollout(env: gymnasium.Env, actions) -> list:
    return [env.step(action) for action in actions]


# --- every wrapper keeps its observations inside its observation space ------------------

WRAPPERS = {
    "RangeNormalize": RangeNormalize,
    "RangeNormalize+ClipAction": lambda env: ClipAction(RangeNormalize(env)),
    "ClipAction": ClipAction,
    "ConvertTo32Bit": ConvertTo32Bit,
    "FrameHistory": lambda env: FrameHistory(env, [0, 1, 4]),
    "FrameHistory-flat": lambda env: FrameHistory(env, [0, 2], flatten=True),
    "FrameDelta": FrameDelta,
    "ActionRepeat": lambda env: ActionRepeat(env, 3),
    "RandomStart": lambda env: RandomStart(env, 5),
}


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_pendulum_observations_stay_in_the_wrappers_space(name):
    env = WRAPPERS[name](gymnasium.make("Pendulum-v1"))
    env.action_space.seed(0)
    observ, _ = env.reset(seed=0)
    assert observ in env.observation_space
    for _ in range(25):
        observ, *_ = env.step(env.action_space.sample())
        assert observ in env.observation_space
    env.close()


def test_wrappers_are_recorded_in_the_spec_and_can_be_remade():
    env = ActionRepeat(FrameHistory(gymnasium.make("CartPole-v1"), [0, 3], flatten=True), 2)
    assert env.spec.additional_wrappers[-2].kwargs == {"past_indices": [0, 3], "flatten": True}
    assert env.spec.additional_wrappers[-1].kwargs == {"amount": 2}
    remade = gymnasium.make(env.spec)
    assert isinstance(remade, ActionRepeat) and remade.observation_space.shape == (8,)


def test_docstring_examples_run():
    results = [
        doctest.testmod(module)
        for module in (batchenv.wrappers, batchenv.wrappers.batch_ppo, batchenv.wrappers.atari)
    ]
    assert sum(result.attempted for result in results) >= 8
    assert all(result.failed == 0 for result in results)


# --- RangeNormalize -----------------------------------------------------------------------


def test_range_normalize_pendulum_matches_the_unwrapped_env():
    raw = gymnasium.make("Pendulum-v1")
    env = RangeNormalize(gymnasium.make("Pendulum-v1"))
    assert env.observation_space == spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert env.action_space == spaces.Box(-1.0, 1.0, (1,), np.float32)
    raw_observ, _ = raw.reset(seed=3)
    observ, _ = env.reset(seed=3)
    scale = np.array([1.0, 1.0, 8.0])  # Pendulum bounds: cos, sin in [-1, 1], speed in [-8, 8]
    for agent_action in [-1.0, -0.5, 0.0, 0.25, 1.0]:
        np.testing.assert_allclose(observ, raw_observ / scale, rtol=1e-6, atol=1e-7)
        assert observ.dtype == np.float32
        raw_observ, raw_reward, *_ = raw.step(np.array([2.0 * agent_action], np.float32))
        observ, reward, *_ = env.step(np.array([agent_action], np.float32))
        assert reward == raw_reward


def test_range_normalize_maps_exactly_on_a_scripted_env():
    action_space = spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 10.0]), dtype=np.float64)
    observation_space = spaces.Box(-100.0, 100.0, (2,), np.float64)
    inner = counting_env(observation_space=observation_space, action_space=action_space)
    env = RangeNormalize(inner)
    observ, _ = env.reset()
    np.testing.assert_array_equal(observ, [0.0, 0.0])
    observ, *_ = env.step(np.array([-1.0, 1.0]))
    np.testing.assert_allclose(observ, [0.01, -0.02])
    env.step(np.array([0.0, 0.0]))
    env.step(np.array([3.0, -3.0]))  # not clipped here: that is ClipAction's job
    np.testing.assert_allclose(inner.actions, [[-2.0, 10.0], [0.0, 5.0], [6.0, -10.0]])
    assert all(action.dtype == np.float64 for action in inner.actions)
    assert env.observation_space.dtype == np.float64 and env.action_space.dtype == np.float64


def test_range_normalize_maps_a_zero_width_dimension_to_zero():
    box = spaces.Box(np.array([0.0, 5.0]), np.array([10.0, 5.0]), dtype=np.float64)
    env = RangeNormalize(ScriptedEnv([np.array([10.0, 5.0])] * 2, observation_space=box))
    observ, _ = env.reset()
    np.testing.assert_array_equal(observ, [1.0, 0.0])


def test_range_normalize_integer_observations_become_float32():
    box = spaces.Box(0, 4, (1,), np.int64)
    env = RangeNormalize(ScriptedEnv([np.array([1])] * 2, observation_space=box))
    observ, _ = env.reset()
    assert env.observation_space.dtype == np.float32 and observ.dtype == np.float32
    np.testing.assert_array_equal(observ, [-0.5])


def test_range_normalize_leaves_cartpole_alone_by_default():
    inner = gymnasium.make("CartPole-v1")
    env = RangeNormalize(inner)  # infinite velocity bounds, Discrete actions
    assert env.observation_space is inner.observation_space
    assert env.action_space is inner.action_space
    raw_observ, _ = gymnasium.make("CartPole-v1").reset(seed=1)
    observ, _ = env.reset(seed=1)
    np.testing.assert_array_equal(observ, raw_observ)
    env.step(1)


def test_range_normalize_false_turns_normalization_off():
    inner = gymnasium.make("Pendulum-v1")
    env = RangeNormalize(inner, observ=False, action=False)
    assert env.observation_space is inner.observation_space
    assert env.action_space is inner.action_space


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"observ": True}, r"RangeNormalize\(observ=True\) needs finite observation bounds"),
        ({"action": True}, r"RangeNormalize\(action=True\) needs a Box action space"),
    ],
    ids=["observ-infinite", "action-discrete"],
)
def test_range_normalize_rejects_impossible_requests(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RangeNormalize(gymnasium.make("CartPole-v1"), **kwargs)


def test_range_normalize_rejects_integer_actions_and_non_bool_flags():
    env = ScriptedEnv([np.zeros(2)] * 2, action_space=spaces.Box(0, 3, (1,), np.int64))
    with pytest.raises(ValueError, match="needs a floating-point action Box"):
        RangeNormalize(env, action=True)
    assert RangeNormalize(env).action_space is env.action_space
    with pytest.raises(TypeError, match=r"must be True, False or None, got 'yes'"):
        RangeNormalize(env, observ="yes")


# --- ClipAction ---------------------------------------------------------------------------


def test_clip_action_clips_into_the_env_space():
    inner = counting_env()
    env = ClipAction(inner)
    assert env.action_space == spaces.Box(-np.inf, np.inf, (2,), np.float32)
    env.reset()
    env.step(np.array([5.0, -0.5]))
    env.step(np.array([-7.0, 0.25]))
    np.testing.assert_array_equal(inner.actions, [[1.0, -0.5], [-1.0, 0.25]])
    assert inner.actions[0].dtype == np.float32


def test_clip_action_after_range_normalize_on_pendulum():
    raw = gymnasium.make("Pendulum-v1")
    env = ClipAction(RangeNormalize(gymnasium.make("Pendulum-v1")))
    raw.reset(seed=0)
    env.reset(seed=0)
    raw_observ, raw_reward, *_ = raw.step(np.array([2.0], np.float32))
    observ, reward, *_ = env.step(np.array([30.0]))  # clipped to 1, then mapped to 2
    assert reward == raw_reward
    np.testing.assert_allclose(observ, raw_observ / [1.0, 1.0, 8.0], rtol=1e-6)


def test_clip_action_needs_a_box():
    with pytest.raises(ValueError, match="ClipAction needs a Box action space.*Discrete"):
        ClipAction(gymnasium.make("CartPole-v1"))


# --- ConvertTo32Bit -----------------------------------------------------------------------


def test_convert_to_32bit_narrows_float64_observations_and_rewards():
    env = ConvertTo32Bit(counting_env(length=3))
    assert env.observation_space.dtype == np.float32
    observ, _ = env.reset()
    assert observ.dtype == np.float32
    observ, reward, *_ = env.step(np.zeros(2))
    np.testing.assert_array_equal(observ, [1.0, -2.0])
    assert type(reward) is np.float32 and reward == 1.0


def test_convert_to_32bit_handles_nested_spaces():
    space = spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (2,), np.float64),
            "cell": spaces.Box(0, 9, (2,), np.int64),
            "mode": spaces.Discrete(4, start=1),
            "keys": spaces.Tuple([spaces.MultiDiscrete([3, 5]), spaces.MultiBinary(2)]),
        }
    )
    value = {
        "pos": np.array([0.5, -0.25]),
        "cell": np.array([3, 9]),
        "mode": np.int64(2),
        "keys": (np.array([2, 4]), np.array([1, 0], np.int8)),
    }
    env = ConvertTo32Bit(ScriptedEnv([value], observation_space=space))
    narrowed = env.observation_space
    assert narrowed["pos"] == spaces.Box(-1.0, 1.0, (2,), np.float32)
    assert narrowed["cell"] == spaces.Box(0, 9, (2,), np.int32)
    assert narrowed["mode"] == spaces.Discrete(4, start=1, dtype=np.int32)
    assert narrowed["keys"][0].dtype == np.int32
    assert narrowed["keys"][1] is space["keys"][1]
    assert list(narrowed.spaces) == list(space.spaces)
    observ, _ = env.reset()
    assert observ in narrowed
    assert observ["pos"].dtype == np.float32 and observ["cell"].dtype == np.int32
    assert type(observ["mode"]) is np.int32 and observ["mode"] == 2
    assert observ["keys"][0].dtype == np.int32 and observ["keys"][1].dtype == np.int8


def test_convert_to_32bit_leaves_float32_envs_as_they_are():
    inner = gymnasium.make("Pendulum-v1")
    env = ConvertTo32Bit(inner)
    assert env.observation_space is inner.observation_space
    raw_observ, _ = gymnasium.make("Pendulum-v1").reset(seed=2)
    observ, _ = env.reset(seed=2)
    np.testing.assert_array_equal(observ, raw_observ)


@pytest.mark.parametrize(
    "observations, rewards, call, message",
    [
        ([[np.nan, 0.0]], [], "reset", r"env\.reset\(\) returned a non-finite observation"),
        ([[0.0, 0.0], [0.0, np.inf]], [1.0], "step", r"env\.step\(\) .*non-finite observation"),
        ([[0.0, 0.0], [1e300, 0.0]], [1.0], "step", r"non-finite observation"),
        ([[0.0, 0.0], [1.0, 0.0]], [np.nan], "step", r"env\.step\(\) .*non-finite reward: nan"),
    ],
    ids=["observ-reset", "observ-step", "observ-overflows-float32", "reward"],
)
def test_convert_to_32bit_rejects_non_finite_values(observations, rewards, call, message):
    env = ConvertTo32Bit(ScriptedEnv([np.array(o) for o in observations], rewards=rewards))
    if call == "step":
        env.reset()
    with pytest.raises(ValueError, match=message):
        env.reset() if call == "reset" else env.step(np.zeros(2))


def test_convert_to_32bit_rejects_int64_bounds_beyond_int32():
    space = spaces.Box(0, 2**40, (1,), np.int64)
    with pytest.raises(ValueError, match=r"cannot narrow the observation space .* to int32"):
        ConvertTo32Bit(ScriptedEnv([np.array([1])], observation_space=space))


# --- FrameHistory -------------------------------------------------------------------------


def test_frame_history_stacks_the_requested_past_frames():
    env = FrameHistory(counting_env(), past_indices=[0, 1, 3])
    frame = lambda t: [t, -2.0 * t]
    observ, _ = env.reset()
    np.testing.assert_array_equal(observ, [frame(0)] * 3)
    expected = {1: [1, 0, 0], 2: [2, 1, 0], 3: [3, 2, 0], 4: [4, 3, 1], 5: [5, 4, 2]}
    for t, ages in expected.items():
        observ, *_ = env.step(np.zeros(2))
        np.testing.assert_array_equal(observ, [frame(a) for a in ages], err_msg=f"step {t}")
    observ, _ = env.reset()  # the history starts afresh
    np.testing.assert_array_equal(observ, [frame(0)] * 3)


def test_frame_history_space_repeats_the_bounds():
    box = spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64)
    env = FrameHistory(ScriptedEnv([np.zeros(2)], observation_space=box), [0, 2])
    assert env.observation_space == spaces.Box(
        np.array([[-1.0, 0.0]] * 2), np.array([[1.0, 5.0]] * 2), dtype=np.float64
    )
    flat = FrameHistory(ScriptedEnv([np.zeros(2)], observation_space=box), [0, 2], flatten=True)
    assert flat.observation_space == spaces.Box(
        np.array([-1.0, 0.0, -1.0, 0.0]), np.array([1.0, 5.0, 1.0, 5.0]), dtype=np.float64
    )


def test_frame_history_flatten_concatenates_on_the_last_axis():
    images = [np.full((2, 3, 1), t, np.uint8) for t in range(4)]
    space = spaces.Box(0, 255, (2, 3, 1), np.uint8)
    env = FrameHistory(ScriptedEnv(images, observation_space=space), [0, 1, 2], flatten=True)
    assert env.observation_space.shape == (2, 3, 3)
    env.reset()
    env.step(np.zeros(2))
    observ, *_ = env.step(np.zeros(2))
    assert observ.dtype == np.uint8
    np.testing.assert_array_equal(observ[0, 0], [2, 1, 0])
    np.testing.assert_array_equal(observ[..., 1], np.full((2, 3), 1))


def test_frame_history_copies_frames_from_envs_that_reuse_their_buffer():
    env = FrameHistory(counting_env(reuse_buffer=True), [0, 1])
    env.reset()
    observ, *_ = env.step(np.zeros(2))
    np.testing.assert_array_equal(observ, [[1.0, -2.0], [0.0, 0.0]])
    observ, *_ = env.step(np.zeros(2))
    np.testing.assert_array_equal(observ, [[2.0, -4.0], [1.0, -2.0]])


@pytest.mark.parametrize(
    "indices, message",
    [
        ([], "at least one past index"),
        ([0, -1], r"integers >= 0, got \[0, -1\]"),
        ([0, 1.5], "integers >= 0"),
    ],
    ids=["empty", "negative", "float"],
)
def test_frame_history_rejects_bad_indices(indices, message):
    with pytest.raises(ValueError, match=message):
        FrameHistory(counting_env(), indices)


def test_frame_history_needs_a_box_observation():
    env = ScriptedEnv([np.int64(0)], observation_space=spaces.Discrete(3))
    with pytest.raises(ValueError, match="FrameHistory needs a Box observation space"):
        FrameHistory(env, [0, 1])


# --- FrameDelta ---------------------------------------------------------------------------


def test_frame_delta_is_the_difference_to_the_previous_observation():
    squares = [np.array([t, t * t], np.float64) for t in range(6)]
    env = FrameDelta(ScriptedEnv(squares))
    observ, _ = env.reset()
    np.testing.assert_array_equal(observ, [0.0, 0.0])
    deltas = [env.step(np.zeros(2))[0] for _ in range(3)]
    np.testing.assert_array_equal(deltas, [[1, 1], [1, 3], [1, 5]])
    observ, _ = env.reset()
    np.testing.assert_array_equal(observ, [0.0, 0.0])
    np.testing.assert_array_equal(env.step(np.zeros(2))[0], [1.0, 1.0])


def test_frame_delta_space_and_integer_observations():
    space = spaces.Box(0, 10, (1,), np.uint8)
    env = FrameDelta(ScriptedEnv([np.array([5], np.uint8), np.array([2], np.uint8)], None, space))
    assert env.observation_space == spaces.Box(-10.0, 10.0, (1,), np.float32)
    env.reset()
    observ, *_ = env.step(np.zeros(2))
    assert observ.dtype == np.float32 and observ[0] == -3.0  # no uint8 wrap-around


def test_frame_delta_errors():
    with pytest.raises(gymnasium.error.ResetNeeded, match="call reset"):
        FrameDelta(counting_env()).step(np.zeros(2))
    env = ScriptedEnv([np.int64(0)], observation_space=spaces.Discrete(3))
    with pytest.raises(ValueError, match="FrameDelta needs a Box observation space"):
        FrameDelta(env)


# --- ActionRepeat -------------------------------------------------------------------------


def test_action_repeat_sums_rewards_and_stops_on_termination():
    inner = counting_env(length=7)
    env = ActionRepeat(inner, 3)
    env.reset()
    results = rollout(env, [np.full(2, 0.1), np.full(2, 0.2), np.full(2, 0.3)])
    assert [r[1] for r in results] == [1 + 2 + 3, 4 + 5 + 6, 7]
    np.testing.assert_array_equal([r[0] for r in results], [[3, -6], [6, -12], [7, -14]])
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (True, False)]
    assert results[-1][4] == {"t": 7}
    np.testing.assert_allclose(inner.actions, [[0.1] * 2] * 3 + [[0.2] * 2] * 3 + [[0.3] * 2])


def test_action_repeat_stops_on_gymnasium_time_limit_truncation():
    env = ActionRepeat(TimeLimit(counting_env(), max_episode_steps=5), 2)
    env.reset()
    results = rollout(env, [np.zeros(2)] * 3)
    assert [r[1] for r in results] == [1 + 2, 3 + 4, 5]
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (False, True)]


def test_action_repeat_on_cartpole():
    env = ActionRepeat(gymnasium.make("CartPole-v1"), 4)
    raw = gymnasium.make("CartPole-v1")
    env.reset(seed=5)
    raw.reset(seed=5)
    for _ in range(4):
        raw_observ, *_ = raw.step(1)
    observ, reward, *_ = env.step(1)
    np.testing.assert_array_equal(observ, raw_observ)
    assert reward == 4.0


@pytest.mark.parametrize(
    "amount, error, message",
    [(0, ValueError, r"amount must be >= 1, got 0"), (1.5, TypeError, "must be an int")],
)
def test_action_repeat_rejects_bad_amounts(amount, error, message):
    with pytest.raises(error, match=message):
        ActionRepeat(counting_env(), amount)


# --- RandomStart --------------------------------------------------------------------------


def test_random_start_takes_between_zero_and_max_steps_random_actions():
    inner = counting_env()
    env = RandomStart(inner, max_steps=6)
    counts = []
    for seed in range(40):
        observ, info = env.reset(seed=seed)
        steps = info["random_start_steps"]
        assert info["t"] == steps == len(inner.actions) - sum(counts)
        np.testing.assert_array_equal(observ, [steps, -2.0 * steps])
        counts.append(steps)
    assert set(counts) == set(range(7))
    assert all(action in inner.action_space for action in inner.actions)


def test_random_start_is_reproducible_from_the_reset_seed():
    def starts(seeds):
        inner = counting_env()
        env = RandomStart(inner, max_steps=20)
        infos = [env.reset(seed=seed)[1]["t"] for seed in seeds]
        return infos, np.array(inner.actions)

    first, first_actions = starts([7, None, None, 3])
    second, second_actions = starts([7, None, None, 3])
    assert first == second
    np.testing.assert_array_equal(first_actions, second_actions)
    assert starts([8, None, None, 3])[0][:3] != first[:3]


def test_random_start_leaves_the_env_action_space_rng_alone():
    inner = counting_env()
    inner.action_space.seed(0)
    state = inner.action_space.np_random.bit_generator.state
    RandomStart(inner, max_steps=10).reset(seed=1)
    assert inner.action_space.np_random.bit_generator.state == state


def test_random_start_resets_again_when_the_episode_ends():
    inner = counting_env(length=3)  # terminates on its third step
    env = RandomStart(inner, max_steps=10)
    for seed in range(10):
        _, info = env.reset(seed=seed)
        assert info["t"] == info["random_start_steps"] <= 2
    assert inner.resets > 10  # most counts exceed 2, so most starts needed a second reset


def test_random_start_gives_up_when_every_start_ends_the_episode():
    env = RandomStart(counting_env(length=1), max_steps=10**9)
    with pytest.raises(RuntimeError, match=r"ended during the random start 100 times"):
        env.reset(seed=0)


def test_random_start_with_zero_steps_is_a_plain_reset():
    env = RandomStart(gymnasium.make("Pendulum-v1"), max_steps=0)
    observ, info = env.reset(seed=4)
    raw_observ, _ = gymnasium.make("Pendulum-v1").reset(seed=4)
    np.testing.assert_array_equal(observ, raw_observ)
    assert info["random_start_steps"] == 0


@pytest.mark.parametrize(
    "max_steps, error, message",
    [(-1, ValueError, r"max_steps must be >= 0, got -1"), ("3", TypeError, "must be an int")],
)
def test_random_start_rejects_bad_max_steps(max_steps, error, message):
    with pytest.raises(error, match=message):
        RandomStart(counting_env(), max_steps)


# ---- Atari preprocessing --------------------------------------------------------------


def test_noop_reset_takes_between_one_and_max_noops() -> None:
    counts = set()
    for seed in range(40):
        env = NoopReset(FakeAtari(), noop_max=30)
        _, info = env.reset(seed=seed)
        assert 1 <= info["noops"] <= 30
        assert env.unwrapped.actions == [0] * info["noops"]  # only the no-op action
        assert env.unwrapped.frame == info["noops"]
        counts.add(info["noops"])
    assert len(counts) > 10  # the count varies with the seed
    first = NoopReset(FakeAtari()).reset(seed=7)[1]["noops"]
    assert NoopReset(FakeAtari()).reset(seed=7)[1]["noops"] == first  # and is reproducible


def test_noop_reset_restarts_a_game_that_ends_during_noops() -> None:
    env = NoopReset(FakeAtari(lives=1, frames_per_life=2), noop_max=30)
    _, info = env.reset(seed=3)
    assert info["noops"] >= 2 and env.unwrapped.resets >= 2


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_noop_reset_rejects_bad_counts(bad) -> None:
    with pytest.raises((ValueError, TypeError), match="NoopReset noop_max must be"):
        NoopReset(FakeAtari(), noop_max=bad)


def test_max_and_skip_repeats_sums_and_maxes_the_last_two_frames() -> None:
    env = MaxAndSkip(FakeAtari(), skip=4)
    env.reset(seed=0)
    observ, reward, terminated, truncated, _ = env.step(3)
    assert env.unwrapped.actions == [3, 3, 3, 3] and reward == 4.0
    # Frames 3 (value 3) and 4 (flicker: 0): the maximum shows the sprite.
    assert observ.shape == (210, 160, 3) and int(observ.min()) == int(observ.max()) == 3
    assert not terminated and not truncated


def test_max_and_skip_stops_at_the_end_of_the_episode() -> None:
    env = MaxAndSkip(FakeAtari(lives=1, frames_per_life=6), skip=4)
    env.reset(seed=0)
    env.step(0)
    observ, reward, terminated, _, _ = env.step(0)  # frames 5, 6: ends at frame 6
    assert terminated and reward == 2.0 and int(observ.max()) == 5


def test_gray_resize_is_exact_area_averaging() -> None:
    # An integer ratio: 168 x 168 -> 84 x 84 averages 2 x 2 blocks.
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (168, 168), dtype=np.uint8)
    env = GrayResize(FakeAtari(shape=(168, 168)))
    expected = frame.reshape(84, 2, 84, 2).astype(np.float64).mean(axis=(1, 3))
    resized = env.observation(frame)
    assert resized.dtype == np.uint8 and resized.shape == (84, 84)
    np.testing.assert_array_equal(resized, np.rint(expected).astype(np.uint8))


@pytest.mark.parametrize(
    "shape, size",
    [
        ((210, 160), (84, 84)),  # Atari: rows as group sums, columns through weights
        ((210, 160, 3), (84, 84)),  # RGB: luma first, float sums
        ((100, 30), (20, 12)),  # both axes as group sums (30 -> 12: each twice, groups of 5)
        ((97, 61), (40, 17)),  # neither: two weight matrices
    ],
)
def test_gray_resize_matches_float64_area_averaging(shape, size) -> None:
    """Every pixel is the exact area average rounded to the nearest integer; only where
    that average lies within 1e-3 of a .5 tie may float rounding pick the other side."""
    rng = np.random.default_rng(1)
    env = GrayResize(FakeAtari(shape=shape), width=size[1], height=size[0])
    for _ in range(20):
        frame = rng.integers(0, 256, shape, dtype=np.uint8)
        grey = frame.astype(np.float64)
        if grey.ndim == 3:
            grey = grey @ np.array([0.299, 0.587, 0.114])
        rows = _area_weights(shape[0], size[0]).astype(np.float64)
        columns = _area_weights(shape[1], size[1]).astype(np.float64)
        rows /= rows.sum(axis=1, keepdims=True)
        columns /= columns.sum(axis=1, keepdims=True)
        exact = rows @ grey @ columns.T
        resized = env.observation(frame)
        assert resized.shape == size and resized.dtype == np.uint8
        off = resized != np.rint(exact)
        assert np.all(np.abs(exact[off] % 1.0 - 0.5) < 1e-3), exact[off]
        assert np.all(np.abs(resized.astype(np.float64) - exact) <= 0.5 + 1e-3)


@pytest.mark.parametrize("size_in, size_out", [(160, 84), (97, 40), (61, 17), (10, 10), (7, 19)])
def test_area_taps_hold_exactly_the_weight_matrix(size_in, size_out) -> None:
    """The few (index, weight) taps per output cell rebuild the dense area-weight matrix."""
    index, weight = _area_taps(size_in, size_out)
    assert index.shape == weight.shape and index.shape[1] == size_out
    dense = np.zeros((size_out, size_in), np.float32)
    for t in range(len(index)):
        np.add.at(dense, (np.arange(size_out), index[t]), weight[t])
    np.testing.assert_array_equal(dense, _area_weights(size_in, size_out))
    assert len(index) <= int(np.ceil(size_in / size_out)) + 1


def test_gray_resize_luma_and_atari_shape() -> None:
    env = GrayResize(FakeAtari())
    assert env.observation_space == spaces.Box(0, 255, (84, 84), np.uint8)
    rgb = np.zeros((210, 160, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 200, 100, 50
    luma = 0.299 * 200 + 0.587 * 100 + 0.114 * 50
    np.testing.assert_array_equal(env.observation(rgb), np.full((84, 84), round(luma), np.uint8))
    with pytest.raises(ValueError, match=r"GrayResize needs \(H, W\)"):
        GrayResize(FakeAtari(shape=(4, 5, 6, 7)))


def test_episodic_life_ends_episodes_at_life_loss_but_keeps_the_game() -> None:
    env = EpisodicLife(FakeAtari(lives=2, frames_per_life=3))
    env.reset(seed=0)
    results = [env.step(0) for _ in range(3)]
    assert [r[2] for r in results] == [False, False, True]  # a life lost at frame 3
    env.reset()
    assert env.unwrapped.resets == 1 and env.unwrapped.frame == 4  # a no-op, not a reset
    results = [env.step(0) for _ in range(2)]
    assert results[-1][2] and env.unwrapped.lives == 0  # game over
    env.reset()
    assert env.unwrapped.resets == 2  # now the game restarts


def test_clip_reward_is_the_sign() -> None:
    env = ClipReward(FakeAtari())
    assert [env.reward(r) for r in (-3.0, -0.2, 0.0, 0.5, 21.0)] == [-1, -1, 0, 1, 1]


def test_make_atari_rejects_frameskipping_ids() -> None:
    pytest.importorskip("ale_py")
    with pytest.raises(ValueError, match="make_atari wants an env without frame skip"):
        make_atari("Pong-v4")


@pytest.mark.parametrize("env_id", ["PongNoFrameskip-v4", "ALE/Pong-v5"])
def test_make_atari_on_pong(env_id: str) -> None:
    pytest.importorskip("ale_py")  # the atari extra
    env = make_atari(env_id, clip_rewards=True)
    observ, info = env.reset(seed=0)
    assert env.observation_space == spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert observ.shape == (4, 84, 84) and observ.dtype == np.uint8
    assert env.action_space == spaces.Discrete(6)
    assert 1 <= info["noops"] <= 30
    assert all((observ[k] == observ[0]).all() for k in range(4))  # history of the first frame
    rewards = []
    for step in range(200):
        observ, reward, terminated, truncated, _ = env.step(step % 6)
        rewards.append(reward)
    assert set(rewards) <= {-1.0, 0.0, 1.0} and observ.max() > 0
    assert not (observ[0] == observ[3]).all()  # the stack moves
    env.close()
