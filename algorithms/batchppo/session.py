"""BatchPPO as a session of an experiment (the trainer protocol of batchenv.experiment).

A spec's ``config`` holds :class:`BatchPPOConfig` fields on top of the preset of its env
(the same rule as ``batchenv train batchppo --env``); ``meta.steps``, ``meta.seed``,
``meta.eval_every`` and ``meta.log_frequency`` set ``steps``, ``seed``, ``eval_every`` and
``log_frequency``. A session is :func:`~batchenv.algorithms.batchppo.train.train` into the
session folder. Its checkpoints are SLM Lab's log checkpoints: every ``log_frequency``
train env steps, the mean return of the last 100 training episodes (independent of the
update rounds); with ``log_frequency`` 0, the mean-action eval phases (after every round or
every ``eval_every`` training steps) are the checkpoints instead.

    >>> config = TRAINER.make_config("CartPole-v1", {"discount": 0.99}, steps=50_000, seed=3,
    ...                              eval_every=None)
    >>> config.max_length, config.discount, config.seed
    (500, 0.99, 3)
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from batchenv.run_dir import CHECKPOINT_NAME

from .cli import DEFAULT_ENV, OPTIONS, preflight
from .config import BatchPPOConfig
from .envs import env_class

__all__ = ["TRAINER", "BatchPPOTrainer"]


class BatchPPOTrainer:
    """BatchPPO under the trainer protocol (see batchenv.experiment.trainers)."""

    config_class = BatchPPOConfig
    meta_fields = {
        "env": "env",
        "steps": "steps",
        "seed": "seed",
        "eval_every": "eval_every",
        "log_frequency": "log_frequency",
    }
    default_env = DEFAULT_ENV

    def make_config(
        self,
        env: str,
        values: Mapping[str, Any],
        *,
        steps: int | None,
        seed: int,
        eval_every: int | None,
        log_frequency: int | None = None,
    ) -> BatchPPOConfig:
        """The preset of ``env`` (or its defaults) with ``values`` and the meta fields."""
        meta = {"seed": seed, "steps": steps, "eval_every": eval_every}
        return OPTIONS.session_config(env, values, {**meta, "log_frequency": log_frequency})

    def check(self, config: BatchPPOConfig) -> None:
        """What ``batchenv train batchppo`` checks first: the device, the env id and its
        extras, update_every >= num_agents (ValueError with one line saying what to do)."""
        preflight(config)

    def cpus(self, config: BatchPPOConfig) -> int:
        """One core for in-graph envs; a parent and one worker process for Gymnasium ids."""
        return 1 if env_class(config.env) is not None else 2

    def train(
        self,
        config: BatchPPOConfig,
        run_dir: Path,
        *,
        resume: bool,
        progress: bool,
        cpus: int,
        report,
    ) -> None:
        """One session into ``run_dir``; ``report`` at every log checkpoint (or eval phase)."""
        from .envs import make_env
        from .train import train

        run_dir = Path(run_dir)
        if resume and not (run_dir / CHECKPOINT_NAME).exists():
            shutil.rmtree(run_dir, ignore_errors=True)  # died before its first round
            resume = False
        in_graph = env_class(config.env) is not None
        # In-graph envs step in torch: the session's cores are torch threads. Worker envs:
        # one torch thread, the other cores step the envs.
        config = config.replace(torch_threads=max(1, cpus) if in_graph else 1)
        env = None if in_graph else make_env(config, num_workers=max(1, cpus - 1))
        per_update = config.update_epochs * config.minibatches

        def after_round(steps: int, score: float) -> None:
            report(steps, score, opt_step=_updates(run_dir) * per_update)

        def on_checkpoint(steps: int, total_reward: float, updates: int) -> None:
            report(steps, total_reward, opt_step=updates * per_update)

        try:
            train(
                config,
                env=env,
                logdir=run_dir,
                resume=resume,
                progress=progress,
                after_round=None if config.log_frequency else after_round,
                on_checkpoint=on_checkpoint if config.log_frequency else None,
            )
        finally:
            if env is not None:
                env.close()


def _updates(run_dir: Path) -> int:
    """Updates made so far: the sum of the train rows' ``updates`` in metrics.csv."""
    total = 0
    with open(run_dir / "metrics.csv", newline="") as file:
        for row in csv.DictReader(file):
            if row.get("phase") == "train" and row.get("updates"):
                total += int(float(row["updates"]))
    return total


TRAINER = BatchPPOTrainer()
