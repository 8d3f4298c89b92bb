"""Worker deaths: a worker killed while idle or exiting mid-step, and a killed fork
server, surface as WorkerDiedError with the exit status.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

import batchenv
import batchenv.workers.launch
from batchenv import BatchEnv
from batchenv.errors import ClosedError, WorkerDiedError
from tests import faulty_envs as fe
from tests.faults.fault_helpers import KINDS, actions, provoke, wait_dead, worker_pids

# ---------------------------------------------------------------------- 4, 5. worker deaths


@pytest.mark.parametrize("kind", KINDS)
def test_worker_killed_while_idle_is_noticed_at_once(kind, batches, wait_gone):
    env, error, elapsed = provoke("killed-idle", kind, batches)
    assert isinstance(error, WorkerDiedError)
    assert error.exitcode == -signal.SIGKILL and "killed by signal 9" in str(error)
    assert elapsed < 1.0
    with pytest.raises(ClosedError, match="WorkerDiedError"):
        env.step(actions())
    assert not wait_gone(worker_pids(env), 2.0)


@pytest.mark.parametrize("kind", KINDS)
def test_worker_exiting_mid_step_reports_its_exit_code(kind, batches, wait_gone):
    env, error, elapsed = provoke("exits", kind, batches)
    assert isinstance(error, WorkerDiedError)
    assert error.exitcode == 3 and "exit code 3" in str(error)
    assert elapsed < 2.0
    with pytest.raises(ClosedError, match="WorkerDiedError"):
        env.step(actions())
    assert not wait_gone(worker_pids(env), 2.0)


def _kill_fork_server_under(env: BatchEnv) -> list[int]:
    """SIGKILL the fork server (its workers die with it); return the workers' pids."""
    pids = worker_pids(env)
    server = batchenv.workers.launch.fork_server_pid()
    assert server is not None
    os.kill(server, signal.SIGKILL)
    for pid in pids:
        wait_dead(pid)
    return pids


def test_killed_fork_server_takes_its_workers_and_a_new_one_starts(batches):
    env = batches("shm", fe.PlainEnv, 2)
    env.reset(seed=0)
    _kill_fork_server_under(env)
    start = time.monotonic()
    with pytest.raises(WorkerDiedError):
        env.step(actions(num_envs=2))
    assert time.monotonic() - start < 1.0
    env = batches("shm", fe.PlainEnv, 2)  # a fresh fork server
    env.reset(seed=0)
    env.step(actions(num_envs=2))


def test_unknown_exit_status_is_not_reported_as_sighup(batches):
    env = batches("shm", fe.PlainEnv, 2)
    env.reset(seed=0)
    _kill_fork_server_under(env)
    with pytest.raises(WorkerDiedError) as info:
        env.step(actions(num_envs=2))
    assert info.value.exitcode != -1 and "signal 1)" not in str(info.value)
