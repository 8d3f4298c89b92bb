"""Closing: twice, with env close() errors, with a step pending (also a hung one), and
by garbage collection; every worker ends.
"""

from __future__ import annotations

import gc
import time

import pytest

from batchenv.errors import AlreadyPendingCallError, ClosedError
from tests import faulty_envs as fe
from tests.faults.fault_helpers import FAULTS, KINDS, NUM_ENVS, S, actions, step_ok, worker_pids

# ---------------------------------------------------------------------- 14. closing


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_close_twice_is_a_no_op(kind, batches, wait_gone):
    env = batches(kind, fe.PlainEnv)
    pids = worker_pids(env)
    env.reset(seed=0)
    assert env.close() == []
    assert env.close() == []
    assert env.closed
    assert not wait_gone(pids, 2.0)


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_close_reports_errors_of_env_close(kind, batches, wait_gone):
    env = batches(kind, fe.CloseRaisesEnv, 2)
    pids = worker_pids(env)
    env.reset(seed=0)
    problems = env.close()
    assert len(problems) == 2
    assert all("FaultyEnvError" in problem and "cannot close" in problem for problem in problems)
    assert not wait_gone(pids, 2.0)


@pytest.mark.parametrize("kind", KINDS)
def test_calls_into_envs_wait_for_a_pending_step(kind, batches):
    env = batches(kind, fe.PlainEnv)
    env.reset(seed=0)
    env.step_async(actions())
    with pytest.raises(AlreadyPendingCallError):
        env.call("add", 1)
    with pytest.raises(AlreadyPendingCallError):
        env.get_attr("t")
    env.step_wait()
    assert env.get_attr("t") == (1,) * NUM_ENVS


@pytest.mark.parametrize("kind", KINDS)
def test_close_with_a_step_pending_returns_promptly(kind, batches, wait_gone):
    env = batches(kind, fe.PlainEnv)
    pids = worker_pids(env)
    env.reset(seed=0)
    env.step_async(actions())
    start = time.monotonic()
    assert env.close() == []
    assert time.monotonic() - start < 2.0
    assert not wait_gone(pids, 2.0)
    with pytest.raises(ClosedError):
        env.step_wait()


@pytest.mark.parametrize("kind", KINDS)
def test_close_with_a_hung_step_pending_returns_within_its_timeout(kind, batches, wait_gone):
    env = batches(kind, FAULTS["hangs"])
    pids = worker_pids(env)
    env.reset(seed=0)
    step_ok(env, S)
    env.step_async(actions())
    start = time.monotonic()
    env.close(timeout=1.0)
    assert time.monotonic() - start < 2.5
    assert not wait_gone(pids, 2.0)


@pytest.mark.parametrize("kind", KINDS)
def test_garbage_collected_batch_ends_its_workers(kind, batches, wait_gone):
    env = batches(kind, fe.PlainEnv)
    env.reset(seed=0)
    pids = worker_pids(env)
    batches.created.clear()
    del env
    gc.collect()
    assert not wait_gone(pids, 2.0)
