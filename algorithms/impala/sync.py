"""IMPALA's synchronous shared-memory mode (TorchBeast MonoBeast's design, without its hangs).

Actor processes step their envs with a CPU copy of the model and write ``[T + 1]`` unrolls
into shared-memory slots (actor.py, actor_pool.py). Learner threads in this process take
``B`` full slots, stack them to ``[T + 1, B]``, hand the slots back, take a V-trace step
(learner.py) and copy the new weights into the actors' shared model. The training thread
watches the actors (a death is seen at once and the actor restarted, within a budget),
logs, checkpoints and stops everything on Ctrl-C. Every wait has a deadline.

    >>> from batchenv.algorithms.impala.config import ImpalaConfig
    >>> config = ImpalaConfig(env="CartPole-v1", num_actors=2, envs_per_actor=4,
    ...                       total_steps=20_000)
    >>> result = SyncTrainer(config).train()          # doctest: +SKIP
    >>> result.steps >= 20_000                        # doctest: +SKIP
    True
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from .actor import allocate_slots, slot_specs
from .actor_pool import ActorPool
from .trainer import Trainer, TrainResult, build_model, probe_env

__all__ = ["SyncResult", "SyncTrainer", "build_model", "probe_env"]

SyncResult = TrainResult
"""What a synchronous training run did (the trainers share :class:`TrainResult`)."""


class SyncTrainer(Trainer):
    """Train IMPALA with actor processes and learner threads on one machine.

    Takes the arguments of :class:`~batchenv.algorithms.impala.trainer.Trainer`;
    ``config.mode`` is not consulted (this class is the synchronous mode).
    """

    def __init__(self, config, env=None, **options):
        super().__init__(config, env, **options)
        # Actors act with a CPU copy in shared memory; the learner copies its weights into it.
        self.actor_model = build_model(config, self.observation_shape, self.num_actions)
        self.actor_model.load_state_dict(self.model.state_dict())
        self.actor_model.share_memory()
        core_sizes = tuple(s.shape[-1] for s in self.model.initial_state(1))
        obs_dtype = torch.from_numpy(np.zeros(0, self.observation_space.dtype)).dtype
        specs = slot_specs(
            self.observation_shape, obs_dtype, self.num_actions, config.unroll_length, core_sizes
        )
        num_slots = config.num_slots_per_actor * config.num_actors
        self.slots = allocate_slots(num_slots, specs)
        self.pool: ActorPool | None = None
        self._batch_lock = threading.Lock()  # one learner thread gathers a batch at a time

    def _start(self) -> None:
        self.pool = ActorPool(
            self.config, self.constructor, self.env_description, self.actor_model, self.slots
        )
        self.pool.start()

    def _watch(self, timeout: float) -> None:
        self.pool.poll(timeout)

    def _shutdown(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def counts(self) -> dict[str, int]:
        if self.pool is None:
            return dict.fromkeys(
                ("restarts", "produced_unrolls", "leftover_unrolls", "abandoned_unrolls"), 0
            )
        counts = self.pool.counts()
        counts["leftover_unrolls"] = counts["full"]
        return counts

    def actor_pids(self, index: int) -> list[int]:
        actor = self.pool.actors[index] if self.pool is not None else None
        return [actor.process.pid] if actor is not None and actor.alive else []

    def _publish(self) -> None:
        with torch.no_grad():
            for target, source in zip(self.actor_model.parameters(), self.model.parameters()):
                target.copy_(source)

    def _gather(self, ids: list[int]) -> tuple[dict[str, torch.Tensor], tuple, torch.Tensor]:
        index = torch.as_tensor(ids)
        batch = {
            key: tensor.index_select(0, index).transpose(0, 1).contiguous()
            for key, tensor in self.slots.items()
            if key != "unroll_id" and not key.startswith("core_state_")
        }
        core = tuple(
            self.slots[f"core_state_{k}"].index_select(0, index).unsqueeze(0)
            for k in range(sum(key.startswith("core_state_") for key in self.slots))
        )
        return batch, core, self.slots["unroll_id"].index_select(0, index)

    def _next_batch(self):
        config = self.config
        with self._batch_lock:
            # A backstop: the pool's per-actor deadlines normally fire first.
            deadline = config.start_timeout + config.actor_timeout
            ids = self.pool.take(config.batch_size, deadline, self._stop)
            if ids is None:
                return None
            taken = self._gather(ids)
            self.pool.release(ids)
        return taken
