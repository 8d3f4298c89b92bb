"""What cannot be pickled: an unpicklable constructor is a TypeError before any process
starts; an unpicklable info is an env error.
"""

from __future__ import annotations

import functools
import threading

import psutil
import pytest

import batchenv
import batchenv.workers.launch
from batchenv.errors import ClosedError, EnvWorkerError
from tests import faulty_envs as fe
from tests.faults.fault_helpers import KINDS, K, S, actions, step_ok, worker_pids

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
    assert after <= before | {batchenv.workers.launch.fork_server_pid()}


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
