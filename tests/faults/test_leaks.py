"""No leaks: create/close cycles (some failing, some dropped without close) leak no
process, file descriptor or shared memory.
"""

from __future__ import annotations

import gc
import os
import time

import pytest

import batchenv
from batchenv import BatchEnv, ExternalProcess
from batchenv.errors import EnvWorkerError
from tests import faulty_envs as fe
from tests.faults.fault_helpers import actions

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
