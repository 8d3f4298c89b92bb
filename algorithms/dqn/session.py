"""DQN as a session of an experiment (the trainer protocol of batchenv.experiment).

A spec's ``config`` holds :class:`DQNConfig` fields on top of the preset of its env (the
same rule as ``batchenv train dqn --env``); ``meta.steps``, ``meta.seed``,
``meta.eval_every`` and ``meta.log_frequency`` set ``steps``, ``seed``, ``eval_every`` and
``log_frequency``. A session is :func:`~batchenv.algorithms.dqn.train.train` into the
session folder. Its checkpoints are SLM Lab's log checkpoints (every ``log_frequency``
train env steps, the mean return of the last 100 training episodes); with
``log_frequency`` 0, the greedy eval phases that end every round are the checkpoints.

    >>> config = TRAINER.make_config("CartPole-v1", {"double": True}, steps=100_000, seed=3,
    ...                              eval_every=None)
    >>> config.double, config.steps, config.seed
    (True, 100000, 3)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from batchenv.algorithms.offpolicy import check_shared, run_session, session_cpus

from .cli import OPTIONS, preflight
from .config import PRESETS, DQNConfig

__all__ = ["TRAINER", "DQNTrainer"]


class DQNTrainer:
    """DQN under the trainer protocol (see batchenv.experiment.trainers)."""

    config_class = DQNConfig
    meta_fields = {
        "env": "env",
        "steps": "steps",
        "seed": "seed",
        "eval_every": "eval_every",
        "log_frequency": "log_frequency",
    }
    default_env = PRESETS[OPTIONS.default_preset].env

    def make_config(
        self,
        env: str,
        values: Mapping[str, Any],
        *,
        steps: int | None,
        seed: int,
        eval_every: int | None,
        log_frequency: int | None = None,
    ) -> DQNConfig:
        """The preset of ``env`` (or the defaults) with ``values`` and the meta fields."""
        meta = {"seed": seed, "steps": steps, "eval_every": eval_every}
        return OPTIONS.session_config(env, values, {**meta, "log_frequency": log_frequency})

    def check(self, config: DQNConfig) -> None:
        """What ``batchenv train dqn`` checks first: the device, the env id and its extras,
        a Discrete action space (ValueError with one line saying what to do)."""
        preflight(config)

    def check_shared(self, config: DQNConfig) -> None:
        """meta.distributed: shared is supported on the CPU (ValueError for another device)."""
        check_shared(config)

    def cpus(self, config: DQNConfig) -> int:
        """One core for in-graph envs; a parent and one worker process for Gymnasium ids."""
        return session_cpus(config)

    def train(
        self,
        config: DQNConfig,
        run_dir: Path,
        *,
        resume: bool,
        progress: bool,
        cpus: int,
        report,
        shared: Any = None,
    ) -> None:
        """One session into ``run_dir``; ``report`` at every log checkpoint (or round)."""
        from .train import make_env, train

        def on_checkpoint(steps: int, total_reward: float, updates: int) -> None:
            report(steps, total_reward, opt_step=updates)

        run_session(
            train,
            make_env,
            config,
            run_dir,
            resume=resume,
            progress=progress,
            cpus=cpus,
            shared=shared,
            on_checkpoint=on_checkpoint if config.log_frequency else None,
            after_round=None if config.log_frequency else on_checkpoint,
        )


TRAINER = DQNTrainer()
