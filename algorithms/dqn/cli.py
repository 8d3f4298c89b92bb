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
import difflib
from pathlib import Path
from typing import Any

from batchenv.algorithms.offpolicy import (
    RESUMABLE,
    add_run_arguments,
    run_command,
    run_directory,
)
from batchenv.cli_common import evaluation_line, fail, whole_number

from .config import PRESETS, DQNConfig, field_help, parse_overrides

__all__ = [
    "add_arguments",
    "add_evaluate_arguments",
    "evaluate",
    "make_config",
    "preflight",
    "preset_of",
    "train",
]

#: What ``batchenv train dqn`` runs when neither --env nor --preset is given.
DEFAULT_PRESET = "cartpole"

#: Named options and the config field each sets.
NAMED_OPTIONS = {
    "env": "env",
    "num_envs": "num_envs",
    "steps": "steps",
    "seed": "seed",
    "device": "device",
    "threads": "torch_threads",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv train dqn`` (generated from DQNConfig)."""
    docs = field_help()
    parser.description = (
        "Train DQN (CleanRL's dqn.py defaults; Double DQN, prioritized replay and n-step "
        "returns by config) in rounds of training and a greedy eval phase; the run directory "
        "gets config.json, metrics.csv, curve.png and a checkpoint (replay memory included) "
        "after every round."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _fields_epilog(docs)
    parser.add_argument(
        "--preset",
        type=_preset_name,
        default=None,
        help=f"start from a preset: {', '.join(PRESETS)} (default: the preset of --env, "
        f"else {DEFAULT_PRESET!r})",
    )
    for option, field in NAMED_OPTIONS.items():
        parser.add_argument(
            f"--{option.replace('_', '-')}",
            dest=field,
            type=_field_value(field),
            default=None,
            metavar=field.upper(),
            help=f"{docs[field]} (sets {field}; default: the preset's)",
        )
    parser.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        action="extend",
        default=[],
        type=_override,
        metavar="KEY=VALUE",
        help="set any config field (listed below), e.g. --set double=true n_step=3",
    )
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
    parser.add_argument("--device", type=_field_value("device"), default=None)
    parser.add_argument(
        "--epsilon", type=float, default=None, help="exploration rate (default: eval_epsilon)"
    )


def train(args: argparse.Namespace) -> int:
    """Run ``batchenv train dqn``; the exit status (2 for bad options, 130 after Ctrl-C)."""
    from .train import train as run_training

    try:
        config = make_config(args)
        preflight(config)
        logdir = run_directory(args, "dqn", config.env)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as error:
        return fail("train dqn", error)
    return run_command("dqn", config, logdir, args, run_training, score_name="return")


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
    named = {
        field: getattr(args, field)
        for field in NAMED_OPTIONS.values()
        if getattr(args, field, None) is not None
    }
    overrides: dict[str, Any] = {}
    for item in args.overrides:
        overrides.update(item)
    if args.resume:
        from .train import config_from_run

        if args.preset or args.overrides or set(named) - set(RESUMABLE):
            raise ValueError(
                "--resume continues a run with its own config; only --steps, --device and "
                "--threads may be given with it"
            )
        return config_from_run(args.resume).replace(**named)
    env = named.get("env", overrides.get("env"))
    preset = args.preset or (preset_of(env) if env else DEFAULT_PRESET)
    base = PRESETS[preset] if preset else DQNConfig(env=env)
    return base.replace(**overrides).replace(**named)


def preset_of(env: str) -> str | None:
    """The first preset whose env is ``env`` (or the Gymnasium id an in-graph env copies)."""
    from batchenv.algorithms.batchppo.envs import env_class

    cls = env_class(env)
    gym_id = getattr(cls, "gym_id", None) if cls is not None else env
    return next((name for name, config in PRESETS.items() if config.env == gym_id), None)


# --- helpers --------------------------------------------------------------------------------


def _preset_name(name: str) -> str:
    if name in PRESETS:
        return name
    close = difflib.get_close_matches(name, list(PRESETS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise argparse.ArgumentTypeError(f"unknown preset {name!r}{hint} Presets: {', '.join(PRESETS)}")


def _field_value(field: str):
    def convert(text: str) -> Any:
        try:
            return parse_overrides([f"{field}={text}"])[field]
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = field  # argparse names the type in its messages
    return convert


def _override(item: str) -> dict[str, Any]:
    try:
        return parse_overrides([item])
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _fields_epilog(docs: dict[str, str]) -> str:
    defaults = DQNConfig()
    lines = ["config fields for --set (defaults: CleanRL's dqn.py):"]
    for name, doc in docs.items():
        lines.append(f"  {name} = {getattr(defaults, name)!r}\n      {doc}")
    return "\n".join(lines)
