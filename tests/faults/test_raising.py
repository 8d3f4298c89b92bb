"""Envs that raise -- in the constructor, in step, in reset or in a call() -- give an
EnvWorkerError with the env's exception as its cause, and break the batch.
"""

from __future__ import annotations

import functools

import pytest

from batchenv.errors import ClosedError, EnvWorkerError, RemoteTraceback
from tests import faulty_envs as fe
from tests.faults.fault_helpers import (
    KINDS,
    K,
    S,
    actions,
    assert_remote_cause,
    step_ok,
    worker_pids,
)

# ---------------------------------------------------------------------- 1. constructor


@pytest.mark.parametrize("kind", KINDS)
def test_constructor_error_keeps_remote_type_message_and_traceback(kind, batches):
    constructor = functools.partial(fe.ConstructorRaisesEnv, "no such level 7")
    with pytest.raises(EnvWorkerError) as info:
        batches(kind, constructor)
    error = info.value
    assert_remote_cause(error, fe.FaultyEnvError, "no such level 7", kind)
    assert "faulty_envs.py" in error.__cause__.__cause__.text
    assert error.env_index == 0 and error.step == 0
    assert "ConstructorRaisesEnv" in error.env_description


@pytest.mark.parametrize("kind", KINDS)
def test_constructor_error_that_cannot_be_unpickled_keeps_type_name_and_message(kind, batches):
    constructor = functools.partial(fe.ConstructorRaisesEnv, "bad level", unloadable=True)
    with pytest.raises(EnvWorkerError) as info:
        batches(kind, constructor)
    error = info.value
    assert error.remote_type == "UnloadableError"
    assert "UnloadableError" in str(error) and "bad level" in str(error)
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "UnloadableError: bad level" in error.__cause__.text


# ---------------------------------------------------------------------- 2, 3. step / reset raise


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_step_error_breaks_the_batch(kind, batches, wait_gone):
    env = batches(kind, functools.partial(fe.StepRaisesEnv, at_step=S, only_index=K))
    pids = worker_pids(env)
    env.reset(seed=0)
    step_ok(env, S)
    with pytest.raises(EnvWorkerError) as info:
        env.step(actions())
    assert_remote_cause(info.value, fe.FaultyEnvError, f"env {K} failed at step {S}", kind)
    assert env.closed
    with pytest.raises(ClosedError, match=f"broke at step {S}.*FaultyEnvError") as later:
        env.step(actions())
    assert later.value.__cause__ is info.value
    with pytest.raises(ClosedError, match=f"broke at step {S}"):
        env.reset()
    assert not wait_gone(pids, 2.0)
    env.close()  # closing a broken batch is fine


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_reset_error_breaks_the_batch(kind, batches):
    env = batches(kind, functools.partial(fe.ResetRaisesEnv, bad_seed=100 + K))
    env.reset(seed=0)
    step_ok(env, S)
    with pytest.raises(EnvWorkerError) as info:
        env.reset(seed=100)  # env K gets seed 100 + K
    assert_remote_cause(info.value, fe.FaultyEnvError, f"reset failed for seed {100 + K}", kind)
    with pytest.raises(ClosedError, match=f"broke at step {S}"):
        env.step(actions())


# ------------------------------------------------------ a failing call() breaks the batch too


@pytest.mark.parametrize("kind", KINDS)
def test_failing_call_breaks_the_batch(kind, batches, wait_gone):
    env = batches(kind, fe.PlainEnv)
    env.reset(seed=0)
    with pytest.raises(EnvWorkerError, match="TypeError"):
        env[2].call("add")  # missing argument: raises in the worker
    for _ in range(2):
        with pytest.raises(ClosedError, match="TypeError"):
            env.step(actions())
    assert env.closed
    assert not wait_gone(worker_pids(env), 2.0)
