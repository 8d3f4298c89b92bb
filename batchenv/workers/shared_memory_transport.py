"""SharedMemoryTransport: worker processes hosting several envs each, exchanging data
through one shared memory block (:mod:`batchenv.workers.shared_memory`).

A lockstep step costs one one-byte message to and from each worker, whatever the number
of envs it hosts. With a ``local`` env group (``parent_share``) the parent steps its own
rows on the same block while the workers step theirs. :meth:`send_rows` and
:meth:`recv_rows` are the asynchronous half: row subsets pipelined to their workers, and
the first rows to finish collected from whichever workers answer first.
"""

from __future__ import annotations

import collections
import os
import select
import time
from typing import Any

import numpy as np

from batchenv.errors import EnvWorkerError, NoPendingCallError, WorkerTimeoutError
from batchenv.workers import shared_memory
from batchenv.workers.autoreset import IDLE, RESET, ResetAhead
from batchenv.workers.env_group import EnvGroup
from batchenv.workers.external_process import ExternalProcess, remaining
from batchenv.workers.protocol import GO, STEP_ALL, STEP_ALL_AHEAD, EnvFailure, rows_message
from batchenv.workers.transport import Results, RowCalls, check_same_spaces, slow_rows_error


class SharedMemoryTransport(RowCalls):
    """Worker processes (and optionally the parent) stepping envs in one shared block.

    Args:
        workers: started ExternalProcess workers, labelled with their batch rows.
        copy: return copies of the results (False: views, valid until the next call).
        reset_ahead: a step that ends an episode resets that env at once in its worker.
        local: an env group the parent steps itself (rows no worker hosts), or None.
        exact_spaces: the workers' spaces must be equal (False: of one layout).
    """

    def __init__(
        self,
        workers: list[ExternalProcess],
        copy: bool = True,
        reset_ahead: bool = True,
        local: EnvGroup | None = None,
        local_description: str = "",
        exact_spaces: bool = True,
    ):
        self.workers = workers
        self.copy = copy
        self.reset_ahead = reset_ahead
        self.local = local
        self.local_description = local_description
        self.rows_of = [np.asarray(w.rows) for w in workers]
        local_rows = local.rows if local is not None else []
        self.num_envs = sum(len(rows) for rows in self.rows_of) + len(local_rows)
        spaces = [(w.observation_space, w.action_space) for w in workers]
        if local is not None:
            spaces.insert(0, (local.envs[0].observation_space, local.envs[0].action_space))
        check_same_spaces(spaces, "worker", exact=exact_spaces)
        self.observation_space, self.action_space = spaces[0]
        self.owner = np.full(self.num_envs, -1, np.int64)  # worker index of each row, -1: local
        for index, rows in enumerate(self.rows_of):
            self.owner[rows] = index
        buffers, layout, size, fd = shared_memory.allocate(
            self.observation_space, self.action_space, self.num_envs
        )
        try:
            for worker in workers:
                worker.send(
                    ("attach", layout, size, self.observation_space, self.action_space), "attach"
                )
                worker.send_fd(fd)
            for worker in workers:
                worker.wait(30.0)
        finally:
            os.close(fd)
        if local is not None:
            local.attach(buffers, self.observation_space, self.action_space)
        self.buffers = buffers
        self.observ, self.actions, self.command = buffers.observ, buffers.action, buffers.command
        self.reward, self.terminated = buffers.reward, buffers.terminated
        self.truncated = buffers.truncated
        self.ahead = ResetAhead(self.num_envs, buffers.ahead)
        self._step_message = STEP_ALL_AHEAD if reset_ahead else STEP_ALL
        self._kind = "step"
        self._rows = np.arange(self.num_envs)
        self._from_ahead = np.zeros(0, bool)
        self._waiting: list[ExternalProcess] = []
        self._local_call = None
        # The asynchronous half: row sets in flight per worker, finished rows not yet
        # handed out (in the order they finished) and their infos.
        self._in_flight = [collections.deque() for _ in workers]
        self._finished: collections.deque[int] = collections.deque()
        self._finished_infos: dict[int, Any] = {}

    # ------------------------------------------------------------------ lockstep

    def start(
        self,
        kind: str,
        rows: np.ndarray,
        actions: list[np.ndarray] | None,
        reset_args,
        command: np.ndarray | None = None,
        step: int | None = None,
    ) -> None:
        """Wake the workers owning ``rows``: a step, a reset, or the given per-row commands.
        The local group's share runs in :meth:`finish`, while the workers step."""
        if actions is not None:
            for buffer, part in zip(self.actions, actions):
                buffer[...] = part
        self._kind, self._rows = kind, rows
        local = self.local
        if kind in ("step", "mixed") and command is None:  # every row steps: no command array
            self.ahead.forget(slice(None))
            for worker in self.workers:
                worker.send(self._step_message, kind, step=step)
            self._waiting = self.workers
            if local is not None:
                self._local_call = lambda: local.step_all(self.reset_ahead)
            return
        if command is not None:
            self.command[...] = command
        else:
            self._from_ahead = (
                self.ahead.ready[rows] if reset_args is None else np.zeros(len(rows), bool)
            )
            if reset_args is None and self._from_ahead.all():
                # Every row was reset ahead by its worker: nobody to wake. (The command
                # array is rewritten by the next step before any worker reads it.)
                self._waiting = []
                return
            self.command[...] = IDLE
            self.command[rows[~self._from_ahead]] = RESET
        chosen = self.command != IDLE
        self.ahead.forget(chosen)
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
        if local is not None and chosen[local.row_array].any():
            self._local_call = lambda: local.run_commands(reset_args)

    def finish(self, deadline: float | None, step: int) -> Results:
        infos: dict[int, Any] = {}
        local_call, self._local_call = self._local_call, None
        if local_call is not None:
            local_infos = self._run_local(local_call, step)
            if local_infos:
                infos.update(local_infos)
        waiting, self._waiting = self._waiting, []
        for index, worker in enumerate(waiting):
            try:
                reply = worker.wait(remaining(deadline), step=step)
            except WorkerTimeoutError as error:
                slow = [int(r) for r in worker.rows]
                later = [w for w in waiting[index + 1 :] if not w.reply_ready()]
                slow += [int(r) for w in later for r in w.rows]
                raise slow_rows_error(error, slow) from error
            except EnvWorkerError as error:
                error.errors = [error, *_other_failures(waiting[index + 1 :], deadline, step)]
                raise
            if reply:
                infos.update(reply)
        kind = self._kind
        if kind == "reset":
            if self._from_ahead.any():
                rows_ahead = self._rows[self._from_ahead].tolist()
                infos.update(self.ahead.take_infos(rows_ahead))
            return Results(self._reset_observ(self._rows), infos=infos)
        if kind == "step" and self.reset_ahead:  # every row ran STEP_AHEAD
            self.ahead.after_step(self.terminated, self.truncated, infos)
        return self._step_results(infos)

    def _run_local(self, call, step: int):
        """Run the parent's share; its failure is named like a worker's."""
        try:
            return call()
        except EnvFailure as failure:
            errors = [
                self._local_error(f, step) for f in [failure, *getattr(failure, "others", [])]
            ]
            errors[0].errors = errors
            raise errors[0] from failure.error

    def _local_error(self, failure: EnvFailure, step: int) -> EnvWorkerError:
        error = failure.error
        named = EnvWorkerError(
            f"env {failure.row} ({self.local_description}, stepped in the parent process: "
            f"parent_share) raised {type(error).__name__} at step {step}: {error}",
            env_index=failure.row,
            step=step,
            env_description=self.local_description,
            remote_type=type(error).__name__,
        )
        named.__cause__ = error
        return named

    def _step_results(self, infos: dict, rows=None) -> Results:
        if rows is None:
            if self.copy:
                return Results(
                    [b.copy() for b in self.observ],
                    self.reward.copy(),
                    self.terminated.copy(),
                    self.truncated.copy(),
                    infos,
                )
            return Results(self.observ, self.reward, self.terminated, self.truncated, infos)
        return Results(
            [b[rows] for b in self.observ],
            self.reward[rows],
            self.terminated[rows],
            self.truncated[rows],
            infos,
        )

    def _reset_observ(self, rows: np.ndarray) -> list[np.ndarray]:
        from_ahead = self._from_ahead
        if not from_ahead.any():
            return [b[rows] for b in self.observ]
        if from_ahead.all():
            return [b[rows] for b in self.buffers.ahead]
        result = []
        for observ, ahead in zip(self.observ, self.buffers.ahead):
            part = observ[rows]
            part[from_ahead] = ahead[rows[from_ahead]]
            result.append(part)
        return result

    def take_ready(self, rows: np.ndarray):
        return self.ahead.take(rows)

    # ------------------------------------------------------------------ asynchronous

    def send_rows(
        self,
        rows: np.ndarray,
        actions: list[np.ndarray] | None,
        command: np.ndarray,
        reset_args: dict | None = None,
        step: int | np.ndarray | None = None,
    ) -> None:
        """Run ``command`` (one per row) for ``rows``, none of them in flight, without
        waiting; ``actions`` holds one array per action leaf for exactly these rows.
        ``step`` (here and in :meth:`recv_rows`) may hold each row's own step count, which
        errors then name."""
        if actions is not None:
            for buffer, part in zip(self.actions, actions):
                buffer[rows] = part
        self.command[rows] = command
        owners = self.owner[rows]
        for index in np.unique(owners).tolist():
            mine = rows[owners == index]
            worker = self.workers[index]
            if reset_args is None:
                worker.send(rows_message(mine), "step", step=step, pipeline=True)
            else:
                args = {int(r): reset_args[int(r)] for r in mine.tolist() if int(r) in reset_args}
                worker.send(("commands", args, mine), "reset", step=step, pipeline=True)
            self._in_flight[index].append(mine)

    def recv_rows(
        self, count: int, deadline: float | None, step: int | np.ndarray
    ) -> tuple[np.ndarray, dict]:
        """The first ``count`` rows to finish (waiting until ``deadline`` for them) and
        their infos; their results stay in the shared block until they are sent again."""
        finished = self._finished
        while len(finished) < count:
            busy = [i for i, queue in enumerate(self._in_flight) if queue]
            if not busy:
                raise NoPendingCallError(
                    f"recv() needs {count} envs but only {len(finished)} are finished and none "
                    "is in flight; send() actions for more envs first"
                )
            for index in self._wait_any(busy, deadline, step):
                reply = self.workers[index].wait(remaining(deadline), step=step)
                rows = self._in_flight[index].popleft()
                finished.extend(rows.tolist())
                if reply:
                    self._finished_infos.update(reply)
        rows = np.array([finished.popleft() for _ in range(count)], np.int64)
        kept = self._finished_infos
        infos = {row: kept.pop(row) for row in rows.tolist() if row in kept}
        return rows, infos

    def _wait_any(self, busy: list[int], deadline: float | None, step) -> list[int]:
        """Indices of the busy workers with a reply (or gone), waiting until ``deadline``."""
        poller = select.poll()
        by_fd = {}
        for index in busy:
            fd = self.workers[index].fileno()
            by_fd[fd] = index
            poller.register(fd, select.POLLIN)
        left = remaining(deadline)
        events = poller.poll(-1 if left is None else max(0, int(left * 1000 + 0.999)))
        if events:
            return sorted(by_fd[fd] for fd, _ in events)
        slow = [int(r) for index in busy for rows in self._in_flight[index] for r in rows]
        try:
            self.workers[busy[0]].wait(0.0, step=step)  # raises its WorkerTimeoutError
        except WorkerTimeoutError as error:
            raise slow_rows_error(error, slow) from error
        return [busy[0]]

    def in_flight_rows(self) -> np.ndarray:
        """Rows sent and not yet handed out by :meth:`recv_rows`."""
        parts = [rows for queue in self._in_flight for rows in queue]
        parts.append(np.asarray(self._finished, np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    # ------------------------------------------------------------------ attributes

    def env_objects(self) -> None:
        return None  # rows are reached through their workers (BatchEnv's row handles)

    def _on_row(self, row: int, method: str, *args):
        self._check_row(row)
        index = int(self.owner[row])
        if index < 0:
            slot = self.local.position[row]
            try:
                return getattr(self.local, method)(slot, *args)
            except EnvFailure as failure:
                raise failure.error from None  # in this process: the env's own exception
        worker = self.workers[index]
        slot = int(np.flatnonzero(self.rows_of[index] == row)[0])
        if method == "call":
            return worker.call_at(slot, *args)
        return getattr(worker, method)(*args, index=slot)

    # ------------------------------------------------------------------ shutdown

    def close(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        problems = []
        for worker in self.workers:
            problems += worker.close(max(0.1, deadline - time.monotonic()))
        if self.local is not None:
            problems += self.local.close_envs()
        return problems

    def terminate(self) -> None:
        for worker in self.workers:
            worker.terminate()
        local, self.local = self.local, None
        if local is not None:  # a broken batch: its in-process envs go too
            local.close_envs()

    def processes(self) -> list[ExternalProcess]:
        return list(self.workers)


#: How long a failing step waits for the other workers' replies, to report their failures
#: too (``EnvWorkerError.errors``, as AsyncVectorEnv logs every failing worker).
FAILURE_GRACE_SECONDS = 1.0


def _other_failures(workers: list, deadline: float | None, step: int) -> list[EnvWorkerError]:
    """The env failures among the replies of ``workers`` to the same call, each waited
    for at most :data:`FAILURE_GRACE_SECONDS` (the batch is broken already)."""
    failures = []
    for worker in workers:
        left = remaining(deadline)
        grace = FAILURE_GRACE_SECONDS if left is None else min(left, FAILURE_GRACE_SECONDS)
        try:
            worker.wait(grace, step=step)
        except WorkerTimeoutError:
            continue
        except EnvWorkerError as error:
            failures.append(error)
        except Exception:  # not a reply we can read: nothing more to report
            continue
    return failures
