"""``batchenv train dqn`` and ``batchenv evaluate RUN_DIR`` (the protocol of batchenv/cli.py).

    batchenv train dqn                                  # CleanRL's CartPole-v1 run
    batchenv train dqn --preset cartpole_ddqn_per --env batchenv.kernels:CartPole --num-envs 8
    batchenv train dqn --env CartPole-v1 --steps 2e5 --set double=true n_step=3
    batchenv train dqn --resume runs/dqn-CartPole-v1-20261125-220000 --steps 1e6
    batchenv evaluate runs/dqn-CartPole-v1-20261125-220000 --episodes 50

The options come from :class:`DQNConfig`: ``--env``, ``--num-envs``, ``--steps``, ``--seed``,
``--device`` and ``--threads`` set the field of that name, ``--set key=value`` any field.
Precedence: the preset (named, or the one whose env is ``--env``), then ``--set``, then the
named options. Every check runs before the run directory is made.
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

from .config import PRESETS, DQNConfig, parse_overrides

__all__ = [
    "add_arguments",
    "add_evaluate_arguments",
    "evaluate",
    "make_config",
    "preflight",
    "train",
]

#: The options made from DQNConfig; ``cartpole`` runs when neither --env nor --preset is given.
OPTIONS = ConfigOptions(
    config_class=DQNConfig,
    presets=PRESETS,
    default_preset="cartpole",
    parse_overrides=parse_overrides,
    defaults_from="CleanRL's dqn.py",
    set_example="double=true n_step=3",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv train dqn`` (generated from DQNConfig)."""
    parser.description = (
        "Train DQN (CleanRL's dqn.py defaults; Double DQN, prioritized replay and n-step "
        "returns by config) in rounds of training and a greedy eval phase; the run directory "
        "gets config.json, metrics.csv, curve.png and a checkpoint (replay memory included) "
        "after every round."
    )
    OPTIONS.add_arguments(parser)
    add_run_arguments(parser)


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv evaluate RUN_DIR`` for a DQN run."""
    parser.add_argument(
        "--episodes", type=whole_number, default=None, help="default: eval_episodes"
    )
    parser.add_argument(
        "--num-envs", type=whole_number, default=None, help="envs in lockstep (default: the run's)"
    )
    parser.add_argument("--seed", type=int, default=None, help="env seed (default: seed + 1000)")
    parser.add_argument("--device", type=OPTIONS.field_value("device"), default=None)
    parser.add_argument(
        "--epsilon", type=float, default=None, help="exploration rate (default: eval_epsilon)"
    )


def train(args: argparse.Namespace) -> int:
    """Run ``batchenv train dqn``; the exit status (2 for bad options, 130 after Ctrl-C)."""
    from .train import train as run_training

    return train_command("dqn", args, make_config, preflight, run_training, score_name="return")


def evaluate(run_dir: Path, args: argparse.Namespace) -> int:
    """Run ``batchenv evaluate RUN_DIR`` for a DQN run: one line printed, nothing written."""
    import torch

    from .train import evaluate as run_evaluation

    for option, value in (("--episodes", args.episodes), ("--num-envs", args.num_envs)):
        if value is not None and value < 1:
            return fail("evaluate", f"{option} must be >= 1, got {value}")
    if args.epsilon is not None and not 0.0 <= args.epsilon <= 1.0:
        return fail("evaluate", f"--epsilon must be in [0, 1], got {args.epsilon}")
    torch.set_num_threads(1)
    try:
        stats = run_evaluation(
            run_dir,
            episodes=args.episodes,
            num_envs=args.num_envs,
            seed=args.seed,
            device=args.device,
            epsilon=args.epsilon,
        )
    except (ValueError, FileNotFoundError) as error:
        return fail("evaluate", error)
    line = evaluation_line(
        run_dir,
        step=stats["train_steps"],
        mean_return=stats["mean_score"],
        episodes=stats["episodes"],
        mean_length=stats["mean_length"],
    )
    print(line)
    return 0


def preflight(config: DQNConfig) -> None:
    """Checks before a run creates anything (ValueError with one line saying what to do):
    the device, the env id and its extras (Box2D for LunarLander), a Discrete action
    space, an in-graph env's time limit against max_length."""
    import gymnasium as gym

    from batchenv.algorithms.batchppo.envs import check_time_limit, env_class
    from batchenv.preflight import check_device, check_gym_env

    check_device(config.device)
    cls = env_class(config.env)
    if cls is not None:
        check_time_limit(config, getattr(cls, "max_episode_steps", None))
        space = getattr(cls, "single_action_space", None)
    else:
        check_gym_env(config.env)
        probe = gym.make(config.env)
        space = probe.action_space
        probe.close()
    if space is not None and not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"DQN needs a Discrete action space, but {config.env} has {space}; use SAC or PPO "
            "for continuous actions"
        )


def make_config(args: argparse.Namespace) -> DQNConfig:
    """The DQNConfig the parsed ``args`` ask for (the run's own one with --resume)."""
    from .train import config_from_run

    return OPTIONS.make_config(args, config_from_run)
