"""BatchPPO: the TF Agents PPO (batch-ppo v1.4) as a batchenv Algorithm.

The four callbacks ``simulate()`` drives, in reading order:

- ``begin_episodes(rows)``: those rows start fresh episodes (running data dropped, GRU
  state zeroed);
- ``perform(observ)``: normalise the observations, run the policy, sample (training) or take
  the mean / mode (evaluation), remember the distribution parameters;
- ``experience(...)``: while training, update the normalisers, append the step to each row's
  running episode, move finished episodes to the store and, once ``update_every`` episodes
  have finished, run an update and return its summaries;
- ``end_episodes(rows)``: nothing (``experience`` already saw ``done``).

An update (``_update``) normalises the stored raw episodes with the current statistics,
computes Monte-Carlo returns (or GAE) with truncated episodes bootstrapped from
``V(next_observ)``, then runs ``update_epochs`` passes of the penalised PPO loss plus the
value loss with one Adam, and finally adapts the KL penalty beta (batch-ppo v1.4;
docs/batchppo.md). The networks see the valid steps only, never a padding frame.

    >>> import gymnasium as gym
    >>> env = gym.make("Pendulum-v1")
    >>> algo = BatchPPO(env.observation_space, env.action_space, BatchPPOConfig(num_agents=4))
    >>> algo.begin_episodes(torch.arange(4))
    >>> algo.perform(torch.zeros(4, 3)).shape
    torch.Size([4, 1])
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from batchenv.in_graph.algorithm import Algorithm, Summaries

from .config import BatchPPOConfig
from .losses import (
    adapt_penalty,
    discounted_returns,
    gae_advantages,
    normalize_advantages,
    policy_loss,
    value_loss,
)
from .memory import EpisodeMemory, Episodes, Steps
from .networks import CategoricalHead, GaussianHead, Policy, value_network
from .normalize import StreamingNormalize

__all__ = ["BatchPPO"]

OBSERV_CLIP = 5.0
REWARD_CLIP = 10.0


class BatchPPO(Algorithm):
    """PPO with an adaptive KL penalty over whole episodes of a batch of envs.

    Args:
        observation_space: one env's observation space (a Box; flattened inside).
        action_space: one env's action space: a float Box (Gaussian policy) or Discrete
            (categorical policy).
        config: the settings; ``num_agents`` is only a hint, the batch size B is the number
            of rows the first ``perform()`` sees.

    Box actions come back float32 ``[B, *shape]``, unclipped (clip them in the env, e.g.
    batchenv's ClipAction); Discrete actions int64 ``[B]``.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: BatchPPOConfig | None = None,
    ):
        self.config = config = config or BatchPPOConfig()
        self.device = torch.device(config.device)
        if not isinstance(observation_space, gym.spaces.Box):
            raise TypeError(f"BatchPPO needs a Box observation space, got {observation_space}")
        self.observ_size = math.prod(observation_space.shape)
        self.action_space = action_space
        init = torch.Generator().manual_seed(config.seed)
        features = _last_size(config.policy_layers, self.observ_size)
        if isinstance(action_space, gym.spaces.Box) and np.issubdtype(
            action_space.dtype, np.floating
        ):
            self._action_shape = tuple(action_space.shape)
            head = GaussianHead(
                features,
                math.prod(self._action_shape),
                config.init_std,
                config.init_output_factor,
                init,
            )
        elif isinstance(action_space, gym.spaces.Discrete):
            self._action_shape = ()
            head = CategoricalHead(features, int(action_space.n), config.init_output_factor, init)
        else:
            raise TypeError(
                f"BatchPPO acts in a float Box (Gaussian) or a Discrete (categorical) action "
                f"space, got {action_space}"
            )
        self.policy = Policy(
            self.observ_size, head, config.policy_layers, config.recurrent, init
        ).to(self.device)
        self.value = value_network(self.observ_size, config.value_layers, init).to(self.device)
        parameters = [*self.policy.parameters(), *self.value.parameters()]
        self.optimizer = torch.optim.Adam(parameters, lr=config.learning_rate)
        self.observ_norm = StreamingNormalize(
            (self.observ_size,), clip=OBSERV_CLIP, device=self.device
        )
        self.reward_norm = StreamingNormalize(
            (), center=False, clip=REWARD_CLIP, device=self.device
        )
        self.beta = torch.tensor(float(config.kl_init_penalty), device=self.device)
        self.generator = torch.Generator(self.device).manual_seed(config.seed + 1)
        self.training = True
        self.updates = 0
        self.num_rows: int | None = None  # B, fixed by the first perform()
        self.memory: EpisodeMemory | None = None
        self._state: torch.Tensor | None = None  # GRU state [B, H] of a recurrent policy
        self._params: torch.Tensor | None = None  # distribution of the last perform() [B, P]

    # --- modes ----------------------------------------------------------------------------

    def train_mode(self) -> BatchPPO:
        """Sample actions and learn from experience (the default)."""
        self.training = True
        return self

    def eval_mode(self) -> BatchPPO:
        """Act with the mean (Gaussian) or mode (categorical); experience() learns nothing."""
        self.training = False
        return self

    # --- the four callbacks -----------------------------------------------------------------

    def begin_episodes(self, agent_indices: torch.Tensor) -> Summaries | None:
        """Rows ``agent_indices`` start new episodes; unfinished ones there are discarded."""
        if self.memory is None:  # nothing recorded yet: every row is fresh
            return None
        rows = agent_indices.to(self.device)
        self.memory.begin(rows)
        if self._state is not None:
            self._state[rows] = 0.0
        return None

    def perform(self, observ: torch.Tensor) -> torch.Tensor:
        """Actions for every row: sampled while training, the mean / mode in evaluation."""
        observ = self._flat(observ)
        self._allocate(observ.shape[0])
        with torch.no_grad():
            params, self._state = self.policy.step(self.observ_norm.transform(observ), self._state)
            if not self.training:
                return self._env_action(self.policy.head.mode(params))
            action = self.policy.head.sample(params, self.generator)
        self._params = params
        return self._env_action(action)

    def experience(
        self,
        observ: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        next_observ: torch.Tensor,
        truncated: torch.Tensor,
    ) -> Summaries | None:
        """Record the step; commit finished episodes; update once enough have finished."""
        if not self.training:
            return None
        if self._params is None or self.memory is None:
            raise RuntimeError(
                "BatchPPO.experience() was called without a perform() in training mode "
                "before it; call perform(observ) first and pass its action here"
            )
        observ = self._flat(observ)
        reward = reward.to(self.device, torch.float32)
        self.observ_norm.update(observ)
        self.reward_norm.update(reward)
        self.memory.append(observ, self._memory_action(action), reward, self._params)
        self._params = None
        done = done.to(self.device)
        if bool(done.any()):
            rows = torch.nonzero(done).flatten()
            self.memory.commit(rows, self._flat(next_observ), truncated.to(self.device))
        if self.memory.episodes >= self.config.update_every:
            return self._update(self.memory.take())
        return None

    # --- the update -----------------------------------------------------------------------

    def _update(self, episodes: Episodes) -> Summaries:
        """Train on ``episodes`` (all finished since the last update); return summaries.

        The networks run on the valid steps only (:meth:`Episodes.pack`): the losses are
        means over valid steps, so padding frames would only cost time.
        """
        config = self.config
        observ = self.observ_norm.transform(episodes.observ)
        target, advantage = self.targets(episodes, observ)
        everything = episodes.pack(observ, advantage, target)

        totals: dict[str, torch.Tensor] = {}
        steps = 0
        for _ in range(config.update_epochs):
            for index in self._minibatches(len(episodes)):
                batch = everything
                if index is not None:
                    batch = episodes.select(index).pack(
                        observ[index], advantage[index], target[index]
                    )
                for name, value_ in self._train_step(batch).items():
                    totals[name] = totals.get(name, 0.0) + value_
                steps += 1

        with torch.no_grad():
            kl = self.policy.head.kl(everything.params, self._replay(everything)).mean()
        self.beta = adapt_penalty(self.beta, kl, config.kl_target)
        self.updates += 1
        summaries = {name: total / steps for name, total in totals.items()}
        summaries.update(
            kl=kl,
            beta=self.beta.clone(),
            episodes=torch.tensor(len(episodes)),
            mean_episode_length=episodes.length.float().mean(),
            updates=torch.tensor(self.updates),
        )
        return summaries

    def targets(
        self, episodes: Episodes, observ: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Value targets and normalised advantages ``[N, T]`` of ``episodes`` (0 on padding).

        Rewards are scaled by the current statistics. Without ``gae_lambda`` the target is the
        Monte-Carlo return and the advantage ``return - V``; with it, GAE(λ) and
        ``advantage + V``. Truncated episodes bootstrap from ``V(last_observ)``, terminated
        ones from 0. ``observ``: the episodes' observations already normalised.
        """
        config, mask = self.config, episodes.mask
        if observ is None:
            observ = self.observ_norm.transform(episodes.observ)
        reward = torch.where(mask, self.reward_norm.transform(episodes.reward), 0.0)
        with torch.no_grad():  # V on the valid steps only; padding is never read
            valid = self.value(observ[mask]).squeeze(-1)
            value = torch.zeros_like(reward).masked_scatter(mask, valid)
            last_value = self.value(self.observ_norm.transform(episodes.last_observ)).squeeze(-1)
            bootstrap = torch.where(episodes.truncated, last_value, 0.0)
            if config.gae_lambda is None:
                target = discounted_returns(reward, episodes.length, config.discount, bootstrap)
                advantage = target - value
            else:
                advantage = gae_advantages(
                    reward, value, episodes.length, config.discount, config.gae_lambda, bootstrap
                )
                target = torch.where(mask, advantage + value, 0.0)
        return target, normalize_advantages(advantage, mask)

    def _train_step(self, steps: Steps) -> dict[str, torch.Tensor]:
        """One Adam step on the policy and value losses of a (mini)batch of packed steps."""
        config = self.config
        loss_policy, stats = policy_loss(
            self.policy.head,
            steps.params,
            self._replay(steps),
            steps.action,
            steps.advantage,
            steps.episode,
            steps.length,
            self.beta,
            config.kl_target,
            config.kl_cutoff_factor,
            config.kl_cutoff_coef,
            config.entropy_coef,
        )
        loss_value = value_loss(self.value(steps.observ).squeeze(-1), steps.target)
        self.optimizer.zero_grad(set_to_none=True)
        (loss_policy + loss_value).backward()
        self.optimizer.step()
        stats.update(policy_loss=loss_policy.detach(), value_loss=loss_value.detach())
        return stats

    def _replay(self, steps: Steps) -> torch.Tensor:
        """The current policy's distribution parameters ``[R, P]`` at ``steps``: a
        feed-forward policy runs on the rows, a recurrent one replays whole episodes."""
        if not self.policy.state_size:
            return self.policy.sequence(steps.observ)
        params = self.policy.sequence(steps.padded_observ, self.config.chunk_length)
        return params[steps.mask]

    def _minibatches(self, count: int) -> list[torch.Tensor | None]:
        """Episode indices of each minibatch of one epoch (shuffled when more than one);
        ``[None]`` for one minibatch of every episode."""
        if self.config.minibatches == 1:
            return [None]
        order = torch.randperm(count, generator=self.generator, device=self.device)
        return list(order.chunk(min(self.config.minibatches, count)))

    # --- checkpoints ----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically (tensors are live references,
        as in ``nn.Module.state_dict``: ``torch.save`` it or deep-copy it)."""
        return {
            "policy": self.policy.state_dict(),
            "value": self.value.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "observ_norm": self.observ_norm.state_dict(),
            "reward_norm": self.reward_norm.state_dict(),
            "beta": self.beta,
            "generator": self.generator.get_state(),
            "training": self.training,
            "updates": self.updates,
            "num_rows": self.num_rows,
            "memory": None if self.memory is None else self.memory.state_dict(),
            "recurrent_state": self._state,
            "last_params": self._params,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (made with the same spaces and network config)."""
        self.policy.load_state_dict(state["policy"])
        self.value.load_state_dict(state["value"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.observ_norm.load_state_dict(state["observ_norm"])
        self.reward_norm.load_state_dict(state["reward_norm"])
        self.beta = state["beta"].to(self.device, copy=True)
        self.generator.set_state(state["generator"])
        self.training = bool(state["training"])
        self.updates = int(state["updates"])
        self.num_rows, self.memory, self._state = None, None, None
        if state["num_rows"] is not None:
            self._allocate(int(state["num_rows"]))
            self.memory.load_state_dict(state["memory"])
        if state["recurrent_state"] is not None:
            self._state = state["recurrent_state"].to(self.device, copy=True)
        params = state["last_params"]
        self._params = None if params is None else params.to(self.device, copy=True)

    # --- helpers --------------------------------------------------------------------------

    def _allocate(self, rows: int) -> None:
        """Fix B on first use: per-row episode memory and GRU state."""
        if self.num_rows is not None:
            if rows != self.num_rows:
                raise ValueError(
                    f"BatchPPO.perform() got {rows} rows, but this BatchPPO serves "
                    f"{self.num_rows} (fixed by its first perform()); make a new BatchPPO "
                    f"for a different batch size"
                )
            return
        self.num_rows = rows
        self.memory = EpisodeMemory(
            rows,
            self.config.max_length,
            self.observ_size,
            action_shape=(math.prod(self._action_shape),) if self._is_box else (),
            action_dtype=torch.float32 if self._is_box else torch.int64,
            param_size=self.policy.head.param_size,
            capacity=self.config.update_every + rows,
            device=self.device,
        )
        if self.policy.state_size:
            self._state = torch.zeros(rows, self.policy.state_size, device=self.device)

    @property
    def _is_box(self) -> bool:
        return isinstance(self.action_space, gym.spaces.Box)

    def _flat(self, observ: torch.Tensor) -> torch.Tensor:
        return observ.to(self.device, torch.float32).reshape(observ.shape[0], self.observ_size)

    def _env_action(self, action: torch.Tensor) -> torch.Tensor:
        """Policy action -> env action (Box shape / Discrete start)."""
        if self._is_box:
            return action.reshape(action.shape[0], *self._action_shape)
        start = int(self.action_space.start)
        return action + start if start else action

    def _memory_action(self, action: torch.Tensor) -> torch.Tensor:
        """Env action -> policy action (flat float32 / 0-based int64)."""
        action = action.to(self.device)
        if self._is_box:
            return action.to(torch.float32).reshape(action.shape[0], -1)
        return action.to(torch.int64) - int(self.action_space.start)


def _last_size(layers: tuple[int, ...], observ_size: int) -> int:
    """Feature size the policy head reads: the last layer's (or the observation's)."""
    return layers[-1] if layers else observ_size
