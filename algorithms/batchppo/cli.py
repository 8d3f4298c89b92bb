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
import difflib
import sys
from pathlib import Path
from typing import Any

from batchenv.cli_common import evaluation_line, fail, unsaved_interrupt_line, whole_number
from batchenv.run_dir import CHECKPOINT_NAME, CONFIG_NAME

from .config import PRESETS, BatchPPOConfig, field_help, parse_overrides
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
DEFAULT_PRESET = "cartpole"
DEFAULT_ENV = "batchenv.kernels:CartPole"

#: Named options and the config field each sets.
NAMED_OPTIONS = {
    "env": "env",
    "num_envs": "num_agents",
    "steps": "steps",
    "seed": "seed",
    "device": "device",
    "threads": "torch_threads",
}
#: Fields a resumed run may change.
RESUMABLE = ("steps", "device", "torch_threads")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv train batchppo`` (generated from BatchPPOConfig)."""
    docs = field_help()
    parser.description = (
        "Train BatchPPO (batch-ppo v1.4) with alternating train and eval phases; the run "
        "directory gets config.json, metrics.csv, TensorBoard events, curve.png and a "
        "checkpoint after every round."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _fields_epilog(docs)
    parser.add_argument(
        "--preset",
        type=_preset_name,
        default=None,
        help=f"start from a per-env config: {', '.join(PRESETS)} (default: the preset of "
        f"--env, else {DEFAULT_PRESET!r} on {DEFAULT_ENV})",
    )
    for option, field in NAMED_OPTIONS.items():
        extra = " A Gymnasium id, or an in-graph env as module:Class." if field == "env" else ""
        parser.add_argument(
            f"--{option.replace('_', '-')}",
            dest=field,
            type=_field_value(field),
            default=None,
            metavar=field.upper() if field != "env" else "ENV",
            help=f"{docs[field]}{extra} (sets {field}; default: the preset's)",
        )
    parser.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        action="extend",
        default=[],
        type=_override,
        metavar="KEY=VALUE",
        help="set any config field (listed below), e.g. --set learning_rate=3e-4 gae_lambda=0.95",
    )
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
    parser.add_argument("--device", type=_field_value("device"), default=None)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of this process (default 1: fastest on small machines, where "
        "the env workers need the other cores)",
    )


def train(args: argparse.Namespace) -> int:
    """Run ``batchenv train batchppo``; the exit status (130 after Ctrl-C)."""
    from batchenv.run_dir import default_path

    from .train import TrainingInterrupted
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
    try:
        config = make_config(args)
        preflight(config)
        if args.resume and not (Path(args.resume) / CHECKPOINT_NAME).exists():
            raise FileNotFoundError(
                f"{args.resume} has no checkpoint yet (one is written after every round), "
                "so there is nothing to resume; start a new run instead"
            )
        logdir = Path(args.resume or args.logdir or default_path("batchppo", config.env))
        if not args.resume and (logdir / CONFIG_NAME).exists():
            raise FileExistsError(
                f"{logdir} already holds a run; continue it with --resume {logdir}, or "
                "choose another --logdir"
            )
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        return fail("train batchppo", error)
    action = "resuming" if args.resume else "training"
    print(
        f"batchppo: {action} on {config.env} for {config.steps:,} env steps; run directory "
        f"{logdir}",
        file=sys.stderr,
    )
    try:
        scores = run_training(
            config, logdir=logdir, resume=bool(args.resume), progress=args.progress
        )
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        return fail("train batchppo", error)
    except TrainingInterrupted as stop:
        print(
            f"\ninterrupted; checkpoint saved in {stop.run_dir} (resume with batchenv train "
            f"batchppo --resume {stop.run_dir}); it holds the last complete round, train "
            f"step {stop.step:,}: the round in progress was dropped",
            file=sys.stderr,
        )
        return 130
    except KeyboardInterrupt:  # before the first round started: nothing saved
        print(f"\n{unsaved_interrupt_line('batchppo', logdir)}", file=sys.stderr)
        return 130
    final = f"{scores[-1]:.1f}" if scores else "none"
    print(f"batchppo: done, {len(scores)} evaluations, final eval score {final}; {logdir}")
    return 0


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
    preset = args.preset or (_preset_of(env) if env else DEFAULT_PRESET)
    base = PRESETS[preset] if preset else _config_for(env)
    if env is None and args.preset is None:
        base = base.replace(env=DEFAULT_ENV)
    return base.replace(**overrides).replace(**named)


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
            value = parse_overrides([f"{field}={text}"])[field]
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        if field == "device" and str(value).split(":")[0] not in ("cpu", "cuda"):
            raise argparse.ArgumentTypeError(f"device must be cpu or cuda[:N], got {text!r}")
        return value

    convert.__name__ = field  # argparse names the type in its messages
    return convert


def _override(item: str) -> dict[str, Any]:
    try:
        return parse_overrides([item])
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _preset_of(env: str) -> str | None:
    """The preset whose env is ``env`` (or the Gymnasium id an in-graph env reproduces)."""
    cls = env_class(env)
    gym_id = getattr(cls, "gym_id", None) if cls is not None else env
    for name, config in PRESETS.items():
        if config.env == gym_id:
            return name
    return None


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


def _fields_epilog(docs: dict[str, str]) -> str:
    defaults = BatchPPOConfig()
    lines = ["config fields for --set (defaults: batch-ppo v1.4):"]
    for name, doc in docs.items():
        lines.append(f"  {name} = {getattr(defaults, name)!r}\n      {doc}")
    return "\n".join(lines)


def _set_threads(threads: int) -> None:
    import torch

    if threads and threads > 0:
        torch.set_num_threads(threads)
