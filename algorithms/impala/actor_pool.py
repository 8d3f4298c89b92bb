"""ActorPool: starts, watches and restarts IMPALA actor processes, and routes their slots.

Each actor owns a fixed set of shared-memory slots and its own pipe (see actor.py). The pool
keeps the state of every slot, so none is ever lost or handed out twice:

- ``with_actor``: the actor may fill it (it was in its start list or sent back "free");
- ``full``: the actor reported it filled; it waits in ``full_queue`` for the learner;
- ``learner``: a learner thread took it and copies it out; ``release()`` returns it.

``poll()`` (called in a loop by the training thread) reads the pipes and the process
sentinels in one ``multiprocessing.connection.wait`` with a timeout, so a dead actor is seen
at once. A dead actor's reported unrolls stay valid; the slots it was filling are given to
its replacement (its partial unroll is counted in ``abandoned_unrolls``). Past
``max_actor_restarts`` deaths in all, ``poll()`` raises ActorDiedError (or
ActorTimeoutError for an actor that delivered nothing within its deadline).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait as wait_for

import torch
import torch.multiprocessing as mp

from batchenv.errors import RemoteTraceback

from .actor import ActorSpec, run_actor
from .config import ImpalaConfig
from .errors import ActorDiedError, ActorTimeoutError

__all__ = ["ActorPool", "actor_context", "prestart"]

logger = logging.getLogger(__name__)

WITH_ACTOR, FULL, LEARNER = "with_actor", "full", "learner"


_PRELOAD = ["torch", "gymnasium", "batchenv.algorithms.impala.actor"]


_ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def actor_context():
    """The multiprocessing context actors start from: a fork server that has imported torch
    and the actor code, so that starting (or restarting) an actor takes milliseconds. The
    server starts with one BLAS/OpenMP thread (actors share the cores with the learner)."""
    from multiprocessing import forkserver

    context = mp.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    saved = {key: os.environ.get(key) for key in _ONE_THREAD}
    os.environ.update(_ONE_THREAD)
    try:
        forkserver.ensure_running()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return context


def prestart() -> None:
    """Start the fork server and multiprocessing's resource tracker now (both live as long
    as this process), e.g. before timing anything or before counting child processes."""
    from multiprocessing import resource_tracker

    actor_context()
    resource_tracker.ensure_running()


class _ActorHandle:
    """One actor slot-owner: its process of the moment, pipe, slots and counters."""

    def __init__(self, index: int, slots: list[int]):
        self.index = index
        self.slots = slots
        self.incarnation = -1
        self.process = None
        self.conn = None
        self.alive = False
        self.started_at = 0.0
        self.busy_since: float | None = None  # holds enough slots to fill an unroll
        self.delivered = 0  # unrolls of this incarnation
        self.error_text: str | None = None


class ActorPool:
    """Actor processes with their slots (see the module docstring).

    Args:
        config: the run's settings (actors, envs per actor, timeouts, restart budget).
        constructor: the env constructor every env of every actor uses.
        env_description: names the env in messages.
        model: the shared-memory actor model (``share_memory()`` already called).
        slots: the shared-memory slot tensors (``actor.allocate_slots``).
    """

    def __init__(
        self,
        config: ImpalaConfig,
        constructor: Callable,
        env_description: str,
        model: torch.nn.Module,
        slots: dict[str, torch.Tensor],
    ):
        self.config = config
        self.constructor = constructor
        self.env_description = env_description
        self.model = model
        self.slots = slots
        self.full_queue: queue.Queue[int] = queue.Queue()
        per_actor = config.num_slots_per_actor
        self.actors = [
            _ActorHandle(k, list(range(k * per_actor, (k + 1) * per_actor)))
            for k in range(config.num_actors)
        ]
        self.owner = {slot: actor.index for actor in self.actors for slot in actor.slots}
        self.state = {slot: WITH_ACTOR for slot in self.owner}
        self.lock = threading.Lock()  # guards state, the actors' fields and pipe sends
        self.context = actor_context()
        self.restarts = 0
        self.produced_unrolls = 0
        self.abandoned_unrolls = 0
        self.closed = False

    # ---- starting and stopping ----------------------------------------------------------

    def start(self) -> None:
        """Start every actor."""
        with self.lock:
            for actor in self.actors:
                self._start(actor)

    def _start(self, actor: _ActorHandle) -> None:
        config = self.config
        actor.incarnation += 1
        free = [slot for slot in actor.slots if self.state[slot] == WITH_ACTOR]
        spec = ActorSpec(
            index=actor.index,
            incarnation=actor.incarnation,
            constructors=(self.constructor,) * config.envs_per_actor,
            env_workers=config.env_workers,
            unroll_length=config.unroll_length,
            seed=config.actor_seed(actor.index, actor.incarnation),
            slots=tuple(free),
            parent_pid=os.getpid(),
            actor_timeout=config.actor_timeout,
            precision=config.precision,
        )
        parent_conn, child_conn = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=run_actor,
            args=(spec, self.model, self.slots, child_conn),
            name=f"impala-actor-{actor.index}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        actor.process, actor.conn, actor.alive = process, parent_conn, True
        actor.started_at = time.monotonic()
        actor.busy_since = actor.started_at if len(free) >= config.envs_per_actor else None
        actor.delivered = 0
        actor.error_text = None

    def close(self, grace: float = 0.5) -> None:
        """Stop every actor: ask, wait ``grace`` seconds, then kill; reap them all."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            for actor in self.actors:
                if actor.alive:
                    try:
                        actor.conn.send(("stop",))
                    except OSError:
                        pass
        deadline = time.monotonic() + grace
        for actor in self.actors:
            if actor.process is not None:
                actor.process.join(max(0.0, deadline - time.monotonic()))
        for actor in self.actors:
            process = actor.process
            if process is not None and process.is_alive():
                process.kill()
            if process is not None:
                process.join(5.0)
            if actor.conn is not None:
                actor.conn.close()
            actor.alive = False

    def pids(self) -> list[int]:
        """Process ids of the live actor processes."""
        return [a.process.pid for a in self.actors if a.alive and a.process is not None]

    # ---- slots --------------------------------------------------------------------------

    def take(self, count: int, timeout: float, stop: threading.Event) -> list[int] | None:
        """``count`` full slots (marked ``learner``), or None when ``stop`` is set first.

        Raises TimeoutError when ``timeout`` seconds pass without completing the batch.
        """
        taken: list[int] = []
        deadline = time.monotonic() + timeout
        while len(taken) < count:
            if stop.is_set():
                self.release(taken, refill=False)
                return None
            try:
                slot = self.full_queue.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    self.release(taken, refill=False)
                    raise TimeoutError(
                        f"no full unroll for {timeout:.0f} s while gathering a batch of {count} "
                        f"(have {len(taken)}); actors alive: {self.pids()}"
                    ) from None
                continue
            with self.lock:
                if self.state[slot] != FULL:
                    raise AssertionError(f"slot {slot} queued twice (state {self.state[slot]})")
                self.state[slot] = LEARNER
            taken.append(slot)
        return taken

    def release(self, slots: list[int], refill: bool = True) -> None:
        """Give slots back to their actors (``refill=False``: back onto the full queue)."""
        if not slots:
            return
        if not refill:
            with self.lock:
                for slot in slots:
                    self.state[slot] = FULL
            for slot in slots:
                self.full_queue.put(slot)
            return
        by_actor: dict[int, list[int]] = {}
        with self.lock:
            for slot in slots:
                if self.state[slot] != LEARNER:
                    raise AssertionError(f"slot {slot} released in state {self.state[slot]}")
                self.state[slot] = WITH_ACTOR
                by_actor.setdefault(self.owner[slot], []).append(slot)
            for index, returned in by_actor.items():
                actor = self.actors[index]
                if actor.alive and not self.closed:
                    self._mark_busy(actor)
                    try:
                        actor.conn.send(("free", returned))
                    except OSError:
                        pass  # it just died: poll() restarts it with these slots

    def _mark_busy(self, actor: _ActorHandle) -> None:
        held = sum(1 for slot in actor.slots if self.state[slot] == WITH_ACTOR)
        if held >= self.config.envs_per_actor and actor.busy_since is None:
            actor.busy_since = time.monotonic()

    # ---- watching -----------------------------------------------------------------------

    def poll(self, timeout: float) -> None:
        """Read reports and deaths for up to ``timeout`` seconds; restart or raise."""
        live = [a for a in self.actors if a.alive]
        handles = {}
        for actor in live:
            handles[actor.conn] = actor
            handles[actor.process.sentinel] = actor
        ready = wait_for(list(handles), timeout) if handles else []
        for obj in ready:
            actor = handles[obj]
            if actor.alive and obj is actor.conn:
                self._drain(actor)
        for obj in ready:
            actor = handles[obj]
            if actor.alive and obj is not actor.conn:
                self._died(actor, why="exited")
        now = time.monotonic()
        for actor in self.actors:
            if not actor.alive or actor.busy_since is None:
                continue
            limit = self.config.start_timeout if actor.delivered == 0 else self.config.actor_timeout
            if now - actor.busy_since > limit:
                actor.process.kill()
                actor.process.join(5.0)
                self._died(actor, why=f"delivered no unroll for {limit:.0f} s and was killed")

    def _drain(self, actor: _ActorHandle) -> None:
        try:
            while actor.conn.poll(0):
                self._handle(actor, actor.conn.recv())
        except (EOFError, OSError):
            pass  # the process is gone; its sentinel reports it

    def _handle(self, actor: _ActorHandle, message: tuple) -> None:
        if message[0] == "full":
            with self.lock:
                for slot in message[1]:
                    if self.state[slot] != WITH_ACTOR or self.owner[slot] != actor.index:
                        raise AssertionError(
                            f"actor {actor.index} reported slot {slot} in state {self.state[slot]}"
                        )
                    self.state[slot] = FULL
                self.produced_unrolls += len(message[1])
                actor.delivered += 1
                actor.busy_since = None
                self._mark_busy(actor)
            for slot in message[1]:
                self.full_queue.put(slot)
        elif message[0] == "error":
            actor.error_text = message[1]

    def _died(self, actor: _ActorHandle, why: str) -> None:
        self._drain(actor)  # unrolls it finished before dying still count
        actor.process.join(1.0)
        exitcode = actor.process.exitcode
        with self.lock:
            actor.alive = False
            actor.conn.close()
            abandoned = sum(1 for slot in actor.slots if self.state[slot] == WITH_ACTOR)
            self.abandoned_unrolls += min(abandoned, self.config.envs_per_actor)
        message = (
            f"actor {actor.index} (env {self.env_description}, incarnation "
            f"{actor.incarnation}, pid {actor.process.pid}) {why} with exit code {exitcode}"
        )
        if actor.error_text:
            message += f"; it raised: {actor.error_text.strip().splitlines()[-1]}"
        if self.restarts >= self.config.max_actor_restarts:
            kind = ActorTimeoutError if "delivered no unroll" in why else ActorDiedError
            extra = {"restarts": self.restarts} if kind is ActorDiedError else {}
            if kind is ActorDiedError:
                extra["exitcode"] = exitcode
            error = kind(
                f"{message}; {self.restarts} restarts already spent "
                f"(max_actor_restarts={self.config.max_actor_restarts}), so training stops",
                worker=actor.index,
                env_description=self.env_description,
                **extra,
            )
            if actor.error_text:
                raise error from RemoteTraceback(actor.error_text)
            raise error
        self.restarts += 1
        logger.warning(
            "%s; restarting it (restart %d of %d)",
            message,
            self.restarts,
            self.config.max_actor_restarts,
        )
        with self.lock:
            if not self.closed:
                self._start(actor)

    def counts(self) -> dict[str, int]:
        """Slots by state plus the produced / abandoned unroll counters."""
        with self.lock:
            states = list(self.state.values())
            return {
                "with_actor": states.count(WITH_ACTOR),
                "full": states.count(FULL),
                "learner": states.count(LEARNER),
                "produced_unrolls": self.produced_unrolls,
                "abandoned_unrolls": self.abandoned_unrolls,
                "restarts": self.restarts,
            }
