"""IMPALA's distributed mode: actors as Ray actors on any node of a Ray cluster (the role
of TorchBeast's PolyBeast, without its gRPC build).

Each of ``num_actors`` actors is a Ray actor (``batchenv.workers.ray_rollouts``) holding
``envs_per_actor`` envs (stepped in the actor, or in ``env_workers`` processes of its own)
and a CPU copy of the model, with one batched forward pass over its envs per step. One
call produces one unroll of ``T + 1`` rows per env (sync mode's layout, actor.py), and the
unrolls reach the driver through Ray's object store. Learner threads on the driver (on
the GPU when there is one) take ``B`` of them, take a V-trace step and publish the new
weights (``ray.put`` once per learner step; an actor loads them before its next unroll).

A dead actor or node, an actor whose env raised, and an actor that delivers no unroll
within ``actor_timeout`` (``start_timeout`` for its first) are restarted in their
placement bundle, within ``max_actor_restarts``; one more failure raises ActorDiedError
(ActorTimeoutError for a timeout). Ray comes from the ``ray`` extra, imported only here.

    >>> config = ImpalaConfig(mode="distributed", num_actors=4, envs_per_actor=8,
    ...                       ray_address="HEAD:6379")
    >>> result = DistributedTrainer(config).train()      # doctest: +SKIP
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time

import numpy as np
import torch

from batchenv.errors import WorkerTimeoutError

from .actor import Unrolling, slot_specs
from .envs import InProcessGroup, WorkerGroup
from .errors import ActorDiedError, ActorTimeoutError
from .trainer import Trainer, build_model

__all__ = ["DistributedTrainer", "ImpalaSampler"]

logger = logging.getLogger(__name__)


class ImpalaSampler:
    """Inside a Ray actor: one IMPALA actor's envs and model, an unroll per ``sample()``."""

    def __init__(
        self,
        config,
        constructor,
        observation_shape: tuple[int, ...],
        observation_dtype: torch.dtype,
        num_actions: int,
        actor: int,
        incarnation: int,
    ):
        torch.set_num_threads(1)
        self.config, self.actor, self.incarnation = config, actor, incarnation
        self.seed = config.actor_seed(actor, incarnation)
        torch.manual_seed(self.seed)
        self.model = build_model(config, observation_shape, num_actions)
        constructors = [constructor] * config.envs_per_actor
        if config.env_workers > 0:
            self.envs = WorkerGroup(constructors, config.env_workers, config.actor_timeout)
        else:
            self.envs = InProcessGroup(constructors)
        core_sizes = tuple(state.shape[-1] for state in self.model.initial_state(1))
        specs = slot_specs(
            observation_shape, observation_dtype, num_actions, config.unroll_length, core_sizes
        )
        num = config.envs_per_actor
        self.views = {
            key: torch.zeros((num, *shape), dtype=dtype).numpy()
            for key, (shape, dtype) in specs.items()
            if key != "unroll_id"
        }
        self.core_keys = sorted(key for key in specs if key.startswith("core_state_"))
        self.unrolling: Unrolling | None = None  # made with the first weights
        self.sequence = 0

    def load_weights(self, state: dict) -> None:
        self.model.load_state_dict(state)

    def sample(self) -> dict[str, np.ndarray]:
        """One unroll per env: ``[envs, T + 1, ...]`` arrays and ``unroll_id`` ``[envs, 3]``."""
        config = self.config
        num = config.envs_per_actor
        if self.unrolling is None:
            self.unrolling = Unrolling(
                self.envs, self.model, config.unroll_length, self.seed, config.precision
            )
        self.unrolling.fill(self.views, np.arange(num), self.core_keys)
        first = self.sequence * num
        self.sequence += 1
        unroll = {key: value.copy() for key, value in self.views.items()}
        unroll["unroll_id"] = np.array(
            [(self.actor, self.incarnation, first + j) for j in range(num)], np.int64
        )
        return unroll

    def close(self) -> None:
        self.envs.close()


class DistributedTrainer(Trainer):
    """Train IMPALA with Ray actors on a Ray cluster and learner threads here.

    Takes the arguments of :class:`~batchenv.algorithms.impala.trainer.Trainer`;
    ``config.ray_address`` names the cluster ('' : ``RAY_ADDRESS`` or a local Ray) and
    ``config.placement`` spreads or packs the actors over its nodes.
    """

    def __init__(self, config, env=None, **options):
        super().__init__(config, env, **options)
        self.groups = None
        self._queue: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self._since: dict[int, float] = {}  # actor -> when its unroll was asked for
        self._delivered: set[int] = set()  # actors that delivered at least once
        self._produced = self._abandoned = self._restarts = 0

    def _start(self) -> None:
        from batchenv.workers.ray_rollouts import RolloutGroups

        config = self.config
        dtype = torch.from_numpy(np.zeros(0, self.observation_space.dtype)).dtype
        factory = functools.partial(
            ImpalaSampler, config, self.constructor, self.observation_shape, dtype,
            self.num_actions,
        )  # fmt: skip
        self.groups = RolloutGroups(
            factory,
            config.num_actors,
            num_cpus_per_worker=max(1, config.env_workers),
            strategy=config.placement,
            address=config.ray_address or None,
            start_timeout=config.start_timeout,
            description=f"IMPALA actor ({self.env_description})",
        )
        with self._publish_lock:
            self._publish()
        for actor in range(config.num_actors):
            self._submit(actor)

    def _submit(self, actor: int) -> None:
        self.groups.submit(actor)
        self._since[actor] = time.monotonic()

    def _publish(self) -> None:
        state = {
            key: value.detach().cpu().clone() for key, value in self.model.state_dict().items()
        }
        self.groups.set_weights(state)

    def _watch(self, timeout: float) -> None:
        for actor, result in self.groups.wait(timeout):
            if isinstance(result, BaseException):
                self._failed(actor, result, "failed")
                continue
            self._delivered.add(actor)
            unrolls = self._split(result)
            with self._ready:
                self._queue.extend(unrolls)
                self._produced += len(unrolls)
                self._ready.notify_all()
            if not self._stop.is_set():
                self._submit(actor)
        now, config = time.monotonic(), self.config
        for actor, since in list(self._since.items()):
            limit = config.actor_timeout if actor in self._delivered else config.start_timeout
            if self.groups.is_pending(actor) and now - since > limit:
                error = WorkerTimeoutError(
                    f"delivered no unroll within {limit} s", worker=actor, step=self.step
                )
                self._failed(actor, error, f"delivered no unroll within {limit} s")

    @staticmethod
    def _split(unroll: dict[str, np.ndarray]) -> list[dict[str, torch.Tensor]]:
        """An actor's ``[envs, ...]`` unrolls as one dict of tensors per env."""
        count = len(unroll["unroll_id"])
        # Ray hands out read-only views of its object store: copy them into torch's memory.
        tensors = {key: torch.from_numpy(value.copy()) for key, value in unroll.items()}
        return [{key: value[j] for key, value in tensors.items()} for j in range(count)]

    def _failed(self, actor: int, error: BaseException, why: str) -> None:
        """Restart ``actor`` within the budget, else raise ActorDiedError/ActorTimeoutError."""
        config = self.config
        self._abandoned += config.envs_per_actor
        timed_out = isinstance(error, WorkerTimeoutError)
        message = (
            f"actor {actor} (env {self.env_description}, incarnation "
            f"{self.groups.incarnations[actor]}, node {self.groups.nodes[actor]}) {why}: {error}"
        )
        if self._restarts >= config.max_actor_restarts:
            kind = ActorTimeoutError if timed_out else ActorDiedError
            extra = {} if timed_out else {"restarts": self._restarts}
            raise kind(
                f"{message}; {self._restarts} restarts already spent "
                f"(max_actor_restarts={config.max_actor_restarts}), so training stops",
                worker=actor,
                env_description=self.env_description,
                **extra,
            ) from error
        self._restarts += 1
        logger.warning(
            "%s; restarting it (restart %d of %d)",
            message,
            self._restarts,
            config.max_actor_restarts,
        )
        self._delivered.discard(actor)
        self.groups.restart(actor, config.start_timeout)
        if not self._stop.is_set():
            self._submit(actor)

    def _next_batch(self):
        config = self.config
        deadline = time.monotonic() + config.start_timeout + config.actor_timeout
        with self._ready:
            while len(self._queue) < config.batch_size:
                if self._stop.is_set():
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ActorTimeoutError(
                        f"no batch of {config.batch_size} unrolls within "
                        f"{config.start_timeout + config.actor_timeout:g} s",
                        env_description=self.env_description,
                    )
                self._ready.wait(min(left, 0.1))
            unrolls = [self._queue.popleft() for _ in range(config.batch_size)]
        keys = [key for key in unrolls[0] if key != "unroll_id" and not key.startswith("core")]
        batch = {key: torch.stack([u[key] for u in unrolls], dim=1) for key in keys}
        core_keys = sorted(key for key in unrolls[0] if key.startswith("core_state_"))
        core = tuple(torch.stack([u[key] for u in unrolls]).unsqueeze(0) for key in core_keys)
        return batch, core, torch.stack([u["unroll_id"] for u in unrolls])

    def _wake(self) -> None:
        with self._ready:
            self._ready.notify_all()

    def _shutdown(self) -> None:
        if self.groups is not None:
            self.groups.close()

    def counts(self) -> dict[str, int]:
        with self._ready:
            queued = len(self._queue)
        return {
            "restarts": self._restarts,
            "produced_unrolls": self._produced,
            "leftover_unrolls": queued,
            "abandoned_unrolls": self._abandoned,
        }

    def actor_pids(self, index: int) -> list[int]:
        return []  # the actors are processes of the Ray cluster, on any node

    def kill_actor(self, index: int) -> None:
        """Kill actor ``index``'s Ray actor now (fault drills): it is restarted as a death."""
        self.groups.kill(index)
