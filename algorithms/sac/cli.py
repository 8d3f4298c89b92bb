"""``batchenv train sac`` and ``batchenv evaluate RUN_DIR`` (the protocol of batchenv/cli.py).

    batchenv train sac                                  # the pendulum preset on Pendulum-v1
    batchenv train sac --env Pendulum-v1 --steps 2e4 --seed 1
    batchenv train sac --env batchenv.kernels:Pendulum  # in-graph envs, no worker processes
    batchenv train sac --preset cartpole_discrete --set discrete=gumbel
    batchenv train sac --resume runs/sac-Pendulum-v1-20261125-220000 --steps 4e4
    batchenv evaluate runs/sac-Pendulum-v1-20261125-220000 --episodes 20

The options come from :class:`SACConfig`: ``--env``, ``--num-envs``, ``--steps``, ``--seed``,
``--device`` and ``--threads`` set the config field of that name, ``--set key=value`` any
field. Precedence: the preset (named, or the one whose env is ``--env``), then ``--set``,
then the named options. Every value is checked before anything is written: a bad one gets
one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from batchenv.algorithms.train_cli import (
    ConfigOptions,
    add_run_arguments,
    train_command,
)
from batchenv.cli_common import evaluation_line, fail, whole_number
from batchenv.run_dir import CHECKPOINT_NAME

from .config import PRESETS, SACConfig, parse_overrides

__all__ = [
    "add_arguments",
    "add_evaluate_arguments",
    "evaluate",
    "make_config",
    "preflight",
    "train",
]

#: The options made from SACConfig; ``pendulum`` runs when neither --env nor --preset is given.
OPTIONS = ConfigOptions(
    config_class=SACConfig,
    presets=PRESETS,
    default_preset="pendulum",
    parse_overrides=parse_overrides,
    defaults_from="CleanRL's sac_continuous_action.py",
    set_example="q_lr=3e-4 discrete=gumbel",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv train sac`` (generated from SACConfig)."""
    parser.description = (
        "Train SAC (continuous, or discrete: expectation / gumbel) with a replay memory; the "
        "run directory gets config.json, metrics.csv, TensorBoard events, curve.png and a "
        "checkpoint (replay memory included) after every round of eval_every steps."
    )
    OPTIONS.add_arguments(parser)
    add_run_arguments(parser)


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv evaluate RUN_DIR`` for a SAC run."""
    parser.add_argument(
        "--episodes", type=whole_number, default=None, help="default: eval_episodes"
    )
    parser.add_argument(
        "--num-envs", type=whole_number, default=None, help="envs in lockstep (default: the run's)"
    )
    parser.add_argument("--seed", type=int, default=None, help="env seed (default: seed + 1000)")
    parser.add_argument("--device", default=None, help="torch device (default: the run's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")


def train(args: argparse.Namespace) -> int:
    """Run ``batchenv train sac``; the exit status (2 for bad options, 130 after Ctrl-C)."""
    from .train import train as run_training

    return train_command("sac", args, make_config, preflight, run_training, score_name="score")


def evaluate(run_dir: Path, args: argparse.Namespace) -> int:
    """Run ``batchenv evaluate RUN_DIR``: deterministic episodes of the latest checkpoint,
    one line printed; the run directory is only read."""
    import torch

    from .train import evaluate as run_evaluation

    if args.threads and args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        stats = run_evaluation(
            run_dir,
            episodes=args.episodes,
            num_envs=args.num_envs,
            seed=args.seed,
            device=args.device,
        )
    except (ValueError, FileNotFoundError) as error:
        return fail("evaluate", error)
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, map_location="cpu", weights_only=False)
    print(
        evaluation_line(
            run_dir,
            step=checkpoint["counters"]["train_steps"],
            mean_return=stats["mean_score"],
            episodes=stats["episodes"],
            mean_length=stats["mean_length"],
        )
    )
    return 0


def preflight(config: SACConfig) -> None:
    """Checks before a run creates anything (ValueError with one line saying what to do): the
    device, the env id and its extras, a time limit to end evaluation episodes."""
    from batchenv.algorithms.batchppo.envs import env_class
    from batchenv.preflight import check_device, check_gym_env

    from .train import episode_limit

    check_device(config.device)
    if env_class(config.env) is None:
        check_gym_env(config.env)
    episode_limit(config)


def make_config(args: argparse.Namespace) -> SACConfig:
    """The SACConfig the parsed ``args`` ask for (the run's own one with --resume)."""
    from .train import config_from_run

    return OPTIONS.make_config(args, config_from_run)
