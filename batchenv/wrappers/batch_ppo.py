"""Gymnasium wrappers after the ones batch-ppo (TF Agents) ships, written for Gymnasium 1.x.

Each wrapper changes one thing and updates the spaces it changes. Time limits stay
Gymnasium truncation: use ``gymnasium.wrappers.TimeLimit`` (``gymnasium.make`` adds it),
never a wrapper that turns the end of time into termination. batch-ppo's order, in
Gymnasium terms:

    >>> import gymnasium
    >>> from batchenv.wrappers import ClipAction, ConvertTo32Bit, RangeNormalize
    >>> env = gymnasium.make("Pendulum-v1")  # includes TimeLimit(200): truncation
    >>> env = ConvertTo32Bit(ClipAction(RangeNormalize(env)))
    >>> observ, info = env.reset(seed=0)
    >>> float(abs(observ).max()) <= 1.0, observ.dtype
    (True, dtype('float32'))

This module holds that stack (``RangeNormalize``, ``ClipAction``, ``ConvertTo32Bit``,
``FrameHistory``, ``FrameDelta``, ``ActionRepeat``, ``RandomStart``) and the helpers the
wrappers share (``StepResult``, ``_require_box``); the Atari preprocessing is in
:mod:`batchenv.wrappers.atari`.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import RecordConstructorArgs, seeding

__all__ = [
    "ActionRepeat",
    "ClipAction",
    "ConvertTo32Bit",
    "FrameDelta",
    "FrameHistory",
    "RandomStart",
    "RangeNormalize",
]

StepResult = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]


def _require_box(space: spaces.Space, wrapper: str, what: str) -> spaces.Box:
    if not isinstance(space, spaces.Box):
        raise ValueError(f"{wrapper} needs a Box {what} space, but the env has {space}")
    return space


def _is_finite_box(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Box) and bool(
        np.isfinite(space.low).all() and np.isfinite(space.high).all()
    )


def _float_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype`` if it is a floating type, else float32."""
    return np.dtype(dtype) if np.issubdtype(dtype, np.floating) else np.dtype(np.float32)


class RangeNormalize(gymnasium.Wrapper, RecordConstructorArgs):
    """Map finite Box bounds to [-1, 1]: observations forward, actions back.

    Observations ``o`` become ``2 * (o - low) / (high - low) - 1`` (0 where ``low == high``).
    Actions ``a`` given by the agent in [-1, 1] reach the env as
    ``low + (a + 1) / 2 * (high - low)``; values outside [-1, 1] are not clipped here (put
    :class:`ClipAction` outside this wrapper for that, as batch-ppo does).

    Args:
        env: the env to wrap.
        observ: normalize observations. ``None``: when the observation space is a Box with
            finite bounds. ``True``: always (``ValueError`` if that is impossible).
        action: normalize actions. ``None``: when the action space is a floating-point Box
            with finite bounds. ``True``: always (``ValueError`` if that is impossible).

    >>> import gymnasium
    >>> env = RangeNormalize(gymnasium.make("Pendulum-v1"))  # torque bounds [-2, 2]
    >>> env.action_space
    Box(-1.0, 1.0, (1,), float32)
    >>> env.action(np.array([0.5], np.float32))
    array([1.], dtype=float32)
    """

    def __init__(self, env: gymnasium.Env, observ: bool | None = None, action: bool | None = None):
        RecordConstructorArgs.__init__(self, observ=observ, action=action)
        gymnasium.Wrapper.__init__(self, env)
        self._observ = self._decide(env.observation_space, observ, "observ", "observation")
        self._action = self._decide(env.action_space, action, "action", "action")
        if self._observ:
            box = env.observation_space
            self.observation_space = spaces.Box(-1.0, 1.0, box.shape, _float_dtype(box.dtype))
        if self._action:
            box = env.action_space
            self.action_space = spaces.Box(-1.0, 1.0, box.shape, box.dtype)

    @staticmethod
    def _decide(space: spaces.Space, flag: bool | None, arg: str, what: str) -> bool:
        if flag is not None and not isinstance(flag, bool):
            raise TypeError(f"RangeNormalize({arg}=...) must be True, False or None, got {flag!r}")
        if flag is False:
            return False
        missing = None
        if not isinstance(space, spaces.Box):
            missing = f"a Box {what} space"
        elif not _is_finite_box(space):
            missing = f"finite {what} bounds"
        elif what == "action" and not np.issubdtype(space.dtype, np.floating):
            missing = "a floating-point action Box"
        if flag is None:
            return missing is None
        if missing is not None:
            raise ValueError(
                f"RangeNormalize({arg}=True) needs {missing}, but the env's {what} space is "
                f"{space}; pass {arg}=None to normalize only where possible"
            )
        return True

    def observation(self, observation: Any) -> np.ndarray:
        """The env's ``observation`` mapped to [-1, 1] (unchanged if not normalizing)."""
        if not self._observ:
            return observation
        box = self.env.observation_space
        low, high = box.low.astype(np.float64), box.high.astype(np.float64)
        span = high - low
        scaled = 2.0 * (np.asarray(observation, np.float64) - low) / np.where(span > 0, span, 1) - 1
        return np.where(span > 0, scaled, 0.0).astype(self.observation_space.dtype)

    def action(self, action: Any) -> Any:
        """The agent's ``action`` in [-1, 1] mapped to the env's range (unchanged if not)."""
        if not self._action:
            return action
        box = self.env.action_space
        low, high = box.low.astype(np.float64), box.high.astype(np.float64)
        mapped = low + (np.asarray(action, np.float64) + 1.0) / 2.0 * (high - low)
        return mapped.astype(box.dtype)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        observ, info = self.env.reset(seed=seed, options=options)
        return self.observation(observ), info

    def step(self, action: Any) -> StepResult:
        observ, reward, terminated, truncated, info = self.env.step(self.action(action))
        return self.observation(observ), reward, terminated, truncated, info


class ClipAction(gymnasium.ActionWrapper, RecordConstructorArgs):
    """Clip Box actions into the env's action space before stepping.

    The wrapper's action space is an unbounded float32 Box of the same shape (as in
    batch-ppo), so any real-valued action is accepted.

    >>> import gymnasium
    >>> env = ClipAction(gymnasium.make("Pendulum-v1"))
    >>> env.action_space
    Box(-inf, inf, (1,), float32)
    >>> env.action(np.array([5.0]))
    array([2.], dtype=float32)
    """

    def __init__(self, env: gymnasium.Env):
        RecordConstructorArgs.__init__(self)
        gymnasium.ActionWrapper.__init__(self, env)
        box = _require_box(env.action_space, "ClipAction", "action")
        self.action_space = spaces.Box(-np.inf, np.inf, box.shape, np.float32)

    def action(self, action: Any) -> np.ndarray:
        """``action`` clipped to the env's bounds, in the env's action dtype."""
        box = self.env.action_space
        return np.clip(np.asarray(action), box.low, box.high).astype(box.dtype)


_NARROW = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32)}
_INT32 = np.iinfo(np.int32)


def _check_int32(values: Any, space: spaces.Space, path: str) -> None:
    if np.min(values) < _INT32.min or np.max(values) > _INT32.max:
        raise ValueError(
            f"ConvertTo32Bit cannot narrow the observation space {path} = {space} to int32: "
            f"its values may fall outside [{_INT32.min}, {_INT32.max}]"
        )


def _narrow_space(space: spaces.Space, path: str) -> spaces.Space:
    """``space`` with float64 leaves as float32 and int64 leaves as int32."""
    if isinstance(space, spaces.Tuple):
        return spaces.Tuple([_narrow_space(s, f"{path}[{i}]") for i, s in enumerate(space)])
    if isinstance(space, spaces.Dict):
        items = {key: _narrow_space(s, f"{path}[{key!r}]") for key, s in space.spaces.items()}
        return spaces.Dict(items, sort_keys=False)
    dtype = getattr(space, "dtype", None)
    if dtype not in _NARROW:
        return space
    if isinstance(space, spaces.Box):
        if dtype == np.int64:
            _check_int32([space.low.min(), space.high.max()], space, path)
        new = _NARROW[dtype]
        return spaces.Box(space.low.astype(new), space.high.astype(new), dtype=new)
    if isinstance(space, spaces.Discrete):
        _check_int32([space.start, space.start + space.n - 1], space, path)
        return spaces.Discrete(int(space.n), start=int(space.start), dtype=np.int32)
    if isinstance(space, spaces.MultiDiscrete):
        _check_int32([np.min(space.start), np.max(space.start + space.nvec - 1)], space, path)
        return spaces.MultiDiscrete(space.nvec, dtype=np.int32, start=space.start)
    return space


class ConvertTo32Bit(gymnasium.Wrapper, RecordConstructorArgs):
    """float64 observations and all rewards to float32, int64 observations to int32.

    Works through Tuple/Dict observation spaces; leaves other dtypes as they are. Raises
    ``ValueError`` when an observation (after conversion) or a reward is not finite.
    Narrowing an int64 space whose bounds do not fit int32 is a ``ValueError`` at construction.

    >>> import gymnasium
    >>> env = ConvertTo32Bit(gymnasium.make("CartPole-v1"))
    >>> observ, info = env.reset(seed=0)
    >>> observ.dtype, type(env.step(0)[1]).__name__
    (dtype('float32'), 'float32')
    """

    def __init__(self, env: gymnasium.Env):
        RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        self.observation_space = _narrow_space(env.observation_space, "observation")

    def _convert(self, space: spaces.Space, value: Any, call: str) -> Any:
        if isinstance(space, spaces.Tuple):
            return tuple(self._convert(s, v, call) for s, v in zip(space.spaces, value))
        if isinstance(space, spaces.Dict):
            return {key: self._convert(s, value[key], call) for key, s in space.spaces.items()}
        if isinstance(space, spaces.Discrete):
            return space.dtype.type(value)
        if not isinstance(space, (spaces.Box, spaces.MultiDiscrete)):
            return value
        with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is caught below
            array = np.asarray(value).astype(space.dtype, copy=False)
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            raise ValueError(
                f"ConvertTo32Bit: env.{call} returned a non-finite observation: {value!r}"
            )
        return array

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        observ, info = self.env.reset(seed=seed, options=options)
        return self._convert(self.observation_space, observ, "reset()"), info

    def step(self, action: Any) -> StepResult:
        observ, reward, terminated, truncated, info = self.env.step(action)
        observ = self._convert(self.observation_space, observ, "step()")
        reward32 = np.float32(reward)
        if not np.isfinite(reward32):
            raise ValueError(f"ConvertTo32Bit: env.step() returned a non-finite reward: {reward!r}")
        return observ, reward32, terminated, truncated, info


class FrameHistory(gymnasium.Wrapper, RecordConstructorArgs):
    """Observe the frames ``past_indices`` steps ago, stacked on a new leading axis.

    ``past_indices=[0, 1, 4]`` gives ``[now, 1 step ago, 4 steps ago]``. After a reset the
    history holds copies of the first frame. With ``flatten=True`` the frames are
    concatenated along the last axis instead (shape ``(*shape[:-1], k * shape[-1])``;
    a scalar Box gives ``(k,)``), the usual layout for stacking image channels.

    >>> import gymnasium
    >>> env = FrameHistory(gymnasium.make("CartPole-v1"), past_indices=[0, 2])
    >>> env.observation_space.shape
    (2, 4)
    >>> observ, info = env.reset(seed=0)
    >>> bool((observ[0] == observ[1]).all())
    True
    """

    def __init__(self, env: gymnasium.Env, past_indices: Sequence[int], flatten: bool = False):
        RecordConstructorArgs.__init__(self, past_indices=past_indices, flatten=flatten)
        gymnasium.Wrapper.__init__(self, env)
        indices = list(past_indices)
        if not indices:
            raise ValueError("FrameHistory needs at least one past index, got an empty sequence")
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
                raise ValueError(
                    f"FrameHistory past_indices must be integers >= 0, got {past_indices!r}"
                )
        box = _require_box(env.observation_space, "FrameHistory", "observation")
        self._past_indices = [int(index) for index in indices]
        self._flatten = bool(flatten)
        self._frames: deque[np.ndarray] = deque(maxlen=max(self._past_indices) + 1)
        count = len(self._past_indices)
        self.observation_space = spaces.Box(
            self._combine([box.low] * count), self._combine([box.high] * count), dtype=box.dtype
        )

    def _combine(self, frames: list[np.ndarray]) -> np.ndarray:
        if self._flatten and frames[0].ndim > 0:
            return np.concatenate(frames, axis=-1)
        return np.stack(frames, axis=0)

    def _history(self) -> np.ndarray:
        return self._combine([self._frames[index] for index in self._past_indices])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        observ, info = self.env.reset(seed=seed, options=options)
        first = np.array(observ)  # a copy: the env may reuse its buffer
        self._frames.clear()
        self._frames.extend([first] * self._frames.maxlen)
        return self._history(), info

    def step(self, action: Any) -> StepResult:
        observ, reward, terminated, truncated, info = self.env.step(action)
        self._frames.appendleft(np.array(observ))
        return self._history(), reward, terminated, truncated, info


class FrameDelta(gymnasium.Wrapper, RecordConstructorArgs):
    """Observe the difference to the previous observation (zeros right after a reset).

    The bounds become ``[low - high, high - low]``; integer Boxes give float32 deltas.

    >>> import gymnasium
    >>> env = FrameDelta(gymnasium.make("CartPole-v1"))
    >>> observ, info = env.reset(seed=0)
    >>> observ
    array([0., 0., 0., 0.], dtype=float32)
    """

    def __init__(self, env: gymnasium.Env):
        RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        box = _require_box(env.observation_space, "FrameDelta", "observation")
        low, high = box.low.astype(np.float64), box.high.astype(np.float64)
        self._dtype = _float_dtype(box.dtype)
        with np.errstate(over="ignore"):  # float32-max bounds: their span is inf, correctly
            low, high = (low - high).astype(self._dtype), (high - low).astype(self._dtype)
        self.observation_space = spaces.Box(low, high, dtype=self._dtype)
        self._last: np.ndarray | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        observ, info = self.env.reset(seed=seed, options=options)
        self._last = np.array(observ, dtype=self._dtype)
        return np.zeros_like(self._last), info

    def step(self, action: Any) -> StepResult:
        if self._last is None:
            raise gymnasium.error.ResetNeeded("FrameDelta: call reset() before step()")
        observ, reward, terminated, truncated, info = self.env.step(action)
        current = np.array(observ, dtype=self._dtype)
        delta, self._last = current - self._last, current
        return delta, reward, terminated, truncated, info


class ActionRepeat(gymnasium.Wrapper, RecordConstructorArgs):
    """Repeat each action ``amount`` times and sum the rewards.

    Stops early when the episode terminates or is truncated; returns the last observation,
    ``terminated``, ``truncated`` and info of the steps taken.

    >>> import gymnasium
    >>> env = ActionRepeat(gymnasium.make("CartPole-v1"), amount=4)
    >>> _ = env.reset(seed=0)
    >>> float(env.step(0)[1])  # four steps, reward 1 each
    4.0
    """

    def __init__(self, env: gymnasium.Env, amount: int):
        RecordConstructorArgs.__init__(self, amount=amount)
        gymnasium.Wrapper.__init__(self, env)
        if isinstance(amount, bool) or not isinstance(amount, (int, np.integer)):
            raise TypeError(f"ActionRepeat amount must be an int, got {amount!r}")
        if amount < 1:
            raise ValueError(f"ActionRepeat amount must be >= 1, got {amount}")
        self._amount = int(amount)

    def step(self, action: Any) -> StepResult:
        total = 0.0
        for _ in range(self._amount):
            observ, reward, terminated, truncated, info = self.env.step(action)
            total += reward
            if terminated or truncated:
                break
        return observ, total, terminated, truncated, info


_MAX_RESTARTS = 100


class RandomStart(gymnasium.Wrapper, RecordConstructorArgs):
    """After each reset, take a random number (0 to ``max_steps``) of random actions.

    The count and the actions come from the wrapper's own generator and a private copy of
    the action space, both seeded from ``reset(seed=...)`` — so a seeded reset is
    reproducible and the env's ``action_space`` RNG is left alone. If the episode ends
    during the random start, the env is reset again (without a seed) and a new count is
    drawn; after 100 such restarts in a row a ``RuntimeError`` says to lower ``max_steps``.
    ``info`` is that of the last step taken (or of the reset) plus
    ``info["random_start_steps"]``.

    >>> import gymnasium
    >>> env = RandomStart(gymnasium.make("CartPole-v1"), max_steps=5)
    >>> _, info = env.reset(seed=0)
    >>> 0 <= info["random_start_steps"] <= 5
    True
    """

    def __init__(self, env: gymnasium.Env, max_steps: int):
        RecordConstructorArgs.__init__(self, max_steps=max_steps)
        gymnasium.Wrapper.__init__(self, env)
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)):
            raise TypeError(f"RandomStart max_steps must be an int, got {max_steps!r}")
        if max_steps < 0:
            raise ValueError(f"RandomStart max_steps must be >= 0, got {max_steps}")
        self._max_steps = int(max_steps)
        self._sampler = copy.deepcopy(env.action_space)
        self._rng: np.random.Generator | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None or self._rng is None:
            self._rng, _ = seeding.np_random(seed)
            self._sampler.seed(int(self._rng.integers(2**31)))
        observ, info = self.env.reset(seed=seed, options=options)
        for _ in range(_MAX_RESTARTS):
            steps = int(self._rng.integers(0, self._max_steps + 1))
            ended = False
            for _ in range(steps):
                observ, _, terminated, truncated, info = self.env.step(self._sampler.sample())
                ended = terminated or truncated
                if ended:
                    break
            if not ended:
                return observ, {**info, "random_start_steps": steps}
            observ, info = self.env.reset(options=options)
        raise RuntimeError(
            f"RandomStart(max_steps={self._max_steps}): the episode ended during the random "
            f"start {_MAX_RESTARTS} times in a row; use a smaller max_steps for this env"
        )
