"""ExternalProcess: one env (or a group) in a worker process, with promises and deadlines."""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
import signal
import threading
import time

import cloudpickle
import gymnasium
import numpy as np
import psutil
import pytest

from batchenv import ExternalProcess
from batchenv.errors import (
    AlreadyPendingCallError,
    ClosedError,
    EnvWorkerError,
    NoPendingCallError,
    RemoteTraceback,
    WorkerDiedError,
    WorkerTimeoutError,
)
from batchenv.workers.launch import fork_server_pid
from batchenv.workers.protocol import Readable
from tests import faulty_envs as fe

ACTION = np.array([0.5], np.float32)


@pytest.fixture
def processes():
    """Start ExternalProcess workers; each is closed at the end of the test."""
    started = []

    def start(*args, **kwargs):
        process = ExternalProcess(*args, **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        process.close(timeout=1.0)


def _local_closure():
    obs_dim = 2
    return lambda: fe.PlainEnv(obs_dim=obs_dim)


def _local_class():
    class LocalEnv(fe.PlainEnv):  # not importable: cloudpickle sends it by value
        def __init__(self):
            super().__init__(obs_dim=2)

    return LocalEnv


@pytest.mark.parametrize(
    "constructor",
    [
        pytest.param(functools.partial(fe.PlainEnv, obs_dim=2), id="partial-by-reference"),
        pytest.param(lambda: fe.PlainEnv(obs_dim=2), id="lambda"),
        pytest.param(_local_closure(), id="closure"),
        pytest.param(_local_class(), id="local-class-by-value"),
    ],
)
def test_constructors_are_sent_with_cloudpickle(constructor, processes):
    env = processes(constructor)
    observ, info = env.reset(seed=4)
    np.testing.assert_array_equal(observ, [4, 0])
    assert info == {"index": 4, "t": 0}
    observ, reward, terminated, truncated, info = env.step(ACTION)
    np.testing.assert_array_equal(observ, [4, 1])
    assert (reward, terminated, truncated) == (0.5, False, False)


def test_importable_classes_travel_by_reference(processes):
    assert b"tests.faulty_envs" in cloudpickle.dumps(fe.PlainEnv)
    env = processes(fe.PlainEnv)
    assert env.observation_space == fe.PlainEnv().observation_space
    assert env.action_space == fe.PlainEnv().action_space
    assert env.get_attr("__class__") is fe.PlainEnv


def test_matches_a_gymnasium_env(processes):
    env = processes(functools.partial(gymnasium.make, "CartPole-v1"))
    reference = gymnasium.make("CartPole-v1")
    observ, _ = env.reset(seed=3)
    np.testing.assert_array_equal(observ, reference.reset(seed=3)[0])
    for action in [0, 1, 1, 0, 1]:
        got, want = env.step(action), reference.step(action)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:4] == want[1:4]
    reference.close()


def test_promises_are_collected_once(processes):
    env = processes(fe.PlainEnv)
    promise = env.reset(seed=0, blocking=False)
    assert callable(promise)
    with pytest.raises(AlreadyPendingCallError, match="reset is still pending"):
        env.step(ACTION, blocking=False)
    observ, _ = promise()
    with pytest.raises(NoPendingCallError, match="already collected"):
        promise()
    with pytest.raises(NoPendingCallError, match="no call is pending"):
        env.wait()
    promise = env.step(ACTION, blocking=False)
    observ, reward, *_ = promise(5.0)
    assert reward == 0.5 and observ[1] == 1
    with pytest.raises(NoPendingCallError):
        promise()
    assert env.step(ACTION)[0][1] == 2  # still usable


def test_call_get_attr_set_attr_and_render(processes):
    env = processes(fe.PlainEnv)
    env.reset(seed=1)
    assert env.call("add", 2, b=3) == 6
    assert env.get_attr("index") == 1
    env.set_attr("t", 9)
    assert env.get_attr("t") == 9
    np.testing.assert_array_equal(env.render(), np.full((2, 2, 3), 9, np.uint8))
    assert env.get_attr("np_random") is not None  # found through the env and its wrappers


def test_several_envs_in_one_worker(processes):
    env = processes([functools.partial(fe.PlainEnv, obs_dim=2)] * 3, rows=[5, 6, 7])
    assert env.rows == [5, 6, 7]
    env.reset(seed=6, index=1)
    assert env.get_attr("index", index=1) == 6
    assert env.get_attr("index", index=0) is None
    assert env.call_at(1, "add", (1,), {}) == 7
    env.set_attr("t", 3, index=2)
    assert env.get_attr("t", index=2) == 3
    with pytest.raises(IndexError, match="hosts 3 envs"):
        env.call_at(3, "add", (1,), {})


def test_different_spaces_in_one_worker_are_refused():
    constructors = [functools.partial(fe.PlainEnv, obs_dim=2), functools.partial(fe.PlainEnv)]
    with pytest.raises(ValueError, match="share observation and action spaces"):
        ExternalProcess(constructors)


def test_call_error_chains_the_remote_exception_and_breaks_the_process(processes):
    env = processes(fe.PlainEnv)
    with pytest.raises(EnvWorkerError, match="TypeError in add") as info:
        env.call("add")  # missing argument
    error = info.value
    assert error.remote_type == "TypeError"
    assert type(error.__cause__) is TypeError
    assert isinstance(error.__cause__.__cause__, RemoteTraceback)
    assert "missing 1 required positional argument" in error.__cause__.__cause__.text
    with pytest.raises(ClosedError, match="unusable since.*TypeError") as later:
        env.reset()
    assert later.value.__cause__ is error


def test_get_attr_of_a_missing_attribute_is_an_attribute_error(processes):
    env = processes(fe.PlainEnv)
    with pytest.raises(EnvWorkerError, match="AttributeError") as info:
        env.get_attr("no_such_attribute")
    assert type(info.value.__cause__) is AttributeError


def test_constructor_error(processes):
    with pytest.raises(EnvWorkerError, match="FaultyEnvError.*nope") as info:
        processes(functools.partial(fe.ConstructorRaisesEnv, "nope"))
    assert type(info.value.__cause__) is fe.FaultyEnvError
    assert info.value.step == 0


def test_slow_constructor_hits_the_start_timeout(wait_gone):
    before = set(_children())
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match="did not answer start"):
        ExternalProcess(lambda: (time.sleep(60), fe.PlainEnv())[1], start_timeout=0.5)
    assert time.monotonic() - start < 3.0
    assert not wait_gone(set(_children()) - before, 2.0)


def _children() -> list[int]:
    return [child.pid for child in psutil.Process().children(recursive=True)]


def test_step_timeout_terminates_the_worker(processes, wait_gone):
    env = processes(functools.partial(fe.StepHangsEnv, at_step=1, only_index=None), timeout=0.5)
    env.reset(seed=0)
    env.step(ACTION)
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError) as info:
        env.step(ACTION)
    assert 0.45 <= time.monotonic() - start < 3.0
    assert isinstance(info.value, TimeoutError)
    assert info.value.env_indices == (0,)
    assert not wait_gone([env.pid], 2.0)
    with pytest.raises(ClosedError):
        env.step(ACTION)


def test_per_call_timeout_overrides_the_default(processes):
    env = processes(functools.partial(fe.StepHangsEnv, at_step=0, only_index=None))
    env.reset(seed=0)
    promise = env.step(ACTION, blocking=False)
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError):
        promise(0.3)
    assert time.monotonic() - start < 2.0


def test_worker_death_is_noticed_at_once(processes):
    env = processes(fe.PlainEnv)
    env.reset(seed=0)
    os.kill(env.pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        for _ in range(100):  # the first send may still land in the socket buffer
            env.step(ACTION)
    assert time.monotonic() - start < 1.0
    assert info.value.exitcode == -signal.SIGKILL


def test_close_and_terminate(processes, wait_gone):
    env = processes(fe.PlainEnv)
    assert "open" in repr(env) and str(env.pid) in repr(env)
    env.reset(seed=0)
    assert env.close() == []
    assert env.closed and "closed" in repr(env)
    assert env.close() == []  # twice: a no-op
    assert not wait_gone([env.pid], 2.0)
    with pytest.raises(ClosedError, match="closed ExternalProcess"):
        env.reset()
    other = processes(fe.PlainEnv)
    other.terminate()
    assert other.closed
    assert not wait_gone([other.pid], 2.0)
    other.terminate()


def test_close_reports_env_close_problems_and_hangs(processes, wait_gone):
    env = processes(fe.CloseHangsEnv)
    start = time.monotonic()
    problems = env.close(timeout=0.5)
    assert time.monotonic() - start < 1.5
    assert problems and "did not finish" in problems[0]
    assert not wait_gone([env.pid], 2.0)


def test_close_with_a_call_pending(processes, wait_gone):
    env = processes(fe.PlainEnv)
    env.reset(seed=0)
    promise = env.step(ACTION, blocking=False)
    start = time.monotonic()
    env.close()
    assert time.monotonic() - start < 1.0
    with pytest.raises(ClosedError):
        promise()
    assert not wait_gone([env.pid], 2.0)


def test_garbage_collected_process_ends_its_worker(wait_gone):
    env = ExternalProcess(fe.PlainEnv)
    pid = env.pid
    del env
    gc.collect()
    assert not wait_gone([pid], 2.0)


def test_spawn_start_method(processes):
    env = processes(fe.PlainEnv, start_method="spawn")
    observ, _ = env.reset(seed=2)
    np.testing.assert_array_equal(observ, [2, 0, 0])


@pytest.mark.parametrize(
    "constructor, error, match",
    [
        pytest.param(42, TypeError, "callable", id="not-callable"),
        pytest.param([], ValueError, "at least one", id="empty-list"),
        pytest.param(
            functools.partial(fe.PlainEnv, fe.Unpicklable()),
            TypeError,
            "cannot be pickled",
            id="reduce-raises",
        ),
        pytest.param(
            (lambda lock: lambda: (lock, fe.PlainEnv())[1])(threading.Lock()),
            TypeError,
            "cannot be pickled",
            id="closure-over-lock",
        ),
    ],
)
def test_bad_constructors_are_refused_before_starting_a_process(constructor, error, match):
    before = set(_children())
    with pytest.raises(error, match=match):
        ExternalProcess(constructor)
    assert set(_children()) <= before | {fork_server_pid()}


def test_unknown_start_method():
    with pytest.raises(ValueError, match="start_method"):
        ExternalProcess(fe.PlainEnv, start_method="fork")


def test_readable_waits_for_a_message_or_a_closed_peer():
    """The worker and the parent wait through one select.poll object per connection: it
    times out without a message, and wakes for a message and for a peer that hung up."""
    ours, theirs = multiprocessing.Pipe()
    readable = Readable(ours)
    begin = time.monotonic()
    assert not readable(0.05)
    assert 0.04 <= time.monotonic() - begin < 1.0
    assert not readable(0)
    theirs.send_bytes(b"G")
    assert readable(None) and ours.recv_bytes() == b"G"
    theirs.close()
    assert readable(1.0)
    ours.close()
