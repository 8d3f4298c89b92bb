"""What a Ray call costs per step and per rollout fragment (issue 22 part 4).

    python benchmarks/ray_fragments.py [--env CartPole-v1] [--envs 8] [--groups 2]

Three ways to make env steps with ``groups`` worker groups of ``envs`` envs each, random
actions, interleaved rounds, medians:

- ``local``: ``batchenv.make(env, groups * envs, num_workers=groups)``, lockstep;
- ``ray-step``: the same with ``backend="ray"``: one actor call per group per step;
- ``ray-fragment T``: ``RolloutGroups`` whose samplers step their envs ``T`` times next to
  them (the policy a random draw) and return the ``[T, envs]`` fragment in one call.

From the per-call overhead ``c`` (ray-step time per step minus local's) and the env work
per step of a group ``w = envs * s`` the script prints the break-even fragment length:
a fragment of ``T`` steps costs ``c + T * w``, so Ray's share of the time is
``c / (c + T * w)``; it falls under 10% from ``T >= 9 c / w``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import gymnasium
import numpy as np

import batchenv


class RandomSampler:
    """``envs`` envs stepped ``length`` times per fragment with random actions."""

    def __init__(self, env_id: str, envs: int, length: int, group: int, incarnation: int):
        self.envs = [gymnasium.make(env_id) for _ in range(envs)]
        self.length = length
        for j, env in enumerate(self.envs):
            env.reset(seed=1000 * group + j)
            env.action_space.seed(1000 * group + j)

    def load_weights(self, weights) -> None:
        pass

    def sample(self) -> dict:
        rewards = np.zeros((self.length, len(self.envs)), np.float32)
        for t in range(self.length):
            for j, env in enumerate(self.envs):
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                rewards[t, j] = reward
                if terminated or truncated:
                    env.reset()
        return {"reward": rewards}

    def close(self) -> None:
        for env in self.envs:
            env.close()


def time_lockstep(env, steps: int) -> float:
    """Seconds per lockstep step of a BatchEnv with random actions."""
    space = env.action_space
    space.seed(0)
    env.reset(seed=0)
    actions = [np.stack([space.sample() for _ in range(len(env))]) for _ in range(16)]
    start = time.perf_counter()
    for t in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[t % 16])
        done = np.flatnonzero(terminated | truncated)
        if len(done):
            env.reset(done)
    return (time.perf_counter() - start) / steps


def time_fragments(groups, calls: int, length: int) -> float:
    """Seconds per step (of every group) when each call returns ``length`` steps."""
    groups.submit_all()
    start = time.perf_counter()
    done = 0
    while done < calls * groups.num_workers:
        for group, fragment in groups.wait(60.0):
            if isinstance(fragment, BaseException):
                raise fragment
            done += 1
            if done + groups.pending < calls * groups.num_workers:
                groups.submit(group)
    return (time.perf_counter() - start) / (calls * length)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", type=int, default=8, help="envs per group")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--lengths", default="1,10,100", help="fragment lengths T")
    parser.add_argument("--steps", type=int, default=2000, help="steps per timed run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import ray

    from batchenv.workers.ray_rollouts import RolloutGroups

    lengths = [int(x) for x in args.lengths.split(",")]
    # Logical CPUs for every group of every variant: they are all kept alive, but only one
    # variant runs at a time, so the real cores are never shared.
    cpus = args.groups * (1 + len(lengths))
    ray.init(num_cpus=cpus, include_dashboard=False, logging_level="WARNING")
    num_envs = args.groups * args.envs
    local = batchenv.make(args.env, num_envs, num_workers=args.groups)
    remote = batchenv.make(args.env, num_envs, backend="ray", num_workers=args.groups)
    samplers = {
        length: RolloutGroups(
            functools.partial(RandomSampler, args.env, args.envs, length), args.groups
        )
        for length in lengths
    }
    for groups in samplers.values():
        groups.set_weights(None)
    results: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            results.setdefault("local", []).append(time_lockstep(local, args.steps))
            results.setdefault("ray-step", []).append(time_lockstep(remote, args.steps // 4))
            for length, groups in samplers.items():
                calls = max(2, args.steps // length)
                seconds = time_fragments(groups, calls, length)
                results.setdefault(f"ray-fragment T={length}", []).append(seconds)
    finally:
        local.close()
        remote.close()
        for groups in samplers.values():
            groups.close()
        ray.shutdown()
    print(
        f"{args.env}: {args.groups} groups x {args.envs} envs, random actions, "
        f"medians of {args.rounds} rounds"
    )
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, seconds in medians.items():
        print(
            f"  {name:22s} {seconds * 1e6:9.1f} us per step  "
            f"{num_envs / seconds:>10,.0f} env steps/s"
        )
    overhead = medians["ray-step"] - medians["local"]
    work = medians[f"ray-fragment T={max(lengths)}"]  # a long fragment: all env work
    print(
        f"Ray's cost per call c = {overhead * 1e3:.2f} ms; env work per group step "
        f"w = {work * 1e6:.0f} us; Ray under 10% of the time from T >= 9 c / w = "
        f"{9 * overhead / work:.0f} steps per fragment"
    )


if __name__ == "__main__":
    main()
