"""train(): DQN's training loop in rounds of a train phase, an eval phase and a checkpoint.

Read top to bottom, like CleanRL's ``dqn.py`` (docs/dqn.md):

1. checks that create nothing (device, env id and its extras, a checkpoint to resume);
2. the env (:func:`make_env`: a Gymnasium id in worker processes, or an in-graph env), the
   run directory (new, or reopened with its checkpoint) and the :class:`DQN` algorithm;
3. rounds until ``config.steps`` training env steps are done, each round
   - a train phase of ``eval_every`` env steps: ``simulate()`` calls in which ``perform``
     explores epsilon-greedily and ``experience`` stores transitions and runs the gradient
     steps and target updates that fell due,
   - an eval phase of exactly ``eval_episodes`` episodes (``eval_epsilon``, no learning);
   each phase starts with a forced reset of every env and a reseed (so its episodes depend
   only on the seed and the phase number); the episodes a train phase leaves running are
   marked truncated in the replay memory (they bootstrap, and no n-step return crosses the
   reset);
4. after every round: a metrics row per phase, ``curve.png`` and an atomic checkpoint
   (algorithm with its replay memory, counters, RNG states), so ``resume=True`` continues
   exactly where the last round ended (docs/dqn.md gives the checkpoint size);
5. log checkpoints (SLM Lab's): every ``config.log_frequency`` train steps, the mean return
   of the last 100 training episodes, handed to ``on_checkpoint`` once their round is saved.

Ctrl-C raises :class:`~batchenv.algorithms.batchppo.train.TrainingInterrupted` once the run
directory holds the last complete round; the round in progress is dropped.

    >>> from batchenv.algorithms.dqn import PRESETS, train
    >>> scores = train(PRESETS["cartpole"].replace(steps=40_000), logdir="runs/dqn-cartpole")
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import batchenv
from batchenv.algorithms import offpolicy, train_cli
from batchenv.algorithms.batchppo.envs import (
    check_time_limit,
    env_class,
    gym_constructor,
    phase_seed,
    reseed,
)
from batchenv.algorithms.batchppo.log_checkpoints import LogCheckpoints
from batchenv.algorithms.batchppo.train import TrainingInterrupted, run_episodes
from batchenv.algorithms.offpolicy import (
    checkpoint_state,
    progress_bar,
    set_rng_states,
)
from batchenv.cli_common import ctrl_c_held
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import in_graph_batch_env, simulate
from batchenv.preflight import check_device
from batchenv.run_dir import CHECKPOINT_NAME, RunDirectory

from .algorithm import DQN
from .config import DQNConfig

__all__ = ["config_from_run", "evaluate", "make_env", "run_phase", "train"]

ALGORITHM = "dqn"


def train(
    config: DQNConfig,
    env: Any = None,
    logdir: str | Path | None = None,
    resume: bool = False,
    *,
    progress: bool = True,
    on_checkpoint: Callable[[int, float, int], None] | None = None,
    after_round: Callable[[int, float, int], None] | None = None,
    shared: Any = None,
) -> list[float]:
    """Train DQN per ``config``; return the mean eval return of every round so far.

    Args:
        config: the settings (env, run length, network, replay, variant, seed, device).
        env: an InGraphBatchEnv, InGraphEnv or NumPy BatchEnv of ``config.num_envs`` rows
            (closed by the caller); None builds ``config.env``.
        logdir: the run directory; None makes ``runs/dqn-<env>-<time>``.
        resume: continue the run in ``logdir`` from its checkpoint; ``config`` must equal
            the run's except ``steps``, ``device`` and ``torch_threads``.
        progress: show a tqdm progress bar.
        on_checkpoint: called as ``on_checkpoint(train_steps, total_reward, updates)`` at
            every log checkpoint, once its round is saved (to stop early, raise).
        after_round: called as ``after_round(train_steps, eval_return, updates)`` after
            every round's checkpoint (to stop early, raise).
        shared: a :class:`~batchenv.experiment.shared.SharedParameters` to train the
            Q-network in with other sessions, Hogwild-style (``meta.distributed: shared``).
    """
    # 1. Checks that need nothing on disk.
    offpolicy.check_start(config, env, logdir, resume, config_from_run)
    with contextlib.ExitStack() as cleanup:
        if config.torch_threads:
            cleanup.callback(torch.set_num_threads, torch.get_num_threads())
            torch.set_num_threads(config.torch_threads)
        if env is None:
            env = make_env(config)
            cleanup.callback(env.close)
        env = in_graph_batch_env(env)
        run = cleanup.enter_context(
            RunDirectory(
                logdir, ALGORITHM, config, seed=config.seed, env_id=config.env, resume=resume
            )
        )

        # 2. The algorithm, restored from the checkpoint when resuming.
        algo = DQN(env.single_observation_space, env.single_action_space, config, env.num_envs)
        counters = {"train_steps": 0, "eval_steps": 0, "rounds": 0}
        scores: list[float] = []
        log = LogCheckpoints(config.log_frequency, env.num_envs, config.steps)
        checkpoint = run.load_checkpoint() if resume else None
        if checkpoint is not None:
            algo.load_state_dict(checkpoint["algorithm"])
            counters = dict(checkpoint["counters"])
            scores = list(checkpoint["scores"])
            log.load_state_dict(checkpoint["log_checkpoints"])
            set_rng_states(checkpoint["rng"])
        if shared is not None:
            algo.share(shared, sync_target=checkpoint is None)
        last_score = scores[-1] if scores else None
        bar = progress_bar(config.steps, counters["train_steps"], progress, last_score)
        if bar is not None:
            cleanup.callback(bar.close)
        saved_step = counters["train_steps"]

        # 3. Rounds: a train phase, an eval phase, then metrics and the checkpoint.
        try:
            while counters["train_steps"] < config.steps:
                round_ = counters["rounds"]
                left = config.steps - counters["train_steps"]
                calls = math.ceil(min(config.eval_every, left) / env.num_envs)
                stats = run_phase(
                    env,
                    algo.train_mode(),
                    calls,
                    phase_seed(config.seed, 2 * round_),
                    on_step=bar.update if bar else None,
                    checkpoints=log,
                )
                algo.memory.truncate_newest()  # the eval phase's reset cuts these episodes
                train_steps = counters["train_steps"] + stats.pop("steps")
                evaluation = run_episodes(
                    env,
                    algo.eval_mode(),
                    config.eval_episodes,
                    phase_seed(config.seed, 2 * round_ + 1),
                    config.max_length,
                )
                algo.train_mode()
                counters.update(
                    train_steps=train_steps,
                    eval_steps=counters["eval_steps"] + evaluation["steps"],
                    rounds=round_ + 1,
                )
                scores.append(evaluation["mean_score"])

                # 4. Metrics, curve and checkpoint (Ctrl-C waits until all are written).
                with ctrl_c_held():
                    if stats["episodes"] or stats["updates"]:  # else an all-NaN row
                        run.log(train_steps, "train", **stats)
                    run.log(train_steps, "eval", **_eval_metrics(evaluation))
                    run.plot_curve()
                    run.save_checkpoint(
                        checkpoint_state(
                            algo, config, counters, scores, log_checkpoints=log.state_dict()
                        )
                    )
                    saved_step = train_steps
                    for frame, total_reward, updates in log.take():
                        if on_checkpoint is not None:
                            on_checkpoint(frame, total_reward, updates)
                if bar is not None:
                    bar.set_postfix(eval=f"{scores[-1]:.1f}", refresh=False)
                if after_round is not None:
                    after_round(train_steps, scores[-1], algo.updates)
        except KeyboardInterrupt:
            if not (run.path / CHECKPOINT_NAME).exists():
                raise  # nothing saved yet: the caller says so
            raise TrainingInterrupted(run.path, saved_step) from None
        return scores


def run_phase(
    env: InGraphBatchEnv,
    algo: DQN,
    calls: int,
    seed: int | None,
    on_step: Callable[[int], Any] | None = None,
    checkpoints: LogCheckpoints | None = None,
) -> dict[str, float]:
    """``calls`` training ``simulate()`` steps from a forced reset (envs reseeded with
    ``seed`` first); the phase's metrics: ``steps``, the ``mean_score`` / ``mean_length`` /
    number of ``episodes`` finished (NaN / 0 when none), the mean ``loss`` and ``q_value``
    of its gradient steps (NaN when none), the ``epsilon`` at its end, its ``updates`` and
    ``steps_per_s``."""
    if seed is not None:
        reseed(env, seed)
    started = time.perf_counter()
    losses, values = [], []
    updates = 0
    # The phase's own episode sums (the env's running means may hold eval episodes).
    finished = torch.zeros((), dtype=torch.int64, device=env.device)
    score_sum = torch.zeros((), dtype=torch.float32, device=env.device)
    length_sum = torch.zeros((), dtype=torch.int64, device=env.device)
    for call in range(calls):
        done, score, summaries = simulate(env, algo, reset=call == 0)
        finished += done.sum()
        score_sum += torch.where(done, score.reshape(done.shape[0], -1).mean(1), 0.0).sum()
        length_sum += torch.where(done, env.length, 0).sum()
        learned = "updates" in summaries
        if learned:
            count = int(summaries["updates"])
            updates += count
            losses.append(summaries["loss"] * count)
            values.append(summaries["q_value"] * count)
        if checkpoints is not None:
            checkpoints.updates = algo.updates  # gradient steps, several per step possible
            checkpoints.step(done, score, updated=False)
        if on_step is not None:
            on_step(env.num_envs)
    seconds = time.perf_counter() - started
    episodes = int(finished)
    return {
        "steps": calls * env.num_envs,
        "mean_score": float(score_sum) / episodes if episodes else math.nan,
        "mean_length": float(length_sum) / episodes if episodes else math.nan,
        "episodes": episodes,
        "loss": float(torch.stack(losses).sum()) / updates if updates else math.nan,
        "q_value": float(torch.stack(values).sum()) / updates if updates else math.nan,
        "epsilon": algo.epsilon(),
        "updates": updates,
        "steps_per_s": calls * env.num_envs / max(seconds, 1e-9),
    }


def make_env(
    config: DQNConfig, num_envs: int | None = None, num_workers: int | None = None
) -> InGraphBatchEnv:
    """``num_envs`` (default ``config.num_envs``) envs named by ``config.env``.

    A Gymnasium id runs in worker processes (:func:`batchenv.make`), built as
    ``gymnasium.make(id, max_episode_steps=config.max_length)`` (the time limit is a
    truncation) then ``ConvertTo32Bit``; ``"module:Class"`` is an in-graph env built as
    ``Class(num_envs=..., device=config.device, seed=config.seed)``. No observation
    normalisation (CleanRL has none).

        >>> make_env(DQNConfig(env="batchenv.kernels:CartPole"), num_envs=4).num_envs
        4
    """
    rows = config.num_envs if num_envs is None else num_envs
    device = torch.device(config.device)
    cls = env_class(config.env)
    if cls is not None:
        env = cls(num_envs=rows, device=device, seed=config.seed)
        check_time_limit(config, getattr(env, "max_episode_steps", None))
        return InGraphBatchEnv(env, device=device)
    try:
        gym.spec(config.env)
    except gym.error.Error as error:
        raise ValueError(
            f"unknown env {config.env!r}: expected a registered Gymnasium id (e.g. "
            f"'CartPole-v1') or an in-graph env as 'module:Class' (e.g. "
            f"'batchenv.kernels:CartPole'); Gymnasium says: {error}"
        ) from None
    constructor = gym_constructor(config.env, config.max_length, normalize_ranges=False)
    workers = batchenv.make(constructor, rows, num_workers=num_workers)
    return InGraphBatchEnv(workers, device=device)


def evaluate(
    run_dir: str | Path,
    episodes: int | None = None,
    num_envs: int | None = None,
    seed: int | None = None,
    device: str | None = None,
    epsilon: float | None = None,
) -> dict[str, float]:
    """Exactly ``episodes`` episodes (default: the run's ``eval_episodes``) of the latest
    checkpoint's Q-network acting with ``epsilon`` (default: the run's ``eval_epsilon``),
    on ``min(num_envs, episodes)`` envs (default: the run's ``num_envs``) seeded with
    ``seed`` (default: the run's seed + 1000). Returns ``mean_score``, ``mean_length``,
    ``episodes``, ``steps``, ``steps_per_s`` and the checkpoint's ``train_steps``.

        >>> evaluate("runs/dqn-cartpole", episodes=20)["mean_score"]
        500.0
    """
    saved = config_from_run(run_dir)
    episodes = saved.eval_episodes if episodes is None else episodes
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    rows = min(num_envs or saved.num_envs, episodes)
    overrides: dict[str, Any] = {"num_envs": rows}
    if device:
        overrides["device"] = device
    if epsilon is not None:
        overrides["eval_epsilon"] = epsilon
    # The replay memory is not loaded: a small one keeps evaluation light.
    overrides["buffer_size"] = max(rows, saved.batch_size)
    config = saved.replace(**overrides)
    check_device(config.device)
    target = Path(run_dir) / CHECKPOINT_NAME
    if not target.exists():
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet (it is written after a round)")
    checkpoint = torch.load(target, map_location="cpu", weights_only=False)
    env = make_env(config)
    try:
        algo = DQN(env.single_observation_space, env.single_action_space, config, rows)
        state = checkpoint["algorithm"]
        algo.load_state_dict({"q": state["q"], "target": state["target"]})
        seed = config.seed + 1000 if seed is None else seed
        stats = run_episodes(env, algo.eval_mode(), episodes, seed, config.max_length)
    finally:
        env.close()
    return {**stats, "train_steps": int(checkpoint["counters"]["train_steps"])}


def config_from_run(run_dir: str | Path) -> DQNConfig:
    """The DQNConfig stored in ``run_dir/config.json``."""
    return train_cli.config_from_run(run_dir, ALGORITHM, DQNConfig)


# --- helpers --------------------------------------------------------------------------------


def _eval_metrics(stats: dict[str, float]) -> dict[str, float]:
    names = ("mean_score", "mean_length", "episodes", "steps_per_s")
    return {name: stats[name] for name in names}
