"""What DQN and SAC (the replay-memory algorithms) share: the resume checks, the checkpoint
contents and the session runner (their ``batchenv train`` options are in
:mod:`batchenv.algorithms.train_cli`).

Each algorithm keeps its own config, loop and messages' names; these helpers take them.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from batchenv.algorithms.batchppo.envs import env_class
from batchenv.algorithms.train_cli import check_same_run
from batchenv.preflight import check_device, check_gym_env
from batchenv.run_dir import CHECKPOINT_NAME

__all__ = [
    "checkpoint_state",
    "progress_bar",
    "run_session",
    "check_shared",
    "session_cpus",
    "set_rng_states",
]

# --- resume and checkpoints -------------------------------------------------------------------


def check_start(
    config: Any,
    env: Any,
    logdir: str | Path | None,
    resume: bool,
    config_from_run: Callable[[str | Path], Any],
) -> None:
    """What a run checks before anything touches the disk: the device, the env id, and when
    resuming, the run directory's stored config (read by ``config_from_run``) and checkpoint."""
    check_device(config.device)
    if env is None and env_class(config.env) is None:
        check_gym_env(config.env)
    if resume:
        if logdir is None:
            raise ValueError("resume=True needs logdir, the run directory to continue")
        check_same_run(config_from_run(logdir), config)
        if not (Path(logdir) / CHECKPOINT_NAME).exists():
            raise FileNotFoundError(
                f"{logdir} has no checkpoint yet (one is written after every round), so "
                "there is nothing to resume; start a new run instead"
            )


def checkpoint_state(
    algo: Any,
    config: Any,
    counters: dict[str, int],
    scores: Sequence[float],
    **extra: Any,
) -> dict[str, Any]:
    """A round's checkpoint: algorithm, config, counters, scores, ``extra`` and RNG states."""
    return {
        "algorithm": algo.state_dict(),
        "config": dataclasses.asdict(config),
        "counters": dict(counters),
        "scores": list(scores),
        **extra,
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        },
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore the torch, NumPy and Python RNG states a checkpoint holds."""
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


def progress_bar(total: int, done: int, enabled: bool, last_score: float | None = None):
    """A tqdm bar of env steps from ``done`` (None when not ``enabled``)."""
    if not enabled:
        return None
    from tqdm import tqdm

    bar = tqdm(
        total=total, initial=done, unit="step", unit_scale=True, mininterval=1.0, dynamic_ncols=True
    )
    if last_score is not None:
        bar.set_postfix(eval=f"{last_score:.1f}", refresh=False)
    return bar


# --- sessions of batchenv run -----------------------------------------------------------------


def session_cpus(config: Any) -> int:
    """One core for in-graph envs; a parent and one worker process for Gymnasium ids."""
    from batchenv.algorithms.batchppo.envs import env_class

    return 1 if env_class(config.env) is not None else 2


def check_shared(config: Any) -> None:
    """ValueError unless ``config`` can train in shared memory (meta.distributed: shared):
    torch shares CPU tensors only, as SLM Lab's Hogwild notes."""
    if str(config.device).partition(":")[0] != "cpu":  # cuda, cuda:N, mps, auto
        raise ValueError(
            f"meta.distributed: shared keeps the networks in CPU shared memory, but "
            f"config.device is {config.device!r}; set config.device: cpu, or "
            "meta.distributed: false"
        )


def run_session(
    train: Callable[..., Any],
    make_env: Callable[..., Any],
    config: Any,
    run_dir: Path,
    *,
    resume: bool,
    progress: bool,
    cpus: int,
    **callbacks: Any,
) -> None:
    """``train(config, ...)`` into ``run_dir`` on ``cpus`` cores, passing ``callbacks`` (and
    ``shared``, meta.distributed: shared) on."""
    from batchenv.algorithms.batchppo.envs import env_class

    run_dir = Path(run_dir)
    if resume and not (run_dir / CHECKPOINT_NAME).exists():
        shutil.rmtree(run_dir, ignore_errors=True)  # died before its first round
        resume = False
    in_graph = env_class(config.env) is not None
    # In-graph envs step in torch: the session's cores are torch threads. Worker envs:
    # one torch thread, the other cores step the envs.
    config = config.replace(torch_threads=max(1, cpus) if in_graph else 1)
    env = None if in_graph else make_env(config, num_workers=max(1, cpus - 1))
    try:
        train(config, env=env, logdir=run_dir, resume=resume, progress=progress, **callbacks)
    finally:
        if env is not None:
            env.close()
