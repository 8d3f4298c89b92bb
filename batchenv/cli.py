"""The ``batchenv`` command.

batchenv demo [--env CartPole-v1] [--num-envs 64] [--steps 200000]
    step a batchenv.make BatchEnv with random actions, with a progress bar, and print
    the throughput next to a plain single-process loop.
batchenv train ALGORITHM [options]
    train an algorithm of ``batchenv.algorithms`` (``batchenv train batchppo --help``).
batchenv evaluate RUN_DIR [options]
    evaluate the latest checkpoint of a training run.
batchenv run SPEC.yaml [NAME] --mode {dev,train,search} [-s var=value ...]
    run a spec file: one session, a trial of seeds, or a search (batchenv.experiment).
batchenv run --resume RUN_DIR
    continue an interrupted run.
batchenv spec ALGORITHM
    print a complete spec: every config field with its default and doc.
batchenv benchmark SPECS...
    run spec files as trials of 4 sessions and write a Markdown table with plots.

``batchenv`` itself never imports an algorithm: ``train NAME`` loads the module
``batchenv.algorithms.NAME.cli``, which provides

    add_arguments(parser: argparse.ArgumentParser) -> None   # its train options
    train(args: argparse.Namespace) -> int                   # run it; the exit status
    add_evaluate_arguments(parser) -> None                   # optional: evaluate options
    evaluate(run_dir: pathlib.Path, args: argparse.Namespace) -> int

and ``evaluate RUN_DIR`` finds the algorithm's name in the run's ``config.json``. An
algorithm configured by a dataclass can make its options and config with
``batchenv.algorithms.train_cli.ConfigOptions``, as BatchPPO, DQN and SAC do. A usage error
of any command is one line on stderr with exit status 2 (``OneLineParser``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import typing
from importlib import import_module
from pathlib import Path
from types import ModuleType

import numpy as np

from batchenv.cli_common import OneLineParser, ctrl_c_held, fail, whole_number

#: Algorithms ``batchenv train`` knows, each a package of batchenv.algorithms with a ``cli``.
ALGORITHMS = ("batchppo", "impala", "ppo", "sac", "dqn")


def _random_actions(space, num_envs: int, rng: np.random.Generator) -> np.ndarray:
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(space.start, space.start + space.n, size=num_envs)
    if isinstance(space, gym.spaces.Box):
        low, high = np.broadcast_arrays(space.low, space.high)
        return rng.uniform(low, high, size=(num_envs, *space.shape)).astype(space.dtype)
    raise SystemExit(f"demo supports Discrete and Box action spaces, not {space}")


def demo(args: argparse.Namespace) -> int:
    """Step a BatchEnv of ``args.env`` with random actions and report steps/s."""
    from tqdm import tqdm

    import batchenv
    from batchenv.preflight import check_gym_env

    for option, value in (("--num-envs", args.num_envs), ("--steps", args.steps)):
        if value < 1:
            return fail("demo", f"{option} must be >= 1, got {value}")
    if args.num_workers is not None and args.num_workers < 1:
        return fail("demo", f"--num-workers must be >= 1 (or left out), got {args.num_workers}")
    try:
        check_gym_env(args.env)
    except ValueError as error:
        return fail("demo", error)
    started = time.perf_counter()
    env = batchenv.make(args.env, args.num_envs, num_workers=args.num_workers)
    start_seconds = time.perf_counter() - started
    rng = np.random.default_rng(args.seed)
    episodes, returns = 0, []
    score = np.zeros(args.num_envs)
    workers = len(env.processes())
    try:
        env.reset(seed=args.seed)
        iterations = max(1, args.steps // args.num_envs)
        begin = time.perf_counter()
        with tqdm(
            total=iterations * args.num_envs, unit="step", unit_scale=True, mininterval=0.5
        ) as bar:
            for _ in range(iterations):
                _, reward, terminated, truncated, _ = env.step(
                    _random_actions(env.action_space, args.num_envs, rng)
                )
                score += reward
                done = terminated | truncated
                if done.any():
                    rows = np.flatnonzero(done)
                    returns.extend(score[rows].tolist())
                    episodes += len(rows)
                    score[rows] = 0.0
                    env.reset(indices=rows)
                bar.update(args.num_envs)
        seconds = time.perf_counter() - begin
    finally:
        env.close()
    rate = iterations * args.num_envs / seconds
    mean_return = float(np.mean(returns)) if returns else float("nan")
    print(
        f"{args.env}: {args.num_envs} envs in {workers} worker processes, "
        f"started in {start_seconds:.2f} s; {rate:,.0f} steps/s; {episodes} episodes, "
        f"mean random return {mean_return:.1f}"
    )
    return 0


def algorithm_cli(name: str) -> ModuleType:
    """The ``cli`` module of algorithm ``name`` (see the module docstring)."""
    if name not in ALGORITHMS:
        _refuse("evaluate", f"unknown algorithm {name!r}; expected one of {', '.join(ALGORITHMS)}")
    with ctrl_c_held():  # Ctrl-C while torch and triton load would abort: wait for them
        module = import_module(f"batchenv.algorithms.{name}.cli")
        import_module("torch")
    return module


def _algorithm_of(run_dir: str) -> str:
    config = Path(run_dir) / "config.json"
    if not config.exists():
        _refuse("evaluate", f"{run_dir} is not a run directory (no config.json)")
    try:
        return json.loads(config.read_text())["algorithm"]
    except (ValueError, KeyError, TypeError):
        _refuse("evaluate", f"{config} does not name its algorithm; is {run_dir} a batchenv run?")


def _refuse(command: str, message: str) -> typing.NoReturn:
    raise SystemExit(fail(command, message))


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command's parser; ``argv`` picks which algorithm's options ``train`` and
    ``evaluate`` get (only that algorithm's module is imported)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = OneLineParser(
        prog="batchenv",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train an algorithm (batchenv train NAME --help)")
    names = train.add_subparsers(dest="algorithm", required=True, metavar="ALGORITHM")
    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate a training run's checkpoint",
        description="Play episodes with a training run's checkpoint and print one line. The "
        "options depend on the run's algorithm: batchenv evaluate RUN_DIR --help lists them.",
    )
    evaluate.add_argument("run_dir", help="the run directory written by batchenv train")
    # Only the algorithm named on the command line is imported (each pulls in torch).
    if len(argv) >= 2 and argv[0] == "train" and argv[1] in ALGORITHMS:
        module = algorithm_cli(argv[1])
        sub = names.add_parser(argv[1], help=f"train {argv[1]}")
        module.add_arguments(sub)
        sub.set_defaults(handler=module.train)
    else:
        for name in ALGORITHMS:
            names.add_parser(name, help=f"train {name}")
    if len(argv) >= 2 and argv[0] == "evaluate" and not argv[1].startswith("-"):
        module = algorithm_cli(_algorithm_of(argv[1]))
        if hasattr(module, "add_evaluate_arguments"):
            module.add_evaluate_arguments(evaluate)
        evaluate.set_defaults(handler=lambda args: module.evaluate(Path(args.run_dir), args))
    from batchenv.experiment import cli as experiment_cli

    experiment_cli.add_run_arguments(
        commands.add_parser("run", help="run a spec file: dev, train (a trial) or search")
    )
    experiment_cli.add_spec_arguments(
        commands.add_parser("spec", help="print a complete spec of an algorithm")
    )
    experiment_cli.add_benchmark_arguments(
        commands.add_parser("benchmark", help="run spec files as trials, write a Markdown table")
    )
    from batchenv.experiment import analyze

    analyze.add_arguments(
        commands.add_parser("analyze", help="recompute run directories' metrics and plots")
    )
    run = commands.add_parser("demo", help="step a BatchEnv with random actions, report steps/s")
    run.add_argument("--env", default="CartPole-v1", help="a Gymnasium id")
    run.add_argument("--num-envs", type=whole_number, default=64)
    run.add_argument("--num-workers", type=whole_number, default=None)
    run.add_argument("--steps", type=whole_number, default=500_000, help="total env steps")
    run.add_argument("--seed", type=int, default=0)
    run.set_defaults(handler=demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: ``sys.argv[1:]``); the exit status (130 after
    Ctrl-C, also while the command's modules are still being imported)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(argv).parse_args(argv)
        return args.handler(args)
    except KeyboardInterrupt:
        command = " ".join(["batchenv", *(argv[:2] if argv[:1] == ["train"] else argv[:1])])
        print(f"\n{command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
