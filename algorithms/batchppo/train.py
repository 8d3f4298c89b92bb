"""train(): BatchPPO's training loop, alternating train and eval phases.

Read top to bottom, like CleanRL's ``ppo.py`` (the loop is batch-ppo's ``train.py``, see the
BatchPPO page of the docs):

1. checks that create nothing (device, env id and its extras, a checkpoint to resume);
2. the env (:func:`~batchenv.algorithms.batchppo.envs.make_env`), the run directory (new,
   or reopened with its checkpoint when resuming) and the algorithm;
3. rounds until ``config.steps`` training env steps are done, each round
   - a train phase of ``update_every * max_length`` env steps (sampled actions, learning),
   - an eval phase of ``ceil(eval_episodes / num_agents) * max_length`` lockstep steps
     (mean actions, no learning) after every round, or every ``eval_every`` train steps,
   each phase a plain loop over ``simulate()`` that starts with a forced reset of every row
   (and a reseed of the envs, so a phase's episodes depend only on the seed and the phase
   number);
4. after every round: a metrics row per phase and an atomic checkpoint (algorithm,
   normalisers, optimiser, RNG states, step counters), so ``resume=True`` continues exactly
   where the last round ended; ``curve.png`` every ``CURVE_SECONDS`` and when the run ends
   (also by Ctrl-C or a callback's exception);
5. log checkpoints (SLM Lab's, :mod:`~batchenv.algorithms.batchppo.log_checkpoints`):
   every ``config.log_frequency`` train steps within the train phases, the mean return of
   the last 100 training episodes, handed to ``on_checkpoint`` once their round is saved.

Env steps count every row (``num_agents`` per ``simulate()`` call); ``config.steps`` counts
training steps only. A run stops after the first lockstep step at or past ``config.steps``:
its train steps are ``config.steps`` rounded up to a multiple of ``num_agents`` (200,010 for
200,000 on 30 envs), so the last round's train phase may be shorter than the others. A train
phase in which no episode finished and no update ran writes no metrics row (it would hold
only NaN).

Ctrl-C (KeyboardInterrupt) raises :class:`TrainingInterrupted` once the run directory holds
the state after the last complete round (the starting state when no round completed); the
round in progress is dropped and ``resume=True`` redoes it exactly.

    >>> from batchenv.algorithms.batchppo import PRESETS, train
    >>> config = PRESETS["cartpole"].replace(env="batchenv.kernels:CartPole", steps=20_000)
    >>> scores = train(config, logdir="runs/cartpole")   # eval scores, one per round
    >>> scores = train(config.replace(steps=40_000), logdir="runs/cartpole", resume=True)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from batchenv.algorithms import train_cli
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import in_graph_batch_env, simulate
from batchenv.preflight import check_device, check_gym_env
from batchenv.run_dir import CHECKPOINT_NAME, RunDirectory

from .algorithm import BatchPPO
from .config import BatchPPOConfig
from .envs import env_class, make_env, phase_seed, reseed
from .log_checkpoints import LogCheckpoints

__all__ = [
    "TrainingInterrupted",
    "config_from_run",
    "evaluate",
    "run_episodes",
    "run_phase",
    "train",
]

ALGORITHM = "batchppo"

#: The columns of metrics.csv after step, wall_time and phase, in this order.
METRICS = (
    "mean_score",
    "mean_length",
    "episodes",
    "policy_loss",
    "value_loss",
    "kl",
    "entropy",
    "beta",
    "updates",
    "steps_per_s",
)
_UPDATE_MEANS = ("policy_loss", "value_loss", "kl", "entropy")

#: curve.png is redrawn after a round only when this many seconds have passed since it was
#: last drawn, and when train() ends: drawing costs a noticeable share of a short round.
CURVE_SECONDS = 30.0


def train(
    config: BatchPPOConfig,
    env: Any = None,
    logdir: str | Path | None = None,
    resume: bool = False,
    *,
    progress: bool = True,
    after_round: Callable[[int, float], None] | None = None,
    on_checkpoint: Callable[[int, float, int], None] | None = None,
) -> list[float]:
    """Train BatchPPO per ``config``; return the mean eval score of every round so far.

    Args:
        config: the settings (env, run length, networks, losses, seed, device).
        env: an InGraphBatchEnv, InGraphEnv or NumPy BatchEnv of ``config.num_agents`` rows
            to train on (closed by the caller); None builds ``config.env``.
        logdir: the run directory; None makes ``runs/batchppo-<env>-<time>``.
        resume: continue the run in ``logdir`` from its checkpoint. ``config`` must equal
            the run's config except ``steps`` (which may grow), ``device`` and
            ``torch_threads``. Raises FileNotFoundError when the run has no checkpoint yet.
        progress: show a tqdm progress bar (steps, steps/s, the latest eval score).
        after_round: called as ``after_round(train_steps, eval_score)`` after the
            checkpoint of every round that had an eval phase (to stop early, raise).
        on_checkpoint: called as ``on_checkpoint(train_steps, total_reward, updates)`` for
            every log checkpoint (every ``config.log_frequency`` train steps; the mean
            return of the last 100 training episodes, NaN before the first; the updates
            made so far), in order, once the round that made it is saved (to stop, raise).

    Example:
        >>> config = PRESETS["pendulum"].replace(steps=12_000)
        >>> scores = train(config, logdir="runs/pendulum-short")
    """
    # 1. Checks that need nothing on disk, then the env and the run directory (a new one,
    #    or the old one with its checkpoint).
    check_device(config.device)
    if env is None and env_class(config.env) is None:
        check_gym_env(config.env)
    if resume:
        if logdir is None:
            raise ValueError("resume=True needs logdir, the run directory to continue")
        train_cli.check_same_run(config_from_run(logdir), config)
        if not (Path(logdir) / CHECKPOINT_NAME).exists():
            raise FileNotFoundError(
                f"{logdir} has no checkpoint yet (one is written after every round), so "
                "there is nothing to resume; start a new run instead"
            )
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
        checkpoint = run.load_checkpoint() if resume else None

        # 2. The algorithm, restored from the checkpoint when resuming.
        algo = BatchPPO(env.single_observation_space, env.single_action_space, config)
        counters = {"train_steps": 0, "eval_steps": 0, "rounds": 0, "evaluated_at": -1}
        scores: list[float] = []
        log = LogCheckpoints(config.log_frequency, env.num_envs, config.steps)
        if checkpoint is not None:
            algo.load_state_dict(checkpoint["algorithm"])
            counters = {"evaluated_at": -1, **checkpoint["counters"]}
            scores = list(checkpoint["scores"])
            _set_rng_states(checkpoint["rng"])
            log.frame = counters["train_steps"]
            if "log_checkpoints" in checkpoint:
                log.load_state_dict(checkpoint["log_checkpoints"])
        # What Ctrl-C saves before the first round of a new run ends: the starting state.
        start = (
            None
            if checkpoint is not None
            else copy.deepcopy(_checkpoint(algo, config, counters, scores, log))
        )
        train_calls = math.ceil(config.update_every * config.max_length / env.num_envs)
        eval_calls = math.ceil(config.eval_episodes / env.num_envs) * config.max_length
        bar = _progress_bar(config.steps, counters["train_steps"], scores, progress)
        if bar is not None:
            cleanup.callback(bar.close)

        # 3. Rounds of a train phase and an eval phase. A round is kept whole or not at
        #    all: its metrics rows and its checkpoint are written together at its end, so
        #    Ctrl-C (KeyboardInterrupt) keeps the last complete round and drops the one in
        #    progress, and resume=True redoes that round exactly.
        saved_step = counters["train_steps"]
        drawn = time.perf_counter()  # when curve.png was last drawn
        undrawn = False  # metrics rows written since then
        try:
            while counters["train_steps"] < config.steps:
                round_ = counters["rounds"]
                left = math.ceil((config.steps - counters["train_steps"]) / env.num_envs)
                algo.train_mode()
                stats = run_phase(
                    env,
                    algo,
                    min(train_calls, left),
                    phase_seed(config.seed, 2 * round_),
                    on_step=bar.update if bar else None,
                    checkpoints=log,
                )
                train_steps = counters["train_steps"] + stats.pop("steps")
                rows = []
                if stats["episodes"] or stats["updates"]:  # else an all-NaN row: none
                    rows.append((train_steps, "train", stats))

                evaluated = _eval_due(config, {**counters, "train_steps": train_steps})
                if evaluated:
                    algo.eval_mode()
                    stats = run_phase(
                        env, algo, eval_calls, phase_seed(config.seed, 2 * round_ + 1)
                    )
                    algo.train_mode()
                    counters["eval_steps"] += stats.pop("steps")
                    counters["evaluated_at"] = train_steps
                    rows.append((train_steps, "eval", _eval_metrics(stats)))
                    scores.append(stats["mean_score"])
                counters["train_steps"] = train_steps
                counters["rounds"] += 1

                # 4. Metrics and checkpoint after every round, the curve when CURVE_SECONDS
                #    have passed since it was drawn (Ctrl-C waits for all).
                with _interrupt_after():
                    for step, phase, metrics in rows:
                        run.log(step, phase, **metrics)
                    undrawn = undrawn or bool(rows)
                    if undrawn and time.perf_counter() - drawn >= CURVE_SECONDS:
                        run.plot_curve()
                        drawn, undrawn = time.perf_counter(), False
                    run.save_checkpoint(_checkpoint(algo, config, counters, scores, log))
                    saved_step = counters["train_steps"]
                    for frame, total_reward, updates in log.take():
                        if on_checkpoint is not None:
                            on_checkpoint(frame, total_reward, updates)
                if bar is not None and scores:
                    bar.set_postfix(eval=f"{scores[-1]:.1f}", refresh=False)
                if after_round is not None and evaluated:
                    after_round(counters["train_steps"], scores[-1])
        except KeyboardInterrupt:
            if start is not None and not (run.path / CHECKPOINT_NAME).exists():
                run.save_checkpoint(start)
            raise TrainingInterrupted(run.path, saved_step) from None
        finally:  # the curve of every row written, however the run ended
            if undrawn:
                run.plot_curve()
        return scores


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :func:`train`; ``run_dir`` holds a checkpoint at train step ``step``.

    The checkpoint is the state after the last complete round (the starting state when
    none completed); the round in progress is dropped, and ``train(..., resume=True)``
    redoes it exactly.
    """

    def __init__(self, run_dir: Path, step: int):
        super().__init__(f"interrupted; checkpoint at train step {step} in {run_dir}")
        self.run_dir = Path(run_dir)
        self.step = step


def run_phase(
    env: InGraphBatchEnv,
    algo: BatchPPO,
    calls: int,
    seed: int | None,
    on_step: Callable[[int], Any] | None = None,
    checkpoints: LogCheckpoints | None = None,
) -> dict[str, float]:
    """``calls`` lockstep steps from a forced reset; the phase's metrics.

    ``checkpoints`` (train phases) is told of every step's finished episodes and updates.

    The envs are reseeded with ``seed`` first (None: not). Returns ``steps`` (env steps
    made), the ``mean_score`` / ``mean_length`` / number of ``episodes`` finished in the
    phase (NaN / 0 when none finished), the mean losses, KL and entropy of the updates made
    during the phase (NaN when none), the latest ``beta``, the number of ``updates`` and
    ``steps_per_s``.

        >>> stats = run_phase(env, algo.eval_mode(), calls=200, seed=1)
    """
    if seed is not None and not reseed(env, seed):
        warnings.warn(
            f"cannot seed {type(env.env).__name__} (it has no seed(seed) method): phases do "
            f"not start from known episodes, so a resumed run will not repeat an "
            f"uninterrupted one exactly",
            stacklevel=2,
        )
    started = time.perf_counter()
    updates: list[dict[str, torch.Tensor]] = []
    summaries: dict[str, torch.Tensor] = {}
    finished = torch.zeros((), dtype=torch.int64, device=env.device)
    for call in range(calls):
        done, score, summaries = simulate(env, algo, reset=call == 0, log=call == calls - 1)
        finished += done.sum()
        if "updates" in summaries:
            updates.append(summaries)
        if checkpoints is not None:
            checkpoints.step(done, score, updated="updates" in summaries)
        if on_step is not None:
            on_step(env.num_envs)
    seconds = time.perf_counter() - started
    means = {name: [float(update[name]) for update in updates] for name in _UPDATE_MEANS}
    stats = {
        "steps": calls * env.num_envs,
        "mean_score": float(summaries.get("mean_score", math.nan)),
        "mean_length": float(summaries.get("mean_length", math.nan)),
        "episodes": int(finished),
    }
    for name in _UPDATE_MEANS:  # (METRICS gives the order: means, beta, updates, steps/s)
        stats[name] = float(np.mean(means[name])) if means[name] else math.nan
    stats["beta"] = float(algo.beta)
    stats["updates"] = len(updates)
    stats["steps_per_s"] = stats["steps"] / max(seconds, 1e-9)
    return stats


def evaluate(
    run_dir: str | Path,
    episodes: int | None = None,
    num_agents: int | None = None,
    seed: int | None = None,
    device: str | None = None,
) -> dict[str, float]:
    """Exactly ``episodes`` mean-action episodes of the latest checkpoint in ``run_dir``.

    ``min(num_agents, episodes)`` envs (defaults: the run's ``eval_episodes`` and
    ``num_agents``) seeded with ``seed`` (default: the run's seed + 1000, unlike any
    training phase) play the episodes in lockstep: env ``i`` plays its first
    ``ceil((episodes - i) / envs)`` episodes, so no env's later (or shorter) episodes are
    favoured. Returns ``mean_score``, ``mean_length``, ``episodes``, ``steps`` and
    ``steps_per_s``.

        >>> evaluate("runs/cartpole", episodes=10)["mean_score"]
        500.0
    """
    overrides = {"device": device} if device else {}
    saved = config_from_run(run_dir)
    episodes = saved.eval_episodes if episodes is None else episodes
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    rows = min(num_agents or saved.num_agents, episodes)
    config = saved.replace(num_agents=rows, **overrides)
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
        algo = BatchPPO(env.single_observation_space, env.single_action_space, config)
        state = dict(checkpoint["algorithm"])
        if state["num_rows"] is not None and state["num_rows"] != env.num_envs:
            state.update(num_rows=None, memory=None, recurrent_state=None, last_params=None)
        algo.load_state_dict(state)
        seed = config.seed + 1000 if seed is None else seed
        return run_episodes(env, algo.eval_mode(), episodes, seed, config.max_length)
    finally:
        env.close()


def run_episodes(
    env: InGraphBatchEnv, algo: BatchPPO, episodes: int, seed: int | None, max_length: int
) -> dict[str, float]:
    """Exactly ``episodes`` episodes from a forced reset, env ``i`` playing its first
    ``ceil((episodes - i) / num_envs)``; their mean return and length.

    Every episode ends within ``max_length`` steps (the time limit), which bounds the loop;
    an env that runs past it raises RuntimeError.
    """
    env = in_graph_batch_env(env)
    if seed is not None and not reseed(env, seed):
        name = type(env.env).__name__
        warnings.warn(f"cannot seed {name} (it has no seed(seed) method)", stacklevel=2)
    num = env.num_envs
    quota = torch.tensor([(episodes - row + num - 1) // num for row in range(num)])
    taken = torch.zeros(num, dtype=torch.int64)
    length = torch.zeros(num, dtype=torch.int64)
    scores: list[float] = []
    lengths: list[int] = []
    limit = int(quota.max()) * max_length
    started = time.perf_counter()
    calls = 0
    while bool((taken < quota).any()):
        if calls >= limit:
            raise RuntimeError(
                f"{int((quota - taken).clamp(min=0).sum())} of {episodes} episodes did not "
                f"end within {limit} steps; is max_length={max_length} the env's time limit?"
            )
        done, score, _ = simulate(env, algo, reset=calls == 0)
        calls += 1
        done = done.cpu()
        length += 1
        counted = done & (taken < quota)
        if bool(counted.any()):
            per_row = score.detach().cpu().reshape(num, -1).mean(1)
            scores.extend(per_row[counted].tolist())
            lengths.extend(length[counted].tolist())
        taken += done.to(torch.int64)
        length[done] = 0
    seconds = time.perf_counter() - started
    return {
        "mean_score": float(np.mean(scores)),
        "mean_length": float(np.mean(lengths)),
        "episodes": len(scores),
        "steps": calls * num,
        "steps_per_s": calls * num / max(seconds, 1e-9),
    }


def config_from_run(run_dir: str | Path) -> BatchPPOConfig:
    """The BatchPPOConfig stored in ``run_dir/config.json``."""
    return train_cli.config_from_run(run_dir, ALGORITHM, BatchPPOConfig)


# --- helpers --------------------------------------------------------------------------------


@contextlib.contextmanager
def _interrupt_after():
    """Hold Ctrl-C (SIGINT) back until the block ends, then raise KeyboardInterrupt; in the
    main thread only (elsewhere Python delivers no signals anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _eval_due(config: BatchPPOConfig, counters: dict[str, int]) -> bool:
    """An eval phase after this round: every round (eval_every 0), when the train steps
    crossed a multiple of eval_every since the last one, and after the last round."""
    done = counters["train_steps"]
    if config.eval_every == 0 or done >= config.steps:
        return True
    last = max(counters["evaluated_at"], 0)
    return done // config.eval_every > last // config.eval_every


def _eval_metrics(stats: dict[str, float]) -> dict[str, float]:
    names = ("mean_score", "mean_length", "episodes", "steps_per_s")
    return {name: stats[name] for name in names}


def _checkpoint(
    algo: BatchPPO,
    config: BatchPPOConfig,
    counters: dict[str, int],
    scores: list[float],
    log: LogCheckpoints,
) -> dict[str, Any]:
    return {
        "algorithm": algo.state_dict(),
        "config": dataclasses.asdict(config),
        "counters": dict(counters),
        "scores": list(scores),
        "log_checkpoints": log.state_dict(),
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        },
    }


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


def _progress_bar(total: int, done: int, scores: list[float], enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    bar = tqdm(
        total=total, initial=done, unit="step", unit_scale=True, mininterval=1.0, dynamic_ncols=True
    )
    if scores:
        bar.set_postfix(eval=f"{scores[-1]:.1f}", refresh=False)
    return bar
