"""The small protocol an algorithm follows to run as a session of an experiment.

``algorithm: batchppo``, ``ppo``, ``impala``, ``sac`` or ``dqn`` in a spec load the
``session`` module of that package of ``batchenv.algorithms``; ``algorithm:
my_package.module:MyTrainer`` loads a researcher's own class. Either way the object has:

``config_class``
    a dataclass of the algorithm's settings; a spec's ``config`` keys are its fields,
    each documented by a one-line docstring under the field (``batchenv spec`` prints them).
``make_config(env, values, *, steps, seed, eval_every[, log_frequency]) -> config``
    the config for ``env`` with the spec's ``values`` applied; ``steps``, ``seed`` and
    ``eval_every`` come from the spec's ``meta`` (None: the algorithm's default). Raise
    ValueError or TypeError for bad values. ``log_frequency`` (env frames between
    checkpoints, SLM Lab's meta.log_frequency) is passed only when the spec sets it, so a
    trainer that has no such cadence need not take it.
``meta_fields`` (optional)
    ``{"env": field, "steps": field, "seed": field, "eval_every": field, "log_frequency":
    field}``: the config fields the spec's ``env`` and ``meta`` set (a spec's ``config``
    may not set them).
``default_env`` (optional)
    the env ``batchenv spec ALGORITHM`` writes into its template.
``check(config) -> None`` (optional)
    what would make a session fail at its start (an env id that does not exist, a missing
    extra, a device this machine lacks, settings that can never learn): raise ValueError
    with one line saying what to do. Every spec is checked with it before anything runs.
``cpus(config) -> int``
    the cores one session uses (torch threads plus env worker processes), so that a trial
    never runs more sessions at once than the machine has cores for.
``train(config, run_dir, *, resume, progress, cpus, report) -> None``
    train one session into the folder ``run_dir`` (resume: continue from the checkpoint
    there), using at most ``cpus`` cores, and call ``report(frame, total_reward,
    opt_step=None)`` at every checkpoint: ``frame`` env steps so far, ``total_reward`` the
    mean return of the checkpoint's episodes (NaN when there are none yet), ``opt_step``
    the optimiser steps so far when known. ``report`` may raise to stop training early
    (pruning); let that exception through.
``check_shared(config) -> None`` (optional)
    declares that the trainer supports ``meta.distributed: shared`` and raises ValueError
    (one line) for a config that cannot share its networks (e.g. a GPU device). Such a
    trainer's ``train`` is then also passed ``shared``, a
    :class:`~batchenv.experiment.shared.SharedParameters`: after building (and, resuming,
    restoring) its networks, it calls ``shared.attach({name: module})`` with the networks
    its optimisers train, so that every session of the trial trains the same ones.
``can_train_together(configs) -> bool`` and ``train_together(configs, run_dirs, *, resume,
progress, cpus, reports) -> None`` (optional, both)
    declare that sessions whose configs pass ``can_train_together`` (in-graph PPO: equal
    but for consecutive seeds) train as one program in one process: ``train_together``
    trains ``configs[i]`` into ``run_dirs[i]`` and calls ``reports[i]`` at its
    checkpoints, writing each folder as ``train`` would. The trial uses it for the
    sessions it still has to run (not with ``meta.distributed: shared`` or ``track:
    wandb``); those get ``cpus`` times the slots they take of the CPU budget.

    >>> trainer = load_trainer("batchppo")
    >>> config = trainer.make_config("batchenv.kernels:CartPole", {}, steps=20_000, seed=0,
    ...                              eval_every=None)
    >>> trainer.cpus(config)
    1
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["BUILTIN", "Report", "Trainer", "load_trainer", "shared_algorithms"]

#: Algorithms of ``batchenv.algorithms`` that ship a ``session`` module.
BUILTIN = ("batchppo", "impala", "sac", "dqn", "ppo")

Report = Callable[..., None]
"""``report(frame, total_reward, opt_step=None)``: one evaluation checkpoint."""


@runtime_checkable
class Trainer(Protocol):
    """What ``algorithm:`` in a spec names (see the module docstring)."""

    config_class: type

    def make_config(
        self,
        env: str,
        values: Mapping[str, Any],
        *,
        steps: int | None,
        seed: int,
        eval_every: int | None,
        **cadence: int,
    ) -> Any: ...

    def cpus(self, config: Any) -> int: ...

    def train(
        self,
        config: Any,
        run_dir: Path,
        *,
        resume: bool,
        progress: bool,
        cpus: int,
        report: Report,
    ) -> None: ...


def load_trainer(name: str) -> Trainer:
    """The trainer ``name`` names: a built-in algorithm or ``module:Class``.

    Raises ValueError with what was expected when it cannot be loaded.
    """
    if name in BUILTIN:
        module = importlib.import_module(f"batchenv.algorithms.{name}.session")
        return module.TRAINER
    if ":" not in name:
        raise ValueError(
            f"unknown algorithm {name!r}: expected one of {', '.join(BUILTIN)} or a trainer "
            f"class as 'module:Class'"
        )
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"algorithm {name!r}: cannot import {module_name!r} ({error})") from None
    target = getattr(module, attribute, None)
    if target is None:
        raise ValueError(f"algorithm {name!r}: {module_name!r} has no attribute {attribute!r}")
    trainer = target() if isinstance(target, type) else target
    missing = [
        method
        for method in ("make_config", "cpus", "train")
        if not callable(getattr(trainer, method, None))
    ]
    config_class = getattr(trainer, "config_class", None)
    if not dataclasses.is_dataclass(config_class):
        missing.append("config_class (a dataclass)")
    if missing:
        raise ValueError(
            f"algorithm {name!r} does not follow the trainer protocol: it lacks "
            f"{', '.join(missing)} (see batchenv.experiment.trainers)"
        )
    return trainer


def shared_algorithms() -> list[str]:
    """The built-in algorithms that support ``meta.distributed: shared``.

    >>> shared_algorithms()
    ['sac', 'dqn']
    """
    return [name for name in BUILTIN if hasattr(load_trainer(name), "check_shared")]
