"""Hangs: a hung step times out (WorkerTimeoutError) and its worker is terminated; a
hung env close() does not hang close().
"""

from __future__ import annotations

import functools
import time

import pytest

from batchenv.errors import ClosedError, WorkerTimeoutError
from tests import faulty_envs as fe
from tests.faults.fault_helpers import (
    FAULTS,
    KINDS,
    NUM_ENVS,
    TIMEOUT,
    K,
    S,
    actions,
    step_ok,
    worker_pids,
)

# ---------------------------------------------------------------------- 6. hangs


@pytest.mark.parametrize("deadline_from", ["constructor", "step_wait"])
@pytest.mark.parametrize("kind", KINDS)
def test_hung_step_times_out_and_its_worker_is_terminated(kind, deadline_from, batches, wait_gone):
    env = batches(
        kind,
        FAULTS["hangs"],
        NUM_ENVS,
        timeout=TIMEOUT if deadline_from == "constructor" else None,
    )
    pids = worker_pids(env)
    env.reset(seed=0)
    step_ok(env, S)
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError) as info:
        if deadline_from == "constructor":
            env.step(actions())
        else:
            env.step_async(actions())
            env.step_wait(timeout=TIMEOUT)
    elapsed = time.monotonic() - start
    assert 0.9 * TIMEOUT <= elapsed < 3.0
    error = info.value
    assert isinstance(error, TimeoutError)
    assert K in error.env_indices
    assert set(error.env_indices) <= ({2, 3} if kind == "shm" else {K})
    assert "deadline" in str(error) and "terminated" in str(error)
    assert not wait_gone(pids, 2.0)
    with pytest.raises(ClosedError, match="WorkerTimeoutError"):
        env.step(actions())


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_names_every_slow_row(kind, batches):
    hang_all = functools.partial(fe.StepHangsEnv, at_step=0, only_index=None)
    env = batches(kind, hang_all, NUM_ENVS, timeout=TIMEOUT)
    env.reset(seed=0)
    with pytest.raises(WorkerTimeoutError) as info:
        env.step(actions())
    assert sorted(info.value.env_indices) == list(range(NUM_ENVS))


# ---------------------------------------------------------------------- 7. close hangs


@pytest.mark.parametrize("kind", KINDS)
def test_close_returns_in_time_when_env_close_hangs(kind, batches, wait_gone):
    env = batches(kind, fe.CloseHangsEnv, 2)
    env.reset(seed=0)
    pids = worker_pids(env)
    start = time.monotonic()
    problems = env.close(timeout=1.0)
    assert time.monotonic() - start < 2.5
    assert problems and all("did not finish" in problem for problem in problems)
    assert not wait_gone(pids, 2.0)
