"""Starting a batch's envs as worker groups over one shared memory block.

:func:`start_transport` spreads the rows over worker processes (and the parent's own
share, see :mod:`batchenv.workers.parent_share`) and returns the
:class:`~batchenv.workers.shared_memory_transport.SharedMemoryTransport` that drives
them. ``batchenv.make`` wraps it in a BatchEnv or an AsyncBatchEnv; a Ray worker group
(:mod:`batchenv.workers.ray_transport`) runs one inside its actor.

    >>> import functools, gymnasium
    >>> transport = start_transport([functools.partial(gymnasium.make, "CartPole-v1")] * 4)
    >>> transport.num_envs
    4
    >>> transport.close(5.0)
    []
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from batchenv.errors import EnvWorkerError, with_env_type
from batchenv.workers.env_group import EnvGroup
from batchenv.workers.external_process import (
    DEFAULT_START_TIMEOUT,
    ExternalProcess,
    describe_constructor,
)
from batchenv.workers.parent_share import plan as parent_share_plan
from batchenv.workers.protocol import EnvFailure
from batchenv.workers.shared_memory_transport import SharedMemoryTransport
from batchenv.workers.transport import check_same_spaces


def start_transport(
    constructors: list[Callable],
    *,
    num_workers: int | None = None,
    start_method: str = "forkserver",
    timeout: float | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    copy: bool = True,
    pin_workers: bool | None = None,
    reset_ahead: bool = False,
    spin_us: float = 0.0,
    parent_share: float | str | None = None,
    exact_spaces: bool = True,
) -> SharedMemoryTransport:
    """One env per constructor, grouped over ``num_workers`` worker processes (default:
    one per core, at most one per env) and the parent's share. The arguments are
    ``batchenv.make``'s; ``exact_spaces=False`` accepts envs whose spaces differ but share
    one layout. An env constructor that raises gives an EnvWorkerError that is also of
    the constructor's exception type, naming the worker and the env."""
    num_envs = len(constructors)
    if num_workers is not None and (
        not isinstance(num_workers, (int, np.integer)) or num_workers < 1
    ):
        raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
    split = parent_share_plan(  # None: one worker per core, at most one per env
        parent_share, constructors[0], num_envs, num_workers, default_num_workers()
    )
    local_rows = list(range(split.local))
    groups = (
        np.array_split(np.arange(split.local, num_envs), split.num_workers)
        if split.num_workers
        else []
    )
    description = describe_constructor(constructors[0])
    workers: list[ExternalProcess] = []
    local = None
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
                    exact_spaces=exact_spaces,
                )
            )
        if local_rows:  # the parent builds its share while the workers build theirs
            local = EnvGroup(local_rows)
            try:
                local_spaces = local.build([constructors[r] for r in local_rows])
            except EnvFailure as failure:
                raise _built_in_parent_error(failure, description) from failure.error
            names = [f"env {row}" for row in local_rows]
            check_same_spaces(local_spaces, names=names, exact=exact_spaces)
        for worker in workers:
            worker.wait_started(max(0.0, deadline - time.monotonic()))
        if pin_workers or (pin_workers is None and len(workers) <= default_num_workers()):
            pin(workers, first=1 if local is not None else 0)
        return SharedMemoryTransport(
            workers,
            copy=copy,
            reset_ahead=reset_ahead,
            local=local,
            local_description=description,
            exact_spaces=exact_spaces,
        )
    except BaseException:
        for worker in workers:
            worker.terminate()
        if local is not None:
            local.close_envs()
        raise


def _built_in_parent_error(failure: EnvFailure, description: str) -> BaseException:
    """The error of an env of the parent's share whose constructor raised: an
    EnvWorkerError that is also of the constructor's exception type."""
    error = failure.error
    named = EnvWorkerError(
        f"env {failure.row} ({description}, built in the parent process: parent_share) "
        f"raised {type(error).__name__} while being built: {error}",
        env_index=failure.row,
        step=0,
        env_description=description,
        remote_type=type(error).__name__,
    )
    named.__cause__ = error
    return with_env_type(named)


def default_num_workers() -> int:
    """The number of CPU cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pin(workers: list[ExternalProcess], first: int = 0) -> None:
    """Give worker i its own core ``first + i`` (round robin over the cores this process
    may use; ``first=1`` leaves the first core to a parent that steps envs too)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    for index, worker in enumerate(workers):
        try:
            os.sched_setaffinity(worker.pid, {cores[(first + index) % len(cores)]})
        except OSError:  # not permitted here: pinning is only a speed-up
            return
