"""How many envs the parent steps itself while it would otherwise wait for its workers.

In a lockstep loop the parent sits idle while the workers step, and on a machine with few
cores it is one of them. With ``parent_share`` it steps a share of the envs in-process (an
:class:`~batchenv.workers.env_group.EnvGroup` on the same shared block) between sending
the step to the workers and collecting their replies.

``"auto"`` decides by a measured rule. It builds one probe env in the parent, times its
steps (``s`` seconds each) and compares the ``n`` envs' work with the cost ``r`` of a round
trip to a worker (:data:`ROUNDTRIP_SECONDS`, measured on a 2-core VM):

- ``n * s <= r``: a worker costs more than it saves; the parent steps every env (no
  worker processes at all, as ``SyncVectorEnv`` does).
- otherwise ``W`` workers (``num_workers`` when given) and the parent takes the share ``p``
  that makes both sides finish together: ``p * n * s = (1 - p) * n * s / W + r``.
  ``W`` is the number of cores the parent leaves free: ``cores - 1``, or ``cores - T``
  when torch is imported with ``T`` intra-op threads. After each parallel region torch's
  OpenMP threads spin, waiting for the next one, on the very cores a worker would step
  on: with torch's default of one thread per core, workers measured 0.77x of
  ``SyncVectorEnv`` in a policy loop of 16 HalfCheetahs on 2 cores, and 1.37x with
  ``torch.set_num_threads(1)``. When no core is left (``W < 1``) the parent steps every
  env.
- a probe env that cannot be built, or stepped right after ``reset`` (one that needs
  ``set_attr`` first, say), gives no timing: then the workers step every env.

What the parent's share gives up: an env stepped in the parent has no process of its own,
so a segfault in it ends the parent, and a hang in it cannot be cut by ``timeout`` (an
exception is still reported as an ``EnvWorkerError`` naming the env and the step).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: The cost of one step round trip to a worker beyond the env's own work: writing the
#: message, the cross-core wake-up of the worker and of the parent, reading the reply.
#: 100-200 us on the 2-core VMs this was measured on (benchmarks/RESULTS.md).
ROUNDTRIP_SECONDS = 150e-6

PROBE_SECONDS = 0.05
PROBE_MAX_STEPS = 200


@dataclass(frozen=True)
class Plan:
    """``local`` envs stepped by the parent, the rest over ``num_workers`` workers."""

    local: int
    num_workers: int
    step_seconds: float | None = None  # the probe's measured step time, when "auto"


def plan(
    parent_share: float | str | None,
    constructor: Callable,
    num_envs: int,
    num_workers: int | None,
    cores: int,
) -> Plan:
    """The split of ``num_envs`` envs between the parent and its workers.

    ``parent_share``: None or 0 (the workers step every env), a fraction in (0, 1] of
    the envs for the parent, or "auto" (see the module docstring).
    """
    if parent_share is None or parent_share == 0:
        return Plan(0, _workers(num_workers, cores, num_envs))
    if isinstance(parent_share, str):
        if parent_share != "auto":
            raise ValueError(
                f"parent_share must be 'auto', a fraction in [0, 1] or None, got {parent_share!r}"
            )
        return _auto(constructor, num_envs, num_workers, cores)
    if isinstance(parent_share, bool) or not 0.0 <= float(parent_share) <= 1.0:
        raise ValueError(
            f"parent_share must be 'auto', a fraction in [0, 1] or None, got {parent_share!r}"
        )
    local = min(num_envs, max(1, round(float(parent_share) * num_envs)))
    if local == num_envs:
        return Plan(local, 0)
    default = max(1, cores - 1)
    return Plan(local, _workers(num_workers or default, cores, num_envs - local))


def _workers(num_workers: int | None, cores: int, envs: int) -> int:
    return min(num_workers if num_workers is not None else cores, envs)


def _auto(constructor: Callable, num_envs: int, num_workers: int | None, cores: int) -> Plan:
    seconds = probe_step_seconds(constructor)
    if seconds is None:
        return Plan(0, _workers(num_workers, cores, num_envs))
    work = num_envs * seconds
    workers = num_workers if num_workers is not None else cores - max(1, torch_threads())
    if work <= ROUNDTRIP_SECONDS or workers < 1:
        return Plan(num_envs, 0, seconds)
    share = (1.0 / workers + ROUNDTRIP_SECONDS / work) / (1.0 + 1.0 / workers)
    local = min(num_envs, max(0, round(share * num_envs)))
    if local == num_envs:
        return Plan(num_envs, 0, seconds)
    return Plan(local, min(workers, num_envs - local), seconds)


def torch_threads() -> int:
    """torch's intra-op threads in this process, or 1 when torch is not imported."""
    import sys

    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    return int(get()) if get is not None else 1


def probe_step_seconds(constructor: Callable) -> float | None:
    """Seconds per step of one env built by ``constructor``, with random actions, timed in
    this process for up to :data:`PROBE_SECONDS` (the env is closed afterwards); None
    when the env cannot be built or stepped so (the workers then report its errors, typed
    and naming the env)."""
    from batchenv.compat import to_gymnasium

    try:
        env = to_gymnasium(constructor())
    except Exception:
        return None
    try:
        env.action_space.seed(0)
        env.reset(seed=0)
        steps, start = 0, time.perf_counter()
        while steps < PROBE_MAX_STEPS and time.perf_counter() - start < PROBE_SECONDS:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            steps += 1
            if terminated or truncated:
                env.reset()
        return (time.perf_counter() - start) / max(1, steps)
    except Exception:
        return None
    finally:
        try:
            env.close()
        except Exception:
            pass
