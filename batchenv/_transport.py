"""How a BatchEnv moves actions and results: per-env calls, or shared memory.

``ListTransport`` drives a list of envs: in-process Gymnasium envs, or ExternalProcess
workers (one call per env, sent to all before collecting — the TF Agents way).
``SharedMemoryTransport`` drives worker processes that host several envs each: actions,
observations, rewards and flags live in one shared memory block, and a step costs one
one-byte message to and from each worker, whatever the number of envs it hosts.

Both expose: ``observation_space``, ``action_space``, ``num_envs``, ``start(kind, ...)`` /
``finish(deadline, step)``, ``call``/``get_attr``/``set_attr``, ``close``, ``terminate``.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Sequence
from multiprocessing.reduction import send_handle
from typing import Any

import numpy as np

from batchenv import spaces as batch_spaces
from batchenv._worker import GO, IDLE, RESET, STEP_ALL, STEP_ALL_AHEAD
from batchenv.errors import EnvWorkerError, WorkerTimeoutError
from batchenv.external_process import ExternalProcess, _remaining


def check_same_spaces(spaces: Sequence[tuple], what: str = "env") -> None:
    """ValueError unless every (observation_space, action_space) pair is equal."""
    observ0, action0 = spaces[0]
    for index, (observ, action) in enumerate(spaces):
        if observ != observ0:
            raise ValueError(
                f"{what} {index} has observation space {observ}, but {what} 0 has {observ0}; "
                "all envs of a BatchEnv must share observation and action spaces"
            )
        if action != action0:
            raise ValueError(
                f"{what} {index} has action space {action}, but {what} 0 has {action0}; "
                "all envs of a BatchEnv must share observation and action spaces"
            )


class ListTransport:
    """One env object per row: Gymnasium envs stepped in-process, or ExternalProcess."""

    def __init__(self, envs: Sequence[Any], blocking: bool = False):
        self.envs = list(envs)
        self.blocking = blocking
        self.num_envs = len(self.envs)
        for row, env in enumerate(self.envs):
            if isinstance(env, ExternalProcess):
                if len(env.rows) != 1:
                    raise ValueError(
                        f"env {row} is an ExternalProcess hosting {len(env.rows)} envs; a BatchEnv "
                        "takes one env per ExternalProcess (use batchenv.make for groups)"
                    )
                env.worker_index, env.rows = row, [row]  # errors then name the batch row
        check_same_spaces([(env.observation_space, env.action_space) for env in self.envs])
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self._pending: list = []

    def start(
        self,
        kind: str,
        rows: np.ndarray,
        actions: list[np.ndarray] | None,
        reset_args,
        command: None = None,
        step: int | None = None,
    ) -> None:
        read = (
            batch_spaces.make_row_reader(self.action_space, actions)
            if actions is not None
            else None
        )
        pending = []
        for row in rows:
            env = self.envs[row]
            if kind == "step":
                args = (read(row),)
                call = lambda e=env, a=args: e.step(*a)
            else:
                seed, options = reset_args[row] if reset_args else (None, None)
                call = lambda e=env, s=seed, o=options: e.reset(seed=s, options=o)
            if isinstance(env, ExternalProcess) and not self.blocking:
                if kind == "step":
                    pending.append((row, env.step(args[0], blocking=False)))
                else:
                    pending.append((row, env.reset(seed=seed, options=options, blocking=False)))
            else:
                pending.append((row, _Immediate(call, row, kind)))
        self._pending = pending

    def finish(self, deadline: float | None, step: int):
        results, pending, self._pending = [], self._pending, []
        for index, (row, promise) in enumerate(pending):
            try:
                results.append(promise(_remaining(deadline), step=step))
            except WorkerTimeoutError as error:
                slow = [int(row)] + [int(r) for r, p in pending[index + 1 :] if not _ready(p)]
                raise _all_slow(error, slow) from error
            except EnvWorkerError:
                raise
            except Exception as error:
                raise EnvWorkerError(
                    f"env {row} ({type(self.envs[row]).__name__}) raised {type(error).__name__} "
                    f"at step {step}: {error}",
                    env_index=row,
                    step=step,
                    env_description=str(self.envs[row]),
                    remote_type=type(error).__name__,
                ) from error
        return results

    def call(self, row: int, name: str, args: tuple, kwargs: dict):
        env = self.envs[row]
        if isinstance(env, ExternalProcess):
            return env.call_at(0, name, args, kwargs)
        return getattr(env, name)(*args, **kwargs)

    def get_attr(self, row: int, name: str):
        env = self.envs[row]
        if isinstance(env, ExternalProcess):
            return env.get_attr(name)
        return getattr(env, name) if hasattr(env, name) else env.get_wrapper_attr(name)

    def set_attr(self, row: int, name: str, value: Any) -> None:
        env = self.envs[row]
        if isinstance(env, ExternalProcess):
            env.set_attr(name, value)
        else:
            setattr(env, name, value)

    def close(self, timeout: float) -> list[str]:
        problems = []
        deadline = time.monotonic() + timeout
        for env in self.envs:
            if isinstance(env, ExternalProcess):
                problems += env.close(max(0.1, deadline - time.monotonic()))
            else:
                try:
                    env.close()
                except Exception as error:
                    problems.append(f"{type(error).__name__}: {error}")
        return problems

    def terminate(self) -> None:
        for env in self.envs:
            if isinstance(env, ExternalProcess):
                env.terminate()

    def processes(self) -> list[ExternalProcess]:
        return [env for env in self.envs if isinstance(env, ExternalProcess)]


class _Immediate:
    """A promise that runs its call when asked (blocking stepping, in-process envs)."""

    def __init__(self, call, row: int, kind: str):
        self.call, self.row, self.kind = call, row, kind

    def __call__(self, timeout: float | None = None, *, step: int | None = None):
        return self.call()


def _ready(promise) -> bool:
    owner = getattr(promise, "_owner", None)
    try:
        return owner is None or owner._conn.poll(0)
    except OSError:
        return True


def _all_slow(error: WorkerTimeoutError, rows: list[int]) -> WorkerTimeoutError:
    return WorkerTimeoutError(
        f"envs {rows} did not answer within the deadline at step {error.step}; their workers "
        f"were terminated (first: {error})",
        worker=error.worker,
        env_index=int(rows[0]),
        env_indices=tuple(int(r) for r in rows),
        step=error.step,
        env_description=error.env_description,
    )


class SharedMemoryTransport:
    """Worker processes hosting several envs each, exchanging data through shared memory."""

    def __init__(self, workers: list[ExternalProcess], copy: bool = True, reset_ahead: bool = True):
        self.workers = workers
        self.copy = copy
        self.reset_ahead = reset_ahead
        self.rows_of = [np.asarray(w.rows) for w in workers]
        self.num_envs = sum(len(rows) for rows in self.rows_of)
        check_same_spaces([(w.observation_space, w.action_space) for w in workers], "worker")
        self.observation_space = workers[0].observation_space
        self.action_space = workers[0].action_space
        self._map, layout, size, buffers, fd = _allocate(
            self.observation_space, self.action_space, self.num_envs
        )
        try:
            for worker in workers:
                worker.send(
                    ("attach", layout, size, self.observation_space, self.action_space), "attach"
                )
                send_handle(worker._conn, fd, worker.pid)
            for worker in workers:
                worker.wait(30.0)
        finally:
            os.close(fd)
        n_obs = len(batch_spaces.leaves(self.observation_space))
        n_act = len(batch_spaces.leaves(self.action_space))
        self.observ = [buffers[f"observ{i}"] for i in range(n_obs)]
        self.ahead = [buffers[f"ahead{i}"] for i in range(n_obs)]
        # Rows whose env was reset ahead (after the step that ended its episode), with the
        # reset infos; reset(indices) of such rows without seed or options is free.
        self.ready = np.zeros(self.num_envs, bool)
        self.ready_infos: dict[int, dict] = {}
        self._step_message = STEP_ALL_AHEAD if reset_ahead else STEP_ALL
        self._kind = "step"
        self._from_ahead = np.zeros(0, bool)
        self.actions = [buffers[f"action{i}"] for i in range(n_act)]
        self.command = buffers["command"]
        self.reward, self.terminated, self.truncated = (
            buffers["reward"],
            buffers["terminated"],
            buffers["truncated"],
        )
        self._waiting: list[ExternalProcess] = []

    def start(
        self,
        kind: str,
        rows: np.ndarray,
        actions: list[np.ndarray] | None,
        reset_args,
        command: np.ndarray | None = None,
        step: int | None = None,
    ) -> None:
        """Wake the workers owning ``rows``: a step, a reset, or the given per-row commands."""
        if actions is not None:
            for buffer, part in zip(self.actions, actions):
                buffer[...] = part
        self._kind = kind
        if kind == "step" and command is None:  # every row steps: no command array
            self.ready[...] = False
            for worker in self.workers:
                worker.send(self._step_message, kind, step=step)
            self._waiting = self.workers
            return
        if command is not None:
            self.command[...] = command
        else:
            self._from_ahead = self.ready[rows] if reset_args is None else np.zeros(len(rows), bool)
            self._reset_rows = rows
            if reset_args is None and self._from_ahead.all():
                # Every row was reset ahead by its worker: nobody to wake. (The command
                # array is rewritten by the next step before any worker reads it.)
                self._waiting = []
                return
            self.command[...] = IDLE
            self.command[rows[~self._from_ahead]] = RESET
        self.ready[self.command != IDLE] = False
        chosen = self.command != IDLE
        waiting = []
        for worker, worker_rows in zip(self.workers, self.rows_of):
            if not chosen[worker_rows].any():
                continue
            if reset_args is None:
                worker.send(GO, kind, step=step)
            else:
                args = {int(r): reset_args[r] for r in worker_rows if chosen[r] and r in reset_args}
                worker.send(("commands", args), kind, step=step)
            waiting.append(worker)
        self._waiting = waiting

    def finish(self, deadline: float | None, step: int):
        infos: dict[int, dict] = {}
        waiting, self._waiting = self._waiting, []
        for index, worker in enumerate(waiting):
            try:
                reply = worker.wait(
                    _remaining(deadline) if deadline is not None else None, step=step
                )
            except WorkerTimeoutError as error:
                slow = [int(r) for r in worker.rows]
                slow += [
                    int(r) for w in waiting[index + 1 :] if not _worker_ready(w) for r in w.rows
                ]
                raise _all_slow(error, slow) from error
            if reply:
                infos.update(reply)
        if self._kind == "step" and self.reset_ahead:  # every row ran STEP_AHEAD
            done = np.flatnonzero(self.terminated | self.truncated)
            if not len(done):
                return infos
            self.ready[done] = True
            for row in done.tolist():
                info = infos.get(row)
                if isinstance(info, tuple) and info and info[0] == "reset_ahead":
                    infos[row], self.ready_infos[row] = info[1], info[2]
                else:
                    self.ready_infos.pop(row, None)
        elif self._kind == "reset" and self._from_ahead.any():
            for row in self._rows_ahead():
                infos[row] = self.ready_infos.pop(row, {})
                self.ready[row] = False
        return infos

    def take_ready(self, rows: np.ndarray) -> tuple[list[np.ndarray], dict] | None:
        """Observations and reset infos of ``rows`` if every one was reset ahead, which
        makes them reset now (no worker is involved); None otherwise."""
        ready = self.ready
        if not len(rows) or not ready[rows].all():
            return None
        ready[rows] = False
        infos = self.ready_infos
        raw = {row: infos.pop(row, {}) for row in rows.tolist()} if infos else None
        return [ahead[rows] for ahead in self.ahead], raw

    def _rows_ahead(self) -> list[int]:
        return [int(r) for r in self._reset_rows[self._from_ahead]]

    def results(self, kind: str, rows: np.ndarray):
        """Copies (or views) of the shared results for ``rows``."""
        if kind == "step":
            if self.copy:
                return (
                    [b.copy() for b in self.observ],
                    self.reward.copy(),
                    self.terminated.copy(),
                    self.truncated.copy(),
                )
            return self.observ, self.reward, self.terminated, self.truncated
        from_ahead = self._from_ahead
        if not from_ahead.any():
            return [b[rows] for b in self.observ]
        if from_ahead.all():
            return [b[rows] for b in self.ahead]
        result = []
        for observ, ahead in zip(self.observ, self.ahead):
            part = observ[rows]
            part[from_ahead] = ahead[rows[from_ahead]]
            result.append(part)
        return result

    def call(self, row: int, name: str, args: tuple, kwargs: dict):
        worker, slot = self._locate(row)
        return worker.call_at(slot, name, args, kwargs)

    def get_attr(self, row: int, name: str):
        worker, slot = self._locate(row)
        return worker.get_attr(name, index=slot)

    def set_attr(self, row: int, name: str, value: Any) -> None:
        worker, slot = self._locate(row)
        worker.set_attr(name, value, index=slot)

    def _locate(self, row: int) -> tuple[ExternalProcess, int]:
        for worker, rows in zip(self.workers, self.rows_of):
            hits = np.flatnonzero(rows == row)
            if len(hits):
                return worker, int(hits[0])
        raise IndexError(f"env index {row} out of range for {self.num_envs} envs")

    def close(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        problems = []
        for worker in self.workers:
            problems += worker.close(max(0.1, deadline - time.monotonic()))
        return problems

    def terminate(self) -> None:
        for worker in self.workers:
            worker.terminate()

    def processes(self) -> list[ExternalProcess]:
        return list(self.workers)


def _worker_ready(worker: ExternalProcess) -> bool:
    try:
        return worker._conn.poll(0)
    except OSError:
        return True


def _allocate(observation_space, action_space, num_envs: int):
    """Lay out the shared block, create it as a memfd and map it. Returns the mapping."""
    fields: list[tuple[str, tuple, np.dtype]] = []
    for i, leaf in enumerate(batch_spaces.leaves(observation_space)):
        shape, dtype = batch_spaces.leaf_layout(leaf)
        fields.append((f"observ{i}", (num_envs, *shape), dtype))
    for i, leaf in enumerate(batch_spaces.leaves(observation_space)):
        shape, dtype = batch_spaces.leaf_layout(leaf)
        fields.append((f"ahead{i}", (num_envs, *shape), dtype))
    for i, leaf in enumerate(batch_spaces.leaves(action_space)):
        shape, dtype = batch_spaces.leaf_layout(leaf)
        fields.append((f"action{i}", (num_envs, *shape), dtype))
    fields += [
        ("reward", (num_envs,), np.dtype(np.float64)),
        ("terminated", (num_envs,), np.dtype(np.bool_)),
        ("truncated", (num_envs,), np.dtype(np.bool_)),
        ("command", (num_envs,), np.dtype(np.uint8)),
    ]
    layout, offset = [], 0
    for name, shape, dtype in fields:
        offset = (offset + 63) // 64 * 64
        layout.append((name, offset, shape, dtype.str))
        offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = max(offset, 1)
    fd = _anonymous_file(size)
    block = mmap.mmap(fd, size)
    buffers = {}
    for name, start, shape, dtype in layout:
        count = int(np.prod(shape, dtype=np.int64))
        buffers[name] = np.frombuffer(block, np.dtype(dtype), count, start).reshape(shape)
    return block, layout, size, buffers, fd


def _anonymous_file(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("batchenv", os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux
        import tempfile

        handle, path = tempfile.mkstemp(prefix="batchenv-")
        os.unlink(path)
        fd = handle
    os.ftruncate(fd, size)
    return fd
