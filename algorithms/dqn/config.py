"""DQNConfig: every DQN setting in one typed, documented place, plus presets.

Defaults are CleanRL's ``dqn.py`` (vwxyzjn/cleanrl, the CartPole-v1 run; docs/dqn.md):
learning rate 2.5e-4, a 10k replay buffer, gamma 0.99, a hard target update every 500
steps, batches of 128, epsilon 1 -> 0.05 over half the run, learning from step 10k, one
update every 10 steps, MSE loss, no gradient clipping, a 120-84 ReLU Q-network. The
variants (Double DQN, prioritized replay, n-step returns) are switched on by fields.

    >>> config = PRESETS["cartpole_ddqn_per"]
    >>> config.double, config.prioritized, config.n_step
    (True, True, 3)
    >>> DQNConfig.from_overrides(["hidden_layers=64,64", "loss=huber"]).hidden_layers
    (64, 64)
    >>> field_help()["gamma"]
    'Discount factor of the returns.'
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from batchenv.experiment.fields import coerce, field_docs, field_types, type_name, unknown_key

__all__ = ["LOSSES", "PRESETS", "DQNConfig", "field_help", "parse_overrides"]

#: Values of ``DQNConfig.loss``.
LOSSES = ("mse", "huber")


@dataclass(frozen=True)
class DQNConfig:
    """DQN settings (CleanRL ``dqn.py`` defaults). Immutable: use :meth:`replace`."""

    # Environment and run length.
    env: str = "CartPole-v1"
    """Gymnasium env id (worker processes), or an in-graph env as module:Class."""
    max_length: int = 500
    """Time limit of an episode in steps (a Gymnasium truncation: it bootstraps)."""
    steps: int = 500_000
    """Total training env steps, summed over all envs."""
    num_envs: int = 1
    """Envs stepped in lockstep; every step adds one transition per env."""
    eval_every: int = 20_000
    """Training env steps per round; a greedy eval phase and a checkpoint end each round."""
    eval_episodes: int = 10
    """Episodes of each eval phase (greedy actions, no learning)."""
    eval_epsilon: float = 0.0
    """Epsilon of the eval phases and of batchenv evaluate (CleanRL's own eval uses 0.05)."""
    log_frequency: int = 10_000
    """Train env steps between log checkpoints (SLM Lab's): last 100 train episodes' mean."""

    # Network and optimiser.
    hidden_layers: tuple[int, ...] = (120, 84)
    """Hidden sizes of the Q-network MLP (ReLU)."""
    learning_rate: float = 2.5e-4
    """Adam learning rate."""
    loss: str = "mse"
    """TD loss: mse (CleanRL) or huber (smooth L1, delta 1, as the DQN paper clips errors)."""
    max_grad_norm: float | None = None
    """Clip the global gradient norm to this (None: no clipping, as CleanRL)."""

    # Replay and updates (steps count env steps over all envs).
    buffer_size: int = 10_000
    """Transitions the replay memory holds (rounded down to a multiple of num_envs)."""
    batch_size: int = 128
    """Transitions per gradient step."""
    gamma: float = 0.99
    """Discount factor of the returns."""
    learning_starts: int = 10_000
    """Env steps of pure exploration before the first gradient step."""
    train_frequency: int = 10
    """Env steps per gradient step (num_envs > 1: several steps per lockstep step)."""
    target_network_frequency: int = 500
    """Env steps between target-network updates (counted from learning_starts)."""
    tau: float = 1.0
    """Target update rate: 1 copies the Q-network (hard update), < 1 is Polyak averaging."""

    # Exploration: epsilon falls linearly (CleanRL's linear_schedule).
    start_e: float = 1.0
    """Epsilon at step 0."""
    end_e: float = 0.05
    """Epsilon after exploration_fraction * steps env steps, and from then on."""
    exploration_fraction: float = 0.5
    """Fraction of the run over which epsilon falls from start_e to end_e."""

    # Variants.
    double: bool = False
    """Double DQN: the online network picks the next action, the target network values it."""
    n_step: int = 1
    """Rewards summed into each target (n-step return; stops at an episode end)."""
    prioritized: bool = False
    """Proportional prioritized replay (sum-tree) with importance weights."""
    per_alpha: float = 0.6
    """Prioritized replay: priority exponent alpha."""
    per_beta: float = 0.4
    """Prioritized replay: importance exponent at learning_starts, annealed to 1 by the end."""
    per_eps: float = 1e-6
    """Prioritized replay: added to every |TD error| priority."""

    # Reproducibility and placement.
    seed: int = 0
    """Seed of network initialisation, exploration, replay sampling and the env phases."""
    device: str = "cpu"
    """Torch device of the networks and the replay memory."""
    torch_threads: int = 1
    """torch threads during train() (restored after; 0 keeps torch's): 1 is fastest on 2 cores."""

    def __post_init__(self) -> None:
        positive = ("max_length", "steps", "num_envs", "eval_episodes", "buffer_size")
        for name in (*positive, "batch_size", "train_frequency", "n_step"):
            _check(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("eval_every", "target_network_frequency"):
            _check(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("log_frequency", "learning_starts", "torch_threads"):
            _check(self, name, getattr(self, name) >= 0, "must be >= 0")
        _check(
            self,
            "hidden_layers",
            all(size >= 1 for size in self.hidden_layers),
            "sizes must be >= 1",
        )
        _check(self, "learning_rate", self.learning_rate > 0, "must be > 0")
        _check(self, "loss", self.loss in LOSSES, f"must be one of {', '.join(LOSSES)}")
        _check(
            self,
            "max_grad_norm",
            self.max_grad_norm is None or self.max_grad_norm > 0,
            "must be None or > 0",
        )
        _check(self, "gamma", 0 < self.gamma <= 1, "must be in (0, 1]")
        _check(self, "tau", 0 < self.tau <= 1, "must be in (0, 1]")
        for name in ("start_e", "end_e", "eval_epsilon", "per_beta"):
            _check(self, name, 0 <= getattr(self, name) <= 1, "must be in [0, 1]")
        _check(
            self, "exploration_fraction", 0 < self.exploration_fraction <= 1, "must be in (0, 1]"
        )
        _check(self, "per_alpha", self.per_alpha >= 0, "must be >= 0")
        _check(self, "per_eps", self.per_eps > 0, "must be > 0")
        _check(
            self,
            "buffer_size",
            self.buffer_size >= self.num_envs,
            f"must hold one transition per env (num_envs={self.num_envs})",
        )
        _check(
            self,
            "batch_size",
            self.batch_size <= self.buffer_size,
            f"must be <= buffer_size={self.buffer_size}, the replay memory's size",
        )

    def replace(self, **overrides: Any) -> DQNConfig:
        """A copy with ``overrides`` applied (validated like a new config).

        >>> DQNConfig().replace(gamma=0.98).gamma
        0.98
        """
        names = list(field_types(DQNConfig))
        unknown = [name for name in overrides if name not in names]
        if unknown:
            raise TypeError(unknown_key("DQNConfig", unknown[0], names))
        return dataclasses.replace(self, **overrides)

    @classmethod
    def from_overrides(cls, items: Iterable[str], base: DQNConfig | None = None) -> DQNConfig:
        """``base`` (default: the defaults) with ``"key=value"`` strings applied.

        >>> DQNConfig.from_overrides(["steps=1e5", "double=true"]).steps
        100000
        """
        return (base or cls()).replace(**parse_overrides(items))


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` as ``{key: typed value}`` for :class:`DQNConfig`.

    Values are read as YAML and checked against the field's type: ints accept ``1e6``,
    bools ``true/false``, tuples ``120,84`` or ``(120, 84)`` (``()`` for none), optional
    fields ``none``.
    """
    types_ = field_types(DQNConfig)
    overrides = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ValueError(f"override {item!r} is not of the form key=value")
        if key not in types_:
            raise ValueError(unknown_key("DQNConfig", key, list(types_)))
        try:
            overrides[key] = _read(text.strip(), types_[key])
        except (TypeError, ValueError, yaml.YAMLError):
            raise ValueError(
                f"override {item!r}: cannot read {text.strip()!r} as {type_name(types_[key])}"
            ) from None
    return overrides


def field_help() -> dict[str, str]:
    """The one-line docstring of every config field (for the CLI and ``batchenv spec``)."""
    return field_docs(DQNConfig)


def _read(text: str, kind: Any) -> Any:
    if text.lower() in ("none", "null") and type(None) in typing.get_args(kind):
        return None
    if typing.get_origin(kind) is tuple:
        parts = [part.strip() for part in text.strip("()[] ").split(",") if part.strip()]
        return coerce("value", kind, [yaml.safe_load(part) for part in parts])
    value = yaml.safe_load(text) if text else text
    return coerce("value", kind, value)


def _check(config: DQNConfig, name: str, ok: bool, rule: str) -> None:
    if not ok:
        raise ValueError(f"DQNConfig.{name} {rule}, got {getattr(config, name)!r}")


PRESETS: dict[str, DQNConfig] = {
    # CleanRL dqn.py, as published for CartPole-v1.
    "cartpole": DQNConfig(),
    # The same run with the Rainbow pieces this package has: Double DQN, 3-step returns,
    # proportional prioritized replay (alpha 0.6, beta 0.4 -> 1; Schaul et al. 2016).
    "cartpole_ddqn_per": DQNConfig(double=True, n_step=3, prioritized=True),
    # rl-baselines3-zoo's tuned DQN for LunarLander-v2 (hyperparams/dqn.yml) on v3: a
    # 256-256 MLP, one gradient step per env step (train_freq 16 with gradient_steps -1),
    # 20% of 1.5e5 steps exploring down to 0.1, and SB3's defaults: Huber loss, gradient
    # norm clipped at 10.
    "lunarlander": DQNConfig(
        env="LunarLander-v3",
        max_length=1000,
        steps=150_000,
        hidden_layers=(256, 256),
        learning_rate=8.8e-4,
        batch_size=32,
        buffer_size=1_000_000,
        learning_starts=0,
        train_frequency=1,
        target_network_frequency=10_000,
        exploration_fraction=0.2,
        end_e=0.1,
        loss="huber",
        max_grad_norm=10.0,
        eval_every=10_000,
    ),
}
"""The per-env configs (docs/dqn.md), keyed by short name."""
