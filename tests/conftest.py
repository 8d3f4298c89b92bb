"""Shared test fixtures: worker processes must never outlive a test."""

from __future__ import annotations

import os
import sys
import time

import psutil
import pytest

# Worker processes import the fault-injection envs as ``tests.faulty_envs``; they receive
# this process's sys.path, so the repository root must be on it however pytest was started.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Before any test module imports batchenv.kernels (see tests/kernels/interpreter.py).
from tests.kernels.interpreter import import_kernels_for_this_machine  # noqa: E402

import_kernels_for_this_machine()

LEFTOVER_GRACE_SECONDS = 2.0


def _fork_server_pid() -> int | None:
    from batchenv.workers import launch

    return launch.fork_server_pid()


def live_children() -> set[int]:
    """Pids of this process's descendants that still count: running ones, and zombies this
    process should have reaped (its own children). The batchenv fork server, which lives
    as long as this process, is left out."""
    server = _fork_server_pid()
    return {child.pid for child in psutil.Process().children(recursive=True)} - {server}


def wait_until_gone(pids, timeout: float) -> set[int]:
    """Poll until none of ``pids`` counts as running; return those that still do.

    A zombie counts as gone unless it is a child of this process (nobody reaped it).
    """
    deadline = time.monotonic() + timeout
    while True:
        alive = {pid for pid in pids if pid_running(pid)}
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def pid_running(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE or process.ppid() == os.getpid()
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def no_leftover_workers():
    """Fail a test that leaves a worker process behind (after a short grace period)."""
    before = live_children()
    yield
    new = live_children() - before
    left = wait_until_gone(new, LEFTOVER_GRACE_SECONDS) if new else set()
    left -= {_fork_server_pid()}
    if left:
        for pid in left:  # do not let the leak spill into the next test
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        pytest.fail("processes left behind: " + "; ".join(_describe(pid) for pid in sorted(left)))


def _describe(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        if process.ppid() == _fork_server_pid():
            return f"{pid} ({process.status()}): a worker forked by the batchenv fork server"
        return f"{pid} ({process.status()}): {' '.join(process.cmdline())[:120]}"
    except psutil.NoSuchProcess:  # includes zombies, whose command line cannot be read
        return f"{pid} (exited, not reaped)"


class BatchFactory:
    """Builds the BatchEnv kinds under test and closes whatever a test leaves open.

    Kinds: "shm" (``batchenv.make``: shared memory, several envs per worker), "per-env"
    (a BatchEnv of ExternalProcess workers, one env each) and "in-process" (a BatchEnv of
    plain Gymnasium envs). ``env`` is a Gymnasium id or a zero-argument constructor.
    """

    def __init__(self):
        self.created = []

    def __call__(
        self,
        kind: str,
        env,
        num_envs: int = 4,
        *,
        num_workers: int = 2,
        timeout: float | None = None,
        check_actions: bool = True,
        copy: bool = True,
        start_method: str = "forkserver",
    ):
        import functools

        import gymnasium

        import batchenv

        if kind == "shm":
            batch = batchenv.make(
                env,
                num_envs,
                num_workers=min(num_workers, num_envs),
                start_method=start_method,
                timeout=timeout,
                check_actions=check_actions,
                copy=copy,
            )
            self.created.append(batch)
            return batch
        constructor = functools.partial(gymnasium.make, env) if isinstance(env, str) else env
        if kind == "in-process":
            batch = batchenv.BatchEnv(
                [constructor() for _ in range(num_envs)],
                timeout=timeout,
                check_actions=check_actions,
            )
            self.created.append(batch)
            return batch
        assert kind == "per-env", kind
        workers = []
        try:
            for _ in range(num_envs):
                workers.append(
                    batchenv.ExternalProcess(
                        constructor, start_method=start_method, timeout=timeout
                    )
                )
                self.created.append(workers[-1])
            batch = batchenv.BatchEnv(workers, timeout=timeout, check_actions=check_actions)
        except BaseException:
            for worker in workers:
                worker.close(timeout=1.0)
            raise
        self.created.append(batch)
        return batch

    def close_all(self) -> None:
        for item in reversed(self.created):
            try:
                item.close(timeout=1.0)
            except Exception:
                pass


@pytest.fixture
def batches():
    """``batches(kind, env, num_envs, ...)`` -> a BatchEnv, closed at the end of the test."""
    factory = BatchFactory()
    yield factory
    factory.close_all()


@pytest.fixture
def wait_gone():
    """``wait_gone(pids, timeout)`` -> the pids still running after polling up to timeout."""
    return wait_until_gone
