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
"""

from __future__ import annotations

import copy
import math
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
    "ClipReward",
    "ConvertTo32Bit",
    "EpisodicLife",
    "FrameDelta",
    "FrameHistory",
    "GrayResize",
    "MaxAndSkip",
    "NoopReset",
    "RandomStart",
    "RangeNormalize",
    "make_atari",
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


# ---- Atari: the DeepMind preprocessing (Mnih et al. 2015; TorchBeast's atari_wrappers) ----


def _ale_lives(env: gymnasium.Env) -> int:
    """Lives left, from the ALE interface (``env.unwrapped.ale.lives()``)."""
    return int(env.unwrapped.ale.lives())


class NoopReset(gymnasium.Wrapper, RecordConstructorArgs):
    """After each reset, take 1 to ``noop_max`` no-op actions (action ``noop_action``).

    The count comes from the wrapper's own generator, seeded by ``reset(seed=...)``. If the
    episode ends during the no-ops, the env is reset again. ``info["noops"]`` is the count.

    >>> import gymnasium
    >>> env = NoopReset(gymnasium.make("CartPole-v1"), noop_max=3)
    >>> _, info = env.reset(seed=0)
    >>> 1 <= info["noops"] <= 3
    True
    """

    def __init__(self, env: gymnasium.Env, noop_max: int = 30, noop_action: int = 0):
        RecordConstructorArgs.__init__(self, noop_max=noop_max, noop_action=noop_action)
        gymnasium.Wrapper.__init__(self, env)
        if isinstance(noop_max, bool) or not isinstance(noop_max, (int, np.integer)):
            raise TypeError(f"NoopReset noop_max must be an int, got {noop_max!r}")
        if noop_max < 1:
            raise ValueError(f"NoopReset noop_max must be >= 1, got {noop_max}")
        self._noop_max = int(noop_max)
        self._noop_action = noop_action
        self._rng: np.random.Generator | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None or self._rng is None:
            self._rng, _ = seeding.np_random(seed)
        observ, info = self.env.reset(seed=seed, options=options)
        noops = int(self._rng.integers(1, self._noop_max + 1))
        for _ in range(noops):
            observ, _, terminated, truncated, info = self.env.step(self._noop_action)
            if terminated or truncated:
                observ, info = self.env.reset(options=options)
        return observ, {**info, "noops": noops}


class MaxAndSkip(gymnasium.Wrapper, RecordConstructorArgs):
    """Repeat each action ``skip`` times, sum the rewards and observe the pixel-wise maximum
    of the last two frames (Atari sprites flicker between frames). Stops early at the end of
    an episode (then the maximum is over the frames seen).

    >>> import gymnasium
    >>> env = MaxAndSkip(gymnasium.make("CartPole-v1"), skip=4)
    >>> _ = env.reset(seed=0)
    >>> float(env.step(0)[1])
    4.0
    """

    def __init__(self, env: gymnasium.Env, skip: int = 4):
        RecordConstructorArgs.__init__(self, skip=skip)
        gymnasium.Wrapper.__init__(self, env)
        if isinstance(skip, bool) or not isinstance(skip, (int, np.integer)) or skip < 1:
            raise ValueError(f"MaxAndSkip skip must be an int >= 1, got {skip!r}")
        self._skip = int(skip)

    def step(self, action: Any) -> StepResult:
        total = 0.0
        frames: deque[np.ndarray] = deque(maxlen=2)
        for _ in range(self._skip):
            observ, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            frames.append(np.array(observ))  # a copy: the env may reuse its buffer
            if terminated or truncated:
                break
        observ = np.maximum(frames[0], frames[1]) if len(frames) == 2 else frames[0]
        return observ, total, terminated, truncated, info


def _area_weights(size_in: int, size_out: int) -> np.ndarray:
    """``[size_out, size_in]`` matrix averaging the input cells each output cell covers
    (fractional overlaps weighted), like OpenCV's INTER_AREA."""
    edges = np.linspace(0.0, size_in, size_out + 1)
    weights = np.zeros((size_out, size_in), np.float64)
    for out in range(size_out):
        start, stop = edges[out], edges[out + 1]
        for cell in range(int(np.floor(start)), min(int(np.ceil(stop)), size_in)):
            weights[out, cell] = min(stop, cell + 1) - max(start, cell)
        weights[out] /= weights[out].sum()
    return weights.astype(np.float32)


def _area_groups(size_in: int, size_out: int) -> tuple[int, int] | None:
    """``(copies, group)`` when area-resizing ``size_in`` cells to ``size_out`` is the same as
    repeating each cell ``copies`` times and summing groups of ``group`` (then dividing by
    ``group``), with few copies: 210 -> 84 rows is (2, 5). None when that would take more
    than 4 copies (160 -> 84 columns: 21): a weight matrix is cheaper then."""
    common = math.gcd(size_in, size_out)
    copies, group = size_out // common, size_in // common
    return (copies, group) if copies <= 4 else None


def _area_sum(frame: np.ndarray, axis: int, groups: tuple[int, int]) -> np.ndarray:
    """Sum ``frame`` over the area groups along ``axis`` (0 or 1): exact integer sums of
    uint8 frames (uint16 while they fit), float32 sums otherwise."""
    copies, group = groups
    if copies > 1:
        frame = np.repeat(frame, copies, axis=axis)
    shape = list(frame.shape)
    shape[axis : axis + 1] = [shape[axis] // group, group]
    exact = frame.dtype == np.uint8 and 255 * group <= np.iinfo(np.uint16).max
    return frame.reshape(shape).sum(axis=axis + 1, dtype=np.uint16 if exact else np.float32)


def _area_taps(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray]:
    """``(index, weight)``, each ``[taps, size_out]``: output cell ``j`` is the sum over
    ``t`` of input cell ``index[t, j]`` times ``weight[t, j]`` (the nonzero entries of
    ``_area_weights``; unused taps have weight 0). 160 -> 84 columns take 3 taps."""
    weights = _area_weights(size_in, size_out)
    taps = int((weights > 0).sum(axis=1).max())
    index = np.zeros((taps, size_out), np.intp)
    weight = np.zeros((taps, size_out), np.float32)
    for out, row in enumerate(weights):
        cells = np.flatnonzero(row)
        index[: len(cells), out] = cells
        index[len(cells) :, out] = cells[-1]
        weight[: len(cells), out] = row[cells]
    return index, weight


def _area_apply(frame: np.ndarray, axis: int, taps: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Area-resize ``frame`` along ``axis`` (0 or 1) with ``_area_taps``: a few gathers and
    multiply-adds, in float32. Not a product with the weight matrix: NumPy hands that to a
    multithreaded BLAS, whose idle threads then spin on the other cores after every frame."""
    index, weight = taps
    shape = [1] * frame.ndim
    shape[axis] = weight.shape[1]
    total = np.take(frame, index[0], axis=axis) * weight[0].reshape(shape)
    for t in range(1, len(index)):
        total += np.take(frame, index[t], axis=axis) * weight[t].reshape(shape)
    return total


class GrayResize(gymnasium.ObservationWrapper, RecordConstructorArgs):
    """Grey-scale (ITU-R 601 luma) and area-resize image observations to ``height x width``
    uint8 frames. Accepts ``(H, W, 3)`` RGB or ``(H, W)`` grey frames; needs no OpenCV.

    Exact area averaging, like OpenCV's INTER_AREA: along an axis whose sizes have a small
    ratio (Atari's 210 -> 84 rows: each row twice, groups of 5) as sums of uint8 cells,
    otherwise (160 -> 84 columns) as a weighted sum of the few cells each output cell
    overlaps. A 210x160 grey Atari frame takes ~60 us (RGB ~125 us) on one core: there is no
    BLAS call, so no BLAS threads spin beside the env (a matrix product per frame kept
    NumPy's threads busy on the other core: 2x the CPU of the frame itself).

    >>> import gymnasium
    >>> from gymnasium import spaces
    >>> class Screen(gymnasium.Env):
    ...     observation_space = spaces.Box(0, 255, (210, 160, 3), np.uint8)
    ...     action_space = spaces.Discrete(2)
    ...     def reset(self, *, seed=None, options=None):
    ...         return np.full((210, 160, 3), 100, np.uint8), {}
    >>> env = GrayResize(Screen())
    >>> observ, _ = env.reset()
    >>> observ.shape, observ.dtype, int(observ[0, 0])
    ((84, 84), dtype('uint8'), 100)
    """

    def __init__(self, env: gymnasium.Env, width: int = 84, height: int = 84):
        RecordConstructorArgs.__init__(self, width=width, height=height)
        gymnasium.ObservationWrapper.__init__(self, env)
        box = _require_box(env.observation_space, "GrayResize", "observation")
        shape = box.shape
        if not (len(shape) == 2 or (len(shape) == 3 and shape[-1] in (1, 3))):
            raise ValueError(
                f"GrayResize needs (H, W), (H, W, 1) or (H, W, 3) frames, the env has {shape}"
            )
        # Per axis: (axis, (copies, group), None), summed exactly in groups, or
        # (axis, None, (index, weight)), a weighted sum of taps.
        self._axes = []
        divisor = 1
        for axis, size_out in ((0, height), (1, width)):
            groups = _area_groups(shape[axis], size_out)
            if groups is None:
                self._axes.append((axis, None, _area_taps(shape[axis], size_out)))
            else:
                self._axes.append((axis, groups, None))
                divisor *= groups[1]
        self._divisor = divisor  # the group sums are divided once, at the end
        self._luma = tuple(np.float32(weight) for weight in (0.299, 0.587, 0.114))
        self.observation_space = spaces.Box(0, 255, (height, width), np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        frame = np.asarray(observation)
        if frame.ndim == 3 and frame.shape[-1] == 1:
            frame = frame[..., 0]
        elif frame.ndim == 3:
            red, green, blue = self._luma
            grey = frame[..., 0] * red
            grey += frame[..., 1] * green
            grey += frame[..., 2] * blue
            frame = grey
        for axis, groups, taps in self._axes:
            if taps is None:
                frame = _area_sum(frame, axis, groups)
            else:
                frame = _area_apply(frame, axis, taps)
        resized = frame.astype(np.float32, copy=False)  # every path above made a new array
        if self._divisor != 1:
            resized /= self._divisor
        return np.clip(np.rint(resized), 0, 255).astype(np.uint8)


class EpisodicLife(gymnasium.Wrapper, RecordConstructorArgs):
    """End the episode (``terminated``) when a life is lost; reset the game only when it is
    over, otherwise ``reset()`` takes one no-op step and continues (DeepMind's trick)."""

    def __init__(self, env: gymnasium.Env):
        RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> StepResult:
        observ, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = _ale_lives(self.env)
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return observ, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            observ, info = self.env.reset(seed=seed, options=options)
        else:
            observ, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observ, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = _ale_lives(self.env)
        return observ, info


class ClipReward(gymnasium.RewardWrapper, RecordConstructorArgs):
    """Rewards become their sign: -1, 0 or +1.

    >>> import gymnasium
    >>> env = ClipReward(gymnasium.make("CartPole-v1"))
    >>> env.reward(-7.5), env.reward(0.0), env.reward(3.0)
    (-1.0, 0.0, 1.0)
    """

    def __init__(self, env: gymnasium.Env):
        RecordConstructorArgs.__init__(self)
        gymnasium.RewardWrapper.__init__(self, env)

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(reward))


def make_atari(
    env_id: str,
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    frame_stack: int = 4,
    episodic_life: bool = False,
    clip_rewards: bool = False,
    **make_kwargs: Any,
) -> gymnasium.Env:
    """An ALE env with the DeepMind preprocessing: frames ``[frame_stack, 84, 84]`` uint8.

    Order: ALE without frame skip (grey-scale screens) -> NoopReset(noop_max) ->
    MaxAndSkip(frame_skip) -> [EpisodicLife] -> GrayResize(84, 84) -> [ClipReward] ->
    FrameHistory (oldest frame first, channels first). ``PongNoFrameskip-v4`` and
    ``ALE/Pong-v5`` both work (v5 gets ``frameskip=1`` here; its sticky actions stay).
    Needs ``pip install batchenv[atari]`` (ale-py). Extra keywords go to ``gymnasium.make``.

    >>> env = make_atari("ALE/Pong-v5")  # doctest: +SKIP
    >>> env.observation_space.shape      # doctest: +SKIP
    (4, 84, 84)
    """
    try:
        import ale_py
    except ImportError as error:
        raise ImportError(
            f"make_atari({env_id!r}) needs ale-py: pip install 'batchenv[atari]'"
        ) from error
    gymnasium.register_envs(ale_py)
    kwargs: dict[str, Any] = {"obs_type": "grayscale", **make_kwargs}
    if env_id.startswith("ALE/"):
        kwargs.setdefault("frameskip", 1)
    elif "NoFrameskip" not in env_id:
        raise ValueError(
            f"make_atari wants an env without frame skip (it skips frames itself): use "
            f"'ALE/<Game>-v5' or '<Game>NoFrameskip-v4', not {env_id!r}"
        )
    env = gymnasium.make(env_id, **kwargs)
    env = NoopReset(env, noop_max=noop_max)
    env = MaxAndSkip(env, skip=frame_skip)
    if episodic_life:
        env = EpisodicLife(env)
    env = GrayResize(env, width=screen_size, height=screen_size)
    if clip_rewards:
        env = ClipReward(env)
    return FrameHistory(env, past_indices=list(range(frame_stack - 1, -1, -1)))
