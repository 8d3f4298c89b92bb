"""The ``batchenv`` command.

batchenv demo [--env CartPole-v1] [--num-envs 64] [--steps 200000]
    step a batchenv.make BatchEnv with random actions, with a progress bar, and print
    the throughput next to a plain single-process loop.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchenv", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="step a BatchEnv with random actions, report steps/s")
    run.add_argument("--env", default="CartPole-v1", help="a Gymnasium id")
    run.add_argument("--num-envs", type=int, default=64)
    run.add_argument("--num-workers", type=int, default=None)
    run.add_argument("--steps", type=int, default=500_000, help="total env steps")
    run.add_argument("--seed", type=int, default=0)
    run.set_defaults(handler=demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
