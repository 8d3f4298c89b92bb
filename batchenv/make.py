"""``batchenv.make``: the fast BatchEnv, several envs per worker and shared memory.

>>> import batchenv
>>> env = batchenv.make("CartPole-v1", num_envs=64)           # a Gymnasium id ...
>>> env = batchenv.make(lambda: MyEnv(level=3), num_envs=16)  # ... or a constructor
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

import numpy as np

from batchenv._transport import SharedMemoryTransport
from batchenv.batch_env import BatchEnv
from batchenv.external_process import DEFAULT_START_TIMEOUT, ExternalProcess

#: Default bounded spin of batchenv.make workers and parent (see ``spin_us``), microseconds.
#: Off: a loop that only steps gains 5-15% from ``spin_us=300`` on 2 cores, but a loop
#: that trains between steps (torch threads) ran 3x slower with it (benchmarks/RESULTS.md).
DEFAULT_SPIN_US = 0.0


def make(
    env: str | Callable,
    num_envs: int,
    num_workers: int | None = None,
    *,
    start_method: str = "forkserver",
    timeout: float | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    check_actions: bool = True,
    copy: bool = True,
    pin_workers: bool | None = None,
    reset_ahead: bool = True,
    spin_us: float = DEFAULT_SPIN_US,
    **env_kwargs,
) -> BatchEnv:
    """Build a BatchEnv of ``num_envs`` envs spread over ``num_workers`` processes.

    Args:
        env: a Gymnasium id (``gymnasium.make(env, **env_kwargs)`` runs in the workers) or a
            constructor returning an env (then ``env_kwargs`` must be empty).
        num_envs: batch size.
        num_workers: worker processes (default: the number of CPU cores, at most num_envs).
            Each hosts ``num_envs / num_workers`` envs, stepped one after another.
        start_method: "forkserver" (default) or "spawn".
        timeout: deadline in seconds for each step and reset (None: none).
        start_timeout: deadline for starting the workers and building the envs.
        check_actions: check that actions are finite and inside the action space.
        copy: return copies of the results (safe to keep); False returns views into
            shared memory, valid until the next step.
        reset_ahead: reset an env in its worker right after the step that ended its episode
            (the terminal observation is still returned by that step), so that
            ``reset(indices)`` of finished rows without seed or options costs no round trip.
            Finished rows must then be reset before the next step (NotResetError).
            Set False to inspect a finished env (render, get_attr) before its reset.
        pin_workers: pin worker i to CPU core i (mod cores) so the kernel never stacks two
            busy workers on one core; None pins when num_workers <= cores.
        spin_us: poll for a reply (parent) or for the next step (worker) for up to this
            many microseconds before sleeping, yielding the core between polls; saves the
            cross-core wake-ups that dominate short steps. 0 always sleeps. Only for
            loops that do little between steps: spinning workers fight the training
            code's threads for the cores.
    """
    if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if num_workers is None:
        num_workers = (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        )
    if not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
    num_workers = min(int(num_workers), int(num_envs))
    if isinstance(env, str):
        import gymnasium

        constructor = functools.partial(gymnasium.make, env, **env_kwargs)
    elif callable(env):
        if env_kwargs:
            raise TypeError(f"keyword arguments {sorted(env_kwargs)} only apply to a Gymnasium id")
        constructor = env
    else:
        raise TypeError(f"env must be a Gymnasium id or a callable, got {env!r}")
    return start_workers(
        [constructor] * int(num_envs),
        num_workers=num_workers,
        start_method=start_method,
        timeout=timeout,
        start_timeout=start_timeout,
        check_actions=check_actions,
        copy=copy,
        pin_workers=pin_workers,
        reset_ahead=reset_ahead,
        spin_us=spin_us,
    )


def start_workers(
    constructors: list[Callable],
    *,
    num_workers: int | None = None,
    start_method: str = "forkserver",
    timeout: float | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    check_actions: bool = True,
    copy: bool = True,
    pin_workers: bool | None = None,
    reset_ahead: bool = False,
    spin_us: float = 0.0,
) -> BatchEnv:
    """A shared-memory BatchEnv with one env per constructor, grouped over workers."""
    num_envs = len(constructors)
    if num_workers is None:
        num_workers = default_num_workers()
    if not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
    groups = np.array_split(np.arange(num_envs), min(int(num_workers), num_envs))
    workers: list[ExternalProcess] = []
    try:
        deadline = time.monotonic() + start_timeout
        for index, rows in enumerate(groups):
            workers.append(
                ExternalProcess(
                    [constructors[r] for r in rows],
                    start_method=start_method,
                    start_timeout=start_timeout,
                    timeout=timeout,
                    worker_index=index,
                    rows=rows.tolist(),
                    wait=False,
                    spin_us=spin_us,
                )
            )
        for worker in workers:
            worker.wait_started(max(0.0, deadline - time.monotonic()))
        if pin_workers or (pin_workers is None and len(workers) <= default_num_workers()):
            _pin(workers)
        transport = SharedMemoryTransport(workers, copy=copy, reset_ahead=reset_ahead)
    except BaseException:
        for worker in workers:
            worker.terminate()
        raise
    return BatchEnv(None, timeout=timeout, check_actions=check_actions, _transport=transport)


def default_num_workers() -> int:
    """The number of CPU cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _pin(workers: list[ExternalProcess]) -> None:
    """Give worker i its own core (round robin over the cores this process may use)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    for index, worker in enumerate(workers):
        try:
            os.sched_setaffinity(worker.pid, {cores[index % len(cores)]})
        except OSError:  # not permitted here: pinning is only a speed-up
            return
