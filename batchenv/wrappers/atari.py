"""The DeepMind Atari preprocessing (Mnih et al. 2015; TorchBeast's atari_wrappers).

This module holds :func:`make_atari` and the wrappers it stacks: ``NoopReset``,
``MaxAndSkip``, ``EpisodicLife``, ``GrayResize`` (grey-scale and area resize, no OpenCV)
and ``ClipReward``; the frame stack is :class:`~batchenv.wrappers.batch_ppo.FrameHistory`.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import RecordConstructorArgs, seeding

from .batch_ppo import FrameHistory, StepResult, _require_box

__all__ = [
    "ClipReward",
    "EpisodicLife",
    "GrayResize",
    "MaxAndSkip",
    "NoopReset",
    "make_atari",
]


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
