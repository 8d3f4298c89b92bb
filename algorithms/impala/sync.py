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

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium
import numpy as np
import torch

from batchenv.algorithms.impala.actor import allocate_slots, slot_specs
from batchenv.algorithms.impala.actor_pool import ActorPool
from batchenv.algorithms.impala.config import ImpalaConfig
from batchenv.algorithms.impala.envs import describe, env_constructor
from batchenv.algorithms.impala.errors import TrainingStoppedError
from batchenv.algorithms.impala.learner import learn, make_optimizer
from batchenv.algorithms.impala.models import AtariNet, MLPAgent, ResNetAgent

__all__ = ["SyncResult", "SyncTrainer", "build_model", "probe_env"]

logger = logging.getLogger(__name__)

_JOIN_SECONDS = 10.0


def probe_env(constructor: Callable[[], gymnasium.Env]) -> tuple[gymnasium.spaces.Box, int]:
    """The observation space and number of actions of the env ``constructor`` makes."""
    env = constructor()
    try:
        observation_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(action_space, gymnasium.spaces.Discrete):
        raise ValueError(f"IMPALA needs a Discrete action space, the env has {action_space}")
    if not isinstance(observation_space, gymnasium.spaces.Box):
        raise ValueError(f"IMPALA needs a Box observation space, the env has {observation_space}")
    return observation_space, int(action_space.n)


def build_model(config: ImpalaConfig, observation_shape: tuple[int, ...], num_actions: int):
    """The agent ``config.model`` names ('auto': MLP for vectors, Atari net for images)."""
    kind = config.model
    if kind == "auto":
        kind = "atari" if len(observation_shape) == 3 else "mlp"
    if kind == "mlp":
        return MLPAgent(observation_shape, num_actions, config.hidden_sizes, config.use_lstm)
    if kind == "atari":
        return AtariNet(observation_shape, num_actions, config.use_lstm)
    return ResNetAgent(observation_shape, num_actions, config.use_lstm)


@dataclass
class SyncResult:
    """What a training run did."""

    steps: int
    """Agent steps consumed by the learner (T * B per learner step)."""
    learner_steps: int
    """Learner (optimiser) steps."""
    episodes: int
    """Episodes that ended inside consumed unrolls."""
    returns: list[tuple[int, float]]
    """(step, mean return) of the episodes finished since the previous log row."""
    sps: float
    """Agent steps per second over the whole run (this session)."""
    actor_restarts: int
    """Actor processes restarted after a death or timeout."""
    produced_unrolls: int
    """Unrolls actors reported full."""
    consumed_unrolls: int
    """Unrolls learner threads consumed."""
    leftover_unrolls: int
    """Full unrolls still queued when training stopped (not consumed)."""
    abandoned_unrolls: int
    """Unrolls in progress in an actor when it died (never reported, never consumed)."""
    interrupted: bool
    """Stopped by Ctrl-C (KeyboardInterrupt) before total_steps."""
    consumed_ids: list[tuple[int, int, int]] = field(default_factory=list)
    """(actor, incarnation, sequence) of each consumed unroll, when recorded."""


class SyncTrainer:
    """Train IMPALA with actor processes and learner threads on one machine.

    Args:
        config: the settings (ImpalaConfig; MonoBeast's defaults).
        env: overrides ``config.env`` with an env constructor (for custom envs and tests).
        run_dir: a batchenv RunDirectory for metrics, TensorBoard, checkpoints, curve.png.
        checkpoint: a checkpoint dict to resume from (``run_dir.load_checkpoint()``).
        progress: show a tqdm progress bar.
        record_unrolls: keep the id of every consumed unroll in the result.
    """

    def __init__(
        self,
        config: ImpalaConfig,
        env: Callable[[], gymnasium.Env] | None = None,
        run_dir=None,
        checkpoint: dict | None = None,
        progress: bool = False,
        record_unrolls: bool = False,
    ):
        self.config = config
        self.constructor = env_constructor(env if env is not None else config.env)
        self.env_description = describe(env if env is not None else config.env)
        self.run_dir = run_dir
        self.progress = progress
        self.record_unrolls = record_unrolls
        observation_space, self.num_actions = probe_env(self.constructor)
        self.observation_shape = tuple(observation_space.shape)
        torch.manual_seed(config.seed)
        self.model = build_model(config, self.observation_shape, self.num_actions)
        self.actor_model = build_model(config, self.observation_shape, self.num_actions)
        self.optimizer, self.scheduler = make_optimizer(self.model, config)
        self.step = 0
        self.learner_steps = 0
        self.episodes = 0
        if checkpoint is not None:
            self.load_state_dict(checkpoint)
        self.actor_model.load_state_dict(self.model.state_dict())
        self.actor_model.share_memory()
        core_sizes = tuple(s.shape[-1] for s in self.model.initial_state(1))
        obs_dtype = torch.from_numpy(np.zeros(0, observation_space.dtype)).dtype
        specs = slot_specs(
            self.observation_shape, obs_dtype, self.num_actions, config.unroll_length, core_sizes
        )
        num_slots = config.num_slots_per_actor * config.num_actors
        self.slots = allocate_slots(num_slots, specs)
        self.pool: ActorPool | None = None
        self._learn_lock = threading.Lock()  # guards the model, optimiser and counters
        self._batch_lock = threading.Lock()  # one learner thread gathers a batch at a time
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._pending_returns: list[float] = []
        self._last_stats: dict[str, float] = {}
        self._consumed = 0
        self._reserved = 0  # steps of batches being gathered or learned on
        self._consumed_ids: list[tuple[int, int, int]] = []
        self._used = False

    def stop(self) -> None:
        """Ask a running :meth:`train` (in another thread) to stop cleanly, as if done."""
        self._stop.set()

    # ---- state --------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Checkpoint: model, optimiser, scheduler, counters, config and torch RNG."""
        with self._learn_lock:
            return {
                "algorithm": "impala",
                "model": {k: v.clone() for k, v in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "step": self.step,
                "learner_steps": self.learner_steps,
                "episodes": self.episodes,
                "config": dataclasses.asdict(self.config),
                "observation_shape": self.observation_shape,
                "num_actions": self.num_actions,
                "torch_rng": torch.get_rng_state(),
            }

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` (the architecture must match)."""
        if tuple(state["observation_shape"]) != self.observation_shape or (
            state["num_actions"] != self.num_actions
        ):
            raise ValueError(
                f"checkpoint is for observations {tuple(state['observation_shape'])} and "
                f"{state['num_actions']} actions, the env has {self.observation_shape} and "
                f"{self.num_actions}"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        # The rate for the next step under this run's schedule (total_steps may have grown).
        epoch = self.scheduler.last_epoch
        for group, base, decay in zip(
            self.optimizer.param_groups, self.scheduler.base_lrs, self.scheduler.lr_lambdas
        ):
            group["lr"] = base * decay(epoch)
        self.step = int(state["step"])
        self.learner_steps = int(state["learner_steps"])
        self.episodes = int(state["episodes"])
        torch.set_rng_state(state["torch_rng"])

    # ---- learner threads ----------------------------------------------------------------

    def _gather(self, ids: list[int]) -> tuple[dict[str, torch.Tensor], tuple]:
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
        if self.record_unrolls:
            batch["unroll_id"] = self.slots["unroll_id"].index_select(0, index)
        return batch, core

    def _learner_thread(self) -> None:
        config = self.config
        try:
            while not self._stop.is_set():
                with self._learn_lock:
                    if self.step + self._reserved >= config.total_steps:
                        return
                    self._reserved += config.steps_per_batch
                with self._batch_lock:
                    # A backstop: the pool's per-actor deadlines normally fire first.
                    deadline = config.start_timeout + config.actor_timeout
                    ids = self.pool.take(config.batch_size, deadline, self._stop)
                    if ids is None:
                        return
                    batch, core = self._gather(ids)
                    self.pool.release(ids)
                done = batch["done"][1:]
                finished = batch["episode_return"][1:][done].tolist()
                with self._learn_lock:
                    stats = learn(self.model, batch, core, self.optimizer, self.scheduler, config)
                    with torch.no_grad():
                        for target, source in zip(
                            self.actor_model.parameters(), self.model.parameters()
                        ):
                            target.copy_(source)
                    self.step += config.steps_per_batch
                    self._reserved -= config.steps_per_batch
                    self.learner_steps += 1
                    self.episodes += len(finished)
                    self._pending_returns.extend(finished)
                    self._last_stats = stats
                    self._consumed += len(ids)
                    if self.record_unrolls:
                        self._consumed_ids.extend(map(tuple, batch["unroll_id"].tolist()))
        except BaseException as error:  # reported by the training thread
            self._errors.append(error)
            self._stop.set()

    # ---- the training thread -------------------------------------------------------------

    def train(self) -> SyncResult:
        """Run until ``config.total_steps``; returns a :class:`SyncResult`.

        Raises ActorDiedError / ActorTimeoutError past the restart budget, and re-raises
        KeyboardInterrupt after a clean stop (a checkpoint is written first when there is a
        run directory). Everything started here is stopped before it returns or raises.
        """
        if self._used:
            raise TrainingStoppedError("SyncTrainer.train() runs once; make a new SyncTrainer")
        self._used = True
        config = self.config
        torch.set_num_threads(config.torch_threads)
        start_step, started = self.step, time.monotonic()
        returns: list[tuple[int, float]] = []
        interrupted = False
        bar = None
        threads: list[threading.Thread] = []
        self.pool = ActorPool(
            config, self.constructor, self.env_description, self.actor_model, self.slots
        )
        try:
            self.pool.start()
            threads = [
                threading.Thread(target=self._learner_thread, name=f"learner-{i}", daemon=True)
                for i in range(config.num_learner_threads)
            ]
            for thread in threads:
                thread.start()
            if self.progress:
                from tqdm import tqdm

                bar = tqdm(
                    total=config.total_steps,
                    initial=self.step,
                    unit="step",
                    unit_scale=True,
                    mininterval=1.0,
                    smoothing=0.1,
                )
            last_log = last_checkpoint = time.monotonic()
            log_step = self.step
            while any(thread.is_alive() for thread in threads):
                self.pool.poll(0.1)
                if self._errors:
                    raise self._errors[0]
                now = time.monotonic()
                if bar is not None and self.step > bar.n:
                    bar.update(self.step - bar.n)
                if now - last_log >= config.log_interval:
                    self._log(returns, (self.step - log_step) / (now - last_log))
                    last_log, log_step = now, self.step
                if self.run_dir is not None and now - last_checkpoint >= config.checkpoint_interval:
                    self.run_dir.save_checkpoint(self.state_dict())
                    last_checkpoint = now
            if self._errors:
                raise self._errors[0]
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            self._stop.set()
            for thread in threads:
                thread.join(_JOIN_SECONDS)
            self.pool.close()
            if bar is not None:
                bar.close()
            elapsed = time.monotonic() - started
            if self.run_dir is not None and not self._errors:
                self._log(returns, (self.step - start_step) / max(elapsed, 1e-9))
                self.run_dir.save_checkpoint(self.state_dict())
                if not interrupted:  # Ctrl-C: exit fast; the next run draws the curve
                    self.run_dir.plot_curve()
        counts = self.pool.counts()
        return SyncResult(
            steps=self.step,
            learner_steps=self.learner_steps,
            episodes=self.episodes,
            returns=returns,
            sps=(self.step - start_step) / max(elapsed, 1e-9),
            actor_restarts=counts["restarts"],
            produced_unrolls=counts["produced_unrolls"],
            consumed_unrolls=self._consumed,
            leftover_unrolls=counts["full"],
            abandoned_unrolls=counts["abandoned_unrolls"],
            interrupted=interrupted,
            consumed_ids=list(self._consumed_ids),
        )

    def _log(self, returns: list[tuple[int, float]], sps: float) -> None:
        with self._learn_lock:
            finished, self._pending_returns = self._pending_returns, []
            stats = dict(self._last_stats)
            step = self.step
        row: dict[str, float] = {"sps": round(sps, 1), **stats}
        if finished:
            row["mean_score"] = float(np.mean(finished))
            row["episodes"] = len(finished)
            returns.append((step, row["mean_score"]))
        counts = self.pool.counts()
        row["actor_restarts"] = counts["restarts"]
        row["abandoned_unrolls"] = counts["abandoned_unrolls"]
        if self.run_dir is not None and (stats or finished):
            self.run_dir.log(step, "train", **row)
        logger.info("step %d: %s", step, row)
