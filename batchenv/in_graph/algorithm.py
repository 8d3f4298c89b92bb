"""The Algorithm protocol: what a researcher writes, as four batched methods.

``simulate()`` calls them in this order on every step (docs/concepts.md):

- ``begin_episodes(agent_indices)`` — rows ``agent_indices`` (int64 ``[K]``, K >= 1) start a
  new episode now (their env was just reset);
- ``perform(observ) -> action`` — batched inference for every row;
- ``experience(observ, action, reward, done, next_observ, truncated)`` — the transition
  batch; ``done`` is ``terminated | truncated`` and ``next_observ`` of a finished row is its
  terminal observation (the reset comes at the start of the next step);
- ``end_episodes(agent_indices)`` — rows ``agent_indices`` (K >= 1) finished an episode at
  this step. A forced ``simulate(reset=True)`` cuts episodes short without this call.

Each may return a dict of scalar tensors (summaries) or None; ``simulate()`` merges them.
Subclass :class:`Algorithm` and override only what you need:

    >>> class CountEpisodes(Algorithm):
    ...     def __init__(self):
    ...         self.episodes = torch.zeros((), dtype=torch.int64)
    ...     def perform(self, observ):
    ...         return torch.zeros(len(observ), dtype=torch.int64)
    ...     def end_episodes(self, agent_indices):
    ...         self.episodes += len(agent_indices)
    ...         return {"episodes": self.episodes}
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

from batchenv.in_graph.counter_rng import MASK, mix32, uniform

Summaries = dict[str, torch.Tensor]


@runtime_checkable
class Algorithm(Protocol):
    """The four methods ``simulate()`` calls; subclass it to inherit no-op defaults.

    Every method receives and returns torch tensors with a leading batch axis. Any object
    with these methods works (``isinstance(obj, Algorithm)`` checks their presence);
    subclassing is only a convenience. ``perform`` has no default: a subclass must define it.
    """

    def begin_episodes(self, agent_indices: torch.Tensor) -> Summaries | None:
        """Rows ``agent_indices`` (int64 ``[K]``) start new episodes. Default: nothing."""
        return None

    def perform(self, observ: torch.Tensor) -> torch.Tensor:
        """Return the action batch for ``observ`` (``[B, ...]``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement perform(observ)")

    def experience(
        self,
        observ: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        next_observ: torch.Tensor,
        truncated: torch.Tensor,
    ) -> Summaries | None:
        """See one transition per row. Default: nothing."""
        return None

    def end_episodes(self, agent_indices: torch.Tensor) -> Summaries | None:
        """Rows ``agent_indices`` (int64 ``[K]``) finished their episodes. Default: nothing."""
        return None


def overrides(algo: object, name: str) -> bool:
    """Whether ``algo`` defines callback ``name`` itself, not as the no-op default.

    ``simulate()`` skips computing the index set of a callback nobody listens to.

        >>> overrides(RandomAlgorithm(gym.spaces.Discrete(2)), "end_episodes")
        False
    """
    method = getattr(type(algo), name, None)
    return method is not None and method is not getattr(Algorithm, name)


class RandomAlgorithm(Algorithm):
    """Uniformly random actions for Box, Discrete, MultiDiscrete and MultiBinary spaces.

    Random numbers come from a counter-based hash of ``(seed, call, element)`` written in
    plain tensor ops, so the same seed gives the same actions eagerly, under
    ``torch.compile`` and on any device. Box dimensions bounded on both sides are sampled
    uniformly, unbounded ones from a standard normal, half-bounded ones from a shifted
    exponential (as Gymnasium does). Box actions are float32, the others int64.

    Args:
        action_space: the single-env (or single-agent) action space.
        device: where the actions are made.
        seed: seed of the stream; None draws one from torch's global generator.
        observation_space: the single observation space; pass it for multi-agent envs so the
            leading axes of ``observ`` (``[B, agents]``) become those of the action. Without
            it the action gets one leading axis, ``[B, ...]``.

    Example:
        >>> algo = RandomAlgorithm(gym.spaces.Discrete(3), seed=0)
        >>> algo.perform(torch.zeros(5, 4)).shape
        torch.Size([5])
    """

    def __init__(
        self,
        action_space: gym.Space,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        observation_space: gym.Space | None = None,
    ):
        self.device = torch.device(device)
        self.action_space = action_space
        self._observ_ndim = None if observation_space is None else len(observation_space.shape)
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, ()).item())
        self.seed = int(seed)
        self._key = mix32(torch.tensor(self.seed & MASK, dtype=torch.int64, device=self.device))
        self._calls = torch.zeros((), dtype=torch.int64, device=self.device)
        as_float = dict(dtype=torch.float32, device=self.device)
        as_int = dict(dtype=torch.int64, device=self.device)
        if isinstance(action_space, gym.spaces.Box):
            low = torch.as_tensor(action_space.low, **as_float)
            high = torch.as_tensor(action_space.high, **as_float)
            self._low, self._high = low, high
            self._bounded = torch.isfinite(low) & torch.isfinite(high)
            self._low_only = torch.isfinite(low) & ~torch.isfinite(high)
            self._high_only = ~torch.isfinite(low) & torch.isfinite(high)
            self._integral = not np.issubdtype(action_space.dtype, np.floating)
            self._shape = tuple(action_space.shape)
        elif isinstance(action_space, gym.spaces.Discrete):
            self._start = torch.tensor(int(action_space.start), **as_int)
            self._n = torch.tensor(int(action_space.n), **as_int)
            self._shape = ()
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            self._start = torch.as_tensor(action_space.start, **as_int)
            self._n = torch.as_tensor(action_space.nvec, **as_int)
            self._shape = tuple(action_space.shape)
        elif isinstance(action_space, gym.spaces.MultiBinary):
            self._start = torch.zeros(action_space.shape, **as_int)
            self._n = torch.full(action_space.shape, 2, **as_int)
            self._shape = tuple(action_space.shape)
        else:
            raise TypeError(
                f"RandomAlgorithm samples Box, Discrete, MultiDiscrete and MultiBinary "
                f"spaces, got {action_space}"
            )

    def perform(self, observ: torch.Tensor) -> torch.Tensor:
        """Random actions shaped ``[*leading axes of observ, *action_space.shape]``."""
        lead = (
            observ.shape[:1]
            if self._observ_ndim is None
            else (observ.shape[: observ.dim() - self._observ_ndim])
        )
        shape = (*lead, *self._shape)
        self._calls += 1
        key = mix32(self._key ^ mix32(self._calls & MASK))
        if not isinstance(self.action_space, gym.spaces.Box):
            u = uniform(shape, key, 0, self.device)
            offset = torch.minimum((u * self._n).to(torch.int64), self._n - 1)
            return self._start + offset
        u = uniform(shape, key, 0, self.device)
        v = uniform(shape, key, 1, self.device)
        low, high = self._low, self._high
        if self._integral:
            span = torch.floor(u * (high - low + 1))
            sample = low + torch.minimum(span, high - low)
        else:
            sample = low + u * high - u * low
        exponential = -torch.log1p(-u)
        normal = torch.sqrt(2.0 * exponential) * torch.cos(2.0 * math.pi * v)
        sample = torch.where(self._low_only, low + exponential, sample)
        sample = torch.where(self._high_only, high - exponential, sample)
        return torch.where(self._bounded | self._low_only | self._high_only, sample, normal)
