"""batchenv.compat: legacy Gym envs (reset() -> obs, 4-tuple step) as Gymnasium envs."""

from __future__ import annotations

import doctest
import functools
import warnings
from collections import OrderedDict

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

import batchenv.compat
from batchenv.compat import LegacyGymEnv, convert_space, is_legacy_env, to_gymnasium


class legacy:  # lower case: it stands in for the ``gym.spaces`` module
    """Fake legacy space classes: the class names and attributes of ``gym.spaces``."""

    class Box:
        def __init__(self, low, high, shape=None, dtype=np.float32):
            self.dtype = np.dtype(dtype)
            self.shape = tuple(shape) if shape is not None else np.shape(low)
            self.low = np.broadcast_to(np.asarray(low, self.dtype), self.shape).copy()
            self.high = np.broadcast_to(np.asarray(high, self.dtype), self.shape).copy()

    class Discrete:
        def __init__(self, n):
            self.n, self.shape, self.dtype = n, (), np.dtype(np.int64)

    class MultiDiscrete:
        def __init__(self, nvec, dtype=np.int64):
            self.nvec, self.dtype = np.asarray(nvec), np.dtype(dtype)

    class MultiBinary:
        def __init__(self, n):
            self.n, self.dtype = n, np.dtype(np.int8)

    class Tuple:
        def __init__(self, spaces):
            self.spaces = tuple(spaces)

    class Dict:
        def __init__(self, spaces):
            self.spaces = OrderedDict(spaces)


class LegacyWalker:
    """A legacy Gym env: a seeded random walk on a line, observed as [position, t].

    Action 0/1/2 moves by -0.1/0/+0.1 plus noise from its seeded generator. The episode
    terminates when |position| > 1; after ``time_limit`` steps it ends the way gym's old
    ``TimeLimit`` did: ``done=True`` and ``info["TimeLimit.truncated"] = not terminated``.
    """

    metadata = {"render.modes": ["ansi"], "video.frames_per_second": 30}

    def __init__(self, time_limit=20):
        self.observation_space = legacy.Box([-10.0, 0.0], [10.0, time_limit], (2,), np.float32)
        self.action_space = legacy.Discrete(3)
        self.time_limit = time_limit
        self.rng = np.random.default_rng()
        self.closed = False
        self.position, self.t = 0.0, 0

    def seed(self, seed=None):
        self.rng = np.random.default_rng(seed)
        return [seed]

    def _observ(self):
        return np.array([self.position, self.t], np.float32)

    def reset(self):
        self.position, self.t = float(self.rng.uniform(-0.5, 0.5)), 0
        return self._observ()

    def step(self, action):
        self.position += 0.1 * (int(action) - 1) + float(self.rng.normal(0.0, 0.05))
        self.t += 1
        done = abs(self.position) > 1.0
        info = {}
        if self.t >= self.time_limit:
            info["TimeLimit.truncated"] = not done
            done = True
        return self._observ(), 1.0, done, info

    def render(self, mode="human"):
        return f"{mode}: position {self.position:.2f}"

    def close(self):
        self.closed = True


class LegacyScript:
    """A legacy env returning scripted ``(done, info)`` pairs, one per step."""

    def __init__(self, outcomes, observation_space=None):
        self.observation_space = observation_space or legacy.Discrete(5)
        self.action_space = legacy.Discrete(2)
        self.outcomes = list(outcomes)

    def reset(self):
        return 0

    def step(self, action):
        done, info = self.outcomes.pop(0)
        return 1, 0.5, done, info


class DuckGymnasiumEnv:
    """Follows the Gymnasium API and uses Gymnasium spaces, but is no gymnasium.Env."""

    observation_space = spaces.Discrete(2)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


# --- spaces -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "legacy_space, expected",
    [
        (
            legacy.Box(-1.0, 2.0, (2, 3), np.float64),
            spaces.Box(-1.0, 2.0, (2, 3), np.float64),
        ),
        (
            legacy.Box(np.array([0, -5]), np.array([255, 5]), dtype=np.int32),
            spaces.Box(np.array([0, -5]), np.array([255, 5]), dtype=np.int32),
        ),
        (legacy.Box(-np.inf, np.inf, (4,)), spaces.Box(-np.inf, np.inf, (4,), np.float32)),
        (legacy.Discrete(7), spaces.Discrete(7)),
        (legacy.MultiDiscrete([3, 4]), spaces.MultiDiscrete([3, 4])),
        (legacy.MultiDiscrete([2], np.int32), spaces.MultiDiscrete([2], dtype=np.int32)),
        (legacy.MultiBinary(5), spaces.MultiBinary(5)),
        (legacy.MultiBinary([2, 3]), spaces.MultiBinary([2, 3])),
    ],
    ids=["box", "box-int", "box-unbounded", "discrete", "multidiscrete",
         "multidiscrete-int32", "multibinary", "multibinary-2d"],
)  # fmt: skip
def test_convert_leaf_spaces(legacy_space, expected):
    converted = convert_space(legacy_space)
    assert type(converted) is type(expected)
    assert converted == expected
    assert converted.dtype == expected.dtype


def test_convert_keeps_a_discrete_start():
    space = legacy.Discrete(4)
    space.start = -1  # gym 0.25 added Discrete.start
    assert convert_space(space) == spaces.Discrete(4, start=-1)


def test_convert_nested_tuple_and_dict_keeping_the_key_order():
    nested = legacy.Dict(
        [
            ("zeta", legacy.Tuple([legacy.Discrete(2), legacy.Box(0.0, 1.0, (3,))])),
            ("alpha", legacy.Dict([("inner", legacy.MultiBinary(4))])),
        ]
    )
    converted = convert_space(nested)
    assert list(converted.spaces) == ["zeta", "alpha"]
    assert converted["zeta"] == spaces.Tuple([spaces.Discrete(2), spaces.Box(0.0, 1.0, (3,))])
    assert converted["alpha"]["inner"] == spaces.MultiBinary(4)
    sample = converted.sample()
    assert sample in converted and list(sample) == ["zeta", "alpha"]


def test_gymnasium_spaces_pass_through():
    space = spaces.Tuple([spaces.Discrete(2), spaces.Box(0.0, 1.0)])
    assert convert_space(space) is space


def test_convert_rejects_unknown_or_incomplete_spaces():
    class Graph:
        pass

    with pytest.raises(TypeError, match=r"cannot convert the space .*Graph.*supported"):
        convert_space(Graph())
    broken = legacy.Box(0.0, 1.0, (2,))
    del broken.high
    with pytest.raises(TypeError, match="legacy Box space .* has no attribute high"):
        convert_space(broken)


# --- LegacyGymEnv -------------------------------------------------------------------------


def run_episode(env, seed, actions=(0, 1, 2, 2, 1)):
    observs = [env.reset(seed=seed)[0]]
    observs += [env.step(action)[0] for action in actions]
    return np.array(observs)


def test_spaces_are_converted_and_observations_fit_them():
    env = LegacyGymEnv(LegacyWalker())
    assert env.observation_space == spaces.Box(np.float32([-10, 0]), np.float32([10, 20]))
    assert env.action_space == spaces.Discrete(3)
    observ, info = env.reset(seed=0)
    assert observ in env.observation_space and info == {}


def test_seeds_reproduce_episodes():
    env = LegacyGymEnv(LegacyWalker())
    first = run_episode(env, seed=11)
    np.testing.assert_array_equal(run_episode(env, seed=11), first)
    np.testing.assert_array_equal(run_episode(LegacyGymEnv(LegacyWalker()), seed=11), first)
    assert not np.array_equal(run_episode(env, seed=12), first)
    env.reset(seed=11)
    assert env.reset()[0][0] != first[0][0]  # an unseeded reset continues the generator


def test_reset_seeds_the_gymnasium_np_random_too():
    env = LegacyGymEnv(LegacyWalker())
    env.reset(seed=3)
    state = env.np_random.bit_generator.state
    env.reset(seed=3)
    assert env.np_random.bit_generator.state == state


@pytest.mark.parametrize(
    "done, info, expected",
    [
        (False, {}, (False, False)),
        (True, {}, (True, False)),
        (True, {"TimeLimit.truncated": True}, (False, True)),
        (True, {"TimeLimit.truncated": False}, (True, False)),
        (False, {"TimeLimit.truncated": True}, (False, True)),
    ],
    ids=["running", "terminal", "time-limit", "terminal-at-time-limit", "truncated-not-done"],
)
def test_done_splits_into_terminated_and_truncated(done, info, expected):
    env = LegacyGymEnv(LegacyScript([(done, info)]))
    env.reset()
    observ, reward, terminated, truncated, step_info = env.step(0)
    assert (observ, reward) == (1, 0.5)
    assert (terminated, truncated) == expected
    assert type(terminated) is bool and type(truncated) is bool
    assert step_info == info and step_info is not info


def test_walker_time_limit_becomes_truncation():
    env = LegacyGymEnv(LegacyWalker(time_limit=3))
    env.reset(seed=0)
    flags = [env.step(1)[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_reset_options():
    env = LegacyGymEnv(LegacyWalker())
    env.reset(options={})
    with pytest.raises(ValueError, match=r"takes no reset options; pass options=None"):
        env.reset(options={"level": 2})


def test_seeding_an_env_without_seed_method_warns():
    env = LegacyGymEnv(LegacyScript([]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env.reset() == (0, {})
    with pytest.warns(UserWarning, match=r"has no seed\(\) method, so the seed is ignored"):
        env.reset(seed=1)


def test_a_five_tuple_step_is_a_clear_error():
    class NewApi(LegacyScript):
        def step(self, action):
            return 1, 0.0, False, False, {}

    env = LegacyGymEnv(NewApi([]))
    env.reset()
    with pytest.raises(TypeError, match=r"returned 5 values, expected \(obs, reward, done"):
        env.step(0)


def test_render_close_and_metadata_are_forwarded():
    inner = LegacyWalker()
    env = LegacyGymEnv(inner, render_mode="ansi")
    assert env.metadata["render_modes"] == ["ansi"] and env.metadata["render_fps"] == 30
    env.reset(seed=0)
    assert env.render().startswith("ansi: position")
    assert LegacyGymEnv(LegacyWalker()).render().startswith("human:")
    env.close()
    assert inner.closed


def test_constructor_rejects_non_envs():
    with pytest.raises(TypeError, match=r"needs an env with a reset\(\) method"):
        LegacyGymEnv(object())
    no_space = LegacyScript([])
    no_space.observation_space = None
    with pytest.raises(TypeError, match="needs an env with an observation_space"):
        LegacyGymEnv(no_space)


def test_gymnasium_env_checker_passes():
    env = LegacyGymEnv(LegacyWalker(), render_mode="ansi")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    messages = [str(w.message) for w in caught]
    # Only the warning every spec-less env gets: no seed, dtype, bounds or API warnings.
    assert all("alternative render modes" in m for m in messages), messages


# --- detection ----------------------------------------------------------------------------


def test_is_legacy_env():
    assert not is_legacy_env(gymnasium.make("CartPole-v1"))
    assert not is_legacy_env(LegacyGymEnv(LegacyWalker()))
    assert not is_legacy_env(DuckGymnasiumEnv())
    assert is_legacy_env(LegacyWalker())
    assert is_legacy_env(LegacyScript([], observation_space=spaces.Discrete(5)))  # gym spaces
    assert is_legacy_env(type("WithSeed", (DuckGymnasiumEnv,), {"seed": lambda self, s: [s]})())
    assert is_legacy_env(object())


def test_to_gymnasium():
    env = gymnasium.make("CartPole-v1")
    assert to_gymnasium(env) is env
    duck = DuckGymnasiumEnv()
    assert to_gymnasium(duck) is duck
    wrapped = to_gymnasium(LegacyWalker())
    assert isinstance(wrapped, LegacyGymEnv) and isinstance(wrapped, gymnasium.Env)
    assert to_gymnasium(wrapped) is wrapped
    assert to_gymnasium(wrapped, legacy=True) is wrapped


def test_to_gymnasium_overrides():
    walker = LegacyWalker()
    assert to_gymnasium(walker, legacy=False) is walker
    forced = to_gymnasium(DuckGymnasiumEnv(), legacy=True)
    assert isinstance(forced, LegacyGymEnv)


def test_docstring_examples_run():
    result = doctest.testmod(batchenv.compat)
    assert result.attempted >= 5 and result.failed == 0


# --- in batchenv workers ------------------------------------------------------------------


def test_a_legacy_env_runs_in_a_batch_env():
    """Workers pass every constructed env through to_gymnasium."""
    import batchenv

    env = batchenv.make(
        functools.partial(LegacyWalker, time_limit=3), num_envs=2, num_workers=1, timeout=60
    )
    try:
        assert env.observation_space == LegacyGymEnv(LegacyWalker(3)).observation_space
        first, _ = env.reset(seed=0)
        np.testing.assert_array_equal(first, env.reset(seed=0)[0])
        terminated, truncated = zip(*[env.step(np.array([1, 2]))[2:4] for _ in range(3)])
        np.testing.assert_array_equal(terminated, [[False, False]] * 3)
        np.testing.assert_array_equal(truncated, [[False, False], [False, False], [True, True]])
    finally:
        env.close()
