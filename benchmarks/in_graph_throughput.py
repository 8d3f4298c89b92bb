"""Env steps per second of in-graph simulation, against Gymnasium's NumPy-vectorised CartPole.

Measured in one run, at each batch size N, with random actions and finished rows started
afresh (so every method pays for its episode turnover):

  gymnasium      gymnasium.make_vec("CartPole-v1", N, vectorization_mode="vector_entry_point")
                 (NumPy, autoreset on the next step)
  step eager     batchenv.kernels.CartPole.step(action, reset_mask=done), eager torch
  step compiled  the same call under torch.compile
  simulate eager     simulate(env, RandomAlgorithm) over InGraphBatchEnv(CartPole): the whole
                     TF Agents step -- reset of finished rows, begin_episodes, perform, step,
                     experience, end_episodes, score and length bookkeeping
  simulate compiled  torch.compile(simulate)

and prints each one's steps/s and its ratio to Gymnasium's at the same N.

    python benchmarks/in_graph_throughput.py                     # N = 256, 4096, 65536 on CPU
    python benchmarks/in_graph_throughput.py --device cuda --sizes 4096,65536,1048576,4194304
    python benchmarks/in_graph_throughput.py --quick             # short runs (a smoke test)

Targets on CPU: compiled step >= 2x Gymnasium at N=65536 and >= 1.3x at N=256; compiled
simulate() >= 1.5x Gymnasium's step at N=65536.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from batchenv.in_graph.algorithm import RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import simulate
from batchenv.kernels import CartPole

ACTION_BATCHES = 64  # distinct random action batches, cycled


def timed(step: Callable[[int], object], seconds: float, num_envs: int, sync) -> float:
    """Call ``step(i)`` for about ``seconds`` after a warm-up; return env steps per second.

    The warm-up (60 calls) lets torch.compile see every frame simulate() has: the resume
    frames after its index sets compile once sizes 0, 1 and "many" have occurred.
    """
    for i in range(60):
        step(i)
    sync()
    count, begin = 0, time.perf_counter()
    while True:
        for _ in range(10):
            step(count)
            count += 1
        sync()
        elapsed = time.perf_counter() - begin
        if elapsed >= seconds:
            return count * num_envs / elapsed


def run_gymnasium(n: int, seconds: float) -> float:
    env = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(ACTION_BATCHES, n))
    try:
        return timed(lambda i: env.step(actions[i % ACTION_BATCHES]), seconds, n, lambda: None)
    finally:
        env.close()


def run_step(n: int, seconds: float, device: torch.device, compiled: bool, sync) -> float:
    env = CartPole(n, device=device, seed=0)
    actions = torch.randint(0, 2, (ACTION_BATCHES, n), device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)

    def step(action, reset_mask):
        _, _, terminated, truncated = env.step(action, reset_mask)
        return terminated | truncated

    fn = torch.compile(step, dynamic=False) if compiled else step

    def one(i: int) -> None:
        nonlocal done
        done = fn(actions[i % ACTION_BATCHES], done)

    return timed(one, seconds, n, sync)


def run_simulate(n: int, seconds: float, device: torch.device, compiled: bool, sync) -> float:
    env = InGraphBatchEnv(CartPole(n, device=device, seed=0))
    algo = RandomAlgorithm(env.single_action_space, device=device, seed=0)
    fn = torch.compile(simulate) if compiled else simulate
    return timed(lambda i: fn(env, algo), seconds, n, sync)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="256,4096,65536")
    parser.add_argument("--seconds", type=float, default=None, help="per measurement")
    parser.add_argument("--quick", action="store_true", help="0.3 s per measurement")
    parser.add_argument("--skip-gymnasium", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    seconds = args.seconds or (0.3 if args.quick else 3.0)
    sizes = [int(s) for s in args.sizes.split(",")]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(
        f"# in_graph_throughput  {time.strftime('%Y-%m-%d')}  {platform.machine()}, "
        f"{os.cpu_count()} cores{gpu}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; device {device}"
    )
    print("# CartPole-v1, env steps/s; ratio to gymnasium's NumPy vector env at the same N\n")
    print(f"{'N':>9} {'method':<18} {'steps/s':>14} {'x gymnasium':>12}")
    for n in sizes:
        base = float("nan") if args.skip_gymnasium else run_gymnasium(n, seconds)
        rows = [("gymnasium", base)]
        rows.append(("step eager", run_step(n, seconds, device, False, sync)))
        rows.append(("step compiled", run_step(n, seconds, device, True, sync)))
        rows.append(("simulate eager", run_simulate(n, seconds, device, False, sync)))
        rows.append(("simulate compiled", run_simulate(n, seconds, device, True, sync)))
        for name, rate in rows:
            print(f"{n:>9} {name:<18} {rate:>14,.0f} {rate / base:>11.2f}x", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
