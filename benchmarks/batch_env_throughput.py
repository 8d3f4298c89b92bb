"""Steps per second of batched Gym envs with random actions, all measured in one run.

Methods (each resets finished envs, so the count includes episode turnover):
  plain      one process, a Python loop over N envs
  sync       gymnasium SyncVectorEnv
  async      gymnasium AsyncVectorEnv (shared memory)
  per-env    batchenv.BatchEnv of one ExternalProcess per env (the TF Agents way)
  make/W     batchenv.make with W worker processes, explicit reset(indices) of finished rows
             (make/W+sU: with spin_us=U, see --spin-us)
  vector/W   batchenv.vector.BatchVectorEnv (autoreset, one round trip per step)

Prints a table with each method's steps/s and its ratio to AsyncVectorEnv and to the plain
loop, then start-up time and memory (RSS and USS of all processes) at N=64.

    python benchmarks/batch_env_throughput.py                  # CartPole and HalfCheetah
    python benchmarks/batch_env_throughput.py --quick          # fewer sizes, shorter runs
    python benchmarks/batch_env_throughput.py --envs CartPole-v1 --sizes 64 --rounds 5
                                            # medians of 5 interleaved rounds, N=64 only
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time

import gymnasium as gym
import numpy as np

import batchenv
from batchenv.vector import BatchVectorEnv


def random_actions(space: gym.Space, num_envs: int, count: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    if isinstance(space, gym.spaces.Discrete):
        return list(rng.integers(0, space.n, size=(count, num_envs)))
    low, high = space.low, space.high
    return list(rng.uniform(low, high, size=(count, num_envs, *space.shape)).astype(space.dtype))


def timed(step, actions: list, seconds: float, num_envs: int) -> float:
    """Run ``step(action_batch)`` for about ``seconds`` after a warm-up; steps/s."""
    for batch in actions[:20]:
        step(batch)
    count, begin, i = 0, time.perf_counter(), 0
    while True:
        for _ in range(10):
            step(actions[i % len(actions)])
            i += 1
        count += 10
        elapsed = time.perf_counter() - begin
        if elapsed >= seconds:
            return count * num_envs / elapsed


def run_plain(env_id, n, actions, seconds):
    envs = [gym.make(env_id) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)

    def step(batch):
        for env, action in zip(envs, batch):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()

    try:
        return timed(step, actions, seconds, n)
    finally:
        for env in envs:
            env.close()


def run_gym_vector(kind, env_id, n, actions, seconds):
    fns = [functools.partial(gym.make, env_id)] * n
    envs = (
        gym.vector.AsyncVectorEnv(fns, shared_memory=True)
        if kind == "async"
        else gym.vector.SyncVectorEnv(fns)
    )
    envs.reset(seed=0)
    try:
        return timed(envs.step, actions, seconds, n)
    finally:
        envs.close()


def run_batch(env, n, actions, seconds):
    env.reset(seed=0)

    def step(batch):
        _, _, terminated, truncated, _ = env.step(batch)
        done = terminated | truncated
        if done.any():
            env.reset(indices=np.flatnonzero(done))

    try:
        return timed(step, actions, seconds, n)
    finally:
        env.close()


def run_made(env_id, n, workers, options, actions, seconds):
    return run_batch(batchenv.make(env_id, n, workers, **options), n, actions, seconds)


def run_vector(env_id, n, workers, actions, seconds):
    envs = BatchVectorEnv([functools.partial(gym.make, env_id)] * n, num_workers=workers)
    envs.reset(seed=0)
    try:
        return timed(envs.step, actions, seconds, n)
    finally:
        envs.close()


def run_per_env(env_id, n, actions, seconds):
    procs = [batchenv.ExternalProcess(functools.partial(gym.make, env_id)) for _ in range(n)]
    return run_batch(batchenv.BatchEnv(procs), n, actions, seconds)


_STARTUP_SCRIPT = """
import json, sys, time, functools
import torch  # a training script has torch; the workers must not pay for it
import gymnasium as gym, psutil
import batchenv
env_id, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
begin = time.perf_counter()
if kind == "batchenv.make":
    env = batchenv.make(env_id, n)
else:
    env = gym.vector.AsyncVectorEnv([functools.partial(gym.make, env_id)] * n)
env.reset(seed=0)
seconds = time.perf_counter() - begin
rss = uss = 0
children = psutil.Process().children(recursive=True)
for proc in children:
    info = proc.memory_full_info()
    rss, uss = rss + info.rss, uss + info.uss
env.close()
print(json.dumps([seconds, len(children), rss / 2**20, uss / 2**20]))
"""


def startup(env_id: str, n: int) -> list[tuple[str, float, int, float, float]]:
    """Start-up seconds and the memory of the child processes, each in a fresh interpreter."""
    import json
    import subprocess
    import sys

    rows = []
    for kind in ("batchenv.make", "gym AsyncVectorEnv"):
        out = subprocess.run(
            [sys.executable, "-c", _STARTUP_SCRIPT, env_id, str(n), kind],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        rows.append((kind, *json.loads(out.stdout.strip().splitlines()[-1])))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--envs", default="CartPole-v1,HalfCheetah-v5")
    parser.add_argument(
        "--spin-us",
        default=None,
        help="comma-separated spin_us values for batchenv.make (default: make's default)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure every method this many times, interleaved, and report the medians",
    )
    parser.add_argument("--sizes", default=None, help="comma-separated N to run (default: all)")
    args = parser.parse_args()
    keep = None if args.sizes is None else {int(v) for v in args.sizes.split(",")}
    seconds = args.seconds or (0.5 if args.quick else 1.5)
    spins = [None] if args.spin_us is None else [float(v) for v in args.spin_us.split(",")]
    cores = len(os.sched_getaffinity(0))
    sizes = {"CartPole-v1": [1, 4, 16, 64, 256], "HalfCheetah-v5": [1, 4, 16]}
    if args.quick:
        sizes = {"CartPole-v1": [16, 64], "HalfCheetah-v5": [16]}
    machine = platform.processor() or platform.machine()
    print(f"# batch_env_throughput  {time.strftime('%Y-%m-%d')}  {machine}, {cores} cores")
    print(f"# python {platform.python_version()}, gymnasium {gym.__version__}")
    for env_id in args.envs.split(","):
        try:
            probe = gym.make(env_id)
        except Exception as error:  # e.g. mujoco extra missing
            print(f"\n{env_id}: skipped ({type(error).__name__}: {error})")
            continue
        space = probe.action_space
        probe.close()
        print(f"\n## {env_id}  (steps/s; ratios to gymnasium AsyncVectorEnv and to the plain loop)")
        print(f"{'N':>5} {'method':<14} {'steps/s':>12} {'x async':>8} {'x plain':>8}")
        for n in sizes.get(env_id, [16]):
            if keep is not None and n not in keep:
                continue
            actions = random_actions(space, n, 256)
            partial = functools.partial
            methods = {
                "plain": partial(run_plain, env_id, n, actions, seconds),
                "sync": partial(run_gym_vector, "sync", env_id, n, actions, seconds),
                "async": partial(run_gym_vector, "async", env_id, n, actions, seconds),
            }
            if n <= 64:
                methods["per-env"] = partial(run_per_env, env_id, n, actions, seconds)
            for workers in sorted({1, 2, cores, 4}):
                for spin in spins:
                    if workers <= n:
                        options = {} if spin is None else {"spin_us": spin}
                        name = f"make/{workers}" + ("" if not spin else f"+s{spin:g}")
                        methods[name] = partial(
                            run_made, env_id, n, workers, options, actions, seconds
                        )
            methods[f"vector/{cores}"] = partial(run_vector, env_id, n, cores, actions, seconds)
            # Rounds interleave the methods, so a slow spell of a shared host hits all of
            # them alike; each method's figure is its median over the rounds.
            rates: dict[str, list[float]] = {name: [] for name in methods}
            for _ in range(args.rounds):
                for name, run in methods.items():
                    rates[name].append(run())
            results = {name: statistics.median(values) for name, values in rates.items()}
            async_, plain = results["async"], results["plain"]
            for name, rate in results.items():
                ratios = f"{rate / async_:>8.2f} {rate / plain:>8.2f}"
                print(f"{n:>5} {name:<14} {rate:>12,.0f} {ratios}")
    print(
        "\n## start-up and memory at N=64 (CartPole-v1), in a fresh interpreter that imported torch"
    )
    print("## seconds to build + reset; child processes; their summed RSS and USS (MB)")
    print(f"{'method':<20} {'start s':>8} {'procs':>6} {'RSS MB':>8} {'USS MB':>8}")
    for name, seconds_, procs, rss, uss in startup("CartPole-v1", 64):
        print(f"{name:<20} {seconds_:>8.2f} {procs:>6} {rss:>8.0f} {uss:>8.0f}")


if __name__ == "__main__":
    main()
