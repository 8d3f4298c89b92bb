"""DQN on the four methods: epsilon-greedy ``perform``, ``experience`` that stores and learns.

``simulate()`` drives it like any algorithm (docs/concepts.md): ``perform`` picks actions,
``experience`` writes the transition batch into the :class:`ReplayMemory` (termination and
truncation apart) and runs the gradient steps and target updates that fell due. Every
schedule counts env steps summed over all envs, as CleanRL's ``dqn.py`` counts its
``global_step`` (docs/dqn.md); transition ``s`` (0, 1, ...) triggers

- a gradient step when ``s > learning_starts`` and ``s % train_frequency == 0``;
- a target update when ``s > learning_starts`` and ``s % target_network_frequency == 0``
  (``target <- tau * online + (1 - tau) * target``),

in the order of ``s``, so ``num_envs`` envs get the updates one env would (several per
lockstep step). Exploration, replay sampling and initialisation draw from the algorithm's
own seeded generators, which its ``state_dict`` holds (exact resume).

    >>> import gymnasium as gym
    >>> from batchenv.algorithms.dqn import PRESETS
    >>> space = gym.spaces.Box(-1, 1, (4,))
    >>> algo = DQN(space, gym.spaces.Discrete(2), PRESETS["cartpole"], num_envs=2)
    >>> algo.perform(torch.zeros(2, 4)).shape
    torch.Size([2])
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from batchenv.algorithms.replay import ReplayMemory
from batchenv.in_graph.algorithm import Algorithm, Summaries

from .config import DQNConfig
from .losses import td_loss, td_target
from .networks import QNetwork

__all__ = ["DQN", "linear_schedule"]


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """CleanRL's ``linear_schedule``: ``start_e`` at ``t = 0`` falling linearly to ``end_e``
    at ``t = duration``, then ``end_e``.

        >>> linear_schedule(1.0, 0.05, 100, 50)
        0.525
    """
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class DQN(Algorithm):
    """DQN, Double DQN, prioritized replay and n-step returns, as ``config`` chooses.

    Args:
        observation_space: one env's observation space (any shape; flattened for the MLP).
        action_space: one env's action space (Discrete).
        config: the settings (network, replay, schedules, variant, seed, device).
        num_envs: rows of every ``perform`` / ``experience`` batch (the memory's columns).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig,
        num_envs: int,
    ):
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(
                f"DQN needs a Discrete action space, got {action_space}; use SAC or PPO for "
                f"continuous actions"
            )
        self.config = config
        self.num_envs = int(num_envs)
        self.device = torch.device(config.device)
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        observ_size = int(np.prod(observation_space.shape))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.q = QNetwork(observ_size, self.num_actions, config.hidden_layers)
        self.q.to(self.device)
        self.target = copy.deepcopy(self.q)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=config.learning_rate)
        self.memory = ReplayMemory(
            config.buffer_size,
            observation_space,
            action_space,
            self.num_envs,
            device=self.device,
            n_step=config.n_step,
            gamma=config.gamma,
            prioritized=config.prioritized,
            alpha=config.per_alpha,
            eps=config.per_eps,
        )
        # Exploration and replay sampling (CPU, so a run is the same on any device).
        self.generator = torch.Generator().manual_seed(config.seed)
        self.steps = 0  # training transitions seen, over all envs
        self.updates = 0  # gradient steps made
        self.training = True

    # --- the four methods ---------------------------------------------------------------

    def perform(self, observ: torch.Tensor) -> torch.Tensor:
        """Epsilon-greedy actions: epsilon from the schedule (training) or eval_epsilon."""
        with torch.no_grad():
            greedy = self.q(observ.to(self.device)).argmax(dim=1)
        epsilon = self.epsilon() if self.training else self.config.eval_epsilon
        if epsilon <= 0.0:
            return greedy + self.action_start
        rows = greedy.shape[0]
        explore = torch.rand(rows, generator=self.generator) < epsilon
        random = torch.randint(0, self.num_actions, (rows,), generator=self.generator)
        action = torch.where(explore.to(self.device), random.to(self.device), greedy)
        return action + self.action_start

    def experience(
        self,
        observ: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        next_observ: torch.Tensor,
        truncated: torch.Tensor,
    ) -> Summaries | None:
        """Store the transitions (training only) and run the updates that fell due."""
        if not self.training:
            return None
        terminated = done & ~truncated
        self.memory.add(
            observ, action - self.action_start, reward, next_observ, terminated, truncated
        )
        first, self.steps = self.steps, self.steps + observ.shape[0]
        config = self.config
        losses, values = [], []
        for step in range(max(first, config.learning_starts + 1), self.steps):
            if step % config.train_frequency == 0:
                loss, value = self.update(self.beta(step))
                losses.append(loss)
                values.append(value)
            if step % config.target_network_frequency == 0:
                self.update_target()
        if not losses:
            return None
        return {
            "loss": torch.stack(losses).mean(),
            "q_value": torch.stack(values).mean(),
            "updates": torch.tensor(len(losses)),
        }

    # --- learning -----------------------------------------------------------------------

    def update(self, beta: float = 0.4) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step on a replay batch; its loss and mean Q(s, a) (detached)."""
        config = self.config
        batch = self.memory.sample(config.batch_size, self.generator, beta)
        q = self.q(batch.observ).gather(1, batch.action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_target = self.target(batch.next_observ)
            next_online = self.q(batch.next_observ) if config.double else None
            target = td_target(batch.reward, batch.discount, next_target, next_online)
        loss = td_loss(q, target, batch.weights, config.loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.q.parameters(), config.max_grad_norm)
        self.optimizer.step()
        self.memory.update_priorities(batch.indices, (target - q).detach().abs())
        self.updates += 1
        return loss.detach(), q.detach().mean()

    def update_target(self) -> None:
        """``target <- tau * online + (1 - tau) * target`` (a copy when tau is 1)."""
        tau = self.config.tau
        with torch.no_grad():
            for target, online in zip(self.target.parameters(), self.q.parameters()):
                if tau == 1.0:
                    target.copy_(online)
                else:
                    target.lerp_(online, tau)

    def epsilon(self) -> float:
        """The exploration rate at the current step (CleanRL's linear schedule)."""
        config = self.config
        duration = config.exploration_fraction * config.steps
        return linear_schedule(config.start_e, config.end_e, duration, self.steps)

    def beta(self, step: int) -> float:
        """Prioritized replay's importance exponent at ``step``: per_beta at learning_starts,
        rising linearly to 1 at the end of the run."""
        config = self.config
        span = max(config.steps - config.learning_starts, 1)
        progress = min(max(step - config.learning_starts, 0) / span, 1.0)
        return config.per_beta + (1.0 - config.per_beta) * progress

    def train_mode(self) -> DQN:
        """Explore with the schedule, store transitions and learn (the default)."""
        self.training = True
        return self

    def eval_mode(self) -> DQN:
        """Act with eval_epsilon; store nothing, learn nothing."""
        self.training = False
        return self

    def share(self, shared: Any, sync_target: bool = True) -> bool:
        """Hogwild! (``meta.distributed: shared``): train the Q-network in ``shared`` memory
        with the other sessions of the trial (a
        :class:`~batchenv.experiment.shared.SharedParameters`); the target network, the
        optimiser and the replay memory stay this session's own. ``sync_target`` copies the
        shared Q-network into the target (a fresh run; a resumed one keeps its checkpoint's).
        Returns whether this session's Q-network became the shared one."""
        first = shared.attach({"q": self.q})
        if sync_target:
            self.target.load_state_dict(self.q.state_dict())
        return first

    # --- checkpoints --------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimiser, replay memory, generator and counters (exact resume)."""
        return {
            "q": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "memory": self.memory.state_dict(),
            "generator": self.generator.get_state(),
            "steps": self.steps,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a state without ``memory`` restores only the
        networks (what :func:`~batchenv.algorithms.dqn.train.evaluate` needs)."""
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        if state.get("memory") is None:
            return
        # A copy: Adam keeps the moment tensors it is given, which may be another DQN's.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.memory.load_state_dict(state["memory"])
        self.generator.set_state(state["generator"])
        self.steps = int(state["steps"])
        self.updates = int(state["updates"])

    def __repr__(self) -> str:
        config = self.config
        variant = "Double DQN" if config.double else "DQN"
        extras = [f"{config.n_step}-step"] if config.n_step > 1 else []
        extras += ["PER"] if config.prioritized else []
        suffix = f" ({', '.join(extras)})" if extras else ""
        return f"{variant}{suffix} on {self.num_envs} envs, {self.updates} updates"
