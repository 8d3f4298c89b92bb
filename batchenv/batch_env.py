"""BatchEnv: a batch of environments stepped in lockstep, with NumPy arrays.

    >>> import gymnasium
    >>> from batchenv import BatchEnv, ExternalProcess
    >>> envs = [ExternalProcess(lambda: gymnasium.make("CartPole-v1")) for _ in range(4)]
    >>> env = BatchEnv(envs)
    >>> observ, infos = env.reset(seed=0)          # env i is seeded with 0 + i
    >>> observ, reward, terminated, truncated, infos = env.step(np.zeros(4, np.int64))
    >>> env.close()

There is no autoreset: the caller (``simulate()``) resets finished envs with
``reset(indices=...)``. ``batchenv.make`` builds the fast kind, with several envs per
worker process and shared memory. Any failure in a worker closes the whole batch and raises
a typed error naming the worker, the env and the step; later calls say since when.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from batchenv import spaces as batch_spaces
from batchenv.errors import (
    AlreadyPendingCallError,
    ClosedError,
    EnvIdsError,
    EnvIdsOutOfRangeError,
    EnvWorkerError,
    NoPendingCallError,
    NotResetError,
)
from batchenv.workers.autoreset import IDLE
from batchenv.workers.external_process import DEFAULT_CLOSE_TIMEOUT
from batchenv.workers.list_transport import ListTransport
from batchenv.workers.transport import Results, Transport

Nest = Any


class BatchEnv:
    """Lockstep batch of envs sharing observation and action spaces.

    Args:
        envs: Gymnasium envs (stepped in this process) or ExternalProcess workers.
        blocking: step the envs one after another instead of sending all actions first.
        timeout: deadline in seconds for each step or reset (None: none; a dead worker is
            still noticed at once).
        check_actions: check that actions lie inside the action space and are finite
            (batch size, shape and dtype are always checked).
    """

    def __init__(
        self,
        envs: Sequence[Any],
        blocking: bool = False,
        timeout: float | None = None,
        check_actions: bool = True,
        *,
        _transport: Transport | None = None,
    ):
        if _transport is None:
            envs = list(envs)
            if not envs:
                raise ValueError("BatchEnv needs at least one env")
            _transport = ListTransport(envs, blocking)
        self._transport = _transport
        self.num_envs: int = _transport.num_envs
        self.observation_space = _transport.observation_space
        self.action_space = _transport.action_space
        self.timeout = timeout
        self.check_actions = check_actions
        self._check = batch_spaces.action_checker(self.action_space, self.num_envs)
        self._unflatten = batch_spaces.unflattener(self.observation_space)
        self.steps = 0
        self._needs_reset = np.ones(self.num_envs, bool)
        self._all_rows = np.arange(self.num_envs)
        self._all_rows.flags.writeable = False
        self._resets_ahead = _transport.reset_ahead
        self._pending: tuple[str, np.ndarray] | None = None
        self._exchange_command: np.ndarray | None = None
        self._closed = False
        self._broken: BaseException | None = None

    # ------------------------------------------------------------------ container

    def __len__(self) -> int:
        return self.num_envs

    def __getitem__(self, index: int):
        """The env object of row ``index`` (an ExternalProcess or Gymnasium env)."""
        envs = self._transport.env_objects()
        if envs is not None:
            return envs[index]
        return _RowHandle(self, index)

    @property
    def closed(self) -> bool:
        return self._closed

    def processes(self):
        """The ExternalProcess workers behind this batch (empty for in-process envs)."""
        return self._transport.processes()

    # ------------------------------------------------------------------ reset / step

    def reset(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        seed: int | Sequence[int | None] | None = None,
        options: dict | None = None,
    ) -> tuple[Nest, tuple[dict, ...]]:
        """Reset envs ``indices`` (all when None) and return ``(observ, infos)`` for those rows.

        An int ``seed`` seeds env ``i`` with ``seed + i``; a sequence gives one seed per
        reset row.
        """
        if indices is not None and seed is None and options is None:
            done = self._reset_ahead(indices)
            if done is not None:
                return done
        self.reset_async(indices, seed, options)
        return self.reset_wait()

    def _reset_ahead(self, indices) -> tuple[Nest, tuple[dict, ...]] | None:
        """reset(indices) of rows whose workers already reset them after the step that
        ended their episodes: no round trip, nothing to wait for. None when some row was
        not reset ahead (or a call is pending): the caller takes the general path."""
        if not self._resets_ahead or self._pending is not None:
            return None
        self._check_usable("reset")
        rows = self._rows(indices)
        taken = self._transport.take_ready(rows)
        if taken is None:
            return None
        observ, raw = taken
        self._needs_reset[rows] = False
        infos = (
            tuple(raw.get(row, EMPTY_INFO) for row in rows.tolist())
            if raw
            else ((EMPTY_INFO,) * len(rows))
        )
        return self._unflatten(observ), infos

    def reset_async(self, indices=None, seed=None, options=None) -> None:
        rows = self._rows(indices)
        if seed is None and options is None:  # the common reset of finished rows
            self._start("reset", rows, None, None)
            return
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds = [None if seed is None else int(seed) + int(r) for r in rows]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            if len(seeds) != len(rows):
                raise ValueError(f"got {len(seeds)} seeds for {len(rows)} envs to reset")
        needs_args = any(s is not None for s in seeds) or options is not None
        reset_args = {int(r): (s, options) for r, s in zip(rows, seeds)}
        self._start("reset", rows, None, reset_args if needs_args else None)

    def reset_wait(self, timeout: float | None = None) -> tuple[Nest, tuple[dict, ...]]:
        kind, rows, results = self._finish("reset", timeout)
        self._needs_reset[rows] = False
        return results

    def step(
        self, actions: Nest
    ) -> tuple[Nest, np.ndarray, np.ndarray, np.ndarray, tuple[dict, ...]]:
        """Step every env; returns ``(observ, reward, terminated, truncated, infos)``."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Nest) -> None:
        """Validate the actions and send them to the envs without waiting."""
        self._check_usable("step")
        leaves = self._check(actions, self.check_actions)
        if self._needs_reset.any():
            rows = np.flatnonzero(self._needs_reset).tolist()
            raise NotResetError(
                f"step() called for envs {rows} that need a reset (never reset, or their "
                "episode ended at the last step); call reset(indices=...) first"
            )
        self._start("step", self._all_rows, leaves, None)

    def step_wait(self, timeout: float | None = None):
        _, _, results = self._finish("step", timeout)
        self.steps += 1
        if self._resets_ahead:
            # Finished envs were already reset in their worker: they must be reset() here
            # (free) before the next step, so no episode silently runs on.
            self._needs_reset |= results[2] | results[3]
        return results

    # ------------------------------------------------------------------ machinery

    def _rows(self, indices) -> np.ndarray:
        if indices is None:
            return np.arange(self.num_envs)
        rows = np.asarray(indices, dtype=np.int64).reshape(-1)
        listed = rows.tolist()  # a few Python ints: cheaper to check than NumPy reductions
        if listed and (min(listed) < 0 or max(listed) >= self.num_envs):
            raise EnvIdsOutOfRangeError(
                f"reset indices {listed} out of range for {self.num_envs} envs"
            )
        if len(listed) > 1 and len(set(listed)) != len(listed):
            raise EnvIdsError(f"reset indices must be unique, got {listed}")
        return rows

    def exchange(
        self,
        command: np.ndarray | None,
        actions: Nest | None,
        reset_args: dict | None = None,
        timeout: float | None = None,
        *,
        count_step: bool = True,
    ):
        """One lockstep round trip with a per-row command (shared-memory BatchEnv only).

        ``command`` holds one of ``batchenv.workers.autoreset``'s commands per row (STEP,
        RESET, SAME_STEP, STEP_AHEAD, or IDLE to leave the row alone), or is None when
        every row steps (the fastest case); ``reset_args`` maps a reset row to its
        ``(seed, options)``; ``count_step`` adds one to ``steps``. Returns ``(observ,
        reward, terminated, truncated, raw_infos)`` for the whole batch, ``raw_infos``
        mapping a row to what its env returned. This is how ``BatchVectorEnv`` implements
        Gymnasium's autoreset modes.
        """
        self.exchange_async(command, actions, reset_args)
        return self.exchange_wait(timeout, count_step=count_step)

    def exchange_async(
        self,
        command: np.ndarray | None,
        actions: Nest | None,
        reset_args: dict | None = None,
        *,
        unused_rows: np.ndarray | None = None,
    ) -> None:
        """The first half of :meth:`exchange`: check the actions and send the commands.

        ``unused_rows`` (a bool mask) marks rows whose actions the commands ignore (rows
        being reset): their values are not checked, as Gymnasium ignores them."""
        leaves = None
        if actions is not None:
            some_unused = unused_rows is not None and bool(unused_rows.any())
            leaves = self._check(actions, self.check_actions and not some_unused)
            if self.check_actions and some_unused:
                batch_spaces.check_rows(self.action_space, leaves, ~unused_rows)
        self._start("mixed", self._all_rows, leaves, reset_args, command=command)
        self._exchange_command = command

    def exchange_wait(self, timeout: float | None = None, *, count_step: bool = True):
        """The second half of :meth:`exchange`; returns what it returns."""
        results = self._finish("mixed", timeout)
        if self._exchange_command is not None:
            self._needs_reset[self._exchange_command != IDLE] = False
        if count_step:
            self.steps += 1
        return (
            self._unflatten(results.observ),
            results.reward,
            results.terminated,
            results.truncated,
            results.infos,
        )

    def _start(self, kind: str, rows: np.ndarray, leaves, reset_args, command=None) -> None:
        self._check_usable(kind)
        if self._pending is not None:
            raise AlreadyPendingCallError(
                f"{kind} called while a {self._pending[0]} is pending; call "
                f"{self._pending[0]}_wait() first"
            )
        try:
            self._transport.start(kind, rows, leaves, reset_args, command=command, step=self.steps)
        except BaseException as error:
            self._break(error)
            raise
        self._pending = (kind, rows)

    def _finish(self, kind: str, timeout: float | None):
        self._check_usable(f"{kind}_wait")
        if self._pending is None or self._pending[0] != kind:
            pending = "nothing" if self._pending is None else f"a {self._pending[0]}"
            raise NoPendingCallError(f"{kind}_wait() called but {pending} is pending")
        _, rows = self._pending
        self._pending = None
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            raw = self._transport.finish(deadline, self.steps)
        except BaseException as error:
            self._break(error)
            raise
        if kind == "mixed":
            return raw
        return kind, rows, self._assemble(kind, rows, raw)

    def _assemble(self, kind: str, rows: np.ndarray, results: Results):
        infos = _infos_for(rows, results.infos, rows is self._all_rows)
        observ = self._unflatten(results.observ)
        if kind == "step":
            return observ, results.reward, results.terminated, results.truncated, infos
        return observ, infos

    def _break(self, error: BaseException) -> None:
        if isinstance(error, (AlreadyPendingCallError, NoPendingCallError)):
            return
        self._broken = error
        self._pending = None
        self._transport.terminate()
        self._closed = True

    def _check_usable(self, what: str) -> None:
        if self._broken is not None:
            raise ClosedError(
                f"{what}() called on a BatchEnv that broke at step {self.steps}: "
                f"{type(self._broken).__name__}: {self._broken}; create a new BatchEnv"
            ) from self._broken
        if self._closed:
            raise ClosedError(f"{what}() called on a closed BatchEnv; create a new one")

    # ------------------------------------------------------------------ attributes

    def call(self, name: str, *args, **kwargs) -> tuple:
        """Call ``env.name(*args, **kwargs)`` on every env; returns the results per env."""
        return tuple(self._on_env(i, "call", name, args, kwargs) for i in range(self.num_envs))

    def get_attr(self, name: str) -> tuple:
        """Read attribute ``name`` of every env."""
        return tuple(self._on_env(i, "get_attr", name) for i in range(self.num_envs))

    def set_attr(self, name: str, values: Any | Sequence[Any]) -> None:
        """Set attribute ``name`` on every env (one value each when a list/tuple)."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"got {len(values)} values for {self.num_envs} envs")
        for i, value in enumerate(values):
            self._on_env(i, "set_attr", name, value)

    def _on_env(self, row: int, method: str, *args):
        """Run a transport call for one env; a worker failure breaks the batch."""
        self._check_usable(method)
        if self._pending is not None:
            raise AlreadyPendingCallError(
                f"{method}() called while a {self._pending[0]} is pending; call "
                f"{self._pending[0]}_wait() first"
            )
        try:
            return getattr(self._transport, method)(row, *args)
        except (EnvWorkerError, ClosedError) as error:
            self._break(error)
            raise

    # ------------------------------------------------------------------ shutdown

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> list[str]:
        """Close every env and end the workers, within about ``timeout`` seconds.

        Safe to call twice and while a step is pending (its result is dropped).
        """
        if self._closed:
            if self._broken is not None:
                self._transport.terminate()
            return []
        self._closed = True
        self._pending = None
        return self._transport.close(timeout)

    def __enter__(self) -> BatchEnv:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        spaces = f"{self.observation_space}, {self.action_space}"
        return f"BatchEnv({self.num_envs} envs, {spaces}, {state})"


EMPTY_INFO = MappingProxyType({})


def per_env_seeds(seed: int | Sequence[int | None] | None, num_envs: int) -> list:
    """One seed per env: None for all, ``seed + i`` for env ``i``, or the sequence given."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"got {len(seeds)} seeds for num_envs={num_envs}")
    return [None if s is None else int(s) for s in seeds]


def _infos_for(rows: np.ndarray, raw: dict, every_row: bool = False) -> tuple:
    """One info per row: the env's dict, or a shared read-only empty mapping.
    ``every_row``: ``rows`` is 0, 1, ..., so a row is its own position."""
    infos = [EMPTY_INFO] * len(rows)
    if raw and every_row:
        for row, info in raw.items():
            infos[row] = info
    elif raw:
        position = {row: i for i, row in enumerate(rows.tolist())}
        for row, info in raw.items():
            index = position.get(row)
            if index is not None:
                infos[index] = info
    return tuple(infos)


class _RowHandle:
    """``batch[i]`` of a shared-memory BatchEnv: explicit calls into that env's worker;
    other attributes are read from the env there (``batch[0].metadata``)."""

    def __init__(self, batch: BatchEnv, row: int):
        if not 0 <= row < batch.num_envs:
            raise IndexError(f"env index {row} out of range for {batch.num_envs} envs")
        self._batch, self._row = batch, row
        self.observation_space = batch.observation_space
        self.action_space = batch.action_space

    def call(self, name: str, *args, **kwargs):
        return self._batch._on_env(self._row, "call", name, args, kwargs)

    def get_attr(self, name: str):
        return self._batch._on_env(self._row, "get_attr", name)

    def set_attr(self, name: str, value: Any) -> None:
        self._batch._on_env(self._row, "set_attr", name, value)

    def render(self):
        return self.call("render")

    def __getattr__(self, name: str):
        """Any other attribute: read from the env in its worker (a copy; see get_attr)."""
        if name.startswith("_"):
            raise AttributeError(name)
        return self.get_attr(name)
