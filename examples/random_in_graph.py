"""Random actions on a batch of in-graph CartPoles with simulate().

    python examples/random_in_graph.py [--steps 1000] [--num-envs 64] [--compile]

Each simulate() call is one step of every env; finished envs are reset at the start of the
next call. With log=True it returns the mean score of the episodes finished since the last
log. A random policy scores about 22 on CartPole-v1.
"""

import argparse

import torch

from batchenv import RandomAlgorithm, simulate
from batchenv.kernels import CartPole

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=1000, help="simulate() calls")
parser.add_argument("--num-envs", type=int, default=64, help="envs stepped in lockstep")
parser.add_argument("--compile", action="store_true", help="torch.compile simulate()")
args = parser.parse_args()

env = CartPole(num_envs=args.num_envs, seed=0)
algo = RandomAlgorithm(env.single_action_space, seed=0)
step = torch.compile(simulate) if args.compile else simulate
for i in range(1, args.steps + 1):
    log = i % 100 == 0 or i == args.steps
    done, score, summaries = step(env, algo, log=log)
    if "mean_score" in summaries:
        print(f"step {i:5d}  mean score {summaries['mean_score'].item():6.2f}")
