"""The environments BatchPPO trains on: a Gymnasium id in worker processes, or an in-graph env.

``make_env(config)`` reads ``config.env``:

- a Gymnasium id (``"Pendulum-v1"``): ``config.num_agents`` envs in worker processes
  (:func:`batchenv.make`), each built in batch-ppo's wrapper order (docs/batchppo.md):
  ``gymnasium.make(id, max_episode_steps=config.max_length)`` (the time limit is Gymnasium
  truncation), then :class:`~batchenv.wrappers.RangeNormalize` and
  :class:`~batchenv.wrappers.ClipAction` when ``config.normalize_ranges``, then
  :class:`~batchenv.wrappers.ConvertTo32Bit`;
- ``"module:Class"`` (``"batchenv.kernels:CartPole"``): an in-graph env built as
  ``Class(num_envs=config.num_agents, device=config.device, seed=config.seed)``, with the same
  range normalisation done in torch by :class:`InGraphRangeNormalize`.

Either way the result is an :class:`~batchenv.in_graph.InGraphBatchEnv`.

    >>> from batchenv.algorithms.batchppo import PRESETS
    >>> env = make_env(PRESETS["cartpole"].replace(env="batchenv.kernels:CartPole", num_agents=4))
    >>> env.num_envs, env.single_action_space
    (4, Discrete(2))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import batchenv
from batchenv.in_graph.env import InGraphEnv
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv

from .config import BatchPPOConfig

__all__ = [
    "InGraphRangeNormalize",
    "check_time_limit",
    "env_class",
    "gym_constructor",
    "make_env",
    "phase_seed",
    "reseed",
]


def make_env(config: BatchPPOConfig, num_workers: int | None = None) -> InGraphBatchEnv:
    """The batch of ``config.num_agents`` envs named by ``config.env`` (see the module doc)."""
    device = torch.device(config.device)
    cls = env_class(config.env)
    if cls is not None:
        env = cls(num_envs=config.num_agents, device=device, seed=config.seed)
        check_time_limit(config, getattr(env, "max_episode_steps", None))
        if config.normalize_ranges:
            env = InGraphRangeNormalize(env)
        return InGraphBatchEnv(env, device=device)
    try:
        gym.spec(config.env)
    except gym.error.Error as error:
        raise ValueError(
            f"unknown env {config.env!r}: expected a registered Gymnasium id (e.g. "
            f"'Pendulum-v1') or an in-graph env as 'module:Class' (e.g. "
            f"'batchenv.kernels:CartPole'); Gymnasium says: {error}"
        ) from None
    constructor = gym_constructor(config.env, config.max_length, config.normalize_ranges)
    workers = batchenv.make(constructor, config.num_agents, num_workers=num_workers)
    return InGraphBatchEnv(workers, device=device)  # train() seeds every phase


def check_time_limit(config: BatchPPOConfig, limit: int | None) -> None:
    """ValueError when the env's own time limit ``limit`` is past ``config.max_length``."""
    if limit is not None and limit > config.max_length:
        raise ValueError(
            f"{config.env} ends its episodes after {limit} steps, but "
            f"config.max_length={config.max_length}; set max_length={limit} (--set "
            f"max_length={limit}) or use a preset for this env"
        )


def env_class(name: str) -> type | None:
    """The class of an in-graph env named ``"module:Class"``; None for a Gymnasium id."""
    if ":" not in name:
        return None
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"env {name!r}: cannot import module {module_name!r} ({error}); an in-graph env "
            f"is given as 'module:Class', e.g. 'batchenv.kernels:CartPole'"
        ) from None
    cls = getattr(module, attribute, None)
    if cls is None:
        raise ValueError(f"env {name!r}: module {module_name!r} has no attribute {attribute!r}")
    return cls


def gym_constructor(env_id: str, max_length: int, normalize_ranges: bool) -> Callable[[], Any]:
    """A constructor for the worker processes: batch-ppo's wrapper stack around ``env_id``.

    It is a closure, so cloudpickle sends it by value and the workers import only Gymnasium,
    NumPy and :mod:`batchenv.wrappers` (never torch).
    """

    def make() -> gym.Env:
        import gymnasium

        from batchenv.wrappers import ClipAction, ConvertTo32Bit, RangeNormalize

        env = gymnasium.make(env_id, max_episode_steps=max_length)
        if normalize_ranges:
            env = RangeNormalize(env)
            if isinstance(env.action_space, gymnasium.spaces.Box):
                env = ClipAction(env)
        return ConvertTo32Bit(env)

    return make


class InGraphRangeNormalize:
    """:class:`~batchenv.wrappers.RangeNormalize` + ``ClipAction`` for an in-graph env.

    Finite Box observation bounds map to [-1, 1]; a finite float Box action space becomes
    [-1, 1], and actions are clipped to it and mapped back to the env's bounds. Other spaces
    pass through unchanged.

        >>> from batchenv.kernels import Pendulum
        >>> env = InGraphRangeNormalize(Pendulum(num_envs=2, seed=0))
        >>> env.single_action_space
        Box(-1.0, 1.0, (1,), float32)
    """

    def __init__(self, env: InGraphEnv):
        self.env = env
        self.num_envs = env.num_envs
        self.device = torch.device(env.device)
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self._observ = _finite_box(env.single_observation_space)
        self._action = _finite_box(env.single_action_space)
        as_tensor = dict(dtype=torch.float32, device=self.device)
        if self._observ:
            box = env.single_observation_space
            self._observ_low = torch.as_tensor(box.low, **as_tensor)
            self._observ_span = torch.as_tensor(box.high - box.low, **as_tensor)
            self.single_observation_space = gym.spaces.Box(-1.0, 1.0, box.shape, np.float32)
        if self._action:
            box = env.single_action_space
            self._action_low = torch.as_tensor(box.low, **as_tensor)
            self._action_span = torch.as_tensor(box.high - box.low, **as_tensor)
            self.single_action_space = gym.spaces.Box(-1.0, 1.0, box.shape, np.float32)
        self.max_episode_steps = getattr(env, "max_episode_steps", None)

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        return self._observation(self.env.reset(indices))

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._action:
            action = self._action_low + (action.clamp(-1.0, 1.0) + 1.0) / 2 * self._action_span
        observ, reward, terminated, truncated = self.env.step(action)
        return self._observation(observ), reward, terminated, truncated

    def _observation(self, observ: torch.Tensor) -> torch.Tensor:
        if not self._observ:
            return observ
        span = self._observ_span
        scaled = 2 * (observ - self._observ_low) / torch.where(span > 0, span, 1.0) - 1
        return torch.where(span > 0, scaled, 0.0)

    def __repr__(self) -> str:
        return f"InGraphRangeNormalize({self.env!r})"


def _finite_box(space: gym.Space) -> bool:
    return (
        isinstance(space, gym.spaces.Box)
        and np.issubdtype(space.dtype, np.floating)
        and bool(np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)))
    )


def phase_seed(seed: int, phase: int) -> int:
    """The env seed of phase ``phase`` (0, 1, ...) of a run seeded ``seed``.

    Every phase reseeds the envs, so a phase's episodes depend only on (seed, phase): a
    resumed run draws the same episodes as an uninterrupted one.

        >>> phase_seed(0, 0) != phase_seed(0, 1)
        True
    """
    return int(np.random.SeedSequence([seed, phase]).generate_state(1)[0])


def reseed(env: InGraphBatchEnv, seed: int) -> bool:
    """Seed the next resets of every row of ``env``; False when the env offers no way.

    A NumPy BatchEnv is reset with ``seed`` (row ``i`` gets ``seed + i``); an in-graph env
    is seeded with its ``seed(seed)`` method (every :mod:`batchenv.kernels` env has one).
    """
    inner = env.env
    while isinstance(inner, InGraphRangeNormalize):
        inner = inner.env
    if callable(getattr(inner, "seed", None)):
        inner.seed(seed)
        return True
    if not isinstance(inner, InGraphEnv) and hasattr(inner, "reset"):
        inner.reset(seed=seed)  # a NumPy BatchEnv; simulate()'s forced reset follows
        return True
    return False
