"""PPO on the four methods, for K independent agents at once (docs/ppo.md).

``perform`` samples actions, ``experience`` writes the transition into a fixed ``[T, ...]``
rollout buffer, and :meth:`PPO.update` runs the epochs of minibatch steps once the buffer is
full. Every method is tensor code, so ``rollout(env, ppo, steps=T)`` compiles the T steps
into one program, and the update is compiled too.

The env holds K blocks of ``num_envs`` rows (see ``StackedEnv``); block k belongs to agent
k. Agents share nothing: each has its own slice of the parameters and the optimiser state,
its own noise key and its own minibatch order, so agent k behaves as a lone run with its
seed (up to float rounding of batched matrix products).

    >>> from batchenv.kernels import CartPole
    >>> from batchenv.in_graph import InGraphBatchEnv, rollout
    >>> config = PPOConfig(num_steps=8, num_envs=2)
    >>> env = InGraphBatchEnv(CartPole(num_envs=2, seed=0))
    >>> ppo = PPO(config, env.single_observation_space, env.single_action_space, seeds=[0])
    >>> _ = rollout(env, ppo, steps=8)
    >>> stats = ppo.update()
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch

from batchenv.in_graph.algorithm import Algorithm
from batchenv.in_graph.rollout import compile_program

from . import distributions as dist
from .config import PPOConfig
from .losses import gae, ppo_loss
from .networks import ActorCritic
from .optim import adam_init, adam_step, with_powers

#: Noise keys are derived from the seed with this offset, apart from the envs' keys.
_NOISE_SALT = 0x5DEECE66D


class PPO(Algorithm):
    """K PPO agents over one batch of envs (``K x num_envs`` rows, agent-major).

    Args:
        config: the hyperparameters (num_steps, epochs, minibatches, ...).
        observation_space: one env's (one agent's) Box observation space.
        action_space: Discrete or Box.
        seeds: one seed per agent (parameters and noise).
        num_agents: agents per env for multi-agent envs (one shared policy per seed over
            all of them); 1 for single-agent envs.
        num_updates: the anneal's length (default ``config.num_updates``).
    """

    def __init__(
        self,
        config: PPOConfig,
        observation_space: gym.Space,
        action_space: gym.Space,
        seeds: list[int],
        num_agents: int = 1,
        num_updates: int | None = None,
    ):
        self.config = config
        self.device = torch.device(config.device)
        self.seeds = list(seeds)
        self.k = len(self.seeds)
        self.num_agents = num_agents
        self.rows = config.num_envs * num_agents  # rows of one agent
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        obs_dim = int(math.prod(observation_space.shape))
        self.observ_shape = tuple(observation_space.shape)
        if self.discrete:
            action_dim = int(action_space.n)
            self.action_shape: tuple[int, ...] = ()
        elif isinstance(action_space, gym.spaces.Box):
            action_dim = int(math.prod(action_space.shape))
            self.action_shape = tuple(action_space.shape)
            self.low = torch.as_tensor(action_space.low, dtype=torch.float32).to(self.device)
            self.high = torch.as_tensor(action_space.high, dtype=torch.float32).to(self.device)
        else:
            raise TypeError(f"PPO needs a Discrete or Box action space, got {action_space}")
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.net = ActorCritic(
            obs_dim,
            action_dim,
            self.discrete,
            config.hidden,
            config.activation,
            config.init_log_std,
            config.init,
            config.bias_init,
        )
        self.params = self.net.init(self.seeds, self.device)
        self.opt_state = adam_init(self.params)
        self.keys = dist.agent_keys([s ^ _NOISE_SALT for s in self.seeds], self.device)
        self.draws = torch.zeros((), dtype=torch.int64, device=self.device)
        self.num_updates = num_updates or config.num_updates
        self.updates_done = 0
        # The same count on the device, for the learning-rate anneal: a CUDA graph of an update
        # (CudaGraphLoop) replays device work only, so what the kernels read must live there.
        self.update_index = torch.zeros((), dtype=torch.float64, device=self.device)
        self._make_buffers()
        self._compiled: dict[str, Any] = {}

    # -- state -------------------------------------------------------------------------

    def _make_buffers(self) -> None:
        t, k, r, dev = self.config.num_steps, self.k, self.rows, self.device
        floats = dict(dtype=torch.float32, device=dev)
        act_dtype = torch.int64 if self.discrete else torch.float32
        act_shape = () if self.discrete else (self.action_dim,)
        self.t = torch.zeros((), dtype=torch.int64, device=dev)
        self.buffer = {
            "observ": torch.zeros(t, k, r, self.obs_dim, **floats),
            "action": torch.zeros(t, k, r, *act_shape, dtype=act_dtype, device=dev),
            "log_prob": torch.zeros(t, k, r, **floats),
            "value": torch.zeros(t, k, r, **floats),
            "next_value": torch.zeros(t, k, r, **floats),
            "reward": torch.zeros(t, k, r, **floats),
            "terminated": torch.zeros(t, k, r, dtype=torch.bool, device=dev),
            "done": torch.zeros(t, k, r, dtype=torch.bool, device=dev),
        }
        # What perform() drew, read back by experience().
        self._action = torch.zeros(k, r, *act_shape, dtype=act_dtype, device=dev)
        self._log_prob = torch.zeros(k, r, **floats)
        self._value = torch.zeros(k, r, **floats)
        # Episode statistics per row (raw rewards) and per agent since the last read.
        self.episode_return = torch.zeros(k, r, **floats)
        self.finished_return = torch.zeros(k, **floats)
        self.finished_count = torch.zeros(k, **floats)
        # Reward scaling (running variance of the discounted return, per agent).
        self.discounted = torch.zeros(k, r, **floats)
        self.ret_mean = torch.zeros(k, **floats)
        self.ret_var = torch.ones(k, **floats)
        self.ret_count = torch.full((k,), 1e-4, **floats)

    # -- the four methods --------------------------------------------------------------

    def perform(self, observ: torch.Tensor) -> torch.Tensor:
        """Sample every row's action; remember its log-probability and value."""
        obs = self._flat(observ)
        head, value = self.net(self.params, obs)
        self.draws.add_(1)  # state kept in place: no new tensor out of a compiled rollout
        u = dist.uniform(self.keys, self.draws, tuple(head.shape), stream=0)
        if self.discrete:
            action = dist.sample_categorical(head, u)
            log_prob = dist.categorical_log_prob(head, action)
            env_action = action
        else:
            v = dist.uniform(self.keys, self.draws, tuple(head.shape), stream=1)
            log_std = self.net.log_std(self.params)
            action = dist.sample_normal(head, log_std, u, v)
            log_prob = dist.normal_log_prob(head, log_std, action)
            env_action = torch.maximum(
                torch.minimum(action, self.high.reshape(-1)), self.low.reshape(-1)
            )
        self._action.copy_(action)
        self._log_prob.copy_(log_prob)
        self._value.copy_(value)
        lead = (self.k * self.config.num_envs, *((self.num_agents,) if self.num_agents > 1 else ()))
        return env_action.reshape(*lead, *self.action_shape)

    def experience(self, observ, action, reward, done, next_observ, truncated):
        """Write the transition at step ``t`` of the buffer; keep episode statistics."""
        config = self.config
        obs, next_obs = self._flat(observ), self._flat(next_observ)
        reward = reward.reshape(self.k, self.rows)
        done_rows = self._agent_rows(done)
        trunc_rows = self._agent_rows(truncated)
        terminated = done_rows & ~trunc_rows if config.bootstrap_truncated else done_rows
        next_value = self.net.value(self.params, next_obs)

        # Episode returns of the raw rewards, summed per agent when episodes end.
        ret = self.episode_return + reward
        self.finished_return.add_(torch.where(done_rows, ret, 0.0).sum(-1))
        self.finished_count.add_(done_rows.sum(-1) / self.num_agents)
        self.episode_return.copy_(torch.where(done_rows, 0.0, ret))
        train_reward = self._scale(reward, done_rows) if config.normalize_reward else reward

        index = (self.t % self.config.num_steps).reshape(1)
        for name, value in (
            ("observ", obs),
            ("action", self._action),
            ("log_prob", self._log_prob),
            ("value", self._value),
            ("next_value", next_value),
            ("reward", train_reward),
            ("terminated", terminated),
            ("done", done_rows),
        ):
            self.buffer[name].index_copy_(0, index, value[None])
        self.t.add_(1)
        return None

    def _flat(self, observ: torch.Tensor) -> torch.Tensor:
        """Observations ``[K * rows, ...]`` -> float32 ``[K, rows, obs_dim]`` (MinAtar's
        boolean images become 0/1 inputs)."""
        return observ.reshape(self.k, -1, self.obs_dim).to(torch.float32)

    def _agent_rows(self, flags: torch.Tensor) -> torch.Tensor:
        """Per-env flags ``[K * num_envs]`` -> per row ``[K, rows]``."""
        flags = flags.reshape(self.k, self.config.num_envs, 1)
        return flags.expand(self.k, self.config.num_envs, self.num_agents).reshape(
            self.k, self.rows
        )

    def _scale(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """CleanRL's NormalizeReward: divide by the running std of the discounted return."""
        self.discounted = self.discounted * self.config.gamma + reward
        batch_mean = self.discounted.mean(-1)
        batch_var = self.discounted.var(-1, unbiased=False)
        n = float(self.rows)
        total = self.ret_count + n
        delta = batch_mean - self.ret_mean
        self.ret_mean = self.ret_mean + delta * n / total
        m2 = (
            self.ret_var * self.ret_count
            + batch_var * n
            + delta.square() * self.ret_count * n / total
        )
        self.ret_var = m2 / total
        self.ret_count = total
        self.discounted = torch.where(done, 0.0, self.discounted)
        return reward / torch.sqrt(self.ret_var[:, None] + 1e-8)

    # -- statistics ----------------------------------------------------------------------

    def episode_stats(self) -> torch.Tensor:
        """Mean return per agent ``[K]`` of the episodes finished since the last call (NaN for
        an agent none of whose episodes finished); resets the sums."""
        mean = torch.where(
            self.finished_count > 0,
            self.finished_return / (self.finished_count * self.num_agents).clamp_min(1e-9),
            torch.nan,
        )
        self.finished_return.zero_()
        self.finished_count.zero_()
        return mean

    # -- the update --------------------------------------------------------------------

    def update(self) -> dict[str, torch.Tensor]:
        """Epochs of minibatch steps on the full buffer; returns the mean loss terms ``[K]``."""
        config = self.config
        lr = self._learning_rate()
        prepare = self._program("prepare", _prepare)
        step = self._program("step", _minibatch_step)
        data, orders = prepare(self, self.buffer, self.draws)
        self.draws.add_(config.update_epochs)
        size = config.minibatch_size * self.num_agents
        steps = []
        for order in orders:
            for m in range(config.num_minibatches):
                rows = order[:, m * size : (m + 1) * size]
                self.params, self.opt_state, terms = step(
                    self, self.params, self.opt_state, data, rows, lr
                )
                steps.append(terms)
        self.t.zero_()
        self.updates_done += 1
        self.update_index = self.update_index + 1
        return {name: torch.stack([terms[name] for terms in steps]).mean(0) for name in steps[0]}

    def _learning_rate(self) -> torch.Tensor:
        """The step size of this update, float32 on the device.

        ``lr * (1 - updates / num_updates)``, 0 once the anneal is over, computed in float64 as
        Python would and rounded once, so it is the same number on every device.
        """
        rate = self.config.learning_rate
        if not self.config.anneal_lr:
            return torch.full((), rate, dtype=torch.float32, device=self.device)
        frac = 1.0 - self.update_index / self.num_updates
        frac = torch.where(self.update_index >= self.num_updates, 0.0, frac)
        return (rate * frac).to(torch.float32)

    def _program(self, name: str, function):
        if not self.config.compile:
            return function
        if name not in self._compiled:
            self._compiled[name] = compile_program(function, self.device)
        return self._compiled[name]

    # -- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "opt_state": self.opt_state,
            "draws": self.draws.clone(),  # the rollout advances self.draws in place
            "updates_done": self.updates_done,
            "ret_mean": self.ret_mean,
            "ret_var": self.ret_var,
            "ret_count": self.ret_count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.params = state["params"].to(self.device)
        opt_state = {k: v.to(self.device) for k, v in state["opt_state"].items()}
        self.opt_state = with_powers(opt_state)  # a checkpoint from before the powers
        self.draws = state["draws"].to(self.device, copy=True)
        self.updates_done = int(state["updates_done"])
        self.update_index = torch.full(
            (), float(self.updates_done), dtype=torch.float64, device=self.device
        )
        self.ret_mean, self.ret_var = state["ret_mean"], state["ret_var"]
        self.ret_count = state["ret_count"]

    def act_greedy(self, observ: torch.Tensor) -> torch.Tensor:
        """The mode of each agent's policy (evaluation); ``observ`` is ``[K * num_envs,
        (agents,) *observation_shape]`` as the env gives it."""
        lead = observ.shape[: observ.dim() - len(self.observ_shape)]
        head, _ = self.net(self.params, self._flat(observ))
        if self.discrete:
            return head.argmax(-1).reshape(lead)
        action = torch.maximum(torch.minimum(head, self.high.reshape(-1)), self.low.reshape(-1))
        return action.reshape(*lead, *self.action_shape)


def _prepare(
    ppo: PPO, buffer: dict[str, torch.Tensor], draws: torch.Tensor
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """Advantages and returns, every field flattened to ``[K, T * rows, ...]``, and each
    epoch's minibatch order ``[K, T * rows]`` (epoch e draws with counter ``draws + e + 1``)."""
    config = ppo.config
    gamma, lam = config.gamma, config.gae_lambda
    t, k, r = buffer["reward"].shape
    orders = [
        torch.argsort(dist.uniform(ppo.keys, draws + e + 1, (k, t * r), 2), dim=-1)
        for e in range(config.update_epochs)
    ]

    def by_row(x: torch.Tensor) -> torch.Tensor:  # [T, K, R] -> [K * R, T]
        return x.permute(1, 2, 0).reshape(k * r, t)

    advantage, returns = gae(
        by_row(buffer["reward"]),
        by_row(buffer["value"]),
        by_row(buffer["next_value"]),
        by_row(buffer["terminated"]),
        by_row(buffer["done"]),
        gamma,
        lam,
    )

    def flat(x: torch.Tensor) -> torch.Tensor:  # [T, K, R, ...] -> [K, T * R, ...]
        return x.transpose(0, 1).reshape(k, t * r, *x.shape[3:])

    def from_rows(x: torch.Tensor) -> torch.Tensor:  # [K * R, T] -> [K, T * R]
        return x.reshape(k, r, t).transpose(1, 2).reshape(k, t * r)

    data = {
        "observ": flat(buffer["observ"]),
        "action": flat(buffer["action"]),
        "log_prob": flat(buffer["log_prob"]),
        "value": flat(buffer["value"]),
        "advantage": from_rows(advantage),
        "returns": from_rows(returns),
    }
    return data, orders


def _minibatch_step(
    ppo: PPO,
    params: torch.Tensor,
    opt_state: dict[str, torch.Tensor],
    data: dict[str, torch.Tensor],
    rows: torch.Tensor,
    lr: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Loss, gradient (torch.func), clipping and Adam for one minibatch of every agent."""
    config = ppo.config
    batch = {
        name: torch.gather(
            value,
            1,
            rows.reshape(*rows.shape, *([1] * (value.dim() - 2))).expand(
                *rows.shape, *value.shape[2:]
            ),
        )
        for name, value in data.items()
    }

    def loss(params: dict[str, torch.Tensor]):
        head, value = ppo.net(params, batch["observ"])
        if ppo.discrete:
            log_prob = dist.categorical_log_prob(head, batch["action"])
            entropy = dist.categorical_entropy(head)
        else:
            log_std = ppo.net.log_std(params)
            log_prob = dist.normal_log_prob(head, log_std, batch["action"])
            entropy = dist.normal_entropy(log_std, head)
        return ppo_loss(
            log_prob,
            batch["log_prob"],
            batch["advantage"],
            value,
            batch["value"],
            batch["returns"],
            entropy,
            config.clip_eps,
            config.vf_coef,
            config.ent_coef,
            config.clip_value,
            config.norm_adv,
        )

    grads, terms = torch.func.grad(loss, has_aux=True)(ppo.net.split(params))
    grad = ppo.net.join(grads)
    params, opt_state = adam_step(
        params, grad, opt_state, lr, config.max_grad_norm, config.adam_eps
    )
    return params, opt_state, terms
