"""``batchenv train impala`` and ``batchenv evaluate RUN_DIR`` for IMPALA runs.

Implements the protocol at the top of batchenv/cli.py. Every ImpalaConfig field is a flag
(``--num-actors``, ``--batch-size``, ``--unroll-length``, ...; ``--steps`` sets
``total_steps``), with the field's docstring as its help:

    batchenv train impala --env CartPole-v1 --mode sync --num-actors 2 --envs-per-actor 16 \\
        --steps 2e6 --logdir runs/impala-cartpole
    batchenv train impala --resume runs/impala-cartpole --steps 4e6
    batchenv evaluate runs/impala-cartpole --episodes 10

The run directory holds config.json, metrics.csv (phase column), TensorBoard events,
curve.png and checkpoint.pt; ``--resume`` continues the run from its checkpoint (model,
optimiser, learning-rate schedule, step counters) with its stored config, where flags given
on the command line override stored values (``--steps`` to train longer).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from pathlib import Path

from batchenv.cli_common import (
    fail,
    optional_whole_number,
    unsaved_interrupt_line,
    whole_number,
)
from batchenv.run_dir import CHECKPOINT_NAME

from .config import ImpalaConfig, field_help

__all__ = ["add_arguments", "add_evaluate_arguments", "config_from_args", "evaluate", "train"]

_FLAG_NAMES = {"total_steps": "steps"}


def _flag(name: str) -> str:
    return "--" + _FLAG_NAMES.get(name, name).replace("_", "-")


def _parse_sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The train options: --logdir, --resume, --no-progress and every config field
    (``--mode sync|async`` among them)."""
    parser.add_argument(
        "--logdir", default=None, help="run directory (default runs/impala-ENV-TIME)"
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        nargs="?",
        const=True,
        default=None,
        help="continue this run from its checkpoint with its stored config (flags given "
        "override it, --steps to train longer); the old form --logdir RUN_DIR --resume "
        "still works",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    docs = field_help()
    hints = typing.get_type_hints(ImpalaConfig)
    for item in dataclasses.fields(ImpalaConfig):
        hint = hints[item.name]
        kwargs: dict = {"default": None, "dest": item.name}
        help_text = f"{docs.get(item.name, '')} (default: {item.default})"
        if hint is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif hint == tuple[int, ...]:
            kwargs["type"], kwargs["metavar"] = _parse_sizes, "N,N"
        elif hint == (int | None):
            kwargs["type"] = optional_whole_number
        elif hint is int:
            kwargs["type"] = whole_number
        elif hint in (float, str):
            kwargs["type"] = hint
        else:
            raise TypeError(f"no command-line type for ImpalaConfig.{item.name}: {hint}")
        parser.add_argument(_flag(item.name), help=help_text.replace("%", "%%"), **kwargs)


def config_from_args(args: argparse.Namespace, base: ImpalaConfig | None = None) -> ImpalaConfig:
    """``base`` (default: ImpalaConfig()) with the flags given on the command line applied."""
    changes = {
        item.name: getattr(args, item.name)
        for item in dataclasses.fields(ImpalaConfig)
        if getattr(args, item.name, None) is not None
    }
    return (base or ImpalaConfig()).replace(**changes)


def _stored_config(record: dict) -> ImpalaConfig:
    values = dict(record["config"])
    if "hidden_sizes" in values:
        values["hidden_sizes"] = tuple(values["hidden_sizes"])
    return ImpalaConfig(**values)


def train(args: argparse.Namespace) -> int:
    """Run ``batchenv train impala``; the exit status (2: refused before anything was
    written, 1: an actor failure past the restart budget, 130: Ctrl-C)."""
    from batchenv.run_dir import default_path

    if args.resume is True:  # the old form: --logdir RUN_DIR --resume
        if args.logdir is None:
            return fail("train impala", "--resume needs the run: --resume RUN_DIR")
        print(
            "batchenv train impala: note: --logdir RUN_DIR --resume is deprecated; "
            "write --resume RUN_DIR",
            file=sys.stderr,
        )
        args.resume, args.logdir = args.logdir, None
    try:
        if args.resume:
            if args.logdir is not None and Path(args.logdir) != Path(args.resume):
                raise ValueError("--resume RUN_DIR continues RUN_DIR; leave out --logdir")
            run_path = Path(args.resume)
            if not (run_path / "config.json").exists():
                raise FileNotFoundError(f"{run_path} is not a run directory (no config.json)")
            record = json.loads((run_path / "config.json").read_text())
            if record.get("algorithm") != "impala":
                raise ValueError(f"{run_path} is a {record.get('algorithm')} run, not impala")
            if not (run_path / CHECKPOINT_NAME).exists():
                raise FileNotFoundError(
                    f"{run_path} has no checkpoint yet, so there is nothing to resume; start "
                    "a new run instead"
                )
            config = config_from_args(args, _stored_config(record))
        else:
            config = config_from_args(args)
            run_path = Path(args.logdir or default_path("impala", config.env))
        preflight(config)
    except (ValueError, FileNotFoundError) as error:
        return fail("train impala", error)
    _warn_if_bf16_is_slow(config)
    saved_before = _checkpoint_time(run_path)
    try:
        return _train_in(run_path, config, resume=bool(args.resume), progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\n{_interrupted(run_path, saved_before)}", file=sys.stderr)
        return 130


def _train_in(run_path: Path, config: ImpalaConfig, *, resume: bool, progress: bool) -> int:
    """Open (or create) the run directory and train in it; the exit status."""
    from batchenv.run_dir import RunDirectory

    from .errors import ActorDiedError, ActorTimeoutError
    from .modes import trainer_class

    try:
        if resume:
            run = RunDirectory(run_path, "impala", resume=True)
        else:
            run = RunDirectory(run_path, "impala", config, seed=config.seed, env_id=config.env)
    except (FileExistsError, FileNotFoundError) as error:
        return fail("train impala", error)
    with run:
        checkpoint = run.load_checkpoint() if resume else None
        if checkpoint is not None and checkpoint["step"] >= config.total_steps:
            print(
                f"{run.path}: already trained {checkpoint['step']} of {config.total_steps} "
                "steps; pass a larger --steps to continue"
            )
            return 0
        print(
            f"impala {config.mode} {config.env}: {config.num_actors} actors x "
            f"{config.envs_per_actor} envs, "
            f"T={config.unroll_length}, B={config.batch_size}, run directory {run.path}"
        )
        try:
            trainer = trainer_class(config.mode)(
                config, run_dir=run, checkpoint=checkpoint, progress=progress
            )
            result = trainer.train()
        except (ActorDiedError, ActorTimeoutError) as error:
            print(f"batchenv train impala: error: {error}", file=sys.stderr)
            return 1
    last = f"{result.returns[-1][1]:.1f}" if result.returns else "n/a"
    print(
        f"done: {result.steps} steps, {result.sps:,.0f} steps/s, {result.episodes} episodes, "
        f"last mean return {last}, {result.actor_restarts} actor restarts; {run.path}"
    )
    return 0


def preflight(config: ImpalaConfig) -> None:
    """Checks before anything is created: the device, the env id and its extras (MinAtar
    ids register the ``minatar`` package's), Ray for distributed mode (ValueError with one
    line saying what to do)."""
    from batchenv.make import register_minatar
    from batchenv.preflight import check_device, check_gym_env

    from .envs import is_minatar_id, minatar_ids

    check_device(config.device)
    if config.mode == "distributed":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ValueError('--mode distributed needs the ray extra: pip install -e ".[ray]"')
    if is_minatar_id(config.env):
        try:
            register_minatar(config.env)
        except ImportError:
            raise ValueError(
                f"{config.env} is a MinAtar game and needs the minatar package: "
                'pip install -e ".[minatar]"'
            ) from None
        except ValueError:
            known = ", ".join(minatar_ids())
            raise ValueError(f"unknown env {config.env!r}: expected one of {known}") from None
    if isinstance(config.env, str):
        check_gym_env(config.env)


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``batchenv evaluate RUN_DIR`` for IMPALA runs."""
    parser.add_argument("--episodes", type=whole_number, default=10, help="episodes to play")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the first episode")
    parser.add_argument(
        "--sample", action="store_true", help="sample actions (default: the most likely action)"
    )


def evaluate(run_dir: Path, args: argparse.Namespace) -> int:
    """Play ``--episodes`` episodes with the run's latest checkpoint and print one line;
    the run directory is only read."""
    import numpy as np
    import torch

    from batchenv.cli_common import evaluation_line

    from .envs import env_constructor
    from .trainer import build_model

    episodes = getattr(args, "episodes", 10)
    if episodes < 1:
        return fail("evaluate", f"--episodes must be >= 1, got {episodes}")
    if not (run_dir / CHECKPOINT_NAME).exists():
        return fail("evaluate", f"{run_dir} has no checkpoint yet, so there is nothing to evaluate")
    config = _stored_config(json.loads((run_dir / "config.json").read_text()))
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, map_location="cpu", weights_only=False)
    model = build_model(config, tuple(checkpoint["observation_shape"]), checkpoint["num_actions"])
    model.load_state_dict(checkpoint["model"])
    model.train(getattr(args, "sample", False))
    env = env_constructor(config.env)()
    returns, lengths = [], []
    try:
        with torch.no_grad():
            for episode in range(episodes):
                observ, _ = env.reset(seed=getattr(args, "seed", 12345) + episode)
                state = model.initial_state(1)
                reward, done, last_action, total, length = 0.0, True, 0, 0.0, 0
                while True:
                    inputs = {
                        "frame": torch.as_tensor(np.asarray(observ)[None, None]),
                        "reward": torch.tensor([[reward]], dtype=torch.float32),
                        "done": torch.tensor([[done]]),
                        "last_action": torch.tensor([[last_action]]),
                    }
                    outputs, state = model(inputs, state)
                    last_action = int(outputs["action"][0, 0])
                    observ, reward, terminated, truncated, _ = env.step(last_action)
                    total += float(reward)
                    length += 1
                    done = False
                    if terminated or truncated:
                        break
                returns.append(total)
                lengths.append(length)
    finally:
        env.close()
    line = evaluation_line(
        run_dir,
        step=int(checkpoint["step"]),
        mean_return=float(np.mean(returns)),
        episodes=len(returns),
        mean_length=float(np.mean(lengths)),
    )
    print(line)
    return 0


# --- helpers --------------------------------------------------------------------------------


def _warn_if_bf16_is_slow(config: ImpalaConfig) -> None:
    from batchenv.preflight import bf16_is_slow

    slow = bf16_is_slow(config.device) if config.precision == "bf16" else None
    if slow:
        print(
            f"batchenv train impala: warning: --precision bf16 asked for, but {slow}; "
            "use --precision fp32",
            file=sys.stderr,
        )


def _checkpoint_time(run_path: Path) -> int | None:
    """When the run's checkpoint was last written (ns), or None when it has none."""
    try:
        return (run_path / CHECKPOINT_NAME).stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _interrupted(run_path: Path, saved_before: int | None) -> str:
    """What Ctrl-C left behind: a checkpoint written now, or what was there before."""
    saved = _checkpoint_time(run_path)
    if saved is None or saved == saved_before:
        return unsaved_interrupt_line("impala", run_path)
    return (
        f"interrupted; checkpoint saved in {run_path} (resume with batchenv train impala "
        f"--resume {run_path}); it holds every learner step taken"
    )
