"""What the ``batchenv train NAME`` commands of BatchPPO, DQN and SAC share: options made from
the algorithm's config dataclass, the rules that turn them into a config, the run directory,
and the run itself.

- ``--preset NAME`` starts from a preset; without it, the preset whose env is ``--env`` (an
  in-graph env counts as the Gymnasium id it reproduces), else the algorithm's default one.
- ``--env``, ``--num-envs``, ``--steps``, ``--seed``, ``--device`` and ``--threads`` set the
  config field of that name; ``--set key=value`` sets any field. Precedence: the preset, then
  ``--set``, then the named options.
- ``--resume RUN_DIR`` continues a run with the config stored in it; only ``--steps``,
  ``--device`` and ``--threads`` may be given with it.

Every value is read with the config's own ``parse_overrides`` while the command line is
parsed, so a bad one stops the command in one line (exit status 2) before anything exists.

    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_run_arguments(parser)
    >>> parser.parse_args(["--resume", "runs/x"]).resume
    'runs/x'
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchenv.cli_common import fail, unsaved_interrupt_line
from batchenv.experiment.fields import field_docs
from batchenv.run_dir import CHECKPOINT_NAME, CONFIG_NAME, RunDirectory

__all__ = [
    "NAMED_OPTIONS",
    "RESUMABLE",
    "ConfigOptions",
    "add_run_arguments",
    "check_same_run",
    "config_from_run",
    "list_fields",
    "train_command",
]

#: Named options and the config field each sets.
NAMED_OPTIONS = {
    "env": "env",
    "num_envs": "num_envs",
    "steps": "steps",
    "seed": "seed",
    "device": "device",
    "threads": "torch_threads",
}

#: Fields a resumed run may change.
RESUMABLE = ("steps", "device", "torch_threads")

#: What a resumed run may be given, as the refusal says it.
_RESUME_RULE = (
    "--resume continues a run with its own config; only --steps, --device and --threads may "
    "be given with it"
)


@dataclass(frozen=True)
class ConfigOptions:
    """The options of one algorithm's ``batchenv train`` command.

    Args:
        config_class: the config dataclass (its fields' docstrings become the help).
        presets: preset name -> config.
        default_preset: what runs when neither ``--preset`` nor ``--env`` is given.
        parse_overrides: the config's ``["key=value", ...] -> {key: typed value}``.
        defaults_from: where the config's defaults come from (the epilog's heading).
        set_example: ``--set`` values for its help, e.g. ``"double=true n_step=3"``.
        named: named option -> config field (BatchPPO's ``--num-envs`` sets ``num_agents``).
        config_for: the base config for an env without a preset (default: the config's
            defaults with that env).
        default_env: replaces the default preset's env when neither ``--preset`` nor
            ``--env`` is given.
    """

    config_class: type
    presets: Mapping[str, Any]
    default_preset: str
    parse_overrides: Callable[[Iterable[str]], dict[str, Any]]
    defaults_from: str
    set_example: str
    named: Mapping[str, str] = field(default_factory=lambda: dict(NAMED_OPTIONS))
    config_for: Callable[[str], Any] | None = None
    default_env: str | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add ``--preset``, the named options and ``--set`` to ``parser``, and the config's
        fields with their defaults as its epilog."""
        docs = field_docs(self.config_class)
        default = f" on {self.default_env}" if self.default_env else ""
        list_fields(parser, self.config_class, self.defaults_from)
        parser.add_argument(
            "--preset",
            type=self._preset_name,
            default=None,
            help=f"start from a per-env config: {', '.join(self.presets)} (default: the preset "
            f"of --env, else {self.default_preset!r}{default})",
        )
        for option, name in self.named.items():
            extra = " A Gymnasium id, or an in-graph env as module:Class." if name == "env" else ""
            parser.add_argument(
                f"--{option.replace('_', '-')}",
                dest=name,
                type=self.field_value(name),
                default=None,
                metavar="ENV" if name == "env" else name.upper(),
                help=f"{docs[name]}{extra} (sets {name}; default: the preset's)",
            )
        parser.add_argument(
            "--set",
            dest="overrides",
            nargs="+",
            action="extend",
            default=[],
            type=self._override,
            metavar="KEY=VALUE",
            help=f"set any config field (listed below), e.g. --set {self.set_example}",
        )

    def make_config(self, args: argparse.Namespace, config_from_run: Callable[[str], Any]) -> Any:
        """The config the parsed ``args`` ask for; with ``--resume``, the run's own one
        (``config_from_run(RUN_DIR)``) with the resumable options applied. ValueError (one
        line) for options that a resumed run may not take."""
        named = {
            name: getattr(args, name)
            for name in self.named.values()
            if getattr(args, name, None) is not None
        }
        overrides: dict[str, Any] = {}
        for item in args.overrides:
            overrides.update(item)
        if args.resume:
            if args.preset or args.overrides or set(named) - set(RESUMABLE):
                raise ValueError(_RESUME_RULE)
            return config_from_run(args.resume).replace(**named)
        env = named.get("env", overrides.get("env"))
        if args.preset:
            base = self.presets[args.preset]
        elif env:
            base = self.base_for(env)
        else:
            base = self.presets[self.default_preset]
            if self.default_env:
                base = base.replace(env=self.default_env)
        return base.replace(**overrides).replace(**named)

    def base_for(self, env: str) -> Any:
        """The config a run on ``env`` starts from: its preset, else ``config_for(env)``."""
        preset = self.preset_of(env)
        if preset:
            return self.presets[preset]
        return self.config_for(env) if self.config_for else self.config_class(env=env)

    def session_config(self, env: str, values: Mapping[str, Any], meta: Mapping[str, Any]) -> Any:
        """A spec session's config: the base for ``env`` (:meth:`base_for`), then the spec's
        ``values``, then ``env`` and the ``meta`` fields that are not None."""
        meta = {name: value for name, value in meta.items() if value is not None}
        return self.base_for(env).replace(**dict(values)).replace(env=env, **meta)

    def preset_of(self, env: str) -> str | None:
        """The first preset whose env is ``env`` (or the Gymnasium id an in-graph env
        reproduces)."""
        from batchenv.algorithms.batchppo.envs import env_class

        cls = env_class(env)
        gym_id = getattr(cls, "gym_id", None) if cls is not None else env
        return next((name for name, config in self.presets.items() if config.env == gym_id), None)

    # --- argparse types: a bad value stops the command while it is parsed ----------------------

    def _preset_name(self, name: str) -> str:
        if name in self.presets:
            return name
        close = difflib.get_close_matches(name, list(self.presets), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise argparse.ArgumentTypeError(
            f"unknown preset {name!r}{hint} Presets: {', '.join(self.presets)}"
        )

    def field_value(self, name: str) -> Callable[[str], Any]:
        """An argparse type reading one value of config field ``name``."""

        def convert(text: str) -> Any:
            try:
                value = self.parse_overrides([f"{name}={text}"])[name]
            except ValueError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
            if name == "device" and str(value).split(":")[0] not in ("cpu", "cuda"):
                raise argparse.ArgumentTypeError(f"device must be cpu or cuda[:N], got {text!r}")
            return value

        convert.__name__ = name  # argparse names the type in its messages
        return convert

    def _override(self, item: str) -> dict[str, Any]:
        try:
            return self.parse_overrides([item])
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None


def list_fields(parser: argparse.ArgumentParser, config_class: type, defaults_from: str) -> None:
    """End ``parser``'s help with every field of ``config_class``: its default and its doc."""
    defaults = config_class()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "\n".join(
        [f"config fields for --set (defaults: {defaults_from}):"]
        + [
            f"  {name} = {getattr(defaults, name)!r}\n      {doc}"
            for name, doc in field_docs(config_class).items()
        ]
    )


# --- resume ----------------------------------------------------------------------------------


def config_from_run(run_dir: str | Path, algorithm: str, config_class: type) -> Any:
    """The ``config_class`` stored in ``run_dir/config.json`` (ValueError for another kind)."""
    run = RunDirectory(run_dir, algorithm, resume=True, tensorboard=False)
    run.close()
    if run.record.get("algorithm") != algorithm:
        raise ValueError(
            f"{run_dir} is a {run.record.get('algorithm')!r} run, not a {algorithm!r} run"
        )
    values = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in run.config.items()
    }
    return config_class(**values)


def check_same_run(saved: Any, config: Any) -> None:
    """ValueError unless ``config`` equals ``saved`` outside :data:`RESUMABLE`."""
    changed = [
        f"{field.name}: {getattr(saved, field.name)!r} -> {getattr(config, field.name)!r}"
        for field in dataclasses.fields(saved)
        if field.name not in RESUMABLE and getattr(saved, field.name) != getattr(config, field.name)
    ]
    if changed:
        raise ValueError(
            "resume continues a run with its own config; only steps, device and torch_threads "
            f"may change, but these differ: {'; '.join(changed)}"
        )


# --- the run directory and the run ------------------------------------------------------------


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--logdir``, ``--resume RUN_DIR`` and ``--no-progress`` to ``parser``."""
    parser.add_argument("--logdir", default=None, help="run directory (default: runs/<name>)")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue this run from its checkpoint with its config (only --steps, --device "
        "and --threads may change)",
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bar"
    )


def _run_directory(args: argparse.Namespace, algorithm: str, env: str) -> Path:
    """The run directory ``args`` name (FileNotFoundError / FileExistsError when unusable)."""
    from batchenv.run_dir import default_path

    if args.resume and not (Path(args.resume) / CHECKPOINT_NAME).exists():
        raise FileNotFoundError(
            f"{args.resume} has no checkpoint yet (one is written after every round), "
            "so there is nothing to resume; start a new run instead"
        )
    logdir = Path(args.resume or args.logdir or default_path(algorithm, env))
    if not args.resume and (logdir / CONFIG_NAME).exists():
        raise FileExistsError(
            f"{logdir} already holds a run; continue it with --resume {logdir}, or "
            "choose another --logdir"
        )
    return logdir


def train_command(
    algorithm: str,
    args: argparse.Namespace,
    make_config: Callable[[argparse.Namespace], Any],
    preflight: Callable[[Any], None],
    run_training: Callable[..., list[float]],
    score_name: str,
) -> int:
    """Run ``batchenv train <algorithm>``: the config (``make_config(args)``, checked by
    ``preflight``) and the run directory, refused in one line (exit status 2) before anything
    is written; then ``run_training`` into the run directory. The exit status (130 after
    Ctrl-C)."""
    try:
        config = make_config(args)
        preflight(config)
        logdir = _run_directory(args, algorithm, config.env)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as error:
        return fail(f"train {algorithm}", error)

    from batchenv.algorithms.batchppo.train import TrainingInterrupted

    action = "resuming" if args.resume else "training"
    print(
        f"{algorithm}: {action} on {config.env} for {config.steps:,} env steps; run directory "
        f"{logdir}",
        file=sys.stderr,
    )
    try:
        scores = run_training(
            config, logdir=logdir, resume=bool(args.resume), progress=args.progress
        )
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        return fail(f"train {algorithm}", error)
    except TrainingInterrupted as stop:
        print(
            f"\ninterrupted; checkpoint saved in {stop.run_dir} (resume with batchenv train "
            f"{algorithm} --resume {stop.run_dir}); it holds the last complete round, train "
            f"step {stop.step:,}: the round in progress was dropped",
            file=sys.stderr,
        )
        return 130
    except KeyboardInterrupt:  # before the first round started: nothing saved
        print(f"\n{unsaved_interrupt_line(algorithm, logdir)}", file=sys.stderr)
        return 130
    final = f"{scores[-1]:.1f}" if scores else "none"
    print(
        f"{algorithm}: done, {len(scores)} evaluations, final eval {score_name} {final}; {logdir}"
    )
    return 0
