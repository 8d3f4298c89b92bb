"""``batchenv train batchppo`` and ``batchenv evaluate RUN_DIR`` (the protocol of batchenv/cli.py).

    batchenv train batchppo                      # in-graph CartPole, a learned policy in minutes
    batchenv train batchppo --env Pendulum-v1    # the pendulum preset (found from the env id)
    batchenv train batchppo --preset cheetah --num-envs 10 --set learning_rate=3e-4
    batchenv train batchppo --resume runs/batchppo-Pendulum-v1-20261123-150000 --steps 2e6
    batchenv evaluate runs/batchppo-Pendulum-v1-20261123-150000 --episodes 50

The options come from :class:`BatchPPOConfig`: ``--env``, ``--num-envs``, ``--steps``,
``--seed`` and ``--device`` set the config field of that name (``--num-envs`` sets
``num_agents``) with the field's type and docstring, and ``--set key=value`` sets any field.
Precedence: the preset, then ``--set``, then the named options.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchenv.algorithms.train_cli import NAMED_OPTIONS, ConfigOptions, train_command
from batchenv.cli_common import evaluation_line, fail, whole_number
from batchenv.run_dir import CHECKPOINT_NAME

from .config import PRESETS, BatchPPOConfig, parse_overrides
from .envs import check_time_limit, env_class

__all__ = [
    "add_arguments",
    "add_evaluate_arguments",
    "evaluate",
    "make_config",
    "preflight",
    "train",
]

#: What ``batchenv train batchppo`` runs when neither --env nor --preset is given: the
#: cartpole preset on the in-graph CartPole (no worker processes, no downloads).
DEFAULT_ENV = "batchenv.kernels:CartPole"


def _config_for(env: str) -> BatchPPOConfig:
    """The defaults for an env without a preset, with max_length from its time limit."""
    cls = env_class(env)
    limit = getattr(cls, "max_episode_steps", None) if cls is not None else None
    if cls is None:
        import gymnasium as gym

        try:
            limit = gym.spec(env).max_episode_steps
        except gym.error.Error:
            limit = None  # make_env explains unknown ids
    config = BatchPPOConfig(env=env)
    return config.replace(max_length=limit) if limit else config


#: The options made from BatchPPOConfig (``--num-envs`` sets ``num_agents``).
OPTIONS = ConfigOptions(
    config_class=BatchPPOConfig,
    presets=PRESETS,
    default_preset="cartpole",
    parse_overrides=parse_overrides,
    defaults_from="batch-ppo v1.4",
    set_example="learning_rate=3e-4 gae_lambda=0.95",
    named={**NAMED_OPTIONS, "num_envs": "num_agents"},
    config_for=_config_for,
    default_env=DEFAULT_ENV,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv train batchppo`` (generated from BatchPPOConfig)."""
    parser.description = (
        "Train BatchPPO (batch-ppo v1.4) with alternating train and eval phases; the run "
        "directory gets config.json, metrics.csv, TensorBoard events, curve.png and a "
        "checkpoint after every round."
    )
    OPTIONS.add_arguments(parser)
    parser.add_argument("--logdir", default=None, help="run directory (default: runs/<name>)")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        nargs="?",
        const=True,
        default=None,
        help="continue this run from its checkpoint with its config (only --steps, --device "
        "and --threads may change); the old form --logdir RUN_DIR --resume still works",
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bar"
    )


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv evaluate RUN_DIR`` for a BatchPPO run."""
    parser.add_argument(
        "--episodes", type=whole_number, default=None, help="default: eval_episodes"
    )
    parser.add_argument(
        "--num-envs",
        type=whole_number,
        default=None,
        help="envs stepped in lockstep (default: the run's)",
    )
    parser.add_argument("--seed", type=int, default=None, help="env seed (default: seed + 1000)")
    parser.add_argument("--device", type=OPTIONS.field_value("device"), default=None)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of this process (default 1: fastest on small machines, where "
        "the env workers need the other cores)",
    )


def train(args: argparse.Namespace) -> int:
    """Run ``batchenv train batchppo``; the exit status (130 after Ctrl-C)."""
    from .train import train as run_training

    if args.resume is True:  # the old form: --logdir RUN_DIR --resume
        if args.logdir is None:
            return fail("train batchppo", "--resume needs the run: --resume RUN_DIR")
        print(
            "batchenv train batchppo: note: --logdir RUN_DIR --resume is deprecated; "
            "write --resume RUN_DIR",
            file=sys.stderr,
        )
        args.resume, args.logdir = args.logdir, None
    return train_command("batchppo", args, make_config, preflight, run_training, "score")


def evaluate(run_dir: Path, args: argparse.Namespace) -> int:
    """Run ``batchenv evaluate RUN_DIR``: mean-action episodes of the latest checkpoint,
    one line printed; the run directory is only read."""
    import torch

    from .train import evaluate as run_evaluation

    for option, value in (("--episodes", args.episodes), ("--num-envs", args.num_envs)):
        if value is not None and value < 1:
            return fail("evaluate", f"{option} must be >= 1, got {value}")
    _set_threads(args.threads)
    try:
        stats = run_evaluation(
            run_dir,
            episodes=args.episodes,
            num_agents=args.num_envs,
            seed=args.seed,
            device=args.device,
        )
    except (ValueError, FileNotFoundError) as error:
        return fail("evaluate", error)
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, map_location="cpu", weights_only=False)
    line = evaluation_line(
        run_dir,
        step=checkpoint["counters"]["train_steps"],
        mean_return=stats["mean_score"],
        episodes=stats["episodes"],
        mean_length=stats["mean_length"],
    )
    print(line)
    return 0


def preflight(config: BatchPPOConfig) -> None:
    """Checks before a run creates anything (ValueError with one line saying what to do):
    the device, the env id and its extras, an in-graph env's time limit against
    max_length, and that a train phase can finish an episode.

    A train phase is ``update_every * max_length`` env steps over ``num_agents`` envs, so
    with ``update_every < num_agents`` it is shorter than ``max_length`` lockstep steps:
    episodes that run to the time limit never finish in it, and no update ever runs.
    """
    from batchenv.preflight import check_device, check_gym_env

    check_device(config.device)
    cls = env_class(config.env)
    if cls is None:
        check_gym_env(config.env)
    else:
        check_time_limit(config, getattr(cls, "max_episode_steps", None))
    if config.update_every < config.num_agents:
        raise ValueError(
            f"update_every={config.update_every} is below num_agents={config.num_agents}: a "
            f"train phase (update_every * max_length env steps over num_agents envs) is then "
            f"shorter than max_length={config.max_length} steps, so episodes that reach the "
            "time limit never finish and no update runs; set update_every >= num_agents"
        )


def make_config(args: argparse.Namespace) -> BatchPPOConfig:
    """The BatchPPOConfig the parsed ``args`` ask for (the run's own one with --resume)."""
    from .train import config_from_run

    return OPTIONS.make_config(args, config_from_run)


def _set_threads(threads: int) -> None:
    import torch

    if threads and threads > 0:
        torch.set_num_threads(threads)
