"""Shared helpers of the fault tests (tests/faults): failures of envs and worker processes
surface as typed, precise errors, break the batch cleanly, and leave no process behind (see
the conftest fixture).

Each case runs for ``batchenv.make`` ("shm": shared memory, two envs per worker here) and
for a BatchEnv of ExternalProcess workers ("per-env"). The faulty envs live in
tests/faulty_envs.py; a fault fires in env row ``K`` at its step number ``S`` (0-based,
so ``S`` steps succeed first). ``FAULTS`` and :func:`provoke` build one batch per fault.
"""

from __future__ import annotations

import functools
import os
import signal
import time

import numpy as np
import psutil
import pytest

from batchenv import BatchEnv
from batchenv.errors import EnvWorkerError, RemoteTraceback
from tests import faulty_envs as fe

KINDS = ("shm", "per-env")
NUM_ENVS = 4
S = 2  # the failing step number: steps 0 and 1 succeed
K = 3  # the failing env row; with "shm" it lives in worker 1 (rows 2 and 3)
TIMEOUT = 0.5


def actions(value: float = 0.0, num_envs: int = NUM_ENVS) -> np.ndarray:
    return np.full((num_envs, 1), value, np.float32)


def worker_pids(env: BatchEnv) -> list[int]:
    return [worker.pid for worker in env.processes()]


def step_ok(env: BatchEnv, count: int) -> None:
    for _ in range(count):
        env.step(actions())


def assert_remote_cause(error: EnvWorkerError, remote_type: type, text: str, kind: str) -> None:
    """The env's exception is the __cause__; from a worker, with its traceback as its cause."""
    assert error.remote_type == remote_type.__name__
    assert remote_type.__name__ in str(error) and text in str(error)
    assert type(error.__cause__) is remote_type
    assert text in str(error.__cause__)
    if kind == "in-process":
        assert error.__cause__.__traceback__ is not None
    else:
        assert isinstance(error.__cause__.__cause__, RemoteTraceback)
        assert "Traceback (most recent call last)" in error.__cause__.__cause__.text


FAULTS = {
    "step-raises": functools.partial(fe.StepRaisesEnv, at_step=S, only_index=K),
    "reset-raises": functools.partial(fe.ResetRaisesEnv, bad_seed=100 + K),
    "exits": functools.partial(fe.StepExitsEnv, at_step=S, only_index=K),
    "killed-idle": fe.PlainEnv,
    "hangs": functools.partial(fe.StepHangsEnv, at_step=S, only_index=K),
    "bad-observ": functools.partial(fe.BadObservationEnv, at_step=S, only_index=K),
    "unpicklable-info": functools.partial(fe.UnpicklableInfoEnv, at_step=S, only_index=K),
}
# A worker death or timeout is the whole worker's fault; "shm" hosts rows 2 and 3 in it.
WHOLE_WORKER = {"exits", "killed-idle", "hangs"}


def provoke(case: str, kind: str, batches) -> tuple[BatchEnv, EnvWorkerError, float]:
    """Build a batch with fault ``case`` in env K, run S good steps, then the failing call."""
    env = batches(kind, FAULTS[case], NUM_ENVS, timeout=TIMEOUT if case == "hangs" else None)
    env.reset(seed=0)
    step_ok(env, S)
    if case == "killed-idle":
        pid = worker_pids(env)[-1]  # the worker hosting row K
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
    start = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        if case == "reset-raises":
            env.reset(seed=100)
        else:
            env.step(actions())
    return env, info.value, time.monotonic() - start


def wait_dead(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} survived SIGKILL")
