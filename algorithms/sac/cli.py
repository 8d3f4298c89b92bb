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

from batchenv.algorithms.offpolicy import (
    RESUMABLE,
    add_run_arguments,
    run_command,
    run_directory,
)
from batchenv.cli_common import evaluation_line, fail, whole_number
from batchenv.run_dir import CHECKPOINT_NAME

from .config import PRESETS, SACConfig, field_help, parse_overrides

__all__ = [
    "add_arguments",
    "add_evaluate_arguments",
    "evaluate",
    "make_config",
    "preflight",
    "train",
]

#: What ``batchenv train sac`` runs when neither --env nor --preset is given.
DEFAULT_PRESET = "pendulum"

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
    """The options of ``batchenv train sac`` (generated from SACConfig)."""
    docs = field_help()
    parser.description = (
        "Train SAC (continuous, or discrete: expectation / gumbel) with a replay memory; the "
        "run directory gets config.json, metrics.csv, TensorBoard events, curve.png and a "
        "checkpoint (replay memory included) after every round of eval_every steps."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _fields_epilog(docs)
    parser.add_argument(
        "--preset",
        default=None,
        help=f"start from a per-env config: {', '.join(PRESETS)} (default: the preset of "
        f"--env, else {DEFAULT_PRESET!r})",
    )
    for option, field in NAMED_OPTIONS.items():
        extra = " A Gymnasium id, or an in-graph env as module:Class." if field == "env" else ""
        parser.add_argument(
            f"--{option.replace('_', '-')}",
            dest=field,
            default=None,
            metavar=field.upper(),
            help=f"{docs[field]}{extra} (sets {field}; default: the preset's)",
        )
    parser.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="set any config field (listed below), e.g. --set q_lr=3e-4 discrete=gumbel",
    )
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

    try:
        config = make_config(args)
        preflight(config)
        logdir = run_directory(args, "sac", config.env)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as error:
        return fail("train sac", error)
    return run_command("sac", config, logdir, args, run_training, score_name="score")


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
    """The SACConfig the parsed ``args`` ask for (the run's own one with --resume);
    ValueError (one line) for an unknown preset, field or bad value."""
    named = parse_overrides(
        f"{field}={getattr(args, field)}"
        for field in NAMED_OPTIONS.values()
        if getattr(args, field, None) is not None
    )
    overrides = parse_overrides(args.overrides)
    if args.resume:
        from .train import config_from_run

        if args.preset or args.overrides or set(named) - set(RESUMABLE):
            raise ValueError(
                "--resume continues a run with its own config; only --steps, --device and "
                "--threads may be given with it"
            )
        return config_from_run(args.resume).replace(**named)
    if args.preset is not None and args.preset not in PRESETS:
        raise ValueError(f"unknown preset {args.preset!r}; choose one of {', '.join(PRESETS)}")
    env = named.get("env", overrides.get("env"))
    preset = args.preset or (preset_of(env) if env else DEFAULT_PRESET)
    base = PRESETS[preset] if preset else SACConfig()
    return base.replace(**overrides).replace(**named)


def preset_of(env: str) -> str | None:
    """The preset whose env is ``env`` (or the Gymnasium id an in-graph env reproduces)."""
    from batchenv.algorithms.batchppo.envs import env_class

    cls = env_class(env)
    gym_id = getattr(cls, "gym_id", None) if cls is not None else env
    for name, config in PRESETS.items():
        if config.env == gym_id:
            return name
    return None


def _fields_epilog(docs: dict[str, str]) -> str:
    defaults = SACConfig()
    lines = ["config fields for --set (defaults: CleanRL's sac_continuous_action.py):"]
    for name, doc in docs.items():
        lines.append(f"  {name} = {getattr(defaults, name)!r}\n      {doc}")
    return "\n".join(lines)
