"""Rollout fragments on Ray: each worker group runs the policy next to its envs for ``T``
steps and returns the whole ``[T, k]`` fragment in one actor call.

Why: one Ray actor call costs about a millisecond (0.8 ms empty, 1-2 ms with a step of
CartPole, on the 2-core VM of docs/workers.md). Worker groups stepped in lockstep from the
driver (``batchenv.make(..., backend="ray")``) pay it on every step; a fragment pays it
once per ``T`` steps. The policy's weights travel once per update: :meth:`set_weights`
puts them in Ray's object store (``ray.put``) and each actor fetches them only when their
version changed, from its node's copy.

    >>> groups = RolloutGroups(make_sampler, num_workers=4, strategy="SPREAD")
    >>> groups.set_weights(model.state_dict())
    >>> groups.submit_all()
    >>> for group, fragment in groups.wait(timeout=60.0):
    ...     learn(fragment)                      # an exception instead when it failed
    ...     groups.submit(group)                 # the next fragment, latest weights
    >>> groups.close()

A *sampler* is any object with ``load_weights(weights)``, ``sample() -> fragment`` and
``close()``; ``factory(group, incarnation)`` builds it inside the actor (so it must be
picklable: a module-level function or a ``functools.partial`` of one). IMPALA's
distributed mode (``algorithms/impala/distributed.py``) is one user: its sampler writes
an unroll of ``T + 1`` rows per env with the actor's model.

Failures come back as values: :meth:`wait` yields ``(group, error)`` for a group whose
actor died (:class:`~batchenv.errors.WorkerDiedError` naming it) or whose sampler raised
(:class:`~batchenv.errors.EnvWorkerError` with the remote traceback chained). The caller
decides: :meth:`restart` builds a new actor for the group in its placement bundle (the next
incarnation), or stop. :meth:`close` kills every actor and removes the placement group.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from batchenv.errors import EnvWorkerError, RemoteTraceback, WorkerDiedError, WorkerTimeoutError
from batchenv.workers.external_process import remaining
from batchenv.workers.ray_cluster import (
    STRATEGIES,
    connect,
    import_ray,
    kill_actor,
    remove_placement_group,
    wait_placed,
)

__all__ = ["RolloutGroups"]


class SamplerHost:
    """Inside a Ray actor: one group's sampler, with the version of its weights."""

    def __init__(self, factory: Callable, group: int, incarnation: int):
        self.sampler = factory(group, incarnation)
        self.version = None

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def sample(self, version: int, boxed_weights: list) -> Any:
        """The next fragment, after loading weights ``version`` when they are new here
        (``boxed_weights`` holds their object ref, in a list so Ray passes the ref)."""
        if version != self.version:
            import ray

            self.sampler.load_weights(ray.get(boxed_weights[0]))
            self.version = version
        return self.sampler.sample()

    def close(self) -> None:
        self.sampler.close()


class RolloutGroups:
    """``num_workers`` samplers as Ray actors in one placement group (see the module doc).

    Args:
        factory: ``factory(group, incarnation) -> sampler``, called in each actor.
        num_workers: groups, one Ray actor and one placement bundle each.
        num_cpus_per_worker: CPUs reserved per group.
        strategy: placement over the nodes: "PACK" (default) or "SPREAD" (Ray's STRICT_
            variants too).
        address: the Ray cluster to join when Ray is not initialized yet (None:
            ``RAY_ADDRESS``, or a local instance).
        start_timeout: deadline for placing the actors and building the samplers.
        description: what the groups run, for error messages.
    """

    def __init__(
        self,
        factory: Callable,
        num_workers: int,
        *,
        num_cpus_per_worker: float = 1,
        strategy: str = "PACK",
        address: str | None = None,
        start_timeout: float = 120.0,
        description: str = "sampler",
    ):
        ray = import_ray()
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if not ray.is_initialized():
            connect(ray, address)
        from ray.util.placement_group import placement_group

        self._ray = ray
        self.factory, self.description = factory, description
        self.num_workers = num_workers
        self.num_cpus = float(num_cpus_per_worker)
        self.incarnations = [0] * num_workers
        self.actors: list = [None] * num_workers
        self.nodes: list[str | None] = [None] * num_workers
        self._pending: dict = {}  # ref -> group
        self._weights: list | None = None
        self._version = 0
        self._lock = threading.Lock()
        self._closed = False
        self.placement_group = placement_group(
            [{"CPU": self.num_cpus} for _ in range(num_workers)], strategy=strategy
        )
        deadline = time.monotonic() + start_timeout
        try:
            wait_placed(
                ray, self.placement_group, strategy, deadline, start_timeout, description,
                description,
            )  # fmt: skip
            for group in range(num_workers):
                self._start(group)
            self._wait_built(range(num_workers), deadline, start_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, group: int) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        host = self._ray.remote(max_restarts=0, max_task_retries=0)(SamplerHost)
        where = PlacementGroupSchedulingStrategy(
            self.placement_group, placement_group_bundle_index=group
        )
        self.actors[group] = host.options(num_cpus=self.num_cpus, scheduling_strategy=where).remote(
            self.factory, group, self.incarnations[group]
        )

    def _wait_built(self, groups, deadline: float, start_timeout: float) -> None:
        """Each group's node, once its sampler is built; typed errors otherwise."""
        ray = self._ray
        refs = {self.actors[g].node.remote(): g for g in groups}
        done, late = ray.wait(list(refs), num_returns=len(refs), timeout=remaining(deadline))
        if late:
            group = refs[late[0]]
            raise WorkerTimeoutError(
                f"{self.description} group {group} was not built within start_timeout="
                f"{start_timeout} s; raise start_timeout or check the cluster",
                worker=group,
                step=0,
                env_description=self.description,
            )
        for ref in done:
            try:
                self.nodes[refs[ref]] = ray.get(ref, timeout=0)
            except ray.exceptions.RayError as error:
                raise self._error(refs[ref], error, "while being built") from None

    # ------------------------------------------------------------------ fragments

    def set_weights(self, weights: Any) -> None:
        """Publish ``weights`` (e.g. a state dict of CPU tensors) for the next fragments."""
        boxed = [self._ray.put(weights)]
        with self._lock:  # a learner thread publishes while another thread submits
            self._weights = boxed
            self._version += 1

    def submit(self, group: int) -> None:
        """Ask ``group`` for its next fragment, with the latest weights."""
        with self._lock:
            if self._weights is None:
                raise RuntimeError("call set_weights() before submit(): samplers need weights")
            version, weights = self._version, self._weights
        ref = self.actors[group].sample.remote(version, weights)
        self._pending[ref] = group

    def is_pending(self, group: int) -> bool:
        """Whether ``group`` owes a fragment (asked for, not yet handed out)."""
        return group in self._pending.values()

    def submit_all(self) -> None:
        for group in range(self.num_workers):
            self.submit(group)

    @property
    def pending(self) -> int:
        """Fragments asked for and not yet handed out by :meth:`wait`."""
        return len(self._pending)

    def wait(self, timeout: float | None) -> Iterator[tuple[int, Any]]:
        """``(group, fragment)`` for each fragment finished within ``timeout`` seconds
        (at least one when any is due in time), or ``(group, error)`` for a group that
        failed (an exception instance: WorkerDiedError, EnvWorkerError)."""
        if not self._pending:
            return
        ray = self._ray
        ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=timeout)
        if ready:  # whatever else is done by now comes along
            ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        for ref in ready:
            group = self._pending.pop(ref)
            try:
                fragment = ray.get(ref, timeout=0)
            except ray.exceptions.RayError as error:
                yield group, self._error(group, error, "while sampling")
                continue
            yield group, fragment

    def _error(self, group: int, error: BaseException, when: str) -> BaseException:
        ray = self._ray
        where = (
            f"{self.description} group {group} (incarnation {self.incarnations[group]}, "
            f"node {self.nodes[group]})"
        )
        if isinstance(error, ray.exceptions.RayTaskError) and not isinstance(
            error, ray.exceptions.RayActorError
        ):
            cause = error.cause if isinstance(error.cause, BaseException) else None
            failure = EnvWorkerError(
                f"{where} raised {type(cause).__name__ if cause else 'an error'} {when}: "
                f"{cause if cause else error}",
                worker=group,
                env_description=self.description,
                remote_type=type(cause).__name__ if cause else "",
            )
            failure.__cause__ = RemoteTraceback(str(error))
            return failure
        failure = WorkerDiedError(
            f"{where} died {when}: its Ray actor is gone ({type(error).__name__}); check "
            "the cluster's logs",
            worker=group,
            env_description=self.description,
        )
        failure.__cause__ = error
        return failure

    def restart(self, group: int, start_timeout: float = 120.0) -> None:
        """Replace ``group``'s actor by a new one (the next incarnation) in its bundle;
        a fragment it still owed is dropped."""
        self._pending = {ref: g for ref, g in self._pending.items() if g != group}
        kill_actor(self.actors[group])
        self.incarnations[group] += 1
        self._start(group)
        self._wait_built([group], time.monotonic() + start_timeout, start_timeout)

    def kill(self, group: int) -> None:
        """Kill ``group``'s actor at once (tests and fault drills; :meth:`restart` after)."""
        kill_actor(self.actors[group])

    def close(self) -> None:
        """Kill every actor and remove the placement group (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for actor in self.actors:
            if actor is not None:
                kill_actor(actor)
        self._pending.clear()
        remove_placement_group(self.placement_group)
