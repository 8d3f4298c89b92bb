"""``batchenv.make``: the fast BatchEnv, several envs per worker and shared memory.

>>> import batchenv
>>> env = batchenv.make("CartPole-v1", num_envs=64)           # a Gymnasium id ...
>>> env = batchenv.make(lambda: MyEnv(level=3), num_envs=16)  # ... or a constructor
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from batchenv.async_batch_env import AsyncBatchEnv
from batchenv.batch_env import BatchEnv
from batchenv.multi_agent import AgentBatchEnv, AgentSpaces
from batchenv.workers.external_process import DEFAULT_CLOSE_TIMEOUT, DEFAULT_START_TIMEOUT
from batchenv.workers.groups import default_num_workers, start_transport
from batchenv.workers.parent_share import torch_threads

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
    parent_share: float | str | None = None,
    batch_size: int | None = None,
    autoreset_mode: str = "next_step",
    backend: str = "local",
    placement: str = "PACK",
    address: str | None = None,
    **env_kwargs,
) -> BatchEnv | AsyncBatchEnv | AgentBatchEnv:
    """Build a BatchEnv of ``num_envs`` envs spread over ``num_workers`` processes.

    Args:
        env: a Gymnasium id (``gymnasium.make(env, **env_kwargs)`` runs in the workers; the
            ``MinAtar/<Game>-v0``/``-v1`` ids of the ``minatar`` package are registered
            first, see :func:`make_minatar`) or a
            constructor returning an env (then ``env_kwargs`` must be empty). A constructor
            of a PettingZoo ``ParallelEnv`` gives an
            :class:`~batchenv.multi_agent.AgentBatchEnv` (arrays ``[num_envs, agents,
            ...]``; see :mod:`batchenv.multi_agent`).
        num_envs: batch size.
        num_workers: worker processes (default: the number of CPU cores, at most num_envs;
            with ``batch_size``, the cores torch's threads leave free: see
            :func:`async_num_workers`). Each hosts ``num_envs / num_workers`` envs, stepped
            one after another.
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
        parent_share: envs the parent steps itself while the workers step the rest: None
            (default, every env in a worker), a fraction in (0, 1], or "auto" (timed at
            start; see ``batchenv.workers.parent_share``). Those envs give up crash
            isolation and deadlines; lockstep only.
        batch_size: return an :class:`~batchenv.async_batch_env.AsyncBatchEnv` with
            EnvPool's ``send``/``recv`` API whose ``recv()`` returns the first
            ``batch_size`` envs to finish (``1 <= batch_size <= num_envs``).
        autoreset_mode: with ``batch_size``: "next_step" (EnvPool's) or "same_step".
        backend: "local" (default: worker processes on this machine) or "ray": the
            ``num_workers`` groups are Ray actors, placed over a Ray cluster's nodes (see
            :mod:`batchenv.workers.ray_transport`; ``pip install -e ".[ray]"``); the
            BatchEnv API is the same. Lockstep only: no ``batch_size`` or
            ``parent_share``.
        placement: with ``backend="ray"``: "PACK" (as few nodes as fit) or "SPREAD".
        address: with ``backend="ray"``: the Ray cluster to join when Ray is not
            initialized yet (None: ``RAY_ADDRESS``, or a local instance).
    """
    if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if isinstance(env, str) and env.startswith(MINATAR_PREFIX):
        register_minatar(env)  # here first: a missing package fails before any worker starts
        constructor = functools.partial(make_minatar, env, **env_kwargs)
    elif isinstance(env, str):
        import gymnasium

        constructor = functools.partial(gymnasium.make, env, **env_kwargs)
    elif callable(env):
        if env_kwargs:
            raise TypeError(f"keyword arguments {sorted(env_kwargs)} only apply to a Gymnasium id")
        constructor = env
    else:
        raise TypeError(f"env must be a Gymnasium id or a callable, got {env!r}")
    if backend not in ("local", "ray"):
        raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
    if backend == "ray":
        return _start_on_ray(
            constructor,
            int(num_envs),
            num_workers,
            timeout=timeout,
            start_timeout=start_timeout,
            check_actions=check_actions,
            placement=placement,
            address=address,
            refused={"batch_size": batch_size, "parent_share": parent_share},
        )
    if batch_size is not None and parent_share:
        raise ValueError(
            "parent_share applies to lockstep stepping; with batch_size (send/recv) every env "
            "runs in a worker: drop one of the two"
        )
    if batch_size is not None and num_workers is None:
        num_workers = async_num_workers(int(num_envs))
    transport = start_transport(
        [constructor] * int(num_envs),
        num_workers=num_workers,
        start_method=start_method,
        timeout=timeout,
        start_timeout=start_timeout,
        copy=copy,
        pin_workers=pin_workers,
        reset_ahead=reset_ahead and batch_size is None,
        spin_us=spin_us,
        parent_share=parent_share,
    )
    if batch_size is None:
        batch = BatchEnv(None, timeout=timeout, check_actions=check_actions, _transport=transport)
        if isinstance(batch.observation_space, AgentSpaces):
            return AgentBatchEnv(batch)
        return batch
    if isinstance(transport.observation_space, AgentSpaces):
        transport.close(DEFAULT_CLOSE_TIMEOUT)
        raise ValueError(
            "batch_size (send/recv) is not supported for PettingZoo envs: drop batch_size "
            "for a lockstep AgentBatchEnv, or use BatchVectorEnv"
        )
    return AsyncBatchEnv(
        transport,
        batch_size,
        timeout=timeout,
        check_actions=check_actions,
        autoreset_mode=autoreset_mode,
    )


#: Ids starting so are the MinAtar package's (``minatar.gym.register_envs``).
MINATAR_PREFIX = "MinAtar/"


def make_minatar(env_id: str, **kwargs) -> Any:
    """``gymnasium.make(env_id, **kwargs)`` for a ``MinAtar/<Game>-v0|v1`` id, registering
    the ``minatar`` package's ids first (workers call this too: they start unregistered).

        >>> env = make_minatar("MinAtar/Breakout-v1")   # pip install 'batchenv[minatar]'
    """
    import gymnasium

    register_minatar(env_id)
    return gymnasium.make(env_id, **kwargs)


def register_minatar(env_id: str) -> None:
    """Register MinAtar's Gymnasium ids unless ``env_id`` is known; fail with the fix."""
    import gymnasium

    if env_id in gymnasium.registry:
        return
    known = sorted(i for i in gymnasium.registry if i.startswith(MINATAR_PREFIX))
    if not known:  # not registered yet (registering twice warns about every id)
        try:
            from minatar.gym import register_envs
        except ImportError as error:
            raise ImportError(
                f"batchenv.make({env_id!r}) needs the MinAtar package: "
                "pip install 'batchenv[minatar]'"
            ) from error
        register_envs()
        known = sorted(i for i in gymnasium.registry if i.startswith(MINATAR_PREFIX))
    if env_id not in known:
        raise ValueError(f"batchenv.make({env_id!r}): no such MinAtar id; known ids: {known}")


def _start_on_ray(constructor, num_envs, num_workers, *, placement, address, refused, **options):
    """``make(..., backend="ray")``: the groups as Ray actors (lockstep BatchEnv)."""
    if num_workers is None:
        raise ValueError(
            "backend='ray' needs num_workers: the number of worker groups, one Ray actor "
            "each (e.g. one per node, or per few cores)"
        )
    given = sorted(name for name, value in refused.items() if value)
    if given:
        raise ValueError(
            f"{' and '.join(given)} apply to the local backend only; with backend='ray' the "
            "batch steps in lockstep: drop them"
        )
    batch = start_ray_workers(
        [constructor] * num_envs,
        num_workers=num_workers,
        strategy=placement,
        address=address,
        **options,
    )
    if isinstance(batch.observation_space, AgentSpaces):
        return AgentBatchEnv(batch)
    return batch


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
    parent_share: float | str | None = None,
    exact_spaces: bool = True,
) -> BatchEnv:
    """A shared-memory BatchEnv with one env per constructor, grouped over workers (and
    the parent's share, see ``batchenv.workers.parent_share``). ``exact_spaces=False``
    accepts envs whose spaces differ but share one layout (``BatchVectorEnv`` checks them
    as Gymnasium does). See :func:`batchenv.workers.groups.start_transport`."""
    transport = start_transport(
        constructors,
        num_workers=num_workers,
        start_method=start_method,
        timeout=timeout,
        start_timeout=start_timeout,
        copy=copy,
        pin_workers=pin_workers,
        reset_ahead=reset_ahead,
        spin_us=spin_us,
        parent_share=parent_share,
        exact_spaces=exact_spaces,
    )
    return BatchEnv(None, timeout=timeout, check_actions=check_actions, _transport=transport)


def start_ray_workers(
    constructors: Sequence[Callable],
    *,
    num_workers: int,
    timeout: float | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    check_actions: bool = True,
    strategy: str = "PACK",
    num_cpus_per_worker: float = 1,
    address: str | None = None,
) -> BatchEnv:
    """A BatchEnv with one env per constructor over ``num_workers`` Ray actors (groups);
    see :mod:`batchenv.workers.ray_transport` for what runs where.

        >>> from batchenv.make import start_ray_workers
        >>> env = start_ray_workers([lambda: gymnasium.make("CartPole-v1")] * 8, num_workers=2)
        >>> observ, infos = env.reset(seed=0)      # the same API as batchenv.make's

    Args:
        constructors: one zero-argument env constructor per batch row (picklable; the
            code of the user's own modules travels with it, see
            :func:`batchenv.workers.ray_cluster.ship`).
        num_workers: worker groups, one Ray actor each, ``len(constructors) / num_workers``
            contiguous rows each.
        timeout: deadline in seconds for each step and reset (None: none; a dead actor is
            still noticed at once).
        start_timeout: deadline for placing the actors and building their envs.
        check_actions: check that actions are finite and inside the action space.
        strategy: placement of the groups over the nodes: "PACK" (default: as few nodes
            as fit), "SPREAD" (one node each where possible) or Ray's STRICT_ variants.
        num_cpus_per_worker: CPUs reserved per group; with 2 or more its envs run in that
            many worker processes inside the actor, else in the actor's own process.
        address: the Ray cluster to join when Ray is not initialized yet (None: start a
            local instance, or join ``RAY_ADDRESS``).
    """
    from batchenv.workers.ray_transport import start_ray_transport  # only when asked for

    transport = start_ray_transport(
        constructors,
        num_workers=num_workers,
        timeout=timeout,
        start_timeout=start_timeout,
        strategy=strategy,
        num_cpus_per_worker=num_cpus_per_worker,
        address=address,
    )
    return BatchEnv(None, timeout=timeout, check_actions=check_actions, _transport=transport)


def async_num_workers(num_envs: int) -> int:
    """Workers of a send/recv batch: the cores that torch's intra-op threads leave free,
    since the training process computes while the workers step (all the cores when torch
    is not imported). On 2 cores with torch at one thread, one worker made a PPO loop of 16
    HalfCheetahs 1.10x SyncVectorEnv's; two made it 0.80x (benchmarks/RESULTS.md)."""
    import sys

    threads = torch_threads() if "torch" in sys.modules else 0
    return max(1, min(num_envs, default_num_workers() - threads))
