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

and prints each one's steps/s and its ratio to Gymnasium's at the same N. Each method is
built (and compiled) once, then timed in ``--rounds`` interleaved rounds of ``--seconds``
(default 5 x 1 s); the median counts, so a slow spell of the VM hits every method alike.

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


def warm(step: Callable[[int], object], sync) -> Callable[[int], object]:
    """Call ``step`` 60 times and return it: torch.compile sees every frame simulate() has
    (the resume frames after its index sets compile once sizes 0, 1 and "many" occurred)."""
    for i in range(60):
        step(i)
    sync()
    return step


def timed(step: Callable[[int], object], seconds: float, num_envs: int, sync) -> float:
    """Call ``step(i)`` for about ``seconds``; return env steps per second."""
    count, begin = 0, time.perf_counter()
    while True:
        for _ in range(10):
            step(count)
            count += 1
        sync()
        elapsed = time.perf_counter() - begin
        if elapsed >= seconds:
            return count * num_envs / elapsed


def make_gymnasium(n: int, device: torch.device, sync):
    env = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(ACTION_BATCHES, n))
    return warm(lambda i: env.step(actions[i % ACTION_BATCHES]), lambda: None), env.close


def make_step(compiled: bool):
    def make(n: int, device: torch.device, sync):
        env = CartPole(n, device=device, seed=0)
        actions = torch.randint(0, 2, (ACTION_BATCHES, n), device=device)
        done = torch.zeros(n, dtype=torch.bool, device=device)

        def step(action, reset_mask):
            _, _, terminated, truncated = env.step(action, reset_mask)
            return terminated | truncated

        # Plain torch.compile, as a user writes it: at a fixed N it compiles the same static
        # graph, while dynamic=False (or fullgraph=True) makes Dynamo patch its config on
        # every call (~5 us, 15% of a call at N=256 on the 2-core VM).
        fn = torch.compile(step) if compiled else step

        def one(i: int) -> None:
            nonlocal done
            done = fn(actions[i % ACTION_BATCHES], done)

        return warm(one, sync), None

    return make


def make_simulate(compiled: bool):
    def make(n: int, device: torch.device, sync):
        env = InGraphBatchEnv(CartPole(n, device=device, seed=0))
        algo = RandomAlgorithm(env.single_action_space, device=device, seed=0)
        fn = torch.compile(simulate) if compiled else simulate
        return warm(lambda i: fn(env, algo), sync), None

    return make


METHODS = {
    "gymnasium": make_gymnasium,
    "step eager": make_step(False),
    "step compiled": make_step(True),
    "simulate eager": make_simulate(False),
    "simulate compiled": make_simulate(True),
}


def measure(n: int, names: list[str], rounds: int, seconds: float, device, sync) -> dict:
    """Median steps/s of each method over ``rounds`` rounds; every round times each method
    once, in turn, so a slow spell of the machine hits all of them alike."""
    made = {name: METHODS[name](n, device, sync) for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    try:
        for _ in range(rounds):
            for name, (step, _) in made.items():
                rates[name].append(timed(step, seconds, n, sync))
    finally:
        for _, close in made.values():
            if close is not None:
                close()
    return {name: float(np.median(values)) for name, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="256,4096,65536")
    parser.add_argument("--seconds", type=float, default=None, help="per measurement (1 s)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median")
    parser.add_argument("--quick", action="store_true", help="0.3 s per measurement")
    parser.add_argument("--skip-gymnasium", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    seconds = args.seconds or (0.3 if args.quick else 1.0)
    rounds = 1 if args.quick else args.rounds
    sizes = [int(s) for s in args.sizes.split(",")]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(
        f"# in_graph_throughput  {time.strftime('%Y-%m-%d')}  {platform.machine()}, "
        f"{os.cpu_count()} cores{gpu}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; device {device}; median of {rounds} rounds "
        f"of {seconds} s per method, methods interleaved"
    )
    print("# CartPole-v1, env steps/s; ratio to gymnasium's NumPy vector env at the same N\n")
    print(f"{'N':>9} {'method':<18} {'steps/s':>14} {'x gymnasium':>12}")
    names = [name for name in METHODS if not (args.skip_gymnasium and name == "gymnasium")]
    for n in sizes:
        rates = measure(n, names, rounds, seconds, device, sync)
        base = rates.get("gymnasium", float("nan"))
        for name, rate in rates.items():
            print(f"{n:>9} {name:<18} {rate:>14,.0f} {rate / base:>11.2f}x", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
