"""RayTransport: a batch's rows split into worker groups, each group a Ray actor.

    >>> from batchenv.make import start_ray_workers        # a BatchEnv over this transport
    >>> env = start_ray_workers([lambda: gymnasium.make("CartPole-v1")] * 8, num_workers=2)
    >>> observ, infos = env.reset(seed=0)      # the same BatchEnv API as batchenv.make

What runs where: :func:`start_ray_transport` reserves a placement group of ``num_workers``
bundles of ``num_cpus_per_worker`` CPUs (``strategy`` PACK or SPREAD over the cluster's
nodes) and starts one Ray actor per bundle. Group ``g`` owns a contiguous slice of the
batch's rows. Inside its actor the slice is an ordinary shared-memory group
(:func:`batchenv.workers.groups.start_transport`): with fewer than 2 CPUs per group its
envs are stepped in the actor's own process (``parent_share=1``, no further process: the
cheapest round trip); with ``C >= 2`` CPUs the actor drives ``C`` worker processes of its
own over shared memory. The constructors reach the actors with the code of the user's own
modules (:func:`batchenv.workers.ray_cluster.ship`), so an env class from a module that only
the driver can import builds on any node.

A step sends each group its slice of the actions (one actor call per group, the refs kept)
and waits with ``ray.wait`` until the BatchEnv's deadline. A group's finished episodes are
reset ahead in its actor and their first observations come back with the step, so
``reset(indices)`` of finished rows costs no round trip (as with ``batchenv.make``).

Failures are the local backend's typed errors, naming the group as the ``worker``: a dead
actor or node is a :class:`~batchenv.errors.WorkerDiedError`, a group that misses the
deadline a :class:`~batchenv.errors.WorkerTimeoutError` (its actor is killed first), an env
exception an :class:`~batchenv.errors.EnvWorkerError` that is also an instance of the env's
exception type, the remote traceback chained. After ``close()`` or any error no actor of
the batch is left and its placement group is removed.
"""

from __future__ import annotations

import os
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from batchenv import spaces as batch_spaces
from batchenv.errors import (
    EnvWorkerError,
    RemoteTraceback,
    WorkerDiedError,
    WorkerTimeoutError,
    with_env_type,
)
from batchenv.workers.autoreset import IDLE
from batchenv.workers.external_process import (
    DEFAULT_START_TIMEOUT,
    describe_constructor,
    remaining,
)
from batchenv.workers.protocol import remote_cause
from batchenv.workers.ray_cluster import (
    STRATEGIES,
    connect,
    import_ray,
    kill_actor,
    remove_placement_group,
    ship,
    wait_placed,
)
from batchenv.workers.transport import Results, RowCalls, check_same_spaces

# ---------------------------------------------------------------------- inside the actor


class GroupHost:
    """One worker group's envs, inside its Ray actor: a local shared-memory transport.

    Every method returns ``("ok", ...)`` or the failure as plain data (:func:`_failure`),
    so the driver raises the local backend's typed errors rather than Ray's wrappers.
    """

    def __init__(self, constructors: bytes, processes: int, timeout, start_timeout: float):
        self.constructors = constructors  # as ray_cluster.ship pickled them
        self.processes = processes
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.transport = None

    def build(self):
        """Build the envs; returns their spaces and where this actor runs."""
        import ray

        from batchenv.workers.groups import start_transport

        try:
            self.transport = start_transport(
                pickle.loads(self.constructors),
                num_workers=self.processes or None,
                parent_share=None if self.processes else 1.0,
                timeout=self.timeout,
                start_timeout=self.start_timeout,
                pin_workers=False,
                reset_ahead=True,
            )
        except BaseException as error:
            return _failure(error)
        spaces = (self.transport.observation_space, self.transport.action_space)
        return "ok", spaces, ray.get_runtime_context().get_node_id(), os.getpid()

    def run(self, request: bytes) -> bytes:
        """One transport call for this group's (local) rows, ``(kind, rows, actions,
        reset_args, command, step)`` pickled; after a step, the rows whose episode ended
        come back with their reset-ahead observations and infos. (One pickled argument
        and reply: Ray serializes each argument on its own, ~0.3 ms more per call.)"""
        try:
            kind, rows, actions, reset_args, command, step = pickle.loads(request)
            transport = self.transport
            transport.start(kind, rows, actions, reset_args, command=command, step=step)
            results = transport.finish(None, step)
            ahead = None
            if kind == "step":
                done = np.flatnonzero(results.terminated | results.truncated)
                if len(done):
                    ahead = (done, *transport.take_ready(done))
            return _dumps(("ok", results, ahead))
        except BaseException as error:
            return pickle.dumps(_failure(error), protocol=5)

    def on_row(self, method: str, slot: int, *args):
        """``call``, ``get_attr`` or ``set_attr`` on the env of local row ``slot``."""
        try:
            return "ok", getattr(self.transport, method)(slot, *args)
        except BaseException as error:
            return _failure(error)

    def close(self, timeout: float) -> list[str]:
        return self.transport.close(timeout) if self.transport is not None else []


def _failure(error: BaseException) -> tuple:
    """An exception raised in the actor as plain data: ``("error", kind, type_name,
    message, pickled_exception_or_None, traceback_text, local_env_index)``; ``kind`` is
    "died" or "timeout" for a worker process of the group, else "error"."""
    kind = "error"
    if isinstance(error, WorkerDiedError):
        kind = "died"
    elif isinstance(error, WorkerTimeoutError):
        kind = "timeout"
    env_index = error.env_index if isinstance(error, EnvWorkerError) else None
    cause = error
    if kind == "error" and isinstance(error, EnvWorkerError) and error.__cause__ is not None:
        cause = error.__cause__  # the env's own exception
    if isinstance(cause, RemoteTraceback):
        text = cause.text
    elif isinstance(cause.__cause__, RemoteTraceback):  # from a worker process of the group
        text = cause.__cause__.text
    else:
        text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    payload = None
    if kind == "error" and not isinstance(cause, RemoteTraceback):
        try:
            payload = _dumps(cause)
        except Exception:
            payload = None
    type_name = getattr(error, "remote_type", "") or type(cause).__name__
    return "error", kind, type_name, str(cause), payload, text, env_index


def _dumps(value) -> bytes:
    """Plain pickle, or Ray's cloudpickle where plain pickle cannot name a class: one
    that came by value with the constructors (``ray_cluster.ship``). The driver loads
    such a class as its own original (cloudpickle tracks the classes it sent)."""
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:
        from ray import cloudpickle

        return cloudpickle.dumps(value, protocol=5)


# ---------------------------------------------------------------------- the driver


class RayTransport(RowCalls):
    """A BatchEnv's rows over Ray actors, one worker group (contiguous rows) each.

    Args:
        actors: started :class:`GroupHost` actors, one per group, built.
        groups: the batch rows of each group (contiguous, in order).
        placement_group: the placement group the actors run in (removed at the end).
        spaces: each group's ``(observation_space, action_space)``.
        description: the env constructor, for error messages.
        nodes: the Ray node id of each actor.
        timeout: deadline of ``call``/``get_attr``/``set_attr`` (None: none).
    """

    reset_ahead = True

    def __init__(
        self,
        actors: list,
        groups: list[np.ndarray],
        placement_group,
        spaces: list[tuple],
        description: str,
        nodes: list[str],
        timeout: float | None = None,
    ):
        import ray

        self._ray = ray
        self.actors = actors
        self.groups = [np.asarray(rows, np.int64) for rows in groups]
        self.placement_group = placement_group
        self.description = description
        self.nodes = nodes
        self.timeout = timeout
        check_same_spaces(spaces, names=[f"worker group {g}" for g in range(len(groups))])
        self.observation_space, self.action_space = spaces[0]
        self.num_envs = sum(len(rows) for rows in self.groups)
        self.bounds = [(int(rows[0]), int(rows[-1]) + 1) for rows in self.groups]
        self.owner = np.concatenate([np.full(len(r), g) for g, r in enumerate(self.groups)])
        # The last results of every row (rows a call leaves alone keep theirs, as in a
        # shared block), and the rows reset ahead in their actors.
        self.observ = batch_spaces.allocate(self.observation_space, self.num_envs)
        self.reward = np.zeros(self.num_envs, np.float64)
        self.terminated = np.zeros(self.num_envs, bool)
        self.truncated = np.zeros(self.num_envs, bool)
        self.ready = np.zeros(self.num_envs, bool)
        self.ahead = batch_spaces.allocate(self.observation_space, self.num_envs)
        self.ahead_infos: dict[int, Any] = {}
        self._pending: list[tuple[int, Any, np.ndarray]] = []
        self._kind, self._rows, self._step = "step", np.zeros(0, np.int64), 0
        self._from_ahead = np.zeros(0, bool)
        self._ended = False

    # ------------------------------------------------------------------ lockstep

    def start(
        self,
        kind: str,
        rows: np.ndarray,
        actions: list[np.ndarray] | None,
        reset_args: dict | None,
        command: np.ndarray | None = None,
        step: int | None = None,
    ) -> None:
        """Send each group owning some of ``rows`` its share, without waiting."""
        self._kind, self._rows = kind, rows
        self._step = 0 if step is None else int(step)
        self._from_ahead = np.zeros(len(rows), bool)
        if kind == "reset":
            if reset_args is None:
                self._from_ahead = self.ready[rows].copy()
            self.ready[rows] = False
            chosen = rows[~self._from_ahead]
        elif command is not None:
            self.ready[command != IDLE] = False
            chosen = np.flatnonzero(command != IDLE)
        else:
            self.ready[:] = False
            chosen = self._all_rows()
        pending = []
        for group in np.unique(self.owner[chosen]).tolist():
            first, end = self.bounds[group]
            part = slice(first, end)
            if kind == "reset":
                positions = np.flatnonzero((rows >= first) & (rows < end) & ~self._from_ahead)
                local_rows = rows[positions] - first
            else:
                positions, local_rows = np.arange(first, end), np.arange(end - first)
            args = None
            if reset_args:
                args = {r - first: v for r, v in reset_args.items() if first <= r < end}
            request = (
                kind,
                local_rows,
                None if actions is None else [leaf[part] for leaf in actions],
                args,
                None if command is None else command[part],
                step,
            )
            ref = self.actors[group].run.remote(pickle.dumps(request, protocol=5))
            pending.append((group, ref, positions))
        self._pending = pending

    def finish(self, deadline: float | None, step: int) -> Results:
        pending, self._pending = self._pending, []
        replies = {}
        refs = [ref for _, ref, _ in pending]
        ready, late = self._ray.wait(refs, num_returns=len(refs), timeout=remaining(deadline))
        ready = set(ready)  # a dead actor's reply is ready: named before any slow group
        for group, ref, positions in pending:
            if ref in ready:
                replies[group] = (self._get(group, ref, step), positions)
        if late:
            raise self._timed_out([group for group, ref, _ in pending if ref not in ready], step)
        if self._kind == "reset":
            return self._reset_results(replies)
        return self._step_results(replies)

    def _get(self, group: int, ref, step: int):
        """The reply of ``group``; a dead actor or node, or a failure inside the group,
        raises the local backend's typed error."""
        ray = self._ray
        try:
            reply = pickle.loads(ray.get(ref, timeout=0))
        except ray.exceptions.RayError as error:
            raise self._died(group, step, error) from error
        if reply[0] != "ok":
            raise self._remote_error(group, reply, step)
        return reply

    def _step_results(self, replies: dict) -> Results:
        infos: dict[int, Any] = {}
        for group, ((_, results, ahead), _) in replies.items():
            first, end = self.bounds[group]
            for mirror, part in zip(self.observ, results.observ):
                mirror[first:end] = part
            self.reward[first:end] = results.reward
            self.terminated[first:end] = results.terminated
            self.truncated[first:end] = results.truncated
            infos.update({first + row: info for row, info in results.infos.items()})
            if ahead is not None:
                done, observ, raw = ahead
                rows = first + done
                self.ready[rows] = True
                for mirror, part in zip(self.ahead, observ):
                    mirror[rows] = part
                for row in rows.tolist():
                    self.ahead_infos.pop(row, None)
                if raw:
                    self.ahead_infos.update({first + r: info for r, info in raw.items() if info})
        return Results(
            [leaf.copy() for leaf in self.observ],
            self.reward.copy(),
            self.terminated.copy(),
            self.truncated.copy(),
            infos,
        )

    def _reset_results(self, replies: dict) -> Results:
        rows, from_ahead = self._rows, self._from_ahead
        observ = batch_spaces.allocate(self.observation_space, len(rows))
        infos: dict[int, Any] = {}
        if from_ahead.any():
            taken = rows[from_ahead]
            for out, ahead in zip(observ, self.ahead):
                out[from_ahead] = ahead[taken]
            for row in taken.tolist():
                infos[row] = self.ahead_infos.pop(row, {})
        for group, ((_, results, _), positions) in replies.items():
            first, _ = self.bounds[group]
            reset_rows = rows[positions]
            for out, mirror, part in zip(observ, self.observ, results.observ):
                out[positions] = part
                mirror[reset_rows] = part
            self.reward[reset_rows] = 0.0
            self.terminated[reset_rows] = self.truncated[reset_rows] = False
            infos.update({first + row: info for row, info in results.infos.items()})
        return Results(observ, infos=infos)

    def take_ready(self, rows: np.ndarray):
        ready = self.ready
        if not len(rows) or not ready[rows].all():
            return None
        ready[rows] = False
        kept = self.ahead_infos
        raw = {row: kept.pop(row, {}) for row in rows.tolist()} if kept else None
        return [ahead[rows] for ahead in self.ahead], raw

    def _all_rows(self) -> np.ndarray:
        return np.arange(self.num_envs)

    # ------------------------------------------------------------------ errors

    def _where(self, group: int, env_index: int | None = None) -> str:
        first, end = self.bounds[group]
        env = f"envs {first}-{end - 1}" if env_index is None else f"env {env_index}"
        return f"worker group {group} ({self.description}, {env})"

    def _died(self, group: int, step: int, cause: BaseException) -> WorkerDiedError:
        self._kill([group])
        first, end = self.bounds[group]
        return WorkerDiedError(
            f"{self._where(group)} died during {self._kind} at step {step}: its Ray actor "
            f"or node is gone ({type(cause).__name__}); create a new BatchEnv",
            worker=group,
            env_index=first if end - first == 1 else None,
            step=step,
            env_description=self.description,
        )

    def _timed_out(self, groups: list[int], step: int) -> WorkerTimeoutError:
        self._kill(groups)
        slow = tuple(int(r) for group in groups for r in self.groups[group])
        return WorkerTimeoutError(
            f"{self._where(groups[0])} did not answer {self._kind} within the deadline at "
            f"step {step}; its Ray actor was killed (slow groups: {groups})",
            worker=groups[0],
            env_index=slow[0] if len(slow) == 1 else None,
            env_indices=slow,
            step=step,
            env_description=self.description,
        )

    def _remote_error(self, group: int, reply: tuple, step: int, what: str | None = None):
        """The typed error for a failure inside ``group``'s actor, remote traceback chained."""
        _, kind, type_name, message, payload, text, local_index = reply
        first, _ = self.bounds[group]
        env_index = None if local_index is None else first + int(local_index)
        where = self._where(group, env_index)
        what = what or self._kind
        fields = dict(
            worker=group, env_index=env_index, step=step, env_description=self.description
        )
        if kind == "died":
            error = WorkerDiedError(
                f"{where}: a worker process died in {what}: {message}", **fields
            )
        elif kind == "timeout":
            error = WorkerTimeoutError(f"{where} timed out in {what}: {message}", **fields)
        else:
            error = EnvWorkerError(
                f"{where} raised {type_name} in {what} at step {step}: {message}",
                remote_type=type_name,
                **fields,
            )
        return chain_remote(error, payload, text)

    # ------------------------------------------------------------------ attributes

    def env_objects(self) -> None:
        return None  # rows are reached through their actors (BatchEnv's row handles)

    def _on_row(self, row: int, method: str, *args):
        self._check_row(row)
        group = int(self.owner[row])
        first, _ = self.bounds[group]
        ref = self.actors[group].on_row.remote(method, row - first, *args)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        ready, _ = self._ray.wait([ref], timeout=remaining(deadline))
        self._kind, step = method, self._step
        if not ready:
            raise self._timed_out([group], step)
        try:
            reply = self._ray.get(ref, timeout=0)
        except self._ray.exceptions.RayError as error:
            raise self._died(group, step, error) from error
        if reply[0] != "ok":
            if reply[6] is None:  # the env of this row raised
                reply = (*reply[:6], row - first)
            raise self._remote_error(group, reply, step, method)
        return reply[1]

    # ------------------------------------------------------------------ shutdown

    def processes(self) -> list:
        return []  # the worker processes live in the actors, on their nodes

    def close(self, timeout: float) -> list[str]:
        """Close every group's envs (within ``timeout``), then end the actors."""
        if self._ended:
            return []
        ray = self._ray
        problems: list[str] = []
        try:
            refs = [actor.close.remote(timeout) for actor in self.actors]
            done, late = ray.wait(refs, num_returns=len(refs), timeout=timeout)
            for ref in done:
                try:
                    problems += ray.get(ref, timeout=0)
                except ray.exceptions.RayError as error:
                    problems.append(f"{type(error).__name__} while closing a worker group")
            if late:
                problems.append(f"{len(late)} worker group(s) did not close within {timeout} s")
        finally:
            self.terminate()
        return problems

    def terminate(self) -> None:
        """Kill every actor and remove the placement group (idempotent)."""
        if self._ended:
            return
        self._ended = True
        self._kill(range(len(self.actors)))
        remove_placement_group(self.placement_group)

    def _kill(self, groups) -> None:
        for group in groups:
            kill_actor(self.actors[group])


def chain_remote(error: EnvWorkerError, payload: bytes | None, text: str) -> BaseException:
    """``error`` caused by the remote exception (re-created from ``payload`` where it can
    be unpickled, else its traceback text), with the remote traceback chained under it;
    also an instance of the env's exception type where possible (``with_env_type``)."""
    error.__cause__ = remote_cause(payload, text)
    return with_env_type(error)


# ---------------------------------------------------------------------- entry point


def start_ray_transport(
    constructors: Sequence[Callable],
    *,
    num_workers: int,
    timeout: float | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    strategy: str = "PACK",
    num_cpus_per_worker: float = 1,
    address: str | None = None,
) -> RayTransport:
    """One env per constructor over ``num_workers`` Ray actors (groups), built; the
    BatchEnv of ``batchenv.make(..., backend="ray")`` and
    :func:`batchenv.make.start_ray_workers` drives it. The arguments are those of
    ``start_ray_workers``."""
    ray = import_ray()
    constructors = list(constructors)
    num_envs = len(constructors)
    if not num_envs:
        raise ValueError("start_ray_workers needs at least one constructor")
    if (
        isinstance(num_workers, bool)
        or not isinstance(num_workers, (int, np.integer))
        or not 1 <= num_workers <= num_envs
    ):
        raise ValueError(
            f"num_workers must be an integer in [1, {num_envs}] (one group per Ray actor), "
            f"got {num_workers!r}"
        )
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if not num_cpus_per_worker > 0:
        raise ValueError(f"num_cpus_per_worker must be > 0, got {num_cpus_per_worker!r}")
    if not ray.is_initialized():
        connect(ray, address)
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    deadline = time.monotonic() + start_timeout
    description = describe_constructor(constructors[0])
    groups = np.array_split(np.arange(num_envs), int(num_workers))
    processes = int(num_cpus_per_worker) if num_cpus_per_worker >= 2 else 0
    bundles = [{"CPU": float(num_cpus_per_worker)} for _ in groups]
    pg = placement_group(bundles, strategy=strategy)
    actors: list = []
    try:
        wait_placed(ray, pg, strategy, deadline, start_timeout, "worker", description)
        host = ray.remote(max_restarts=0, max_task_retries=0)(GroupHost)
        for index, rows in enumerate(groups):
            strategy_of = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)
            actors.append(
                host.options(num_cpus=num_cpus_per_worker, scheduling_strategy=strategy_of).remote(
                    ship([constructors[r] for r in rows]), processes, timeout, start_timeout
                )
            )
        spaces, nodes = _built(ray, actors, groups, description, deadline, start_timeout)
        return RayTransport(actors, groups, pg, spaces, description, nodes, timeout)
    except BaseException:
        for actor in actors:
            kill_actor(actor)
        remove_placement_group(pg)
        raise


def _built(ray, actors, groups, description: str, deadline: float, start_timeout: float):
    """Each group's spaces and node once its envs are built; typed errors otherwise."""
    refs = [actor.build.remote() for actor in actors]
    done, late = ray.wait(refs, num_returns=len(refs), timeout=remaining(deadline))
    if late:
        group = refs.index(late[0])
        raise WorkerTimeoutError(
            f"worker group {group} ({description}) did not build its envs within "
            f"start_timeout={start_timeout} s; raise start_timeout or check the env",
            worker=group,
            env_indices=tuple(int(r) for r in groups[group]),
            step=0,
            env_description=description,
        )
    spaces, nodes = [], []
    for group, ref in enumerate(refs):
        first = int(groups[group][0])
        try:
            reply = ray.get(ref, timeout=0)
        except ray.exceptions.RayError as error:
            raise WorkerDiedError(
                f"worker group {group} ({description}) died while being built: its Ray actor "
                f"is gone ({type(error).__name__}); check the cluster's logs",
                worker=group,
                step=0,
                env_description=description,
            ) from error
        if reply[0] != "ok":
            _, kind, type_name, message, payload, text, local = reply
            env = "" if local is None else f", env {first + int(local)}"
            error = EnvWorkerError(
                f"worker group {group} ({description}{env}) raised {type_name} while being "
                f"built: {message}",
                worker=group,
                env_index=None if local is None else first + int(local),
                step=0,
                env_description=description,
                remote_type=type_name,
            )
            raise chain_remote(error, payload, text)
        spaces.append(reply[1])
        nodes.append(reply[2])
    return spaces, nodes
