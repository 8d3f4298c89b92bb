"""SessionPool: session processes within a CPU budget, watched, with deadlines.

At most ``slots`` sessions run at once (the cores divided by the cores a session uses).
Every wait is bounded: :meth:`SessionPool.poll` returns after ``timeout`` seconds at most,
a session process that dies without a word becomes a ``failed`` event naming it and its
exit code, and a session past its ``session_timeout`` is killed and reported the same way.
Nothing outlives :meth:`SessionPool.close`.

A job with a ``group`` (sessions trained together as one program) is one process that
takes ``min(len(job.members), slots)`` slots and gets that many times ``job.cpus`` cores;
it ends when every member has reported ``done`` (or on its first ``failed``), and its
``session_timeout`` is that of the process.

    >>> pool = SessionPool(slots=2)
    >>> pool.submit(job)
    >>> for event in pool.poll(timeout=0.5): ...   # ("report" | "done" | "failed", key, ...)
    >>> pool.close()
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from .session import SessionJob

__all__ = ["SessionPool", "available_cores"]

_KILL_GRACE = 5.0
#: A session process starts with ``python -c``, so a user's script is never re-imported (as
#: multiprocessing's spawn would, without an ``if __name__ == "__main__"`` guard).
_ENTRY = "from batchenv.experiment.session import session_main; session_main()"


def available_cores() -> int:
    """Cores this process may use (its CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass
class _Running:
    job: SessionJob
    process: subprocess.Popen
    connection: Connection
    started: float
    slots: int
    pending: set[tuple[int, int]]
    """Members that have not reported ``done`` yet."""


class SessionPool:
    """Runs :class:`SessionJob` s in their own processes, ``slots`` at a time.

    Args:
        slots: sessions at once.
        session_timeout: seconds a session may run (None: no limit).
    """

    def __init__(self, slots: int, session_timeout: float | None = None):
        self.slots = max(1, slots)
        self.session_timeout = session_timeout
        self._waiting: deque[SessionJob] = deque()
        self._running: dict[tuple[int, int], _Running] = {}

    def submit(self, job: SessionJob) -> None:
        """Queue ``job``; it starts when a slot is free (in submission order)."""
        self._waiting.append(job)

    @property
    def busy(self) -> bool:
        return bool(self._waiting or self._running)

    def poll(self, timeout: float) -> list[tuple]:
        """Start what fits, then wait up to ``timeout`` s; the events that arrived.

        Events: ``("report", key, frame, total_reward_ma)``, ``("done", key, result)``,
        ``("failed", key, type name, message, traceback text)``.
        """
        self._start_waiting()
        by_connection = {running.connection: key for key, running in self._running.items()}
        events: list[tuple] = []
        for connection in wait(list(by_connection), timeout=timeout):
            key = by_connection[connection]
            try:
                while connection.poll():
                    event = connection.recv()
                    events.append(event)
                    pending = self._running[key].pending
                    if event[0] == "done":
                        pending.discard(event[1])
                    if event[0] == "failed" or (event[0] == "done" and not pending):
                        self._retire(key)
                        break
            except (EOFError, OSError):
                events.append(self._died(key))
        events.extend(self._timeouts())
        self._start_waiting()
        return events

    def cancel(self, trial: int) -> None:
        """Drop the queued sessions of ``trial`` and kill its running ones (no events)."""
        self._waiting = deque(job for job in self._waiting if job.trial != trial)
        for key in [key for key in self._running if key[0] == trial]:
            self._stop(self._running.pop(key))

    def close(self) -> None:
        """Kill every running session and wait for the processes to end."""
        self._waiting.clear()
        for key in list(self._running):
            self._stop(self._running.pop(key))

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- helpers ----------------------------------------------------------------------------

    def _start_waiting(self) -> None:
        while self._waiting:
            slots = min(len(self._waiting[0].members), self.slots)
            used = sum(running.slots for running in self._running.values())
            if used + slots > self.slots:
                return
            job = self._waiting.popleft()
            if slots > 1:  # a group: its program gets the cores of the slots it takes
                job = dataclasses.replace(job, cpus=job.cpus * slots)
            read, write = os.pipe()
            try:
                process = subprocess.Popen(
                    [sys.executable, "-c", _ENTRY, str(write)],
                    stdin=subprocess.PIPE,
                    pass_fds=(write,),
                )
            finally:
                os.close(write)
            process.stdin.write(pickle.dumps((list(sys.path), job)))
            process.stdin.close()
            pending = {member.key for member in job.members}
            self._running[job.key] = _Running(
                job, process, Connection(read), time.monotonic(), slots, pending
            )

    def _retire(self, key: tuple[int, int]) -> None:
        running = self._running.pop(key, None)
        if running is not None:
            try:
                running.process.wait(_KILL_GRACE)
            except subprocess.TimeoutExpired:
                pass
            self._stop(running)

    def _died(self, key: tuple[int, int]) -> tuple:
        running = self._running.pop(key)
        try:
            code = running.process.wait(_KILL_GRACE)
        except subprocess.TimeoutExpired:
            code = None
        self._stop(running)
        return (
            "failed",
            key,
            "SessionDiedError",
            f"{_name(running.job)} died with exit code {code} before it finished",
            "",
        )

    def _timeouts(self) -> list[tuple]:
        if not self.session_timeout:
            return []
        events = []
        now = time.monotonic()
        for key, running in list(self._running.items()):
            if now - running.started > self.session_timeout:
                self._stop(self._running.pop(key))
                events.append(
                    (
                        "failed",
                        key,
                        "SessionTimeoutError",
                        f"{_name(running.job)} ran past "
                        f"meta.session_timeout={self.session_timeout:g} s and was stopped",
                        "",
                    )
                )
        return events

    @staticmethod
    def _stop(running: _Running) -> None:
        process = running.process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(_KILL_GRACE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(_KILL_GRACE)
        running.connection.close()


def _name(job: SessionJob) -> str:
    """``session t0_s1 (seed 1)``, or for a group ``sessions t0_s0..s3 (seeds 0..3)``."""
    if not job.group:
        return f"session {job.label} (seed {job.seed})"
    last = job.members[-1]
    return f"sessions {job.label}..s{last.session} (seeds {job.seed}..{last.seed}, one process)"
