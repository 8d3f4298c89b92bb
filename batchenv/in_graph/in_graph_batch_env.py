"""InGraphBatchEnv: any batch of envs as an InGraphEnv that keeps its state in tensors.

It wraps either a NumPy :class:`batchenv.BatchEnv` (envs in worker processes or in this
process) or any :class:`~batchenv.in_graph.env.InGraphEnv`, and holds the step state that
``simulate()`` reads and writes: ``observ``, ``action``, ``reward``, ``done`` (bool,
initially all True so the first ``simulate()`` resets every row), ``truncated``, and per row
``score`` and ``length``. Box observations and actions are float32, except that a bool Box
observation (MinAtar's grids) stays bool: a quarter of the bytes, and a compiled step need
not convert hundreds of cells a row to floats that the algorithm's first layer converts
anyway (the built-in algorithms cast to float32 there). Discrete, MultiDiscrete and
MultiBinary ones are int64.

A NumPy BatchEnv is stepped through the torch custom ops ``batchenv::batch_env_reset`` and
``batchenv::batch_env_step``: a compiled ``simulate()`` sees one opaque op per call, with
shapes from ``register_fake``, and no graph break. The op finds its BatchEnv
through an integer handle (a registry of weak references), and mutates a small ``clock``
tensor so the compiler keeps the env calls, in program order, even when no output is used.

    >>> import gymnasium, batchenv
    >>> envs = [gymnasium.make("CartPole-v1") for _ in range(2)]
    >>> env = InGraphBatchEnv(batchenv.BatchEnv(envs), seed=0)
    >>> observ = env.reset(torch.arange(2))
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(2, dtype=torch.int64))
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from batchenv.in_graph.env import InGraphEnv

#: What the deferred finite check marks, in the order of ``InGraphBatchEnv.nonfinite``.
_CHECKED = ("action", "observation", "reward")

_BACKENDS: weakref.WeakValueDictionary[int, _NumpyBackend] = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


class InGraphBatchEnv:
    """A batch of envs with tensor state; satisfies the InGraphEnv protocol itself.

    Args:
        env: a NumPy BatchEnv (``len``, ``observation_space``, ``action_space``,
            ``reset(indices, seed)``, ``step(actions)``) or an InGraphEnv. One with a
            ``num_agents`` attribute (an InGraphEnv, or the AgentBatchEnv of PettingZoo
            envs) has an agent axis after the batch axis in observ, action and reward; its
            ``done`` is the env's (every agent has left).
        device: where the state lives (default: the InGraphEnv's device, or CPU).
        check_finite: raise ValueError naming the rows when an action, observation or
            reward is NaN or infinite. A ``simulate()`` step checks at once (a host read per
            step); ``rollout()`` only marks bad rows in tensor code and raises once, at its
            end (:meth:`raise_if_nonfinite`), so its compiled steps keep no host call.
        seed: NumPy BatchEnv only: seed of the first reset (env ``i`` gets ``seed + i``).

    Example:
        >>> env = InGraphBatchEnv(CartPole(num_envs=8))
        >>> env.done
        tensor([True, True, True, True, True, True, True, True])
    """

    #: CPU tensors that only order host calls (see batchenv.in_graph.cuda_graph).
    cuda_graph_host_tokens = ("clock",)

    def __init__(
        self,
        env: Any,
        device: torch.device | str | None = None,
        check_finite: bool = True,
        seed: int | None = None,
    ):
        self.env = env
        self.check_finite = check_finite
        if isinstance(env, InGraphEnv):
            self._backend = None
            self.handle = 0
            self.num_envs = int(env.num_envs)
            self.single_observation_space = env.single_observation_space
            self.single_action_space = env.single_action_space
            self._env_device = torch.device(env.device)
            self.device = torch.device(device) if device is not None else self._env_device
            agents = getattr(env, "num_agents", None)
            self._agent_shape: tuple[int, ...] = () if agents is None else (int(agents),)
        elif _looks_like_batch_env(env):
            self.num_envs = len(env)
            self.single_observation_space = env.observation_space
            self.single_action_space = env.action_space
            self.device = torch.device(device if device is not None else "cpu")
            agents = getattr(env, "num_agents", None)  # an AgentBatchEnv (PettingZoo envs)
            self._agent_shape = () if agents is None else (int(agents),)
            self._backend = _NumpyBackend(self, seed)
            self.handle = next(_HANDLES)
            _BACKENDS[self.handle] = self._backend
        else:
            raise TypeError(
                f"InGraphBatchEnv wraps a BatchEnv (len, observation_space, action_space, "
                f"reset, step) or an InGraphEnv (num_envs, single_observation_space, "
                f"single_action_space, device, reset, step); got {type(env).__name__}"
            )
        if self.num_envs < 1:
            raise ValueError(f"InGraphBatchEnv needs at least one env, got {self.num_envs}")
        self.observ_shape, self.observ_dtype = _layout(self.single_observation_space, "observ")
        self.action_shape, self.action_dtype = _layout(self.single_action_space, "action")
        batch = (self.num_envs, *self._agent_shape)
        zeros = dict(device=self.device)
        self.observ = torch.zeros((*batch, *self.observ_shape), dtype=self.observ_dtype, **zeros)
        self.action = torch.zeros((*batch, *self.action_shape), dtype=self.action_dtype, **zeros)
        self.reward = torch.zeros(batch, dtype=torch.float32, **zeros)
        self.done = torch.ones(self.num_envs, dtype=torch.bool, **zeros)
        self.truncated = torch.zeros(self.num_envs, dtype=torch.bool, **zeros)
        self.score = torch.zeros(batch, dtype=torch.float32, **zeros)
        self.length = torch.zeros(self.num_envs, dtype=torch.int64, **zeros)
        # Running means of finished episodes (simulate() fills and clears them).
        self.score_total = torch.zeros((), dtype=torch.float32, **zeros)
        self.length_total = torch.zeros((), dtype=torch.float32, **zeros)
        self.episodes = torch.zeros((), dtype=torch.int64, **zeros)
        # simulate() calls so far: the step counter of the logger.
        self.steps = torch.zeros((), dtype=torch.int64, **zeros)
        # Mutated by every custom op call, so compiled graphs keep them and their order; only
        # an ordering token (never read), so CudaGraphLoop lets a replay leave it be.
        self.clock = torch.zeros((), dtype=torch.int64)
        # The deferred finite check (rollout()): rows with a non-finite action, observation
        # or reward, and the step of the first (-1: none) since raise_if_nonfinite() last ran.
        self.nonfinite = torch.zeros((len(_CHECKED), self.num_envs), dtype=torch.bool, **zeros)
        self.nonfinite_step = torch.full((), -1, dtype=torch.int64, **zeros)
        #: Set by rollout() while its programs run (read when they are traced).
        self.defer_check = False
        self.logger = None
        # Summaries of the running simulate() call, before end_episodes (simulate's own).
        self.pending_summaries: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.num_envs

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        """Start new episodes in rows ``indices`` (int64 ``[K]``); return ``observ[indices]``.

        Their ``reward`` is zeroed and ``done``/``truncated`` cleared; ``score`` and
        ``length`` are ``simulate()``'s to reset.

            >>> observ = env.reset(torch.tensor([0, 3]))   # observ.shape[0] == 2
        """
        indices = indices.to(device=self.device, dtype=torch.int64)
        if self._backend is not None:
            observ = torch.ops.batchenv.batch_env_reset(self.clock, self.handle, indices)
        else:
            observ = self.env.reset(indices.to(self._env_device))
            self._check_shape("reset", "observ", observ, indices.shape[0], self.observ_shape)
            check = self.check_finite and observ.dtype.is_floating_point
            observ = observ.to(device=self.device, dtype=self.observ_dtype)
            if check:
                _check_finite(self.clock, [observ], "reset observation", indices)
        self.observ = self.observ.index_put((indices,), observ)
        self.reward = self.reward.index_fill(0, indices, 0.0)
        self.done = self.done.index_fill(0, indices, False)
        self.truncated = self.truncated.index_fill(0, indices, False)
        return observ

    def reset_where(self, mask: torch.Tensor) -> torch.Tensor:
        """Start new episodes in the rows where ``mask`` (bool ``[B]``) is set; return ``observ``.

        The traceable form of :meth:`reset` that ``rollout()`` uses: no data-dependent shapes.
        A NumPy BatchEnv resets inside one custom op; an InGraphEnv with its own
        ``reset_where(mask)`` (the batchenv kernels) resets in tensor code. Any other
        InGraphEnv falls back to :meth:`reset` on the index set (a graph break).

            >>> observ = env.reset_where(env.done)   # observ.shape[0] == num_envs
        """
        mask = mask.to(device=self.device, dtype=torch.bool)
        if self._backend is not None:
            fresh = torch.ops.batchenv.batch_env_reset_where(self.clock, self.handle, mask)
        elif callable(getattr(self.env, "reset_where", None)):
            fresh = self.env.reset_where(mask.to(self._env_device))
            self._check_shape("reset_where", "observ", fresh, self.num_envs, self.observ_shape)
            check = self.check_finite and fresh.dtype.is_floating_point
            fresh = fresh.to(device=self.device, dtype=self.observ_dtype)
            if check and self.defer_check:
                self._mark_nonfinite({"observation": fresh}, mask)
            elif check:
                rows = torch.arange(self.num_envs, device=self.device)
                _check_finite(self.clock, [fresh], "reset observation", rows)
        else:
            rows = torch.nonzero(mask).squeeze(-1)  # graph break: data-dependent size
            if rows.shape[0] > 0:
                self.reset(rows)
            return self.observ
        rows_mask = mask.reshape(mask.shape[0], *([1] * (self.observ.dim() - 1)))
        self.observ = torch.where(rows_mask, fresh, self.observ)
        reward_mask = mask.reshape(mask.shape[0], *([1] * (self.reward.dim() - 1)))
        self.reward = torch.where(reward_mask, 0.0, self.reward)
        self.done = self.done & ~mask
        self.truncated = self.truncated & ~mask
        return self.observ

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every row; return ``(observ, reward, terminated, truncated)``.

        Also stores them (and the action, and ``done = terminated | truncated``) in the
        state tensors.

            >>> observ, reward, terminated, truncated = env.step(env.action)
        """
        expected = (self.num_envs, *self._agent_shape, *self.action_shape)
        if tuple(action.shape) != expected:
            raise ValueError(
                f"action batch has shape {tuple(action.shape)}, expected {expected} "
                f"({self.num_envs} envs x action space {self.single_action_space})"
            )
        if action.dtype.is_floating_point and self.action_dtype == torch.int64:
            raise TypeError(
                f"action batch has dtype {action.dtype}, but the action space "
                f"{self.single_action_space} needs integers"
            )
        action = action.to(device=self.device, dtype=self.action_dtype)
        if self._backend is not None:
            observ, reward, terminated, truncated = torch.ops.batchenv.batch_env_step(
                self.clock, self.handle, action
            )
        else:
            observ, reward, terminated, truncated = self.env.step(action.to(self._env_device))
            self._check_shape("step", "observ", observ, self.num_envs, self.observ_shape)
            self._check_shape("step", "reward", reward, self.num_envs, ())
            # Integer and bool observations (MinAtar's grids) cannot be non-finite: checking
            # them after the cast to float cost half of a compiled Breakout step.
            observ_checked = observ.dtype.is_floating_point
            observ = observ.to(device=self.device, dtype=self.observ_dtype)
            reward = reward.to(device=self.device, dtype=torch.float32)
            terminated = terminated.to(device=self.device, dtype=torch.bool)
            truncated = truncated.to(device=self.device, dtype=torch.bool)
            if self.check_finite and self.defer_check:
                checked = {"action": action, "reward": reward}
                if observ_checked:
                    checked["observation"] = observ
                self._mark_nonfinite(checked)
            elif self.check_finite:
                rows = torch.arange(self.num_envs, device=self.device)
                if observ_checked:
                    tensors, names = [action, observ, reward], "action,observation,reward"
                else:
                    tensors, names = [action, reward], "action,reward"
                _check_finite(self.clock, tensors, names, rows)
        self.action = action
        self.observ = observ
        self.reward = reward
        self.done = terminated | truncated
        self.truncated = truncated
        return observ, reward, terminated, truncated

    def raise_if_nonfinite(self) -> None:
        """Raise ValueError for the non-finite values the deferred check has marked.

        ``rollout()`` calls this at its end (one host read). After replaying a recorded CUDA
        graph of rollouts, call it yourself: a recording skips the read. The marks are
        cleared (in place) before raising.

            >>> env.raise_if_nonfinite()   # ValueError: non-finite reward in rows [3] ...
        """
        if not bool(self.nonfinite.any()):
            return
        marks, step = self.nonfinite.to("cpu", copy=True), int(self.nonfinite_step)
        self.nonfinite.zero_()
        self.nonfinite_step.fill_(-1)
        found = [
            f"{name} in rows {torch.nonzero(rows).flatten().tolist()}"
            for name, rows in zip(_CHECKED, marks)
            if bool(rows.any())
        ]
        raise ValueError(
            f"non-finite {'; '.join(found)}, first at step {step} (found by rollout()'s check "
            "at its end); fix the env or algorithm, or pass check_finite=False to "
            "InGraphBatchEnv to skip this check"
        )

    def _mark_nonfinite(
        self, tensors: dict[str, torch.Tensor], mask: torch.Tensor | None = None
    ) -> None:
        """The deferred check: mark the rows (of ``mask``) where a float tensor is not finite.

        Tensor code only, so it fuses into the compiled step; ``tensors`` maps names of
        ``_CHECKED`` to tensors with the batch axis first.
        """
        none = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        bad = []
        for name in _CHECKED:
            tensor = tensors.get(name)
            if tensor is None or not tensor.dtype.is_floating_point:
                bad.append(none)
                continue
            rows = ~torch.isfinite(tensor.reshape(self.num_envs, -1)).all(dim=1)
            bad.append(rows if mask is None else rows & mask)
        marks = torch.stack(bad)
        first = (self.nonfinite_step < 0) & marks.any()
        self.nonfinite_step.copy_(torch.where(first, self.steps + 1, self.nonfinite_step))
        self.nonfinite.logical_or_(marks)

    def _check_shape(
        self, method: str, what: str, value: torch.Tensor, rows: int, shape: tuple[int, ...]
    ) -> None:
        expected = (rows, *self._agent_shape, *shape)
        if tuple(value.shape) != expected:
            raise ValueError(
                f"{type(self.env).__name__}.{method} returned {what} of shape "
                f"{tuple(value.shape)} for {rows} rows, expected {expected} (a multi-agent "
                "env has a num_agents attribute and an agent axis after the batch axis)"
            )

    def close(self) -> None:
        """Close the wrapped env (when it has ``close``) and forget its handle."""
        _BACKENDS.pop(self.handle, None)
        close = getattr(self.env, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return (
            f"InGraphBatchEnv({type(self.env).__name__}, {self.num_envs} envs, "
            f"device={self.device})"
        )


def _looks_like_batch_env(env: Any) -> bool:
    return all(
        hasattr(env, name) for name in ("__len__", "observation_space", "action_space", "reset")
    ) and callable(getattr(env, "step", None))


def _layout(space: gym.Space, what: str) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape of one value and the torch dtype of its batch: Box float32 (a bool Box of
    observations bool), others int64."""
    if isinstance(space, gym.spaces.Box):
        if what == "observ" and space.dtype == np.bool_:
            return tuple(space.shape), torch.bool
        return tuple(space.shape), torch.float32
    if isinstance(space, gym.spaces.Discrete):
        return (), torch.int64
    if isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return tuple(space.shape), torch.int64
    raise TypeError(
        f"InGraphBatchEnv supports Box, Discrete, MultiDiscrete and MultiBinary {what} "
        f"spaces, got {space}; flatten Tuple/Dict spaces with a wrapper first"
    )


def _nonfinite_rows(array: np.ndarray) -> np.ndarray:
    """Positions along the first axis whose values are not all finite."""
    if array.dtype.kind not in "fc":
        return np.zeros(0, np.int64)
    return np.flatnonzero(~np.isfinite(array.reshape(len(array), -1)).all(axis=1))


def _raise_nonfinite(what: str, rows: list[int], during: str = "") -> None:
    raise ValueError(
        f"non-finite {what} in rows {rows}{during and ' ' + during}; fix the env or "
        "algorithm, or pass check_finite=False to InGraphBatchEnv to skip this check"
    )


class _NumpyBackend:
    """The NumPy BatchEnv behind a handle. Everything here runs eagerly inside the ops."""

    def __init__(self, owner: InGraphBatchEnv, seed: int | None):
        self.env = owner.env
        self.num_envs = owner.num_envs
        self.device = owner.device
        self.check_finite = owner.check_finite
        self.seed = seed
        self.agent_shape = owner._agent_shape
        self.observ_shape, self.observ_dtype = _layout(owner.single_observation_space, "observ")
        space = owner.single_action_space
        if isinstance(space, gym.spaces.Discrete):
            self.action_np_dtype = np.dtype(np.int64)
        else:
            self.action_np_dtype = np.dtype(space.dtype)

    def _observ(self, observ: Any, rows: np.ndarray, during: str) -> torch.Tensor:
        observ = np.asarray(observ)
        if self.check_finite:
            bad = _nonfinite_rows(observ)
            if len(bad):
                _raise_nonfinite("observation", rows[bad].tolist(), during)
        return torch.tensor(observ, dtype=self.observ_dtype, device=self.device)

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        rows = indices.cpu().numpy().astype(np.int64)
        seed, self.seed = self.seed, None
        observ, _ = self.env.reset(indices=rows, seed=seed)
        return self._observ(observ, rows, "returned by reset()")

    def observ_batch(self, rows: int, make=torch.empty) -> torch.Tensor:
        """A new observation batch of ``rows`` rows (``make``: torch.empty or torch.zeros)."""
        shape = (rows, *self.agent_shape, *self.observ_shape)
        return make(shape, dtype=self.observ_dtype, device=self.device)

    def reset_where(self, mask: torch.Tensor) -> torch.Tensor:
        """Reset the masked rows; their observations, zeros in the other rows."""
        rows = np.flatnonzero(mask.cpu().numpy())
        observ = self.observ_batch(self.num_envs, torch.zeros)
        if len(rows):
            observ[torch.as_tensor(rows, device=self.device)] = self.reset(torch.as_tensor(rows))
        return observ

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        actions = action.detach().cpu().numpy().astype(self.action_np_dtype, copy=False)
        rows = np.arange(self.num_envs)
        if self.check_finite:
            bad = _nonfinite_rows(actions)
            if len(bad):
                _raise_nonfinite("action", bad.tolist(), "passed to step()")
        observ, reward, terminated, truncated, infos = self.env.step(actions)
        if self.agent_shape:  # per-agent flags; the env is done when its episode is over
            terminated, truncated = infos["episode_terminated"], infos["episode_truncated"]
        reward = np.asarray(reward, dtype=np.float32)
        if self.check_finite:
            bad = _nonfinite_rows(reward)
            if len(bad):
                _raise_nonfinite("reward", bad.tolist(), "returned by step()")
        observ = self._observ(observ, rows, "returned by step()")
        as_bool = dict(dtype=torch.bool, device=self.device)
        return (
            observ,
            torch.tensor(reward, device=self.device),
            torch.tensor(np.asarray(terminated), **as_bool),
            torch.tensor(np.asarray(truncated), **as_bool),
        )


def _backend(handle: int) -> _NumpyBackend:
    backend = _BACKENDS.get(handle)
    if backend is None:
        raise RuntimeError(
            f"no BatchEnv is registered under handle {handle}: its InGraphBatchEnv was closed "
            "or garbage-collected"
        )
    return backend


# --- custom ops -------------------------------------------------------------------------
# Each takes and mutates ``clock`` (a CPU int64 scalar), which orders the ops in a compiled
# graph and stops the compiler from dropping or merging them.


@torch.library.custom_op("batchenv::batch_env_reset", mutates_args=("clock",))
def _batch_env_reset(clock: torch.Tensor, handle: int, indices: torch.Tensor) -> torch.Tensor:
    clock += 1
    return _backend(handle).reset(indices)


@_batch_env_reset.register_fake
def _(clock: torch.Tensor, handle: int, indices: torch.Tensor) -> torch.Tensor:
    return _backend(handle).observ_batch(indices.shape[0], torch.empty)


@torch.library.custom_op("batchenv::batch_env_reset_where", mutates_args=("clock",))
def _batch_env_reset_where(clock: torch.Tensor, handle: int, mask: torch.Tensor) -> torch.Tensor:
    clock += 1
    return _backend(handle).reset_where(mask)


@_batch_env_reset_where.register_fake
def _(clock: torch.Tensor, handle: int, mask: torch.Tensor) -> torch.Tensor:
    backend = _backend(handle)
    return backend.observ_batch(backend.num_envs, torch.empty)


@torch.library.custom_op("batchenv::batch_env_step", mutates_args=("clock",))
def _batch_env_step(
    clock: torch.Tensor, handle: int, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    clock += 1
    return _backend(handle).step(action)


@_batch_env_step.register_fake
def _(clock: torch.Tensor, handle: int, action: torch.Tensor):
    backend = _backend(handle)
    n, device, agents = backend.num_envs, backend.device, backend.agent_shape
    return (
        torch.empty((n, *agents, *backend.observ_shape), dtype=backend.observ_dtype, device=device),
        torch.empty((n, *agents), dtype=torch.float32, device=device),
        torch.empty(n, dtype=torch.bool, device=device),
        torch.empty(n, dtype=torch.bool, device=device),
    )


def _check_finite(
    clock: torch.Tensor, tensors: list[torch.Tensor], names: str, rows: torch.Tensor
) -> None:
    """Raise ValueError naming ``rows[i]`` for each row ``i`` of the tensors that is not finite.

    ``names`` are comma-separated, one per tensor; integer tensors are skipped. The count of
    non-finite elements is plain tensor code (under torch.compile it fuses into the kernel
    that made the tensors); only reading it back is an op of its own.
    """
    checked = [
        (name, tensor)
        for name, tensor in zip(names.split(","), tensors)
        if tensor.dtype.is_floating_point
    ]
    if not checked:
        return
    count = sum((~torch.isfinite(tensor)).sum() for _, tensor in checked)
    floats = [tensor for _, tensor in checked]
    names = ",".join(name for name, _ in checked)
    torch.ops.batchenv.raise_if_nonfinite(clock, count, floats, names, rows)


# Defined with the low-level torch.library API rather than ``custom_op``: it runs on every
# step, and its dispatch costs ~6 us per call here against ~25 us through ``custom_op``.
_LIBRARY = torch.library.Library("batchenv", "FRAGMENT")
_LIBRARY.define(
    "raise_if_nonfinite(Tensor(a!) clock, Tensor count, Tensor[] tensors, str names, "
    "Tensor rows) -> ()"
)


def _raise_if_nonfinite(
    clock: torch.Tensor,
    count: torch.Tensor,
    tensors: list[torch.Tensor],
    names: str,
    rows: torch.Tensor,
) -> None:
    """When ``count`` (non-finite elements) is not 0, raise ValueError naming the bad rows."""
    clock += 1
    if not int(count):
        return
    for name, tensor in zip(names.split(","), tensors):
        bad = ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(dim=1)
        if bool(bad.any()):
            _raise_nonfinite(name, rows[bad].tolist())


_LIBRARY.impl("raise_if_nonfinite", _raise_if_nonfinite, "CompositeExplicitAutograd")
# Returns nothing, so its fake (shape) version has nothing to make.
torch.library.register_fake("batchenv::raise_if_nonfinite", lambda *args: None, lib=_LIBRARY)
