"""BatchPPOConfig: every BatchPPO setting in one typed, documented place, plus presets.

Defaults are the batch-ppo v1.4 ``default()`` config (TF Agents, Hafner et al. 2017; see
docs/batchppo.md), with the
Pendulum task filled in; ``PRESETS`` holds the per-env configs of batch-ppo, with
Gymnasium 1.x env ids. The CLI builds its options from this class:

    >>> config = PRESETS["cartpole"].replace(update_epochs=10)
    >>> config = BatchPPOConfig.from_overrides(["env=Hopper-v5", "policy_layers=64,64"])
    >>> config.policy_layers
    (64, 64)
    >>> field_help()["discount"]
    'Discount factor of the returns.'
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from batchenv.experiment.fields import field_docs

__all__ = ["PRESETS", "BatchPPOConfig", "field_help"]


@dataclass(frozen=True)
class BatchPPOConfig:
    """BatchPPO settings (batch-ppo v1.4 defaults). Immutable: use :meth:`replace`."""

    # Environment and run length.
    env: str = "Pendulum-v1"
    """Gymnasium env id the training loop makes."""
    max_length: int = 200
    """Time limit of an episode in steps (episodes are stored padded to this length)."""
    steps: int = 1_000_000
    """Total environment steps (summed over all agents) to train for."""
    normalize_ranges: bool = True
    """Map finite observation and action bounds to [-1, 1] (RangeNormalize + ClipAction)."""
    num_agents: int = 30
    """Number of envs stepped in lockstep (batch rows)."""
    eval_episodes: int = 30
    """Episodes per evaluation phase (mean actions, no learning)."""
    eval_every: int = 0
    """Training env steps between eval phases (0: after every round; always after the last)."""
    log_frequency: int = 10_000
    """Train env steps between log checkpoints (SLM Lab's): last 100 train episodes' mean return."""

    # Networks.
    policy_layers: tuple[int, ...] = (200, 100)
    """Hidden sizes of the policy MLP (ReLU); with recurrent, the last one is the GRU."""
    value_layers: tuple[int, ...] = (200, 100)
    """Hidden sizes of the separate value MLP (ReLU)."""
    init_std: float = 0.35
    """Initial action std of the Gaussian policy (softplus of a state-independent parameter)."""
    init_output_factor: float = 0.1
    """Variance-scaling factor of the policy output layer's initial weights."""
    recurrent: bool = False
    """Replace the last policy layer by a GRU of that size (state per agent row)."""
    chunk_length: int | None = None
    """Recurrent only: truncate backprop through time to chunks of this many steps."""

    # Optimisation.
    update_every: int = 30
    """Update after this many episodes have finished (all finished episodes are used)."""
    update_epochs: int = 25
    """Passes over the collected episodes per update."""
    learning_rate: float = 1e-4
    """Adam learning rate (one optimiser for policy and value, no gradient clipping)."""
    minibatches: int = 1
    """Split the episodes of an update into this many shuffled minibatches per epoch."""

    # Losses.
    discount: float = 0.995
    """Discount factor of the returns."""
    gae_lambda: float | None = None
    """GAE lambda; None uses Monte-Carlo returns minus the value (batch-ppo's default)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus in the policy loss."""
    kl_target: float = 0.01
    """Target KL(old || new) per step that the adaptive penalty steers to."""
    kl_cutoff_factor: float = 2.0
    """Episodes whose KL exceeds kl_cutoff_factor * kl_target get the quadratic cutoff loss."""
    kl_cutoff_coef: float = 1000.0
    """Weight of the quadratic KL cutoff loss."""
    kl_init_penalty: float = 1.0
    """Initial weight beta of the KL penalty (adapted after every update)."""

    # Reproducibility and placement.
    seed: int = 0
    """Seed of network initialisation, action sampling and minibatch shuffling."""
    device: str = "cpu"
    """Torch device of the networks and the episode memory."""
    torch_threads: int = 1
    """torch threads during train() (restored after; 0 keeps torch's): 1 is fastest on 2 cores."""

    def __post_init__(self) -> None:
        for name in ("max_length", "steps", "num_agents", "eval_episodes"):
            _check(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("update_every", "update_epochs", "minibatches"):
            _check(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("policy_layers", "value_layers"):
            sizes = getattr(self, name)
            _check(self, name, all(size >= 1 for size in sizes), "sizes must be >= 1")
        _check(
            self,
            "policy_layers",
            bool(self.policy_layers) or not self.recurrent,
            "needs at least one layer (the GRU) when recurrent=True",
        )
        _check(
            self,
            "chunk_length",
            self.chunk_length is None or self.chunk_length >= 1,
            "must be None or >= 1",
        )
        _check(self, "eval_every", self.eval_every >= 0, "must be >= 0")
        _check(self, "log_frequency", self.log_frequency >= 0, "must be >= 0")
        _check(self, "torch_threads", self.torch_threads >= 0, "must be >= 0")
        _check(self, "init_std", self.init_std > 0, "must be > 0")
        _check(self, "learning_rate", self.learning_rate > 0, "must be > 0")
        _check(self, "discount", 0 < self.discount <= 1, "must be in (0, 1]")
        _check(
            self,
            "gae_lambda",
            self.gae_lambda is None or 0 <= self.gae_lambda <= 1,
            "must be None or in [0, 1]",
        )
        _check(self, "kl_target", self.kl_target > 0, "must be > 0")
        _check(self, "kl_init_penalty", self.kl_init_penalty > 0, "must be > 0")

    def replace(self, **overrides: Any) -> BatchPPOConfig:
        """A copy with ``overrides`` applied (validated like a new config).

        >>> BatchPPOConfig().replace(discount=0.99).discount
        0.99
        """
        unknown = [name for name in overrides if name not in _field_types()]
        if unknown:
            raise TypeError(_unknown_message(unknown[0]))
        return dataclasses.replace(self, **overrides)

    @classmethod
    def from_overrides(
        cls, items: Iterable[str], base: BatchPPOConfig | None = None
    ) -> BatchPPOConfig:
        """``base`` (default: the defaults) with ``"key=value"`` strings applied.

        Values are converted to the field's type: ints accept ``1e6``, bools accept
        ``true/false/1/0/yes/no``, tuples accept ``200,100`` or ``(200, 100)`` (``()`` for
        none), optional fields accept ``none``.

            >>> BatchPPOConfig.from_overrides(["steps=2e5", "gae_lambda=0.95"]).steps
            200000
        """
        return (base or cls()).replace(**parse_overrides(items))


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` as ``{key: typed value}`` for :class:`BatchPPOConfig`."""
    types_ = _field_types()
    overrides = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ValueError(f"override {item!r} is not of the form key=value")
        if key not in types_:
            raise ValueError(_unknown_message(key))
        try:
            overrides[key] = _convert(text.strip(), types_[key])
        except ValueError as error:
            raise ValueError(
                f"override {item!r}: cannot read {text!r} as {_type_name(types_[key])} ({error})"
            ) from None
    return overrides


def field_help() -> dict[str, str]:
    """The one-line docstring of every config field, read from the source (for the CLI)."""
    return field_docs(BatchPPOConfig)


def _check(config: BatchPPOConfig, name: str, ok: bool, rule: str) -> None:
    if not ok:
        raise ValueError(f"BatchPPOConfig.{name} {rule}, got {getattr(config, name)!r}")


def _field_types() -> dict[str, Any]:
    hints = typing.get_type_hints(BatchPPOConfig)
    return {field.name: hints[field.name] for field in dataclasses.fields(BatchPPOConfig)}


def _unknown_message(key: str) -> str:
    names = list(_field_types())
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"BatchPPOConfig has no field {key!r}{hint} Fields: {', '.join(names)}"


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or str(kind).replace("typing.", "")


def _convert(text: str, kind: Any) -> Any:
    """``text`` as a value of the annotation ``kind`` (int, float, bool, str, tuple, X | None)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null"):
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _convert(text, inner)
    if origin is tuple:
        inner = args[0]
        text = text.strip("()[] ")
        return tuple(_convert(part.strip(), inner) for part in text.split(",") if part.strip())
    if kind is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if kind is int:
        value = float(text) if any(c in text.lower() for c in ".e") else int(text)
        if value != int(value):
            raise ValueError("not a whole number")
        return int(value)
    if kind is float:
        return float(text)
    return text


def _preset(env: str, max_length: int, steps: float, **values: Any) -> BatchPPOConfig:
    return BatchPPOConfig(env=env, max_length=max_length, steps=int(steps), **values)


PRESETS: dict[str, BatchPPOConfig] = {
    # batch-ppo configs.py, on the Gymnasium 1.x versions of the same envs.
    "pendulum": _preset("Pendulum-v1", 200, 1e6),
    "cartpole": _preset("CartPole-v1", 500, 2e5),  # Discrete actions: categorical policy.
    "reacher": _preset("Reacher-v5", 1000, 5e6, discount=0.985, update_every=60),
    "cheetah": _preset("HalfCheetah-v5", 1000, 1e7, discount=0.99),
    "walker": _preset("Walker2d-v5", 1000, 1e7),
    "hopper": _preset("Hopper-v5", 1000, 1e7, update_every=60),
    "ant": _preset("Ant-v5", 1000, 2e7),
    "humanoid": _preset("Humanoid-v5", 1000, 5e7, update_every=60),
}
"""The per-env configs of batch-ppo v1.4 (docs/batchppo.md), keyed by short name."""
