"""SAC: Soft Actor-Critic as a batchenv Algorithm, for Box and Discrete actions.

The four callbacks ``simulate()`` drives, in reading order:

- ``begin_episodes(rows)``: nothing (a transition carries everything SAC needs);
- ``perform(observ)``: uniformly random actions for the first ``learning_starts`` env steps,
  then a sample of the policy (training) or its mean / most likely action (evaluation);
- ``experience(...)``: while training, write the step (one transition per env) into the
  shared :class:`~batchenv.algorithms.replay.ReplayMemory` with termination and truncation
  apart, then run the gradient steps due (``replay_ratio`` per env step once learning has
  started) and return their mean summaries;
- ``end_episodes(rows)``: nothing.

A gradient step (``_update``) samples ``batch_size`` transitions and steps the twin Qs
towards the soft target; every ``policy_frequency`` Q steps it makes ``policy_frequency``
policy and temperature steps (CleanRL's delayed update), and every ``target_frequency`` Q
steps it moves the target Qs by Polyak averaging. The losses are in :mod:`.losses`; which
form applies depends on the action space and ``config.discrete`` (docs/sac.md):

- Box: tanh-squashed Gaussian policy, ``Q(s, a)`` critics (Haarnoja et al. 2018, CleanRL);
- Discrete, ``"expectation"``: ``Q(s, .)`` critics, exact sums over actions (Christodoulou
  2019, SLM Lab v5), the twins combined by ``config.discrete_twin``;
- Discrete, ``"gumbel"``: ``Q(s, one_hot(a))`` critics, a straight-through Gumbel-Softmax
  sample for the policy loss (the SLM Lab paper's variant, v4.2.4).

    >>> import gymnasium as gym
    >>> env = gym.make("Pendulum-v1")
    >>> sac = SAC(env.observation_space, env.action_space, SACConfig(learning_starts=0))
    >>> sac.perform(torch.zeros(4, 3)).shape
    torch.Size([4, 1])
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from batchenv.algorithms.replay import ReplayMemory
from batchenv.in_graph.algorithm import Algorithm, Summaries

from .config import SACConfig
from .losses import (
    expected_policy_loss,
    expected_soft_q_target,
    policy_loss,
    polyak_update,
    q_loss,
    soft_q_target,
    temperature_loss,
)
from .networks import (
    CategoricalPolicy,
    DiscreteQNetwork,
    GaussianPolicy,
    QNetwork,
    gumbel_max_sample,
    gumbel_softmax_sample,
)

__all__ = ["SAC", "target_entropy"]

#: Summaries of the gradient steps, averaged over those of one experience() call.
UPDATE_STATS = ("q_loss", "q_value", "policy_loss", "alpha", "entropy")


def target_entropy(action_space: gym.Space, config: SACConfig) -> float:
    """The entropy the temperature steers to: ``-|A|`` for a Box (Haarnoja et al. 2018),
    ``target_entropy_scale * log|A|`` for a Discrete (SLM Lab v5: 0.6; CleanRL: 0.89).

        >>> target_entropy(gym.spaces.Discrete(2), SACConfig())   # 0.6 * log 2
        0.41588830833596717
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return config.target_entropy_scale * math.log(int(action_space.n))
    return -float(math.prod(action_space.shape))


def _adam(parameters, lr: float) -> torch.optim.Adam:
    """torch's Adam with ``fused=True`` (one kernel over all parameters; a tenth of a
    HalfCheetah-sized SAC step less on 2 CPU cores) where this torch has it for the device;
    else its default. The two differ only in float rounding."""
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, lr=lr, fused=True)
    except (RuntimeError, ValueError):  # no fused kernel for this device in this torch
        return torch.optim.Adam(parameters, lr=lr)


class SAC(Algorithm):
    """Soft Actor-Critic over a batch of envs, learning from a replay memory.

    Args:
        observation_space: one env's observation space (a Box; flattened inside).
        action_space: one env's action space: a bounded float Box or a Discrete.
        config: the settings.

    The batch size B (envs per step) is fixed by the first ``perform()``; the replay memory
    is made then, with ``config.buffer_size`` transitions in ``B`` env columns. Box actions
    come back float32 ``[B, *shape]`` inside the Box; Discrete actions int64 ``[B]``.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: SACConfig | None = None,
    ):
        self.config = config = config or SACConfig()
        self.device = torch.device(config.device)
        if not isinstance(observation_space, gym.spaces.Box):
            raise TypeError(f"SAC needs a Box observation space, got {observation_space}")
        self.observ_size = math.prod(observation_space.shape)
        self.action_space = action_space
        self.kind = _action_kind(action_space, config)
        self.target_entropy = target_entropy(action_space, config)
        hidden = config.hidden_layers
        # Networks are initialised from the config's seed, leaving torch's global RNG alone.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            if self.kind == "continuous":
                low = torch.as_tensor(action_space.low, dtype=torch.float32)
                high = torch.as_tensor(action_space.high, dtype=torch.float32)
                self.action_size = low.numel()
                self.policy = GaussianPolicy(self.observ_size, low, high, hidden)
                make_q = lambda: QNetwork(self.observ_size, self.action_size, hidden)  # noqa: E731
            else:
                self.action_size = int(action_space.n)
                self.policy = CategoricalPolicy(self.observ_size, self.action_size, hidden)
                if self.kind == "expectation":
                    make_q = lambda: DiscreteQNetwork(self.observ_size, self.action_size, hidden)  # noqa: E731
                else:
                    make_q = lambda: QNetwork(self.observ_size, self.action_size, hidden)  # noqa: E731
            self.q1, self.q2 = make_q(), make_q()
        self.policy.to(self.device)
        self.q1.to(self.device)
        self.q2.to(self.device)
        self.q1_target = copy.deepcopy(self.q1).requires_grad_(False)
        self.q2_target = copy.deepcopy(self.q2).requires_grad_(False)
        self.q_optimizer = _adam([*self.q1.parameters(), *self.q2.parameters()], config.q_lr)
        self.policy_optimizer = _adam(self.policy.parameters(), config.policy_lr)
        start = 0.0 if config.autotune else math.log(config.alpha)
        self.log_alpha = torch.tensor([start], device=self.device, requires_grad=config.autotune)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.alpha_lr or config.q_lr)
        self.generator = torch.Generator(self.device).manual_seed(config.seed + 1)
        self.training = True
        self.env_steps = 0  # training env steps seen by experience()
        self.q_steps = 0  # Q gradient steps made
        self._owed = 0.0  # gradient steps due but not yet made (fractional replay ratios)
        self.num_rows: int | None = None  # B, fixed by the first perform()
        self.memory: ReplayMemory | None = None

    # --- modes ----------------------------------------------------------------------------

    def train_mode(self) -> SAC:
        """Sample actions and learn from experience (the default)."""
        self.training = True
        return self

    def eval_mode(self) -> SAC:
        """Act with the squashed mean (Box) or most likely action; experience() learns nothing."""
        self.training = False
        return self

    @property
    def alpha(self) -> torch.Tensor:
        """The current temperature ``exp(log_alpha)`` (no gradient)."""
        return self.log_alpha.detach().exp()

    # --- the four callbacks -----------------------------------------------------------------

    def perform(self, observ: torch.Tensor) -> torch.Tensor:
        """Actions for every row: random before learning starts, then sampled; the mode in
        evaluation."""
        observ = self._flat(observ)
        with torch.no_grad():
            if not self.training:
                return self._env_action(self.policy.mode(observ))
        self._allocate(observ.shape[0])
        with torch.no_grad():
            if self.env_steps < self.config.learning_starts:
                return self._env_action(self._random_action(observ.shape[0]))
            if self.kind == "continuous":
                action, _ = self.policy.sample(observ, self.generator)
            else:
                action = self.policy.sample(observ, self.generator)
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
        """Store the transitions; run the gradient steps due; their mean summaries."""
        if not self.training:
            return None
        if self.memory is None:
            raise RuntimeError(
                "SAC.experience() was called before any perform(); call perform(observ) "
                "first and pass its action here"
            )
        done = done.to(self.device, torch.bool)
        truncated = truncated.to(self.device, torch.bool)
        self.memory.add(
            self._flat(observ),
            self._memory_action(action),
            reward.to(self.device, torch.float32),
            self._flat(next_observ),
            done & ~truncated,
            truncated,
        )
        rows = self.num_rows
        self.env_steps += rows
        if self.env_steps <= self.config.learning_starts:
            return None
        self._owed += self.config.replay_ratio * rows
        steps = int(self._owed)
        self._owed -= steps
        if steps == 0:
            return None
        totals = {name: torch.zeros((), device=self.device) for name in UPDATE_STATS}
        policy_steps = 0
        for _ in range(steps):
            stats = self._update()
            totals["q_loss"] += stats["q_loss"]
            totals["q_value"] += stats["q_value"]
            if "policy_loss" in stats:
                policy_steps += 1
                for name in ("policy_loss", "alpha", "entropy"):
                    totals[name] += stats[name]
        summaries = {"q_loss": totals["q_loss"] / steps, "q_value": totals["q_value"] / steps}
        if policy_steps:
            for name in ("policy_loss", "alpha", "entropy"):
                summaries[name] = totals[name] / policy_steps
        summaries["updates"] = torch.tensor(self.q_steps)
        return summaries

    # --- the update -----------------------------------------------------------------------

    def _update(self) -> dict[str, torch.Tensor]:
        """One Q step; the delayed policy and temperature steps; the target update."""
        config = self.config
        batch = self.memory.sample(config.batch_size, self.generator)
        observ, next_observ = batch.observ, batch.next_observ
        with torch.no_grad():
            target = self.q_target(batch.reward, batch.discount, next_observ)
        q1, q2 = self._q_values(observ, batch.action)
        loss = q_loss(q1, q2, target)
        self.q_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.q_optimizer.step()
        self.q_steps += 1
        stats = {"q_loss": loss.detach(), "q_value": q1.detach().mean()}

        if self.q_steps % config.policy_frequency == 0:
            # CleanRL: policy_frequency policy steps every policy_frequency Q steps.
            for _ in range(config.policy_frequency):
                loss_policy, entropy = self._policy_loss(observ)
                self.policy_optimizer.zero_grad(set_to_none=True)
                # Only the policy's gradients: the Qs' would be computed and then dropped.
                loss_policy.backward(inputs=list(self.policy.parameters()))
                self.policy_optimizer.step()
                if config.autotune:
                    loss_alpha = temperature_loss(self.log_alpha, entropy, self.target_entropy)
                    self.alpha_optimizer.zero_grad(set_to_none=True)
                    loss_alpha.backward()
                    self.alpha_optimizer.step()
                    if config.log_alpha_range:
                        with torch.no_grad():
                            self.log_alpha.clamp_(*config.log_alpha_range)
            stats.update(
                policy_loss=loss_policy.detach(), alpha=self.alpha[0], entropy=entropy.mean()
            )
        if self.q_steps % config.target_frequency == 0:
            polyak_update(self.q1, self.q1_target, config.tau)
            polyak_update(self.q2, self.q2_target, config.tau)
        return stats

    def q_target(
        self, reward: torch.Tensor, discount: torch.Tensor, next_observ: torch.Tensor
    ) -> torch.Tensor:
        """The soft Q target ``[B]`` of transitions (call under ``torch.no_grad()``).

        ``discount`` is the memory's ``gamma^k * (1 - terminated)``: truncated ends
        bootstrap, terminated ones do not.
        """
        alpha = self.alpha
        if self.kind == "continuous":
            action, log_prob = self.policy.sample(next_observ, self.generator)
            next_q1 = self.q1_target(next_observ, action)
            next_q2 = self.q2_target(next_observ, action)
            return soft_q_target(reward, discount, next_q1, next_q2, log_prob, alpha)
        logits = self.policy(next_observ)
        if self.kind == "expectation":
            next_q1, next_q2 = self.q1_target(next_observ), self.q2_target(next_observ)
            return expected_soft_q_target(
                reward, discount, logits, next_q1, next_q2, alpha, self.config.discrete_twin
            )
        # Gumbel (SLM Lab v4): a hard sample a' ~ pi, its log-probability, Q(s', one_hot(a')).
        action = gumbel_max_sample(logits, self.generator)
        log_prob = F.log_softmax(logits, -1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        one_hot = F.one_hot(action, self.action_size).float()
        next_q1 = self.q1_target(next_observ, one_hot)
        next_q2 = self.q2_target(next_observ, one_hot)
        return soft_q_target(reward, discount, next_q1, next_q2, log_prob, alpha)

    def _q_values(
        self, observ: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``Q1(s, a)`` and ``Q2(s, a)`` ``[B]`` of stored actions."""
        if self.kind == "continuous":
            return self.q1(observ, action), self.q2(observ, action)
        if self.kind == "expectation":
            index = action.unsqueeze(-1)
            return self.q1(observ).gather(-1, index).squeeze(-1), self.q2(observ).gather(
                -1, index
            ).squeeze(-1)
        one_hot = F.one_hot(action, self.action_size).float()
        return self.q1(observ, one_hot), self.q2(observ, one_hot)

    def _policy_loss(self, observ: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy loss and the entropy estimate ``[B]`` the temperature loss uses."""
        alpha = self.alpha
        if self.kind == "continuous":
            action, log_prob = self.policy.sample(observ, self.generator)
            loss = policy_loss(log_prob, self.q1(observ, action), self.q2(observ, action), alpha)
            return loss, -log_prob.detach()
        logits = self.policy(observ)
        if self.kind == "expectation":
            with torch.no_grad():
                q1, q2 = self.q1(observ), self.q2(observ)
            return expected_policy_loss(logits, q1, q2, alpha, self.config.discrete_twin)
        # Gumbel (SLM Lab v4): log pi of a straight-through relaxed one-hot sample.
        sample = gumbel_softmax_sample(logits, self.config.gumbel_temperature, self.generator)
        log_prob = (sample * F.log_softmax(logits, -1)).sum(-1)
        loss = policy_loss(log_prob, self.q1(observ, sample), self.q2(observ, sample), alpha)
        return loss, -log_prob.detach()

    def share(self, shared: Any, sync_targets: bool = True) -> bool:
        """Hogwild! (``meta.distributed: shared``): train the policy and the twin Qs in
        ``shared`` memory with the other sessions of the trial (a
        :class:`~batchenv.experiment.shared.SharedParameters`); the target Qs, the
        temperature, the optimisers and the replay memory stay this session's own.
        ``sync_targets`` copies the shared Qs into the targets (a fresh run; a resumed one
        keeps its checkpoint's). Returns whether this session's networks became the shared
        ones."""
        first = shared.attach({"policy": self.policy, "q1": self.q1, "q2": self.q2})
        if sync_targets:
            self.q1_target.load_state_dict(self.q1.state_dict())
            self.q2_target.load_state_dict(self.q2.state_dict())
        return first

    # --- checkpoints ----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically, the replay memory included (tensors
        are live references, as in ``nn.Module.state_dict``: ``torch.save`` or deep-copy it)."""
        return {
            "policy": self.policy.state_dict(),
            "q1": self.q1.state_dict(),
            "q2": self.q2.state_dict(),
            "q1_target": self.q1_target.state_dict(),
            "q2_target": self.q2_target.state_dict(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "policy_optimizer": self.policy_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach(),
            "generator": self.generator.get_state(),
            "training": self.training,
            "env_steps": self.env_steps,
            "q_steps": self.q_steps,
            "owed": self._owed,
            "num_rows": self.num_rows,
            "memory": None if self.memory is None else self.memory.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], memory: bool = True) -> None:
        """Restore a :meth:`state_dict` (same spaces and network config); ``memory=False``
        skips the replay memory (evaluation needs only the networks)."""
        for name in ("policy", "q1", "q2", "q1_target", "q2_target"):
            getattr(self, name).load_state_dict(state[name])
        self.q_optimizer.load_state_dict(state["q_optimizer"])
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.generator.set_state(state["generator"])
        self.training = bool(state["training"])
        self.env_steps = int(state["env_steps"])
        self.q_steps = int(state["q_steps"])
        self._owed = float(state["owed"])
        self.num_rows, self.memory = None, None
        if memory and state["num_rows"] is not None:
            self._allocate(int(state["num_rows"]))
            self.memory.load_state_dict(state["memory"])

    # --- helpers --------------------------------------------------------------------------

    def _allocate(self, rows: int) -> None:
        """Fix B on first use and make the replay memory (``buffer_size`` transitions)."""
        if self.num_rows is not None:
            if rows != self.num_rows:
                raise ValueError(
                    f"SAC.perform() got {rows} rows, but this SAC serves {self.num_rows} "
                    f"(fixed by its first perform()); make a new SAC for a different batch size"
                )
            return
        if self.config.buffer_size < rows:
            raise ValueError(
                f"SACConfig.buffer_size={self.config.buffer_size} holds less than one step "
                f"of {rows} envs; set buffer_size >= {rows}"
            )
        self.num_rows = rows
        observ_space = gym.spaces.Box(-np.inf, np.inf, (self.observ_size,), np.float32)
        if self.kind == "continuous":
            action_space = gym.spaces.Box(-np.inf, np.inf, (self.action_size,), np.float32)
        else:
            action_space = gym.spaces.Discrete(self.action_size)
        self.memory = ReplayMemory(
            self.config.buffer_size,
            observ_space,
            action_space,
            rows,
            device=self.device,
            gamma=self.config.gamma,
        )

    def _random_action(self, rows: int) -> torch.Tensor:
        """Uniform actions (policy space: Box values or 0-based indices) from the generator."""
        if self.kind == "continuous":
            uniform = torch.rand(
                (rows, self.action_size), generator=self.generator, device=self.device
            )
            return self.policy.action_bias + (2.0 * uniform - 1.0) * self.policy.action_scale
        return torch.randint(
            0, self.action_size, (rows,), generator=self.generator, device=self.device
        )

    def _flat(self, observ: torch.Tensor) -> torch.Tensor:
        return observ.to(self.device, torch.float32).reshape(observ.shape[0], self.observ_size)

    def _env_action(self, action: torch.Tensor) -> torch.Tensor:
        """Policy action -> env action (Box shape / Discrete start)."""
        if self.kind == "continuous":
            return action.reshape(action.shape[0], *self.action_space.shape)
        return action + int(self.action_space.start)

    def _memory_action(self, action: torch.Tensor) -> torch.Tensor:
        """Env action -> stored action (flat float32 / 0-based int64)."""
        action = action.to(self.device)
        if self.kind == "continuous":
            return action.to(torch.float32).reshape(action.shape[0], self.action_size)
        return action.to(torch.int64) - int(self.action_space.start)


def _action_kind(action_space: gym.Space, config: SACConfig) -> str:
    """``"continuous"`` for a bounded float Box, ``config.discrete`` for a Discrete."""
    if isinstance(action_space, gym.spaces.Discrete):
        return config.discrete
    if isinstance(action_space, gym.spaces.Box) and np.issubdtype(action_space.dtype, np.floating):
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(
                f"SAC squashes actions into a bounded Box, but {action_space} has infinite "
                f"bounds; wrap the env so its action space is bounded (e.g. RescaleAction)"
            )
        return "continuous"
    raise TypeError(
        f"SAC acts in a bounded float Box (tanh Gaussian) or a Discrete action space, "
        f"got {action_space}"
    )
