"""The parent process: Ctrl-C in it prints one traceback and ends every worker; workers
die with a killed parent. Each case runs a script in a subprocess.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

import psutil
import pytest

from tests.cli_process import python_command
from tests.faults.fault_helpers import KINDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
        python_command(code),
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
