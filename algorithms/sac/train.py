"""train(): SAC's training loop, rounds of a train phase and an evaluation.

Read top to bottom, like CleanRL's ``sac_continuous_action.py`` (docs/sac.md):

1. checks that create nothing (device, env id and its extras, a checkpoint to resume);
2. the env (:func:`make_env`: Gymnasium envs in worker processes, several per worker, or an
   in-graph env), the run directory (new, or reopened with its checkpoint) and the algorithm;
3. rounds until ``config.steps`` training env steps are done, each round
   - a train phase of ``eval_every`` env steps: ``simulate()`` calls in which SAC acts,
     stores every transition in its replay memory and makes the gradient steps due,
   - an evaluation phase of ``eval_episodes`` episodes with the deterministic policy,
   each phase starting with a forced reset of every row and a reseed of the envs, so a
   phase's episodes depend only on the seed and the phase number;
4. after every round: a metrics row per phase, ``curve.png`` and an atomic checkpoint
   (networks, optimisers, temperature, the replay memory, RNG states, counters), so
   ``resume=True`` continues exactly where the last round ended.

Env steps count every row (``num_envs`` per ``simulate()`` call): a run's train steps are
``config.steps`` rounded up to a multiple of ``num_envs``.

    >>> from batchenv.algorithms.sac import PRESETS, train
    >>> config = PRESETS["pendulum"].replace(env="batchenv.kernels:Pendulum")
    >>> scores = train(config, logdir="runs/sac-pendulum")   # one eval score per round
    >>> scores = train(config.replace(steps=40_000), logdir="runs/sac-pendulum", resume=True)
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
from batchenv.algorithms.batchppo.envs import env_class, gym_constructor, phase_seed, reseed
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

from .algorithm import SAC, UPDATE_STATS
from .config import SACConfig

__all__ = [
    "ALGORITHM",
    "TrainingInterrupted",
    "config_from_run",
    "episode_limit",
    "evaluate",
    "make_env",
    "train",
]

ALGORITHM = "sac"


def train(
    config: SACConfig,
    env: Any = None,
    logdir: str | Path | None = None,
    resume: bool = False,
    *,
    progress: bool = True,
    after_round: Callable[[int, float, int], None] | None = None,
    shared: Any = None,
) -> list[float]:
    """Train SAC per ``config``; return the mean eval score of every round so far.

    Args:
        config: the settings (env, run length, networks, losses, seed, device).
        env: an InGraphBatchEnv, InGraphEnv or NumPy BatchEnv of ``config.num_envs`` rows
            to train on (closed by the caller); None builds ``config.env``.
        logdir: the run directory; None makes ``runs/sac-<env>-<time>``.
        resume: continue the run in ``logdir`` from its checkpoint. ``config`` must equal
            the run's config except ``steps`` (which may grow), ``device`` and
            ``torch_threads``.
        progress: show a tqdm progress bar.
        after_round: called as ``after_round(train_steps, eval_score, gradient_steps)``
            after every round's checkpoint (to stop early, raise).
        shared: a :class:`~batchenv.experiment.shared.SharedParameters` to train the policy
            and twin Qs in with other sessions, Hogwild-style (``meta.distributed: shared``).

    Example:
        >>> scores = train(PRESETS["pendulum"], logdir="runs/sac-pendulum")
    """
    # 1. Checks that need nothing on disk.
    offpolicy.check_start(config, env, logdir, resume, config_from_run)
    with contextlib.ExitStack() as cleanup:
        if config.torch_threads:
            cleanup.callback(torch.set_num_threads, torch.get_num_threads())
            torch.set_num_threads(config.torch_threads)
        # 2. The env, the run directory and the algorithm (restored when resuming).
        if env is None:
            env = make_env(config)
            cleanup.callback(env.close)
        env = in_graph_batch_env(env)
        limit = episode_limit(config, env)
        run = cleanup.enter_context(
            RunDirectory(
                logdir, ALGORITHM, config, seed=config.seed, env_id=config.env, resume=resume
            )
        )
        algo = SAC(env.single_observation_space, env.single_action_space, config)
        counters = {"train_steps": 0, "eval_steps": 0, "rounds": 0}
        scores: list[float] = []
        checkpoint = run.load_checkpoint() if resume else None
        if checkpoint is not None:
            algo.load_state_dict(checkpoint["algorithm"])
            counters = dict(checkpoint["counters"])
            scores = list(checkpoint["scores"])
            set_rng_states(checkpoint["rng"])
        if shared is not None:
            algo.share(shared, sync_targets=checkpoint is None)
        bar = progress_bar(config.steps, counters["train_steps"], progress)
        if bar is not None:
            cleanup.callback(bar.close)

        # 3. Rounds of a train phase and an evaluation, each kept whole or not at all.
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
                    on_step=bar.update if bar is not None else None,
                )
                train_steps = counters["train_steps"] + stats.pop("steps")
                evaluation = run_episodes(
                    env,
                    algo.eval_mode(),
                    config.eval_episodes,
                    phase_seed(config.seed, 2 * round_ + 1),
                    limit,
                )
                algo.train_mode()
                counters.update(
                    train_steps=train_steps,
                    eval_steps=counters["eval_steps"] + evaluation.pop("steps"),
                    rounds=round_ + 1,
                )
                scores.append(evaluation["mean_score"])

                # 4. Metrics, curve and checkpoint (Ctrl-C waits until all are written).
                with ctrl_c_held():
                    run.log(train_steps, "train", **stats)
                    run.log(train_steps, "eval", **evaluation)
                    run.plot_curve()
                    run.save_checkpoint(checkpoint_state(algo, config, counters, scores))
                if bar is not None:
                    bar.set_postfix(eval=f"{scores[-1]:.1f}", refresh=False)
                if after_round is not None:
                    after_round(train_steps, scores[-1], algo.q_steps)
        except KeyboardInterrupt:
            if not (run.path / CHECKPOINT_NAME).exists():
                raise  # no round finished: nothing to resume from
            raise TrainingInterrupted(run.path, counters["train_steps"]) from None
        return scores


def run_phase(
    env: InGraphBatchEnv,
    algo: SAC,
    calls: int,
    seed: int | None,
    on_step: Callable[[int], Any] | None = None,
) -> dict[str, float]:
    """``calls`` lockstep training steps from a forced reset; the phase's metrics.

    Returns ``steps`` (env steps made), ``mean_score`` / ``mean_length`` / ``episodes`` of
    the episodes finished in the phase (NaN / 0 when none), the mean update summaries
    (NaN when none ran), the gradient steps made so far (``updates``) and ``steps_per_s``.
    """
    if seed is not None:
        reseed(env, seed)
    started = time.perf_counter()
    returns = torch.zeros((), device=env.device)
    lengths = torch.zeros((), device=env.device)
    finished = torch.zeros((), dtype=torch.int64, device=env.device)
    sums = {name: 0.0 for name in UPDATE_STATS}
    counts = {name: 0 for name in UPDATE_STATS}
    for call in range(calls):
        done, score, summaries = simulate(env, algo, reset=call == 0)
        returns += torch.where(done, score.reshape(score.shape[0], -1).mean(1), 0.0).sum()
        lengths += torch.where(done, env.length, 0).sum()
        finished += done.sum()
        for name in UPDATE_STATS:
            if name in summaries:
                sums[name] += float(summaries[name])
                counts[name] += 1
        if on_step is not None:
            on_step(env.num_envs)
    seconds = time.perf_counter() - started
    episodes = int(finished)
    stats = {
        "steps": calls * env.num_envs,
        "mean_score": float(returns) / episodes if episodes else math.nan,
        "mean_length": float(lengths) / episodes if episodes else math.nan,
        "episodes": episodes,
    }
    for name in UPDATE_STATS:
        stats[name] = sums[name] / counts[name] if counts[name] else math.nan
    stats["updates"] = algo.q_steps
    stats["steps_per_s"] = stats["steps"] / max(seconds, 1e-9)
    return stats


def make_env(config: SACConfig, num_workers: int | None = None) -> InGraphBatchEnv:
    """The batch of ``config.num_envs`` envs named by ``config.env``.

    A Gymnasium id runs in worker processes (:func:`batchenv.make`, several envs per
    worker), each env ``gymnasium.make(id, max_episode_steps=config.max_length)`` with
    float32 observations; ``"module:Class"`` is an in-graph env built as
    ``Class(num_envs=..., device=..., seed=...)``. No observation or action normalisation:
    SAC scales its actions into the Box itself.

        >>> env = make_env(SACConfig(env="batchenv.kernels:Pendulum", num_envs=4))
        >>> env.num_envs, env.single_action_space
        (4, Box(-2.0, 2.0, (1,), float32))
    """
    device = torch.device(config.device)
    cls = env_class(config.env)
    if cls is not None:
        env = cls(num_envs=config.num_envs, device=device, seed=config.seed)
        return InGraphBatchEnv(env, device=device)
    constructor = gym_constructor(config.env, config.max_length, normalize_ranges=False)
    workers = batchenv.make(constructor, config.num_envs, num_workers=num_workers)
    return InGraphBatchEnv(workers, device=device)  # train() seeds every phase


def episode_limit(config: SACConfig, env: Any = None) -> int:
    """The longest episode ``config.env`` can have: its time limit (bounds evaluation loops).

    ValueError when the env has none (SAC evaluates whole episodes).
    """
    limit = config.max_length
    cls = env_class(config.env)
    if cls is not None:
        inner = getattr(env, "env", None)
        limit = getattr(inner, "max_episode_steps", None) or getattr(cls, "max_episode_steps", None)
    elif limit is None:
        try:
            limit = gym.spec(config.env).max_episode_steps
        except gym.error.Error:
            limit = None
    if not limit:
        raise ValueError(
            f"{config.env} has no time limit, but SAC evaluates whole episodes; set "
            f"max_length (--set max_length=1000)"
        )
    return int(limit)


def evaluate(
    run_dir: str | Path,
    episodes: int | None = None,
    num_envs: int | None = None,
    seed: int | None = None,
    device: str | None = None,
) -> dict[str, float]:
    """Exactly ``episodes`` deterministic episodes of the latest checkpoint in ``run_dir``.

    ``min(num_envs, episodes)`` envs (defaults: the run's ``eval_episodes`` and
    ``num_envs``) seeded with ``seed`` (default: the run's seed + 1000, unlike any training
    phase). Returns ``mean_score``, ``mean_length``, ``episodes``, ``steps`` and
    ``steps_per_s``. The replay memory in the checkpoint is not rebuilt.

        >>> evaluate("runs/sac-pendulum", episodes=10)["mean_score"]
        -150.2
    """
    saved = config_from_run(run_dir)
    episodes = saved.eval_episodes if episodes is None else episodes
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    rows = min(num_envs or saved.num_envs, episodes)
    overrides = {"device": device} if device else {}
    config = saved.replace(num_envs=rows, **overrides)
    check_device(config.device)
    run = RunDirectory(run_dir, ALGORITHM, resume=True, tensorboard=False)
    try:
        checkpoint = run.load_checkpoint()
    finally:
        run.close()
    if checkpoint is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet (it is written after a round)")
    env = make_env(config)
    try:
        algo = SAC(env.single_observation_space, env.single_action_space, config)
        algo.load_state_dict(checkpoint["algorithm"], memory=False)
        seed = config.seed + 1000 if seed is None else seed
        limit = episode_limit(config, env)
        return run_episodes(env, algo.eval_mode(), episodes, seed, limit)
    finally:
        env.close()


def config_from_run(run_dir: str | Path) -> SACConfig:
    """The SACConfig stored in ``run_dir/config.json``."""
    return train_cli.config_from_run(run_dir, ALGORITHM, SACConfig)
