"""Fault-injection environments for the batchenv tests (Gymnasium's testing_utils style).

Every env here is deterministic and tiny. Worker processes import this module by
reference (``tests.faulty_envs``): tests/conftest.py puts the repository root on
``sys.path``, and workers receive the parent's ``sys.path``.

A fault fires in one chosen env only. An env learns its batch row either from its
``index`` constructor argument or, when that is None, from its first seeded reset:
``BatchEnv.reset(seed=0)`` seeds env ``i`` with ``0 + i``, so ``index = seed``. That
lets one constructor, shared by every env of ``batchenv.make``, fault in row ``k`` only.

    >>> env = StepRaisesEnv(at_step=1, only_index=1)
    >>> _ = env.reset(seed=1)        # this env is row 1
    >>> _ = env.step(np.zeros(1, np.float32))   # step 0 is fine, step 1 raises
    >>> env.step(np.zeros(1, np.float32))  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    FaultyEnvError: env 1 failed at step 1
"""

from __future__ import annotations

import os
import threading
import time

import gymnasium
import numpy as np
from gymnasium import spaces

HANG_SECONDS = 60.0  # long enough to outlast every test deadline; workers get killed first


class FaultyEnvError(RuntimeError):
    """The exception the faulty envs raise (importable, so it crosses processes intact)."""


class PlainEnv(gymnasium.Env):
    """A deterministic env with a Box(-1, 1, (1,)) action.

    The observation is ``[index, t, last action, 0, ...]`` (``obs_dim`` floats), the reward
    is the action, and the episode terminates after ``episode_length`` steps. The info is
    ``{"index": index, "t": t}``.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, obs_dim: int = 3, episode_length: int = 1000, index: int | None = None):
        self.observation_space = spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.episode_length = episode_length
        self.index = index
        self.t = 0
        self.last_action = 0.0
        self.closed = False
        self.render_mode = "rgb_array"

    def _observ(self) -> np.ndarray:
        observ = np.zeros(self.observation_space.shape, np.float32)
        observ[: min(3, len(observ))] = [self.index or 0, self.t, self.last_action][: len(observ)]
        return observ

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.index is None and seed is not None:
            self.index = int(seed)
        self.t = 0
        self.last_action = 0.0
        return self._observ(), {"index": self.index, "t": self.t}

    def step(self, action):
        self.fault(self.t)
        self.last_action = float(np.asarray(action).reshape(-1)[0])
        self.t += 1
        terminated = self.t >= self.episode_length
        return self._observ(), self.last_action, terminated, False, self.info()

    def info(self) -> dict:
        return {"index": self.index, "t": self.t}

    def fault(self, step: int) -> None:
        """Called at the start of each step with the number of steps done; no fault here."""

    def render(self):
        return np.full((2, 2, 3), self.t, np.uint8)

    def add(self, a: int, b: int = 0) -> int:
        """A method for ``call()`` tests."""
        return a + b + (self.index or 0)

    def close(self):
        self.closed = True


class _OneEnvFault(PlainEnv):
    """A PlainEnv whose fault fires in env ``only_index`` at its step ``at_step``."""

    def __init__(self, at_step: int = 0, only_index: int | None = 0, **kwargs):
        super().__init__(**kwargs)
        self.at_step = at_step
        self.only_index = only_index

    def fires(self, step: int) -> bool:
        return step == self.at_step and self.only_index in (None, self.index)

    def fault(self, step: int) -> None:
        if self.fires(step):
            self.fire()

    def fire(self) -> None:
        raise NotImplementedError


class UnloadableError(Exception):
    """Pickles, but cannot be unpickled (its __init__ needs two arguments, pickle passes one)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class ConstructorRaisesEnv(PlainEnv):
    """Raises FaultyEnvError (or, with ``unloadable=True``, UnloadableError) while built."""

    def __init__(self, message: str = "cannot build this env", unloadable: bool = False):
        if unloadable:
            raise UnloadableError(message, 7)
        raise FaultyEnvError(message)


class StepRaisesEnv(_OneEnvFault):
    """Raises FaultyEnvError in step number ``at_step`` (0-based) of env ``only_index``."""

    def fire(self) -> None:
        raise FaultyEnvError(f"env {self.index} failed at step {self.at_step}")


class ResetRaisesEnv(PlainEnv):
    """Raises FaultyEnvError in reset when seeded with ``bad_seed`` (None: every reset)."""

    def __init__(self, bad_seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.bad_seed = bad_seed

    def reset(self, *, seed=None, options=None):
        if self.bad_seed is None or seed == self.bad_seed:
            raise FaultyEnvError(f"reset failed for seed {seed}")
        return super().reset(seed=seed, options=options)


class StepExitsEnv(_OneEnvFault):
    """Ends its worker process with ``os._exit(code)`` in the middle of a step."""

    def __init__(self, code: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.code = code

    def fire(self) -> None:
        os._exit(self.code)


class StepHangsEnv(_OneEnvFault):
    """Sleeps ``seconds`` in step number ``at_step`` of env ``only_index`` (a hung env)."""

    def __init__(self, seconds: float = HANG_SECONDS, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def fire(self) -> None:
        time.sleep(self.seconds)


class CloseHangsEnv(PlainEnv):
    """Its close() sleeps ``seconds``."""

    def __init__(self, seconds: float = HANG_SECONDS, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def close(self):
        time.sleep(self.seconds)


class CloseRaisesEnv(PlainEnv):
    """Its close() raises FaultyEnvError."""

    def close(self):
        raise FaultyEnvError(f"env {self.index} cannot close")


class DiscreteObservationEnv(_OneEnvFault):
    """A Discrete(3) observation (the step count mod 3); at step ``at_step`` it returns
    ``bad_value`` instead (a float to be cast, or an int outside the space)."""

    def __init__(self, bad_value: float = 7.9, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = spaces.Discrete(3)
        self.bad_value = bad_value
        self._bad = False

    def fire(self) -> None:
        self._bad = True

    def _observ(self):
        return self.bad_value if self._bad else self.t % 3

    def step(self, action):
        self._bad = False
        return super().step(action)


class BadObservationEnv(_OneEnvFault):
    """Returns an observation one element longer than its space says, at step ``at_step``."""

    def fire(self) -> None:
        self._bad = True

    def step(self, action):
        self._bad = False
        observ, reward, terminated, truncated, info = super().step(action)
        if self._bad:
            observ = np.zeros(len(observ) + 1, np.float32)
        return observ, reward, terminated, truncated, info


class TextObservationEnv(BadObservationEnv):
    """At step ``at_step``, returns an observation of the right shape that cannot be
    stored as floats (strings)."""

    def step(self, action):
        self._bad = False
        observ, reward, terminated, truncated, info = PlainEnv.step(self, action)
        if self._bad:
            observ = np.array(["x"] * len(observ))
        return observ, reward, terminated, truncated, info


class UnpicklableInfoEnv(_OneEnvFault):
    """Puts a threading.Lock (which cannot be pickled) into the info of step ``at_step``."""

    def fire(self) -> None:
        self._lock = True

    def step(self, action):
        self._lock = False
        observ, reward, terminated, truncated, info = super().step(action)
        if self._lock:
            info["lock"] = threading.Lock()
        return observ, reward, terminated, truncated, info


class CountedSpaceEnv(PlainEnv):
    """The n-th instance built (counted across processes in ``counter_dir``) has obs_dim 2 + n.

    Builds envs whose spaces differ, deterministically, even inside ``batchenv.make``.
    """

    def __init__(self, counter_dir: str):
        number = 0
        while True:
            try:
                os.close(os.open(os.path.join(counter_dir, str(number)), os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                number += 1
        super().__init__(obs_dim=2 + number)


class Unpicklable:
    """An object that refuses to be pickled (even by cloudpickle)."""

    def __reduce__(self):
        raise TypeError("Unpicklable objects cannot be pickled")


class NestedEnv(gymnasium.Env):
    """Nested Dict/Tuple spaces with Box, Discrete, MultiDiscrete and MultiBinary leaves.

    The observation is a deterministic function of the seed, the step count and the action,
    so two copies fed the same actions agree exactly.
    """

    def __init__(self):
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-10.0, 10.0, (2,), np.float32),
                "flags": spaces.MultiBinary(3),
                "inner": spaces.Tuple((spaces.Discrete(5), spaces.MultiDiscrete([3, 4]))),
            }
        )
        self.action_space = spaces.Tuple(
            (
                spaces.Discrete(3),
                spaces.Box(-1.0, 1.0, (2,), np.float64),
                spaces.Dict({"md": spaces.MultiDiscrete([2, 3]), "mb": spaces.MultiBinary(2)}),
            )
        )
        self.seed_value = 0
        self.t = 0

    def _observ(self, action=None):
        if action is None:
            choice, box, md, mb = 0, np.zeros(2), np.zeros(2, np.int64), np.zeros(2, np.int8)
        else:
            choice, box, rest = action
            md, mb = rest["md"], rest["mb"]
        return {
            "pos": (np.asarray(box, np.float32) + self.t + self.seed_value).astype(np.float32),
            "flags": np.array([mb[0], mb[1], self.t % 2], np.int8),
            "inner": (int(choice) + self.seed_value % 2, np.asarray(md, np.int64)),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_value = 0 if seed is None else int(seed)
        self.t = 0
        return self._observ(), {}

    def step(self, action):
        self.t += 1
        return self._observ(action), float(action[0]), False, self.t >= 50, {"t": self.t}


class LegacyGymEnv:
    """An old-style gym env: ``seed()``, ``reset() -> observ``, 4-tuple ``step``.

    Counts up from the seed; ``done`` after ``episode_length`` steps.
    """

    metadata: dict = {}

    def __init__(self, episode_length: int = 3):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.episode_length = episode_length
        self.start = 0
        self.t = 0

    def seed(self, seed=None):
        self.start = 0 if seed is None else int(seed)
        return [seed]

    def reset(self):
        self.t = 0
        return np.array([self.start, self.t], np.float32)

    def step(self, action):
        self.t += 1
        observ = np.array([self.start + int(action), self.t], np.float32)
        return observ, 1.0, self.t >= self.episode_length, {"t": self.t}

    def close(self):
        pass
