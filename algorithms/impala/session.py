"""IMPALA as a session of an experiment (the trainer protocol of batchenv.experiment).

A spec's ``config`` holds :class:`ImpalaConfig` fields; ``meta.steps`` sets
``total_steps``, ``meta.seed`` ``seed`` and ``meta.log_frequency`` (or ``meta.eval_every``,
when log_frequency is unset) ``log_every`` (agent steps between metrics rows; default: 1/50
of the run, at least one learner batch), so sessions of a trial have checkpoints at the
same steps. A checkpoint's return is the mean return of the training episodes finished
since the previous one (IMPALA has no separate eval phase; SLM Lab averages the last 100
episodes instead); a checkpoint where none finished is not reported.
The learner threads and actor processes race, so IMPALA sessions are seeded but, like
TorchBeast's, not bitwise reproducible.

    >>> config = TRAINER.make_config("CartPole-v1", {"num_actors": 2}, steps=400_000, seed=1,
    ...                              eval_every=None)
    >>> config.total_steps, config.log_every
    (400000, 8000)
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from batchenv.run_dir import CHECKPOINT_NAME

from .config import ImpalaConfig

__all__ = ["TRAINER", "ImpalaTrainer"]

#: Checkpoints per session when the spec does not set meta.eval_every.
CHECKPOINTS = 50


class ImpalaTrainer:
    """IMPALA (sync or async mode) under the trainer protocol."""

    config_class = ImpalaConfig
    meta_fields = {
        "env": "env",
        "steps": "total_steps",
        "seed": "seed",
        "eval_every": "log_every",
        "log_frequency": "log_every",
    }
    default_env = "CartPole-v1"

    def make_config(
        self,
        env: str,
        values: Mapping[str, Any],
        *,
        steps: int | None,
        seed: int,
        eval_every: int | None,
        log_frequency: int | None = None,
    ) -> ImpalaConfig:
        config = ImpalaConfig(env=env, seed=seed).replace(**dict(values))
        if steps is not None:
            config = config.replace(total_steps=steps)
        if log_frequency is not None:
            eval_every = log_frequency
        if eval_every is None:
            eval_every = max(config.steps_per_batch, config.total_steps // CHECKPOINTS)
        return config.replace(log_every=eval_every)

    def check(self, config: ImpalaConfig) -> None:
        """What ``batchenv train impala`` checks first: the device, the env id and its
        extras (ValueError with one line saying what to do)."""
        from .cli import preflight

        preflight(config)

    def cpus(self, config: ImpalaConfig) -> int:
        """Actor processes (sync) or env workers (async) plus the learner's threads."""
        actors = config.num_actors if config.mode == "sync" else max(1, config.env_workers)
        return actors + config.torch_threads

    def train(
        self,
        config: ImpalaConfig,
        run_dir: Path,
        *,
        resume: bool,
        progress: bool,
        cpus: int,
        report,
    ) -> None:
        from batchenv.run_dir import RunDirectory

        from .modes import trainer_class

        run_dir = Path(run_dir)
        if resume and not (run_dir / CHECKPOINT_NAME).exists():
            shutil.rmtree(run_dir, ignore_errors=True)
            resume = False
        if resume:
            run = RunDirectory(run_dir, "impala", resume=True)
            checkpoint = run.load_checkpoint()
        else:
            run = RunDirectory(run_dir, "impala", config, seed=config.seed, env_id=config.env)
            checkpoint = None
        per_batch = config.steps_per_batch
        with run:
            if checkpoint is not None and checkpoint["step"] >= config.total_steps:
                return
            trainer = trainer_class(config.mode)(
                config,
                run_dir=run,
                checkpoint=checkpoint,
                progress=progress,
                on_log=lambda step, row: report(
                    step, row["mean_score"], opt_step=step // per_batch
                ),
            )
            trainer.train()


TRAINER = ImpalaTrainer()
