"""``batchenv run``, ``batchenv spec`` and ``batchenv benchmark`` (wired into batchenv/cli.py).

    batchenv run SPEC.yaml [NAME] --mode {dev,train,search} [-s var=value ...]
    batchenv run SPEC.yaml --mode search --backend ray [--address HOST:PORT]
    batchenv run --resume RUN_DIR
    batchenv spec batchppo [--env ENV]          # a complete spec, every field documented
    batchenv benchmark specs/ [--sessions 4]    # a Markdown table of trials, SLM Lab style

A spec that cannot run fails before anything is written, with one line and exit code 2
(``batchenv run: error: ...``); a session that fails while running exits with 1, Ctrl-C
with 130.
"""

from __future__ import annotations

import argparse
import sys

__all__ = [
    "add_benchmark_arguments",
    "add_run_arguments",
    "add_spec_arguments",
    "benchmark_command",
    "run_command",
    "spec_command",
]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run a spec file: one session (dev), one trial of meta.sessions seeds (train) or a "
        "search over the spec's search section (search). The run directory gets the resolved "
        "spec, per-session metrics and plots, and for a search experiment.csv and "
        "best_spec.yaml."
    )
    parser.add_argument("spec", nargs="?", help="a YAML or JSON spec file")
    parser.add_argument("name", nargs="?", help="the spec's name (when the file holds several)")
    parser.add_argument("--mode", choices=("dev", "train", "search"), default="train")
    parser.add_argument(
        "-s",
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="fill ${VAR} in the spec file (repeatable)",
    )
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="continue an interrupted run (its spec and mode)"
    )
    parser.add_argument("--runs-dir", default="runs", help="where run directories go (runs)")
    parser.add_argument(
        "--backend",
        choices=("local", "ray"),
        default=None,
        help="where trials run: local (this machine, the default) or ray (a search's trials "
        "as Ray Tune trials; pip install 'ray[tune]')",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        default=None,
        help="with --backend ray: the cluster's HOST:PORT (as `ray start --head` prints) or "
        "auto (default: the cluster ray.init() finds, or a new one on this machine)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    from .experiment import run
    from .spec import SpecError, parse_sets
    from .trial import SessionFailedError

    if args.resume and args.spec:
        return _fail("run", "give a spec file or --resume RUN_DIR, not both")
    if not args.resume and not args.spec:
        return _fail("run", "give a spec file (batchenv run SPEC.yaml [NAME]) or --resume RUN_DIR")
    try:
        run(
            args.spec,
            args.name,
            mode=args.mode,
            sets=parse_sets(args.sets),
            resume=args.resume,
            runs_dir=args.runs_dir,
            progress=args.progress,
            backend=args.backend,
            address=args.address,
        )
    except SpecError as error:
        return _fail("run", str(error))
    except SessionFailedError as error:
        print(f"batchenv run: error: {error}{error.__cause__ or ''}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print a complete spec for ALGORITHM, every field with its default and doc."
    )
    parser.add_argument("algorithm", help="batchppo, ppo, impala, sac, dqn or module:Class")
    parser.add_argument("--env", default=None, help="the env to write into the spec")
    parser.set_defaults(handler=spec_command)


def spec_command(args: argparse.Namespace) -> int:
    from .spec import template

    try:
        sys.stdout.write(template(args.algorithm, args.env))
    except (ValueError, TypeError) as error:
        return _fail("spec", str(error))
    return 0


def add_benchmark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run every spec of the files given (or of *.yaml in a folder) as a trial and write a "
        "Markdown table (env x algorithm: final return mean +- std, strength, sample "
        "efficiency, stability, consistency, wall time) with the trial band plots."
    )
    parser.add_argument("paths", nargs="+", help="spec files or folders of them")
    parser.add_argument("--sessions", type=int, default=4, help="sessions per trial (4)")
    parser.add_argument(
        "--only", nargs="+", default=None, metavar="NAME", help="run only these spec names"
    )
    parser.add_argument("--out", default="benchmarks/experiments", help="table and plots go here")
    parser.add_argument("--runs-dir", default="runs", help="where run directories go (runs)")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.set_defaults(handler=benchmark_command)


def benchmark_command(args: argparse.Namespace) -> int:
    from .benchmark import benchmark
    from .spec import SpecError

    try:
        table = benchmark(
            args.paths,
            sessions=args.sessions,
            only=args.only,
            out=args.out,
            runs_dir=args.runs_dir,
            progress=args.progress,
        )
    except SpecError as error:
        return _fail("benchmark", str(error))
    except KeyboardInterrupt:
        return 130
    print(table.read_text())
    return 0


def _fail(command: str, message: str) -> int:
    print(f"batchenv {command}: error: {message}", file=sys.stderr)
    return 2
