"""IMPALA's asynchronous mode: TorchBeast PolyBeast's design in one process, without gRPC.

Actors never run the model. Each actor thread drives ``envs_per_actor`` envs living in a
batchenv worker group (``env_workers`` processes, at least one) through batchenv's
asynchronous send/recv: it receives the first ``env_batch_size`` of its envs to finish
(half of them by default, so the workers step one half while the model runs on the other,
and a slow env stalls only itself) and hands their observations to a C++
``DynamicBatcher`` (batcher.so): one or more inference threads run the acting model on
whatever steps of all actors are pending, as one batch, on ``config.device``. Each env
keeps its own ``[T + 1]`` unroll (the row layout of actor.py), enqueued in a C++
``BatchingQueue`` as soon as it is full; learner threads take ``[T + 1, B]``
batches from it, take V-trace steps (learner.py) and publish the weights to the acting model.

Every wait has a deadline or is woken on shutdown: env steps and resets time out after
``actor_timeout`` (``start_timeout`` for starting the workers), ``compute()`` and
``enqueue()`` wake with ClosedBatcherError when training stops. An actor whose env group
raises, dies or hangs gets a fresh group (counted in ``actor_restarts``, its unroll in
progress in ``abandoned_unrolls``); past ``max_actor_restarts`` training stops with
ActorDiedError / ActorTimeoutError naming the actor, its env and the worker's exit code.
Unrolls still queued when training stops are counted in ``leftover_unrolls``.

    >>> from batchenv.algorithms.impala.config import ImpalaConfig
    >>> config = ImpalaConfig(env="CartPole-v1", mode="async", num_actors=2,
    ...                       envs_per_actor=16, total_steps=20_000)
    >>> result = AsyncTrainer(config).train()          # doctest: +SKIP
    >>> result.steps >= 20_000                         # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from batchenv.errors import EnvWorkerError, WorkerTimeoutError

from .actor import slot_specs, write_row
from .batcher import (
    BatcherError,
    BatchingQueue,
    ClosedBatcherError,
    DynamicBatcher,
)
from .envs import AsyncWorkerGroup
from .errors import ActorDiedError, ActorTimeoutError
from .models import forward_in
from .trainer import Trainer, build_model

__all__ = ["AsyncTrainer"]

logger = logging.getLogger(__name__)

_JOIN_SECONDS = 5.0
_AGENT_KEYS = ("action", "policy_logits", "baseline")


@dataclass
class _Actor:
    """One actor thread and the env group it drives at the moment."""

    index: int
    incarnation: int = 0
    thread: threading.Thread | None = None
    envs: AsyncWorkerGroup | None = None
    in_progress: bool = False  # an unroll is being assembled (abandoned if the envs fail)
    pids: list[int] = field(default_factory=list)


class AsyncTrainer(Trainer):
    """Train IMPALA with actor threads, dynamically batched inference and a learner queue.

    Takes the arguments of :class:`~batchenv.algorithms.impala.trainer.Trainer`;
    ``config.mode`` is not consulted (this class is the asynchronous mode).
    """

    def __init__(self, config, env=None, **options):
        super().__init__(config, env, **options)
        self.acting_model = build_model(config, self.observation_shape, self.num_actions)
        self.acting_model.load_state_dict(self.model.state_dict())
        self.acting_model.to(self.device)
        self.num_core = len(self.model.initial_state(1))
        specs = slot_specs(
            self.observation_shape,
            torch.from_numpy(np.zeros(0, self.observation_space.dtype)).dtype,
            self.num_actions,
            config.unroll_length,
        )
        del specs["unroll_id"]
        self._unroll_specs = specs
        self.batcher: DynamicBatcher | None = None
        self.learner_queue: BatchingQueue | None = None
        self.actors = [_Actor(k) for k in range(config.num_actors)]
        self._inference_threads: list[threading.Thread] = []
        self._counts_lock = threading.Lock()  # guards the counters below
        self.restarts = 0
        self.produced_unrolls = 0
        self.abandoned_unrolls = 0
        self.leftover_unrolls = 0
        self.inference_batches = 0
        self.inference_rows = 0
        self._shut = False

    # ---- starting, watching, stopping ---------------------------------------------------

    def _start(self) -> None:
        config = self.config
        self.batcher = DynamicBatcher(
            batch_dim=1,
            minimum_batch_size=1,
            maximum_batch_size=config.num_actors * config.envs_per_actor,
            timeout_ms=100,
        )
        self.learner_queue = BatchingQueue(
            batch_dim=1,
            minimum_batch_size=config.batch_size,
            maximum_batch_size=config.batch_size,
            maximum_queue_size=config.learner_queue_size,
        )
        self._inference_threads = [
            threading.Thread(target=self._inference_thread, name=f"inference-{i}", daemon=True)
            for i in range(config.num_inference_threads)
        ]
        for thread in self._inference_threads:
            thread.start()
        for actor in self.actors:
            actor.thread = threading.Thread(
                target=self._actor_thread, args=(actor,), name=f"actor-{actor.index}", daemon=True
            )
            actor.thread.start()

    def _watch(self, timeout: float) -> None:
        # Failures are reported by the threads themselves (_fail); this only waits.
        self._stop.wait(timeout)

    def _wake(self) -> None:
        if self.learner_queue is not None:
            dropped = self.learner_queue.close(drop=True)
            with self._counts_lock:
                self.leftover_unrolls += dropped
        if self.batcher is not None:
            self.batcher.close()

    def _shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        self._wake()
        deadline = time.monotonic() + _JOIN_SECONDS
        for actor in self.actors:
            if actor.thread is not None:
                actor.thread.join(max(0.0, deadline - time.monotonic()))
        # An actor still waiting on a hung env: kill its workers, so that its wait ends.
        for actor in self.actors:
            if actor.thread is not None and actor.thread.is_alive():
                for pid in actor.pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                actor.thread.join(_JOIN_SECONDS)
        for thread in self._inference_threads:
            thread.join(_JOIN_SECONDS)

    def counts(self) -> dict[str, int]:
        with self._counts_lock:
            return {
                "restarts": self.restarts,
                "produced_unrolls": self.produced_unrolls,
                "leftover_unrolls": self.leftover_unrolls,
                "abandoned_unrolls": self.abandoned_unrolls,
            }

    def actor_pids(self, index: int) -> list[int]:
        return list(self.actors[index].pids)

    def _publish(self) -> None:
        with torch.no_grad():
            for target, source in zip(self.acting_model.parameters(), self.model.parameters()):
                target.copy_(source)

    # ---- inference threads ----------------------------------------------------------------

    def _inference_thread(self) -> None:
        device = self.device
        try:
            for batch in self.batcher:
                with batch:
                    inputs = batch.get_inputs()
                    core = tuple(
                        torch.from_numpy(inputs.pop(f"core_{k}")).to(device)
                        for k in range(self.num_core)
                    )
                    tensors = {
                        key: torch.from_numpy(value).to(device) for key, value in inputs.items()
                    }
                    with self._publish_lock, torch.inference_mode():
                        outputs, core = forward_in(
                            self.config.precision, self.acting_model, tensors, core
                        )
                    result = {key: outputs[key].cpu().numpy() for key in _AGENT_KEYS}
                    for k, state in enumerate(core):
                        result[f"core_{k}"] = state.cpu().numpy()
                    batch.set_outputs(result)
                with self._counts_lock:
                    self.inference_batches += 1
                    self.inference_rows += len(batch)
        except BaseException as error:  # reported by the training thread
            if not self._stop.is_set():
                self._fail(error)

    # ---- actor threads ------------------------------------------------------------------

    def _actor_thread(self, actor: _Actor) -> None:
        config = self.config
        try:
            while not self._stop.is_set():
                envs = None
                try:
                    envs = AsyncWorkerGroup(
                        self.constructor,
                        config.envs_per_actor,
                        max(1, config.env_workers),
                        config.actor_env_batch_size(),
                        timeout=config.actor_timeout,
                        start_timeout=config.start_timeout,
                    )
                    actor.envs, actor.pids = envs, envs.pids()
                    self._act(actor, envs)
                    return
                except EnvWorkerError as error:
                    if self._stop.is_set():
                        return
                    self._restart(actor, error)
                finally:
                    actor.envs = None
                    if envs is not None:
                        envs.close()
        except ClosedBatcherError:
            return  # training stops
        except BaseException as error:  # reported by the training thread
            if not (self._stop.is_set() and isinstance(error, BatcherError)):
                self._fail(error)

    def _restart(self, actor: _Actor, error: EnvWorkerError) -> None:
        """Count the failure of ``actor``'s envs and let it start over, or raise past the
        restart budget."""
        config = self.config
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        message = (
            f"actor {actor.index} (env {self.env_description}, incarnation "
            f"{actor.incarnation}) lost its envs: {reason}"
        )
        with self._counts_lock:
            if actor.in_progress:
                self.abandoned_unrolls += config.envs_per_actor
                actor.in_progress = False
            if self.restarts >= config.max_actor_restarts:
                budget = (
                    f"; {self.restarts} restarts already spent "
                    f"(max_actor_restarts={config.max_actor_restarts}), so training stops"
                )
                details = {"worker": actor.index, "env_description": self.env_description}
                if isinstance(error, WorkerTimeoutError):
                    raise ActorTimeoutError(message + budget, **details) from error
                raise ActorDiedError(
                    message + budget,
                    exitcode=getattr(error, "exitcode", None),
                    restarts=self.restarts,
                    **details,
                ) from error
            self.restarts += 1
            actor.incarnation += 1
        logger.warning(
            "%s; restarting it (restart %d of %d)",
            message,
            self.restarts,
            config.max_actor_restarts,
        )

    def _act(self, actor: _Actor, envs: AsyncWorkerGroup) -> None:
        """Run inference on whichever of ``envs`` finish first and enqueue each env's
        unroll as soon as it has T steps, until training stops.

        Every env keeps its own place in its own unroll: env j writes row ``row[j]`` of
        ``unroll[key][j]`` when its results arrive, and at row T its unroll goes to the
        learner queue while row T becomes row 0 of the next, as in MonoBeast.
        """
        config = self.config
        num, T = config.envs_per_actor, config.unroll_length
        unroll = {
            key: torch.zeros((num, *shape), dtype=dtype).numpy()
            for key, (shape, dtype) in self._unroll_specs.items()
        }
        agent_out = {key: np.zeros_like(unroll[key][:, 0]) for key in _AGENT_KEYS}
        row = np.zeros(num, np.int64)  # the row each env wrote last
        started = np.zeros(num, np.bool_)  # row 0 written since the reset
        sequence = np.zeros(num, np.int64)  # unrolls enqueued per env
        episode_return = np.zeros(num, np.float32)
        episode_step = np.zeros(num, np.int32)
        last_action = np.zeros(num, np.int64)
        core = [state.cpu().numpy() for state in self.model.initial_state(num)]
        initial_core = [state.copy() for state in core]
        actor.in_progress = True
        envs.reset(seed=config.actor_seed(actor.index, actor.incarnation))
        while not self._stop.is_set():
            ids, observ, reward, done = envs.recv()
            fresh = ~started[ids]
            if fresh.any():  # the first frame after the reset: done, as in MonoBeast
                done = done | fresh
            t = np.where(fresh, 0, row[ids] + 1)
            episode_return[ids] += reward
            episode_step[ids] += ~fresh
            write_row(
                unroll, ids, t, observ, reward, done, episode_return[ids], episode_step[ids],
                last_action[ids], {key: value[ids][None] for key, value in agent_out.items()},
            )  # fmt: skip
            finished = ids[done & ~fresh]
            episode_return[finished] = 0.0
            episode_step[finished] = 0
            row[ids], started[ids] = t, True
            for j in ids[t == T].tolist():
                self._enqueue(actor, unroll, j, sequence[j] * num + j, initial_core)
                for value in unroll.values():
                    value[j, 0] = value[j, T]
                for state, initial in zip(core, initial_core):
                    initial[:, j] = state[:, j]
                row[j], sequence[j] = 0, sequence[j] + 1
            inputs = {
                "frame": observ[None],
                "reward": reward[None],
                "done": done[None],
                "last_action": last_action[ids][None],
            }
            for k, state in enumerate(core):
                inputs[f"core_{k}"] = state[:, ids]
            agent = self.batcher.compute(inputs)
            for k, state in enumerate(core):
                state[:, ids] = agent[f"core_{k}"]
            for key in _AGENT_KEYS:
                agent_out[key][ids] = agent[key][0]
            last_action[ids] = agent["action"][0]
            envs.send(last_action[ids], ids)

    def _enqueue(self, actor: _Actor, unroll: dict, j: int, number: int, initial_core) -> None:
        """Put env ``j``'s finished unroll on the learner queue."""
        item = {key: value[j][:, None] for key, value in unroll.items()}
        item["unroll_id"] = np.array([[[actor.index, actor.incarnation, number]]], np.int64)
        for k, state in enumerate(initial_core):
            item[f"core_{k}"] = np.ascontiguousarray(state[:, j : j + 1])
        self.learner_queue.enqueue(item)
        with self._counts_lock:
            self.produced_unrolls += 1

    # ---- learner threads ----------------------------------------------------------------

    def _next_batch(self):
        try:
            batch = next(self.learner_queue)
        except StopIteration:
            return None
        tensors = {key: torch.from_numpy(value) for key, value in batch.items()}
        unroll_ids = tensors.pop("unroll_id")[0]
        core = tuple(tensors.pop(f"core_{k}") for k in range(self.num_core))
        if unroll_ids.shape[0] != self.config.batch_size:  # the rest, drained on close
            with self._counts_lock:
                self.leftover_unrolls += int(unroll_ids.shape[0])
            return None
        return tensors, core, unroll_ids
