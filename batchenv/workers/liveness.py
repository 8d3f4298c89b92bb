"""Processes that never outlive their parent: the parent-death signal and the pid check.

A child asks Linux to SIGKILL it when the thread that started it exits
(:func:`set_parent_death_signal`), and while idle it checks that its parent still runs
(:func:`pid_alive`), which also covers children started by a thread other than the main
one. Env workers, the fork server and IMPALA's actor processes all use these two.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def set_parent_death_signal() -> None:
    """Ask Linux to SIGKILL this process when its parent thread exits (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def started_by_main_thread() -> bool:
    """True in the main thread: the only thread whose children may rely on the death signal.

    PR_SET_PDEATHSIG fires when the *thread* that started the child exits, so a child
    started by any other thread relies on the pid check alone.
    """
    return threading.current_thread() is threading.main_thread()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, which may never be reaped here, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def orphaned(parent_pid: int) -> bool:
    """True once this process's parent has gone (re-parented, or ``parent_pid`` ended)."""
    return os.getppid() != parent_pid or not pid_alive(parent_pid)
