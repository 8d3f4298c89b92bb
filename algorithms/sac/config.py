"""SACConfig: every SAC setting in one typed, documented place, plus presets.

Defaults are CleanRL's ``sac_continuous_action.py`` (docs/sac.md): twin 256-256 Q networks
and a 256-256 tanh-Gaussian policy, Adam with q_lr 1e-3 and policy_lr 3e-4, batch 256,
random actions for the first 5,000 steps, Polyak tau 0.005, the policy updated every second
Q step (twice then), gamma 0.99, automatic entropy tuning towards -|A|. Discrete action
spaces use the settings under "Discrete actions" (SLM Lab's v5 choices by default).

    >>> config = PRESETS["pendulum"].replace(steps=5_000)
    >>> config = SACConfig.from_overrides(["env=CartPole-v1", "discrete=gumbel"])
    >>> config.discrete
    'gumbel'
    >>> field_help()["tau"]
    'Polyak coefficient of the target Q networks (target <- tau * online + (1 - tau) * target).'
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from batchenv.experiment.fields import coerce, field_docs, field_types, unknown_key

__all__ = ["DISCRETE_VARIANTS", "PRESETS", "SACConfig", "field_help", "parse_overrides"]

#: The two discrete-action SACs (docs/sac.md).
DISCRETE_VARIANTS = ("expectation", "gumbel")
#: How a discrete critic combines its twin Qs: SLM Lab v5 averages them, CleanRL takes the min.
TWIN_RULES = ("mean", "min")


@dataclass(frozen=True)
class SACConfig:
    """SAC settings (CleanRL's defaults). Immutable: use :meth:`replace`."""

    # Environment and run length.
    env: str = "Pendulum-v1"
    """Gymnasium env id (worker processes), or an in-graph env as module:Class."""
    num_envs: int = 1
    """Envs stepped in lockstep; each step adds num_envs transitions to the memory."""
    max_length: int | None = None
    """Time limit of a Gymnasium env's episodes (None: its registered limit)."""
    steps: int = 1_000_000
    """Total training env steps (summed over the envs)."""
    eval_every: int = 5_000
    """Training env steps between evaluation phases (always one after the last step)."""
    eval_episodes: int = 10
    """Episodes per evaluation phase (mean or most likely action, no learning)."""

    # Networks.
    hidden_layers: tuple[int, ...] = (256, 256)
    """Hidden sizes (ReLU) of the policy and of each Q network."""

    # Replay and updates.
    buffer_size: int = 1_000_000
    """Transitions the replay memory holds (over all envs)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    learning_starts: int = 5_000
    """Env steps of uniformly random actions before the first update."""
    replay_ratio: float = 1.0
    """Q gradient steps per env step once learning has started."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the target Q networks (target <- tau * online + (1 - tau) * target)."""
    target_frequency: int = 1
    """Q steps between target network updates."""
    policy_frequency: int = 2
    """Q steps between policy updates; each then makes policy_frequency policy steps."""
    q_lr: float = 1e-3
    """Adam learning rate of the two Q networks (one optimiser)."""
    policy_lr: float = 3e-4
    """Adam learning rate of the policy."""
    alpha_lr: float | None = None
    """Adam learning rate of log alpha (None: q_lr, as CleanRL)."""

    # Entropy temperature.
    autotune: bool = True
    """Tune the temperature alpha towards the target entropy (else keep alpha fixed)."""
    alpha: float = 0.2
    """The fixed temperature when autotune is off (autotune starts at alpha 1)."""
    log_alpha_range: tuple[float, ...] = ()
    """(low, high) clamp of log alpha after each step (SLM Lab v5: (-5, 2)); () for none."""

    # Discrete actions.
    discrete: str = "expectation"
    """Discrete-action SAC: expectation (exact sum over actions) or gumbel (Gumbel-Softmax)."""
    discrete_twin: str = "mean"
    """How the expectation variant combines its twin Qs: mean (SLM Lab v5) or min (CleanRL)."""
    target_entropy_scale: float = 0.6
    """Discrete target entropy as a fraction of log|A| (SLM Lab v5 0.6; CleanRL 0.89)."""
    gumbel_temperature: float = 1.0
    """Temperature of the relaxed one-hot sample of the gumbel variant (SLM Lab: 1)."""

    # Reproducibility and placement.
    seed: int = 0
    """Seed of network initialisation, action sampling, replay sampling and env phases."""
    device: str = "cpu"
    """Torch device of the networks and the replay memory."""
    torch_threads: int = 1
    """torch threads during train() (restored after; 0 keeps torch's)."""

    def __post_init__(self) -> None:
        for name in ("num_envs", "steps", "eval_every", "eval_episodes", "buffer_size"):
            _check(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("batch_size", "target_frequency", "policy_frequency"):
            _check(self, name, getattr(self, name) >= 1, "must be >= 1")
        _check(self, "max_length", self.max_length is None or self.max_length >= 1, "must be >= 1")
        _check(self, "learning_starts", self.learning_starts >= 0, "must be >= 0")
        _check(self, "torch_threads", self.torch_threads >= 0, "must be >= 0")
        _check(
            self,
            "hidden_layers",
            all(size >= 1 for size in self.hidden_layers),
            "sizes must be >= 1",
        )
        _check(self, "buffer_size", self.buffer_size >= self.num_envs, "must be >= num_envs")
        _check(self, "replay_ratio", self.replay_ratio > 0, "must be > 0")
        _check(self, "gamma", 0 <= self.gamma <= 1, "must be in [0, 1]")
        _check(self, "tau", 0 < self.tau <= 1, "must be in (0, 1]")
        for name in ("q_lr", "policy_lr", "alpha", "gumbel_temperature"):
            _check(self, name, getattr(self, name) > 0, "must be > 0")
        _check(self, "alpha_lr", self.alpha_lr is None or self.alpha_lr > 0, "must be > 0 or None")
        _check(
            self,
            "log_alpha_range",
            self.log_alpha_range == ()
            or (
                len(self.log_alpha_range) == 2 and self.log_alpha_range[0] < self.log_alpha_range[1]
            ),
            "must be () or (low, high) with low < high",
        )
        _check(
            self,
            "discrete",
            self.discrete in DISCRETE_VARIANTS,
            f"must be one of {DISCRETE_VARIANTS}",
        )
        _check(
            self, "discrete_twin", self.discrete_twin in TWIN_RULES, f"must be one of {TWIN_RULES}"
        )
        _check(
            self, "target_entropy_scale", 0 <= self.target_entropy_scale <= 1, "must be in [0, 1]"
        )

    def replace(self, **overrides: Any) -> SACConfig:
        """A copy with ``overrides`` applied (validated like a new config).

        >>> SACConfig().replace(gamma=0.9).gamma
        0.9
        """
        unknown = [name for name in overrides if name not in field_types(SACConfig)]
        if unknown:
            raise TypeError(unknown_key("SACConfig", unknown[0], list(field_types(SACConfig))))
        return dataclasses.replace(self, **overrides)

    @classmethod
    def from_overrides(cls, items: Iterable[str], base: SACConfig | None = None) -> SACConfig:
        """``base`` (default: the defaults) with ``"key=value"`` strings applied.

        >>> SACConfig.from_overrides(["steps=2e4", "hidden_layers=64,64"]).hidden_layers
        (64, 64)
        """
        return (base or cls()).replace(**parse_overrides(items))


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` as ``{key: typed value}`` for :class:`SACConfig`.

    Values are read as YAML (``1e-3``, ``true``, ``none``) and checked against the field's
    type; tuples are written ``256,256`` or ``[256, 256]`` (``()`` for none).
    """
    types_ = field_types(SACConfig)
    overrides = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ValueError(f"override {item!r} is not of the form key=value")
        if key not in types_:
            raise ValueError(unknown_key("SACConfig", key, list(types_)))
        text = text.strip()
        if typing.get_origin(types_[key]) is tuple:
            text = "[" + text.strip("()[] ") + "]"
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            value = text
        try:
            overrides[key] = coerce(key, types_[key], value)
        except TypeError as error:
            raise ValueError(f"override {item!r}: {error}") from None
    return overrides


def field_help() -> dict[str, str]:
    """The one-line docstring of every config field (for the CLI and spec templates)."""
    return field_docs(SACConfig)


def _check(config: SACConfig, name: str, ok: bool, rule: str) -> None:
    if not ok:
        raise ValueError(f"SACConfig.{name} {rule}, got {getattr(config, name)!r}")


PRESETS: dict[str, SACConfig] = {
    # Pendulum within 20k steps: learning from 1,000 steps (CleanRL waits 5,000).
    "pendulum": SACConfig(
        env="Pendulum-v1", num_envs=4, steps=20_000, learning_starts=1_000, eval_every=1_000
    ),
    # Discrete SAC on the classic-control tasks: SLM Lab v5's sac_cartpole / sac_acrobot
    # (4 envs, learning from 1,000 steps, log alpha clamped to [-5, 2]) with 64-64 networks
    # (SLM Lab: 256-256) so a run fits minutes on two cores, CleanRL's q_lr 1e-3 and a target
    # entropy of 0.3 log|A| (with SLM Lab's 0.6 and q_lr 3e-4, CartPole stayed near 200 in
    # 40k steps: docs/sac.md).
    "cartpole_discrete": SACConfig(
        env="CartPole-v1",
        num_envs=4,
        steps=30_000,
        hidden_layers=(64, 64),
        learning_starts=1_000,
        buffer_size=100_000,
        target_entropy_scale=0.3,
        eval_every=2_000,
        log_alpha_range=(-5.0, 2.0),
    ),
    "acrobot_discrete": SACConfig(
        env="Acrobot-v1",
        num_envs=4,
        steps=40_000,
        hidden_layers=(64, 64),
        learning_starts=1_000,
        buffer_size=100_000,
        target_entropy_scale=0.3,
        eval_every=2_000,
        log_alpha_range=(-5.0, 2.0),
    ),
    # CleanRL's defaults on HalfCheetah (pip install -e ".[mujoco]").
    "halfcheetah": SACConfig(env="HalfCheetah-v5", num_envs=1, steps=300_000, eval_every=10_000),
}
"""Per-env configs, keyed by short name (docs/sac.md gives their sources)."""
