"""AsyncBatchEnv: EnvPool's asynchronous API over batchenv's worker processes.

``batchenv.make(..., batch_size=B)`` returns one. ``send`` hands actions to some envs and
returns at once; ``recv`` returns the first ``B`` envs to finish, whichever they are, so the
policy runs on one part of the batch while the workers step the other and a slow env never
stalls the rest:

    >>> import numpy as np, batchenv
    >>> env = batchenv.make("CartPole-v1", num_envs=8, batch_size=4)
    >>> env.async_reset(seed=0)                       # every env resets; env i gets seed 0 + i
    >>> for _ in range(100):
    ...     observ, reward, terminated, truncated, info = env.recv()  # 4 finished envs
    ...     env_id = info["env_id"]
    ...     env.send(np.random.randint(0, 2, len(env_id)), env_id)
    >>> env.close()

The names and semantics are EnvPool's (``async_reset``, ``send(action, env_id)``,
``recv()``, ``info["env_id"]``, ``step(action, env_id)`` = send + recv). Finished episodes
reset as in Gymnasium's NEXT_STEP autoreset (EnvPool's): the row that returned
``terminated`` or ``truncated`` is reset by its next ``send`` (its action is ignored) and
comes back with the first observation of a new episode, reward 0 and both flags off.
``autoreset_mode="same_step"`` resets at once instead and puts the terminal observation and
info in ``info["final_obs"]`` / ``info["final_info"]``. ``info`` is batched as Gymnasium's
vector envs batch it (a ``key`` array and a ``_key`` mask per key).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from batchenv import spaces as batch_spaces
from batchenv.batch_env import per_env_seeds
from batchenv.errors import (
    AlreadyPendingCallError,
    ClosedError,
    EnvIdsError,
    EnvIdsOutOfRangeError,
    EnvIdsTypeError,
    NoPendingCallError,
)
from batchenv.infos import batch_infos
from batchenv.workers.autoreset import RESET, SAME_STEP, STEP, split_same_step
from batchenv.workers.external_process import DEFAULT_CLOSE_TIMEOUT
from batchenv.workers.shared_memory_transport import SharedMemoryTransport

AUTORESET_MODES = ("next_step", "same_step")


class AsyncBatchEnv:
    """Envs in worker processes with EnvPool's ``send``/``recv`` API.

    Errors name the env and its own step count (the steps it completed before failing).

    Args:
        transport: the workers (built by ``batchenv.make``).
        batch_size: how many envs ``recv()`` returns, ``1 <= batch_size <= num_envs``.
        timeout: deadline in seconds of each ``recv`` (None: none; a dead worker is
            noticed at once).
        check_actions: check that actions are finite and inside the action space.
        autoreset_mode: "next_step" (EnvPool's and Gymnasium's default) or "same_step".
    """

    def __init__(
        self,
        transport: SharedMemoryTransport,
        batch_size: int,
        *,
        timeout: float | None = None,
        check_actions: bool = True,
        autoreset_mode: str = "next_step",
    ):
        num_envs = transport.num_envs
        if not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= num_envs:
            raise ValueError(
                f"batch_size must be an integer in [1, num_envs={num_envs}], got {batch_size!r}"
            )
        mode = getattr(autoreset_mode, "value", autoreset_mode)
        mode = {"NextStep": "next_step", "SameStep": "same_step"}.get(mode, mode)
        if mode not in AUTORESET_MODES:
            raise ValueError(f"autoreset_mode must be one of {AUTORESET_MODES}, got {mode!r}")
        self._transport = transport
        self.num_envs = num_envs
        self.batch_size = int(batch_size)
        self.autoreset_mode = mode
        self.observation_space = transport.observation_space
        self.action_space = transport.action_space
        self.timeout = timeout
        self.check_actions = check_actions
        self._unflatten = batch_spaces.unflattener(self.observation_space)
        self._checkers: dict[int, Any] = {}
        self._in_flight = np.zeros(num_envs, bool)  # sent and not yet returned by recv()
        self._finished = np.zeros(num_envs, bool)  # returned done: the next send resets
        self._never_reset = True
        self._last_ids: np.ndarray | None = None
        self.steps = 0  # recv() calls
        self._env_steps = np.zeros(num_envs, np.int64)  # steps each env completed
        self._stepping = np.zeros(num_envs, bool)  # in flight with a step, not a reset
        self._closed = False
        self._broken: BaseException | None = None

    # ------------------------------------------------------------------ EnvPool's API

    def async_reset(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> None:
        """Reset every env without waiting (env ``i`` gets ``seed + i``); then ``recv()``."""
        self._check_usable("async_reset")
        if self._in_flight.any():
            rows = np.flatnonzero(self._in_flight).tolist()
            raise AlreadyPendingCallError(
                f"async_reset() called while envs {_short(rows)} are in flight; recv() them first"
            )
        rows = np.arange(self.num_envs)
        seeds = per_env_seeds(seed, self.num_envs)
        reset_args = {int(r): (seeds[r], options) for r in rows}
        self._dispatch(rows, None, np.full(self.num_envs, RESET, np.uint8), reset_args)
        self._finished[:] = False
        self._never_reset = False

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Send ``actions`` (one row per id) to envs ``env_ids`` and return at once.

        ``env_ids`` defaults to the ids the last ``recv()`` returned. The ids must be
        unique, in range and not in flight (sent and not yet received): else an
        :class:`~batchenv.errors.EnvIdsError` (a ValueError) or, for ids in flight, an
        :class:`~batchenv.errors.AlreadyPendingCallError`.
        """
        self._check_usable("send")
        if self._never_reset:
            raise NoPendingCallError("send() called before async_reset(); reset the envs first")
        rows = self._ids(env_ids)
        leaves = self._checker(len(rows))(actions, self.check_actions)
        if self.autoreset_mode == "next_step":
            command = np.where(self._finished[rows], RESET, STEP).astype(np.uint8)
        else:
            command = np.full(len(rows), SAME_STEP, np.uint8)
        self._dispatch(rows, leaves, command, None)
        self._finished[rows] = False

    def recv(self, timeout: float | None = None):
        """The first ``batch_size`` envs to finish: ``(observ, reward, terminated,
        truncated, info)``, with their ids in ``info["env_id"]``."""
        self._check_usable("recv")
        if not self._in_flight.any():
            raise NoPendingCallError(
                "recv() called with no env in flight; call async_reset() or send() first"
            )
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            rows, raw = self._transport.recv_rows(self.batch_size, deadline, self._env_steps)
        except NoPendingCallError:
            raise
        except BaseException as error:
            self._break(error)
            raise
        transport = self._transport
        observ = [leaf[rows] for leaf in transport.observ]
        reward = transport.reward[rows]
        terminated = transport.terminated[rows]
        truncated = transport.truncated[rows]
        self._in_flight[rows] = False
        self._env_steps[rows] += self._stepping[rows]
        self._finished[rows] = terminated | truncated
        self._last_ids = rows
        self.steps += 1
        info = self._batched_infos(rows, raw)
        return self._unflatten(observ), reward, terminated, truncated, info

    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None):
        """``send(actions, env_ids)`` then ``recv()``."""
        self.send(actions, env_ids)
        return self.recv()

    def reset(self, seed: int | Sequence[int | None] | None = None, options: dict | None = None):
        """``async_reset(seed, options)`` then ``recv()``: ``(observ, info)`` of the first
        ``batch_size`` envs."""
        self.async_reset(seed, options)
        observ, _, _, _, info = self.recv()
        return observ, info

    # ------------------------------------------------------------------ machinery

    def _ids(self, env_ids) -> np.ndarray:
        if env_ids is None:
            if self._last_ids is None:
                raise EnvIdsError(
                    "send() without env_ids needs a recv() first to take them from: pass "
                    "env_ids, or recv() after async_reset()"
                )
            return self._last_ids
        rows = np.asarray(env_ids).reshape(-1)
        if not len(rows):
            raise EnvIdsError("send() needs at least one env id, got none")
        if rows.dtype.kind not in "iu":
            raise EnvIdsTypeError(f"env_ids must be integers, got an array of {rows.dtype}")
        rows = rows.astype(np.int64)
        if rows.min() < 0 or rows.max() >= self.num_envs:
            raise EnvIdsOutOfRangeError(
                f"env_ids {_short(rows.tolist())} out of range for {self.num_envs} envs"
            )
        if len(np.unique(rows)) != len(rows):
            raise EnvIdsError(f"env_ids must be unique, got {_short(rows.tolist())}")
        busy = rows[self._in_flight[rows]]
        if len(busy):
            raise AlreadyPendingCallError(
                f"envs {_short(busy.tolist())} are still in flight; recv() their results "
                "before sending them new actions"
            )
        return rows

    def _checker(self, count: int):
        checker = self._checkers.get(count)
        if checker is None:
            checker = self._checkers[count] = batch_spaces.action_checker(self.action_space, count)
        return checker

    def _dispatch(self, rows: np.ndarray, leaves, command: np.ndarray, reset_args) -> None:
        try:
            self._transport.send_rows(rows, leaves, command, reset_args, step=self._env_steps)
        except BaseException as error:
            self._break(error)
            raise
        self._in_flight[rows] = True
        self._stepping[rows] = command != RESET

    def _batched_infos(self, rows: np.ndarray, raw: dict) -> dict:
        pairs = []
        for k, row in enumerate(rows.tolist()):
            info = raw.get(row)
            if not info:
                continue
            same_step = split_same_step(info)
            if same_step is not None:
                final_observ, final_info, info = same_step
                info = {"final_obs": final_observ, "final_info": final_info, **info}
            pairs.append((k, info))
        merged = batch_infos(len(rows), pairs)
        merged["env_id"] = rows
        return merged

    def _break(self, error: BaseException) -> None:
        self._broken = error
        self._transport.terminate()
        self._closed = True

    def _check_usable(self, what: str) -> None:
        if self._broken is not None:
            raise ClosedError(
                f"{what}() called on an AsyncBatchEnv that broke after {self.steps} recv() "
                f"calls: {type(self._broken).__name__}: {self._broken}; create a new one"
            ) from self._broken
        if self._closed:
            raise ClosedError(f"{what}() called on a closed AsyncBatchEnv; create a new one")

    # ------------------------------------------------------------------ shutdown

    @property
    def closed(self) -> bool:
        return self._closed

    def processes(self):
        """The worker processes behind the envs."""
        return self._transport.processes()

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> list[str]:
        """Close every env and end the workers (results in flight are dropped)."""
        if self._closed:
            if self._broken is not None:
                self._transport.terminate()
            return []
        self._closed = True
        return self._transport.close(timeout)

    def __enter__(self) -> AsyncBatchEnv:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"AsyncBatchEnv({self.num_envs} envs, batch_size={self.batch_size}, "
            f"{self.observation_space}, {self.action_space}, {state})"
        )


def _short(rows: list[int]) -> str:
    return str(rows) if len(rows) <= 10 else f"{rows[:10]} ... ({len(rows)} in all)"
