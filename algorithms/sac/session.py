"""SAC as a session of an experiment (the trainer protocol of batchenv.experiment).

A spec's ``config`` holds :class:`SACConfig` fields on top of the preset of its env (the
same rule as ``batchenv train sac --env``); ``meta.steps``, ``meta.seed`` and
``meta.eval_every`` set ``steps``, ``seed`` and ``eval_every``, and ``meta.log_frequency``
(SLM Lab's checkpoint cadence in env frames) sets ``eval_every`` too. A session is
:func:`~batchenv.algorithms.sac.train.train` into the session folder; its checkpoints are
the evaluation phases (``eval_episodes`` deterministic episodes every ``eval_every`` train
steps), so a trial's ``total_reward_ma`` is the mean of its last evaluations.

    >>> config = TRAINER.make_config("CartPole-v1", {"discrete": "gumbel"}, steps=50_000,
    ...                              seed=3, eval_every=None)
    >>> config.discrete, config.log_alpha_range, config.seed
    ('gumbel', (-5.0, 2.0), 3)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from batchenv.algorithms.offpolicy import check_shared, run_session, session_cpus

from .cli import OPTIONS, preflight
from .config import SACConfig

__all__ = ["TRAINER", "SACTrainer"]


class SACTrainer:
    """SAC under the trainer protocol (see batchenv.experiment.trainers)."""

    config_class = SACConfig
    meta_fields = {
        "env": "env",
        "steps": "steps",
        "seed": "seed",
        "eval_every": "eval_every",
        "log_frequency": "eval_every",
    }
    default_env = "Pendulum-v1"

    def make_config(
        self,
        env: str,
        values: Mapping[str, Any],
        *,
        steps: int | None,
        seed: int,
        eval_every: int | None,
        log_frequency: int | None = None,
    ) -> SACConfig:
        """The preset of ``env`` (or the defaults) with ``values`` and the meta fields
        (``log_frequency``, when given, is the evaluation cadence)."""
        cadence = log_frequency if log_frequency is not None else eval_every
        return OPTIONS.session_config(
            env, values, {"seed": seed, "steps": steps, "eval_every": cadence}
        )

    def check(self, config: SACConfig) -> None:
        """What ``batchenv train sac`` checks first (ValueError with one line)."""
        preflight(config)

    def check_shared(self, config: SACConfig) -> None:
        """meta.distributed: shared is supported on the CPU (ValueError for another device)."""
        check_shared(config)

    def cpus(self, config: SACConfig) -> int:
        """One core for in-graph envs; a parent and one worker process for Gymnasium ids."""
        return session_cpus(config)

    def train(
        self,
        config: SACConfig,
        run_dir: Path,
        *,
        resume: bool,
        progress: bool,
        cpus: int,
        report,
        shared: Any = None,
    ) -> None:
        """One session into ``run_dir``; ``report`` after every evaluation phase."""
        from .train import make_env, train

        def after_round(steps: int, score: float, updates: int) -> None:
            report(steps, score, opt_step=updates)

        run_session(
            train,
            make_env,
            config,
            run_dir,
            resume=resume,
            progress=progress,
            cpus=cpus,
            shared=shared,
            after_round=after_round,
        )


TRAINER = SACTrainer()
