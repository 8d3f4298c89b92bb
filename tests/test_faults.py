"""Failures of envs and worker processes: every one surfaces as a typed, precise error,
breaks the batch cleanly, and leaves no process behind (see the conftest fixture).

Each case runs for ``batchenv.make`` ("shm": shared memory, two envs per worker here) and
for a BatchEnv of ExternalProcess workers ("per-env"). The faulty envs live in
tests/faulty_envs.py; a fault fires in env row ``K`` at its step number ``S`` (0-based,
so ``S`` steps succeed first).
"""

from __future__ import annotations

import functools
import gc
import os
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

import batchenv
from batchenv import BatchEnv, ExternalProcess
from batchenv.errors import (
    AlreadyPendingCallError,
    ClosedError,
    EnvWorkerError,
    NoPendingCallError,
    NotResetError,
    RemoteTraceback,
    WorkerDiedError,
    WorkerTimeoutError,
)
from tests import faulty_envs as fe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


# ------------------------------------------------------ who and when: one test for every fault

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
        _wait_dead(pid)
    start = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        if case == "reset-raises":
            env.reset(seed=100)
        else:
            env.step(actions())
    return env, info.value, time.monotonic() - start


def _wait_dead(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} survived SIGKILL")


@pytest.mark.parametrize("case", list(FAULTS))
@pytest.mark.parametrize("kind", KINDS)
def test_error_names_the_worker_and_env(kind, case, batches, request):
    _, error, _ = provoke(case, kind, batches)
    message = str(error)
    worker = 1 if kind == "shm" else K
    assert error.worker == worker and f"worker {worker}" in message
    if kind == "shm" and case in WHOLE_WORKER:
        rows = (2, 3)
        assert "envs [2, 3]" in message
    else:
        rows = (K,)
        assert error.env_index == K and type(error.env_index) is int
        assert f"env {K}" in message or f"envs [{K}]" in message
    if case == "hangs":
        assert error.env_indices == rows
        assert all(type(row) is int for row in error.env_indices)


@pytest.mark.parametrize("case", list(FAULTS))
@pytest.mark.parametrize("kind", KINDS)
def test_error_names_the_batch_step(kind, case, batches, request):
    env, error, _ = provoke(case, kind, batches)
    assert error.step == S and f"at step {S}" in str(error)
    assert env.steps == S
    with pytest.raises(ClosedError, match=f"broke at step {S}"):
        env.step(actions())


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


# ---------------------------------------------------------------------- 8, 9. misuse


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_step_before_reset_and_after_close(kind, batches):
    env = batches(kind, fe.PlainEnv)
    with pytest.raises(NotResetError, match="reset"):
        env.step(actions())
    env.reset(indices=[0, 1], seed=0)
    with pytest.raises(NotResetError, match=r"\[2, 3\]"):
        env.step(actions())
    env.reset(indices=[2, 3], seed=0)
    env.step(actions())  # the failed calls did not break anything
    env.close()
    for call in (
        lambda: env.step(actions()),
        lambda: env.reset(),
        lambda: env.step_async(actions()),
        lambda: env.call("add", 1),
        lambda: env.get_attr("t"),
    ):
        with pytest.raises(ClosedError, match="closed BatchEnv"):
            call()


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_async_misuse_raises_one_error_class_each(kind, batches):
    env = batches(kind, fe.PlainEnv)
    with pytest.raises(NoPendingCallError, match="nothing is pending"):
        env.step_wait()
    with pytest.raises(NoPendingCallError):
        env.reset_wait()
    env.reset_async(seed=0)
    with pytest.raises(NoPendingCallError, match="a reset is pending"):
        env.step_wait()
    with pytest.raises(AlreadyPendingCallError, match="reset_wait"):
        env.reset_async()
    observ, _ = env.reset_wait()
    assert observ.shape == (NUM_ENVS, 3)
    env.step_async(actions(0.5))
    with pytest.raises(AlreadyPendingCallError, match="step_wait"):
        env.step_async(actions())
    with pytest.raises(AlreadyPendingCallError):
        env.reset()
    observ, reward, *_ = env.step_wait()
    np.testing.assert_array_equal(reward, 0.5)
    with pytest.raises(NoPendingCallError):
        env.step_wait()
    env.step(actions())  # still usable
    assert env.steps == 2


# ---------------------------------------------------------------------- 10, 11. bad actions


def _no_ipc(env: BatchEnv, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the transport was used for an invalid action")

    monkeypatch.setattr(env._transport, "start", refuse)


@pytest.mark.parametrize(
    "bad, error_type, match",
    [
        pytest.param(actions(num_envs=3), ValueError, r"\(3, 1\).*\(4, 1\)", id="batch-size"),
        pytest.param(np.zeros((4, 2), np.float32), ValueError, r"\(4, 2\)", id="shape"),
        pytest.param(np.zeros(4, np.float32), ValueError, r"\(4,\)", id="no-action-axis"),
        pytest.param(np.full((4, 1), "a"), TypeError, "dtype", id="dtype-str"),
        pytest.param(np.zeros((4, 1), np.complex64), TypeError, "dtype", id="dtype-complex"),
        pytest.param({"a": actions()}, ValueError, "shape", id="dict"),
    ],
)
@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_malformed_action_batch_is_refused_before_any_ipc(
    kind, bad, error_type, match, batches, monkeypatch
):
    env = batches(kind, fe.PlainEnv)
    env.reset(seed=0)
    with monkeypatch.context() as patch:
        _no_ipc(env, patch)
        with pytest.raises(error_type, match=match):
            env.step(bad)
    assert not env.closed
    observ, reward, *_ = env.step(actions(0.25))
    np.testing.assert_array_equal(reward, 0.25)


@pytest.mark.parametrize(
    "value, match",
    [
        pytest.param(np.nan, "not finite", id="nan"),
        pytest.param(np.inf, "not finite", id="inf"),
        pytest.param(-np.inf, "not finite", id="-inf"),
        pytest.param(1.5, "outside the action space", id="above-high"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_action_outside_space_names_the_row(kind, value, match, batches, monkeypatch):
    env = batches(kind, fe.PlainEnv)
    env.reset(seed=0)
    bad = actions()
    bad[2] = value
    with monkeypatch.context() as patch:
        _no_ipc(env, patch)
        with pytest.raises(ValueError, match=f"env 2.*{match}|{match}.*env 2"):
            env.step(bad)
    env.step(actions())


@pytest.mark.parametrize("kind", KINDS)
def test_check_actions_false_lets_out_of_range_values_through(kind, batches):
    env = batches(kind, fe.PlainEnv, check_actions=False)
    env.reset(seed=0)
    observ, reward, *_ = env.step(actions(5.0))
    np.testing.assert_array_equal(observ[:, 2], 5.0)  # the env saw the raw action
    np.testing.assert_array_equal(reward, 5.0)


@pytest.mark.parametrize(
    "part, value, match",
    [
        pytest.param(0, 3, "Discrete", id="discrete-too-big"),
        pytest.param(0, -1, "Discrete", id="discrete-negative"),
        pytest.param(1, 1.01, "Box", id="box"),
        pytest.param("md", [2, 0], "MultiDiscrete", id="multidiscrete"),
        pytest.param("mb", [0, 2], "MultiBinary", id="multibinary"),
    ],
)
def test_nested_action_outside_space_names_the_row_and_leaf(part, value, match, batches):
    env = batches("in-process", fe.NestedEnv, 3)
    env.reset(seed=0)
    batch = [
        np.zeros(3, np.int64),
        np.zeros((3, 2)),
        {"md": np.zeros((3, 2), np.int64), "mb": np.zeros((3, 2), np.int8)},
    ]
    leaf = batch[2][part] if isinstance(part, str) else batch[part]
    leaf[1] = value
    with pytest.raises(ValueError, match=f"env 1 is outside the action space {match}"):
        env.step(tuple(batch))
    leaf[1] = 0
    env.step(tuple(batch))


# ---------------------------------------------------------------------- 12. bad observation


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_observation_of_wrong_shape_is_an_env_error(kind, batches):
    env = batches(kind, functools.partial(fe.BadObservationEnv, at_step=S, only_index=K))
    env.reset(seed=0)
    step_ok(env, S)
    with pytest.raises(EnvWorkerError, match=r"shape \(4,\).*expects \(3,\)") as info:
        env.step(actions())
    assert info.value.remote_type == "ValueError"
    assert info.value.env_index == K
    with pytest.raises(ClosedError):
        env.step(actions())


@pytest.mark.parametrize("kind", [*KINDS, "in-process"])
def test_observation_that_cannot_be_stored_is_an_env_error(kind, batches):
    # The right shape, but strings: the shared-memory worker writes a group's observations
    # in one assignment, and must still name the row that broke it.
    env = batches(kind, functools.partial(fe.TextObservationEnv, at_step=S, only_index=K))
    env.reset(seed=0)
    step_ok(env, S)
    with pytest.raises(EnvWorkerError, match="could not convert string to float") as info:
        env.step(actions())
    assert info.value.remote_type == "ValueError"
    assert info.value.env_index == K


@pytest.mark.parametrize(
    "bad_value, message",
    [
        (7.9, r"observation 7\.9 has dtype float64, but the space Discrete\(3\)"),
        (5, r"observation 5 is outside the space Discrete\(3\) \(\[0, 2\]\)"),
    ],
    ids=["float-cast", "out-of-range"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_observation_value_outside_the_space_is_an_env_error(kind, batches, bad_value, message):
    env = batches(
        kind,
        functools.partial(fe.DiscreteObservationEnv, bad_value=bad_value, at_step=S, only_index=K),
    )
    observ, _ = env.reset(seed=0)
    assert observ.dtype == np.int64 and observ.tolist() == [0] * NUM_ENVS
    step_ok(env, S)
    with pytest.raises(EnvWorkerError, match=message) as info:
        env.step(actions())
    assert info.value.remote_type == "ValueError"
    assert info.value.env_index == K


# ---------------------------------------------------------------------- 13. pickling


def _lock_closure():
    lock = threading.Lock()
    return lambda: (lock, fe.PlainEnv())[1]


UNPICKLABLE_CONSTRUCTORS = {
    "closure-over-lock": _lock_closure(),
    "reduce-raises": functools.partial(fe.PlainEnv, fe.Unpicklable()),
}


@pytest.mark.parametrize("which", list(UNPICKLABLE_CONSTRUCTORS))
@pytest.mark.parametrize("kind", KINDS)
def test_unpicklable_constructor_is_a_type_error_before_any_process(kind, which, batches):
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    with pytest.raises(TypeError, match="cannot be pickled") as info:
        batches(kind, UNPICKLABLE_CONSTRUCTORS[which])
    assert info.value.__cause__ is not None
    after = {child.pid for child in psutil.Process().children(recursive=True)}
    assert after <= before | {batchenv._launch.fork_server_pid()}


@pytest.mark.parametrize("kind", KINDS)
def test_unpicklable_info_is_an_env_error_mentioning_pickle(kind, batches, wait_gone):
    env = batches(kind, functools.partial(fe.UnpicklableInfoEnv, at_step=S, only_index=K))
    pids = worker_pids(env)
    env.reset(seed=0)
    step_ok(env, S)
    with pytest.raises(EnvWorkerError, match="pickle") as info:
        env.step(actions())
    assert info.value.remote_type == "TypeError"
    assert "lock" in str(info.value)
    with pytest.raises(ClosedError):
        env.step(actions())
    assert not wait_gone(pids, 2.0)


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


def _kill_fork_server_under(env: BatchEnv) -> list[int]:
    """SIGKILL the fork server (its workers die with it); return the workers' pids."""
    pids = worker_pids(env)
    server = batchenv._launch.fork_server_pid()
    assert server is not None
    os.kill(server, signal.SIGKILL)
    for pid in pids:
        _wait_dead(pid)
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


# ---------------------------------------------------------------------- 15, 16. the parent


def _build_script(kind: str, constructor: str) -> str:
    """A script that builds a batch of ``kind`` and prints its workers' pids."""
    return f"""
import faulthandler, functools, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)  # _communicate's stack dump on a hang
sys.path.insert(0, {ROOT!r})
import numpy as np
import batchenv
from tests import faulty_envs as fe
constructor = {constructor}
if {kind!r} == "shm":
    env = batchenv.make(constructor, 2, num_workers=2)
else:
    method = "spawn" if {kind!r} == "spawn" else "forkserver"
    env = batchenv.BatchEnv(
        [batchenv.ExternalProcess(constructor, start_method=method) for _ in range(2)]
    )
env.reset(seed=0)
print(" ".join(str(worker.pid) for worker in env.processes()), flush=True)
"""


def _start_script(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _communicate(proc: subprocess.Popen, timeout: float) -> str:
    """The script's stderr once it has exited; past ``timeout``, fail with its thread stacks
    and its process tree (what it hung on)."""
    try:
        return proc.communicate(timeout=timeout)[1].decode()
    except subprocess.TimeoutExpired:
        tree = [f"{p.pid} {p.name()} {p.status()}" for p in psutil.Process(proc.pid).children(True)]
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
        proc.kill()
        stderr = proc.communicate(timeout=10)[1].decode()
        raise AssertionError(
            f"the script did not exit within {timeout} s; children {tree}; stderr:\n{stderr}"
        ) from None


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
            raise AssertionError(f"no line from the script within {timeout} s")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            raise AssertionError(f"script exited early: {proc.stderr.read().decode()}")
        data += chunk
    return data.decode()


def _descendants(pid: int) -> set[int]:
    return {child.pid for child in psutil.Process(pid).children(recursive=True)}


def _end(proc: subprocess.Popen, pids: set[int]) -> None:
    """Clean up after a failed script test: the script and whatever it started."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=5)
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    proc.stdout.close()
    proc.stderr.close()


@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_in_the_parent_prints_one_traceback_and_ends_every_worker(kind, wait_gone):
    hang = "functools.partial(fe.StepHangsEnv, at_step=0, only_index=None)"
    code = _build_script(kind, hang) + "env.step(np.zeros((2, 1), np.float32))\n"
    proc = _start_script(code)
    pids: set[int] = set()
    try:
        pids = {int(pid) for pid in _read_line(proc, 60).split()}
        pids |= _descendants(proc.pid)
        time.sleep(0.3)  # let the step block
        os.killpg(proc.pid, signal.SIGINT)
        stderr = _communicate(proc, 10)
        assert proc.returncode in (1, -signal.SIGINT), stderr
        assert stderr.count("Traceback (most recent call last)") == 1, stderr
        assert [line for line in stderr.splitlines() if "KeyboardInterrupt" in line] == [
            "KeyboardInterrupt"
        ], stderr
        assert not wait_gone(pids, 3.0)
    finally:
        _end(proc, pids)


@pytest.mark.parametrize("kind", [*KINDS, "spawn"])
def test_workers_die_with_a_killed_parent(kind, wait_gone):
    code = _build_script(kind, "fe.PlainEnv") + "time.sleep(60)\n"
    proc = _start_script(code)
    pids: set[int] = set()
    try:
        workers = {int(pid) for pid in _read_line(proc, 60).split()}
        pids = workers | _descendants(proc.pid)
        assert workers <= pids and len(workers) == 2
        proc.kill()
        proc.wait(timeout=5)
        assert not wait_gone(pids, 2.0)
    finally:
        _end(proc, pids)


# ---------------------------------------------------------------------- 17. no leaks


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _shm_entries() -> int:
    return len(os.listdir("/dev/shm"))


def _batchenv_maps() -> int:
    with open("/proc/self/maps") as maps:
        return sum("batchenv" in line for line in maps)


def test_create_close_cycles_leak_no_process_fd_or_shared_memory():
    warm = batchenv.make(fe.PlainEnv, 1, num_workers=1)  # starts the fork server
    warm.close()
    del warm
    gc.collect()
    before = (_open_fds(), _shm_entries(), _batchenv_maps())
    start = time.monotonic()
    for cycle in range(200):
        if cycle % 20 == 7:  # a failed construction cleans up too
            with pytest.raises(EnvWorkerError):
                batchenv.make(fe.ConstructorRaisesEnv, 1, num_workers=1)
            continue
        if cycle % 10 == 5:
            env = BatchEnv([ExternalProcess(fe.PlainEnv)])
        else:
            env = batchenv.make(fe.PlainEnv, 1, num_workers=1)
        env.reset(seed=cycle)
        env.step(actions(num_envs=1))
        if cycle % 4 == 3:  # dropped without close(): the finalizers end the worker
            del env
            gc.collect()
        else:
            env.close()
    env = None
    gc.collect()
    # A hang guard, not a speed test (~30 s on an idle 2-core VM, more under load).
    assert time.monotonic() - start < 120
    fds, shm, maps = _open_fds(), _shm_entries(), _batchenv_maps()
    assert fds <= before[0] + 2, f"{fds - before[0]} file descriptors leaked"
    assert shm == before[1]
    assert maps == before[2], "shared memory mappings leaked"
