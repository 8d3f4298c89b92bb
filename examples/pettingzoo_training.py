"""Shared-policy PPO on a PettingZoo env: Knights-Archers-Zombies, every agent one row.

    pip install -e ".[pettingzoo]"
    python examples/pettingzoo_training.py [--updates 60] [--num-envs 8]

``batchenv.make(kaz.parallel_env, num_envs)`` runs the PettingZoo envs in worker
processes and hands ``simulate()`` arrays ``[envs, agents, ...]`` (like the Tag kernels):
one policy network drives the 2 archers and 2 knights of every game. An agent killed by a
zombie is *masked* until its game ends: zero observation, reward 0, its action never
reaches the env, and ``env.agent_mask`` says so; the algorithm leaves masked rows out of
its losses. A game ends when no agent is left (or at ``--max-cycles``).

The story of one simulate() call, seen from the algorithm:

- ``perform(observ)``: sample an action per agent; remember which agents were alive;
- ``experience(...)``: append the transition to a ``rollout``-step buffer; when it is full,
  compute GAE advantages and run PPO-clip epochs over the rows that were alive;
- ``end_episodes(rows)``: nothing -- ``simulate()`` keeps the running scores.

At the end the mean return per agent (zombies killed) of the trained policy is compared
with random play on the same envs.
"""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from shared_policy_ppo import ActingOnly, ActorCritic, parse_dataclass_args, ppo_epochs

import batchenv
from batchenv import Algorithm, simulate


@dataclass
class Args:
    """Command-line settings (``--name value``)."""

    updates: int = 60  #: PPO updates (each after ``rollout`` simulate() calls)
    num_envs: int = 8  #: games stepped in lockstep (2 archers + 2 knights each)
    num_workers: int = 2  #: worker processes for the games
    max_cycles: int = 300  #: time limit of a game
    rollout: int = 64  #: steps per update
    learning_rate: float = 5e-4  #: Adam step size
    discount: float = 0.99  #: gamma
    gae_lambda: float = 0.95  #: lambda of the advantage estimate
    entropy: float = 0.01  #: entropy bonus weight
    epochs: int = 4  #: passes over each rollout
    minibatches: int = 4  #: minibatches per pass
    clip: float = 0.2  #: PPO's probability-ratio clip
    eval_steps: int = 600  #: simulate() calls per evaluation
    seed: int = 0  #: seeds the envs, the network and the sampling


def check_extra() -> None:
    """Exit with one line when the pettingzoo extra (PettingZoo and pygame) is missing,
    before any worker process tries to import it."""
    try:
        from pettingzoo.butterfly import knights_archers_zombies_v11  # noqa: F401
    except ImportError as error:
        missing = (error.name or "pettingzoo").split(".")[0]
        print(
            f"pettingzoo_training.py: error: Knights-Archers-Zombies needs the pettingzoo "
            f'extra ({missing} is not installed): pip install -e ".[pettingzoo]"',
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def make_game(max_cycles: int):
    """One Knights-Archers-Zombies game (imported in the worker that builds it)."""
    from pettingzoo.butterfly import knights_archers_zombies_v11

    return knights_archers_zombies_v11.parallel_env(max_cycles=max_cycles)


class SharedPolicyPPO(Algorithm):
    """PPO-clip with GAE over every agent row; masked (dead) agents are left out."""

    def __init__(self, env, args: Args, learn: bool = True):
        self.env, self.args, self.learn = env, args, learn
        self.num_actions = int(env.action_space.n)
        observ_size = int(np.prod(env.observation_space.shape))
        self.net = ActorCritic(observ_size, self.num_actions, hidden=128)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=args.learning_rate)
        self.generator = torch.Generator().manual_seed(args.seed)
        self.buffer: list[tuple[torch.Tensor, ...]] = []
        self.alive = torch.ones(env.num_envs, env.num_agents, dtype=torch.bool)
        self.updates = 0

    @torch.no_grad()
    def perform(self, observ):
        # The mask that goes with this observation: which agents act now.
        self.alive = torch.as_tensor(self.env.agent_mask.copy())
        if not self.learn:
            shape = observ.shape[:2]
            return torch.randint(0, self.num_actions, shape, generator=self.generator)
        logits, _ = self.net(observ.flatten(2))
        probs = torch.softmax(logits, dim=-1).reshape(-1, self.num_actions)
        return torch.multinomial(probs, 1, generator=self.generator).reshape(observ.shape[:2])

    def experience(self, observ, action, reward, done, next_observ, truncated):
        if not self.learn:
            return None
        self.buffer.append((observ, action, reward, done, truncated, next_observ, self.alive))
        if len(self.buffer) < self.args.rollout:
            return None
        summaries = self._update()
        self.buffer.clear()
        return summaries

    def _update(self) -> dict[str, torch.Tensor]:
        """PPO-clip epochs on the rollout: GAE over time per agent row."""
        args = self.args
        observ, action, reward, done, truncated, next_observ, alive = (
            torch.stack(column) for column in zip(*self.buffer)
        )  # [S, E, A, ...]; done and truncated [S, E]
        with torch.no_grad():
            logits, value = self.net(observ.flatten(3))
            old_log_prob = torch.distributions.Categorical(logits=logits).log_prob(action)
            _, next_value = self.net(next_observ.flatten(3))
            # An agent's return ends when it dies (its row is masked from then on) or when
            # its game ends; a time limit bootstraps from the last observation.
            next_alive = torch.cat([alive[1:], alive[-1:]])
            ends = (~next_alive) | done[..., None]
            terminal = ends & ~truncated[..., None]
            delta = reward + args.discount * next_value * (~terminal) - value
            advantage = torch.zeros_like(reward)
            running = torch.zeros_like(reward[0])
            for t in reversed(range(reward.shape[0])):
                running = delta[t] + args.discount * args.gae_lambda * (~ends[t]) * running
                advantage[t] = running
            target = advantage + value
        keep = alive.reshape(-1)
        rows = observ.flatten(3).reshape(-1, observ[0, 0, 0].numel())[keep]
        columns = [x.reshape(-1)[keep] for x in (action, old_log_prob, advantage, target)]
        summaries = ppo_epochs(self.net, self.optimizer, rows, columns, args, self.generator)
        self.updates += 1
        return summaries


def mean_return(env, algo: SharedPolicyPPO, steps: int) -> tuple[float, int]:
    """Mean return per agent of the games that finish in ``steps`` simulate() calls from
    fresh starts, and how many did."""
    acting = ActingOnly(algo)
    total, count = 0.0, 0
    simulate(env, acting, reset=True)
    for _ in range(steps):
        done, score, _ = simulate(env, acting)
        total += float(score[done].mean(dim=-1).sum())
        count += int(done.sum())
    return total / max(count, 1), count


def train(args: Args) -> dict[str, float]:
    """Measure random play, train, measure the trained policy; return the figures."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the 2 game workers need the other cores
    env = batchenv.make(
        functools.partial(make_game, args.max_cycles), args.num_envs, num_workers=args.num_workers
    )
    try:
        print(f"{env!r}")
        env.reset(seed=args.seed)
        random_return, random_games = mean_return(
            env, SharedPolicyPPO(env, args, learn=False), args.eval_steps
        )
        print(f"random play:    return per agent {random_return:6.3f} ({random_games} games)")

        algo = SharedPolicyPPO(env, args)
        start = time.perf_counter()
        simulate(env, algo, reset=True)
        calls = 1
        while algo.updates < args.updates:
            calls += 1
            _, _, summaries = simulate(env, algo, log=calls % (5 * args.rollout) == 0)
            if "mean_score" in summaries:
                print(
                    f"update {algo.updates:4d}: return per agent "
                    f"{float(summaries['mean_score']):6.3f}, entropy "
                    f"{float(summaries.get('entropy', torch.tensor(float('nan')))):.3f}"
                )
        seconds = time.perf_counter() - start

        trained_return, trained_games = mean_return(env, algo, args.eval_steps)
        print(f"trained policy: return per agent {trained_return:6.3f} ({trained_games} games)")
        steps = (calls - 1) * args.num_envs
        print(
            f"{steps:,} game steps ({steps * env.num_agents:,} agent steps) in {seconds:.1f} s; "
            f"return per agent {random_return:.3f} -> {trained_return:.3f}"
        )
    finally:
        env.close()
    return {
        "random_return": random_return,
        "trained_return": trained_return,
        "random_games": random_games,
        "trained_games": trained_games,
        "seconds": seconds,
    }


def parse_args(argv: list[str] | None = None) -> Args:
    return parse_dataclass_args(Args(), __doc__.splitlines()[0], argv)


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    check_extra()
    return train(args)


if __name__ == "__main__":
    main()
