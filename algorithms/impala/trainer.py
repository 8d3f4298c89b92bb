"""What the synchronous and the asynchronous IMPALA trainers share.

A trainer owns the learner model, its optimiser and schedule, the step counters and the
checkpoint format. Its training thread (``train()``) starts the actors (``_start``), runs
``num_learner_threads`` learner threads and watches everything (``_watch``), logs metrics,
writes checkpoints, and on the way out (done, failure or Ctrl-C) stops every thread and
process it started (``_wake`` then ``_shutdown``). A learner thread repeatedly reserves a
batch's worth of steps, takes a ``[T + 1, B]`` batch (``_next_batch``), takes a V-trace step
(learner.py) and publishes the new weights to the acting model. The subclasses:

- ``SyncTrainer`` (sync.py): actor processes with CPU model copies, shared-memory slots.
- ``AsyncTrainer`` (async_mode.py): actor threads, batched inference, a C++ learner queue.
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

from .config import ImpalaConfig
from .envs import describe, env_constructor, is_minatar_id
from .errors import TrainingStoppedError
from .learner import learn, make_optimizer
from .models import AtariNet, MinAtarNet, MLPAgent, ResNetAgent

__all__ = ["Trainer", "TrainResult", "build_model", "probe_env", "resolve_device"]

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
    """The agent ``config.model`` names ('auto': the MinAtar net for ``MinAtar/`` ids, MLP
    for vectors, Atari net for other images)."""
    kind = config.model
    if kind == "auto":
        if is_minatar_id(config.env):
            kind = "minatar"
        else:
            kind = "atari" if len(observation_shape) == 3 else "mlp"
    if kind == "mlp":
        return MLPAgent(observation_shape, num_actions, config.hidden_sizes, config.use_lstm)
    if kind == "atari":
        return AtariNet(observation_shape, num_actions, config.use_lstm)
    if kind == "minatar":
        return MinAtarNet(observation_shape, num_actions, config.use_lstm)
    return ResNetAgent(observation_shape, num_actions, config.use_lstm)


def resolve_device(name: str) -> torch.device:
    """``config.device`` as a torch.device ('auto': CUDA when available, else the CPU)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"ImpalaConfig.device={name!r} but CUDA is not available here")
    return device


@dataclass
class TrainResult:
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
    """Actors restarted after a death or timeout (processes in sync mode, env groups in
    async mode)."""
    produced_unrolls: int
    """Unrolls actors delivered (per env)."""
    consumed_unrolls: int
    """Unrolls learner threads consumed."""
    leftover_unrolls: int
    """Delivered unrolls still queued when training stopped (not consumed)."""
    abandoned_unrolls: int
    """Unrolls in progress in an actor when it died (never delivered, never consumed)."""
    interrupted: bool
    """Stopped by Ctrl-C (KeyboardInterrupt) before total_steps."""
    consumed_ids: list[tuple[int, int, int]] = field(default_factory=list)
    """(actor, incarnation, sequence) of each consumed unroll, when recorded."""


class Trainer:
    """Base of SyncTrainer and AsyncTrainer (see the module docstring).

    Args:
        config: the settings (ImpalaConfig; MonoBeast's defaults).
        env: overrides ``config.env`` with an env constructor (for custom envs and tests).
        run_dir: a batchenv RunDirectory for metrics, TensorBoard, checkpoints, curve.png.
        checkpoint: a checkpoint dict to resume from (``run_dir.load_checkpoint()``).
        progress: show a tqdm progress bar.
        record_unrolls: keep the id of every consumed unroll in the result.
        on_log: called as ``on_log(step, row)`` with every metrics row that has a
            ``mean_score`` (episodes finished since the previous row); raise to stop.
    """

    def __init__(
        self,
        config: ImpalaConfig,
        env: Callable[[], gymnasium.Env] | None = None,
        run_dir=None,
        checkpoint: dict | None = None,
        progress: bool = False,
        record_unrolls: bool = False,
        on_log: Callable[[int, dict[str, float]], None] | None = None,
    ):
        self.config = config
        self.on_log = on_log
        self.constructor = env_constructor(env if env is not None else config.env)
        self.env_description = describe(env if env is not None else config.env)
        self.run_dir = run_dir
        self.progress = progress
        self.record_unrolls = record_unrolls
        self.device = resolve_device(config.device)
        self.observation_space, self.num_actions = probe_env(self.constructor)
        self.observation_shape = tuple(self.observation_space.shape)
        torch.manual_seed(config.seed)
        self.model = build_model(config, self.observation_shape, self.num_actions)
        self.model.to(self.device)
        self.optimizer, self.scheduler = make_optimizer(self.model, config)
        self.step = 0
        self.learner_steps = 0
        self.episodes = 0
        if checkpoint is not None:
            self.load_state_dict(checkpoint)
        self._learn_lock = threading.Lock()  # guards the model, optimiser and counters
        self._publish_lock = threading.Lock()  # guards the acting model's weights
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

    def _fail(self, error: BaseException) -> None:
        """Record ``error`` for the training thread (which raises it) and stop everything."""
        self._errors.append(error)
        self._stop.set()

    # ---- hooks of the subclasses --------------------------------------------------------

    def _start(self) -> None:
        """Start the actors (and whatever feeds the learner threads)."""
        raise NotImplementedError

    def _watch(self, timeout: float) -> None:
        """Watch the actors for up to ``timeout`` seconds; restart them or raise."""
        raise NotImplementedError

    def _next_batch(self) -> tuple[dict[str, torch.Tensor], tuple, torch.Tensor] | None:
        """The next ``[T + 1, B]`` batch, its initial core state and its ``[B, 3]`` unroll
        ids; None once training stops."""
        raise NotImplementedError

    def _wake(self) -> None:
        """Wake learner threads blocked waiting for a batch (training is stopping)."""

    def _shutdown(self) -> None:
        """Stop and reap everything ``_start`` started; idempotent."""
        raise NotImplementedError

    def counts(self) -> dict[str, int]:
        """Counters so far: ``restarts`` (of actors), ``produced_unrolls`` (delivered),
        ``leftover_unrolls`` (delivered, not consumed), ``abandoned_unrolls`` (lost with a
        failed actor)."""
        raise NotImplementedError

    def actor_pids(self, index: int) -> list[int]:
        """The processes of actor ``index`` now: the actor process (sync) or the workers
        stepping its envs (async)."""
        raise NotImplementedError

    def _publish(self) -> None:
        """Copy the learner's weights to the model the actors act with."""
        raise NotImplementedError

    # ---- state --------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Checkpoint: model, optimiser, scheduler, counters, config and torch RNG."""
        with self._learn_lock:
            return {
                "algorithm": "impala",
                "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
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

    def _learner_thread(self) -> None:
        config = self.config
        try:
            while not self._stop.is_set():
                with self._learn_lock:
                    if self.step + self._reserved >= config.total_steps:
                        return
                    self._reserved += config.steps_per_batch
                taken = self._next_batch()
                if taken is None:
                    return
                self._learn_on(*taken)
        except BaseException as error:  # reported by the training thread
            self._fail(error)

    def _learn_on(
        self, batch: dict[str, torch.Tensor], core: tuple, unroll_ids: torch.Tensor
    ) -> None:
        config = self.config
        done = batch["done"][1:]
        finished = batch["episode_return"][1:][done].tolist()
        if self.device.type != "cpu":
            batch = {key: value.to(self.device, non_blocking=True) for key, value in batch.items()}
            core = tuple(state.to(self.device, non_blocking=True) for state in core)
        with self._learn_lock:
            stats = learn(self.model, batch, core, self.optimizer, self.scheduler, config)
            with self._publish_lock:
                self._publish()
            self.step += config.steps_per_batch
            self._reserved -= config.steps_per_batch
            self.learner_steps += 1
            self.episodes += len(finished)
            self._pending_returns.extend(finished)
            self._last_stats = stats
            self._consumed += int(unroll_ids.shape[0])
            if self.record_unrolls:
                self._consumed_ids.extend(map(tuple, unroll_ids.tolist()))

    # ---- the training thread -------------------------------------------------------------

    def train(self) -> TrainResult:
        """Run until ``config.total_steps``; returns a :class:`TrainResult`.

        Raises ActorDiedError / ActorTimeoutError past the restart budget, and re-raises
        KeyboardInterrupt after a clean stop (a checkpoint is written first when there is a
        run directory). Everything started here is stopped before it returns or raises.
        """
        if self._used:
            raise TrainingStoppedError(
                f"{type(self).__name__}.train() runs once; make a new {type(self).__name__}"
            )
        self._used = True
        config = self.config
        torch.set_num_threads(config.torch_threads)
        start_step, started = self.step, time.monotonic()
        returns: list[tuple[int, float]] = []
        interrupted = False
        bar = None
        threads: list[threading.Thread] = []
        try:
            self._start()
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
            next_log_step = self._next_log_step()
            while any(thread.is_alive() for thread in threads):
                self._watch(0.1)
                if self._errors:
                    raise self._errors[0]
                if self._stop.is_set():
                    break  # stop(): the finally clause wakes and joins everything
                now = time.monotonic()
                if bar is not None and self.step > bar.n:
                    bar.update(self.step - bar.n)
                if (
                    self.step >= next_log_step
                    if config.log_every
                    else now - last_log >= config.log_interval
                ):
                    self._log(returns, (self.step - log_step) / max(now - last_log, 1e-9))
                    last_log, log_step = now, self.step
                    next_log_step = self._next_log_step()
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
            self._wake()
            for thread in threads:
                thread.join(_JOIN_SECONDS)
            self._shutdown()
            if bar is not None:
                bar.close()
            elapsed = time.monotonic() - started
            if self.run_dir is not None and not self._errors:
                self._log(returns, (self.step - start_step) / max(elapsed, 1e-9))
                self.run_dir.save_checkpoint(self.state_dict())
                if not interrupted:  # Ctrl-C: exit fast; the next run draws the curve
                    self.run_dir.plot_curve()
        counts = self.counts()
        return TrainResult(
            steps=self.step,
            learner_steps=self.learner_steps,
            episodes=self.episodes,
            returns=returns,
            sps=(self.step - start_step) / max(elapsed, 1e-9),
            actor_restarts=counts["restarts"],
            produced_unrolls=counts["produced_unrolls"],
            consumed_unrolls=self._consumed,
            leftover_unrolls=counts["leftover_unrolls"],
            abandoned_unrolls=counts["abandoned_unrolls"],
            interrupted=interrupted,
            consumed_ids=list(self._consumed_ids),
        )

    def _next_log_step(self) -> int:
        every = self.config.log_every
        return (self.step // every + 1) * every if every else 0

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
        counts = self.counts()
        row["actor_restarts"] = counts["restarts"]
        row["abandoned_unrolls"] = counts["abandoned_unrolls"]
        if self.run_dir is not None and (stats or finished):
            self.run_dir.log(step, "train", **row)
        logger.info("step %d: %s", step, row)
        if self.on_log is not None and finished:
            self.on_log(step, row)
