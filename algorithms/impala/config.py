"""ImpalaConfig: every IMPALA setting in one typed, documented place.

Defaults are TorchBeast MonoBeast's flags (REFERENCE.md §2.1): RMSprop with lr 4.8e-4
decayed linearly to 0, alpha 0.99, eps 0.01, momentum 0, gradient-norm clip 40, entropy
cost 6e-4, baseline cost 0.5, discount 0.99, rewards clipped to [-1, 1], unroll 80, batch 8,
2 learner threads, 4 actors, ``num_buffers = max(2 * actors, batch)``. The command line is
generated from this class (one ``--flag`` per field, its docstring as the help):

    >>> config = ImpalaConfig(env="CartPole-v1", num_actors=2)
    >>> config.num_slots_per_actor  # 1 unroll in progress plus its share (4) of a batch
    5
    >>> field_help()["entropy_cost"]
    'Weight of the entropy loss sum(p log p).'
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import textwrap
from dataclasses import dataclass

__all__ = ["ImpalaConfig", "field_help"]

REWARD_CLIPPING = ("abs_one", "none")
MODELS = ("auto", "mlp", "atari", "resnet")


@dataclass(frozen=True)
class ImpalaConfig:
    """IMPALA settings (TorchBeast MonoBeast defaults). Immutable: use :meth:`replace`."""

    # Environment and actors.
    env: str = "CartPole-v1"
    """Gymnasium id (Atari ids get the DeepMind preprocessing of batchenv.wrappers)."""
    num_actors: int = 4
    """Actor processes, each stepping envs_per_actor envs with a CPU copy of the model."""
    envs_per_actor: int = 1
    """Envs each actor steps in lockstep (one batched forward pass for all of them)."""
    env_workers: int = 0
    """0: an actor steps its envs itself; N > 0: in a batchenv.make group of N workers."""
    total_steps: int = 100_000
    """Agent steps to train for (the learning rate reaches 0 here)."""
    seed: int = 0
    """Seed of torch in the learner and of the envs (actor k, env j: seed + 1000 k + j)."""

    # Data flow.
    unroll_length: int = 80
    """Steps T per unroll; slots hold T + 1 rows (row 0 repeats the previous unroll's last)."""
    batch_size: int = 8
    """Unrolls B per learner step (stacked to [T + 1, B])."""
    num_learner_threads: int = 2
    """Learner threads; each takes a batch, learns under a lock and returns the slots."""
    num_buffers: int | None = None
    """Shared-memory slots in all; None: max(2 * actors * envs_per_actor, batch_size)."""

    # Model.
    model: str = "auto"
    """'auto' (MLP for vectors, Atari net for images), 'mlp', 'atari' or 'resnet'."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the MLP agent."""
    use_lstm: bool = False
    """Add a one-layer LSTM core (its state is stored with each unroll)."""

    # Optimisation (MonoBeast).
    learning_rate: float = 4.8e-4
    """RMSprop learning rate, decayed linearly to 0 at total_steps."""
    alpha: float = 0.99
    """RMSprop smoothing constant."""
    epsilon: float = 0.01
    """RMSprop epsilon."""
    momentum: float = 0.0
    """RMSprop momentum."""
    grad_norm_clipping: float = 40.0
    """Clip the global gradient norm to this."""

    # Losses (summed over time and batch).
    entropy_cost: float = 6e-4
    """Weight of the entropy loss sum(p log p)."""
    baseline_cost: float = 0.5
    """Weight of the baseline loss 0.5 sum((vs - V)^2)."""
    discount: float = 0.99
    """Discount factor gamma."""
    reward_clipping: str = "abs_one"
    """'abs_one' clips rewards to [-1, 1] in the learner; 'none' keeps them."""

    # Robustness.
    max_actor_restarts: int = 3
    """Restarts of dead actors allowed in all; one more death raises ActorDiedError."""
    actor_timeout: float = 60.0
    """Seconds an actor may hold its slots without delivering an unroll before it is killed."""
    start_timeout: float = 120.0
    """Seconds an actor may take to start and deliver its first unroll."""

    # Housekeeping.
    log_interval: float = 5.0
    """Seconds between metrics rows (and progress bar updates)."""
    checkpoint_interval: float = 600.0
    """Seconds between checkpoints (one is always written at the end and on Ctrl-C)."""
    torch_threads: int = 1
    """torch threads of the learner process (actors always use 1)."""

    def __post_init__(self) -> None:
        positive = (
            "num_actors",
            "envs_per_actor",
            "total_steps",
            "unroll_length",
            "batch_size",
            "num_learner_threads",
            "torch_threads",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ImpalaConfig.{name} must be a positive integer, got {value!r}")
        if self.env_workers < 0:
            raise ValueError(f"ImpalaConfig.env_workers must be >= 0, got {self.env_workers!r}")
        if self.max_actor_restarts < 0:
            raise ValueError(
                f"ImpalaConfig.max_actor_restarts must be >= 0, got {self.max_actor_restarts!r}"
            )
        if self.reward_clipping not in REWARD_CLIPPING:
            raise ValueError(
                f"ImpalaConfig.reward_clipping must be one of {REWARD_CLIPPING}, "
                f"got {self.reward_clipping!r}"
            )
        if self.model not in MODELS:
            raise ValueError(f"ImpalaConfig.model must be one of {MODELS}, got {self.model!r}")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"ImpalaConfig.discount must lie in [0, 1], got {self.discount!r}")
        for name in ("actor_timeout", "start_timeout", "log_interval", "learning_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ImpalaConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.num_buffers is not None and self.num_buffers < self.minimum_buffers:
            raise ValueError(
                f"ImpalaConfig.num_buffers={self.num_buffers} is too few: each of the "
                f"{self.num_actors} actors fills {self.envs_per_actor} slots at once and the "
                f"learner needs {self.batch_size} full ones, so at least {self.minimum_buffers}"
            )

    @property
    def minimum_buffers(self) -> int:
        """Fewest slots that never deadlock: every actor's in-progress slots plus one batch."""
        return self.num_actors * self.envs_per_actor + self.batch_size

    @property
    def num_slots_per_actor(self) -> int:
        """Slots owned by each actor (at least envs_per_actor in progress plus its share of a
        batch; with num_buffers=None, MonoBeast's max(2 * actors, batch) per env)."""
        total = self.num_buffers
        if total is None:
            total = max(2 * self.num_actors * self.envs_per_actor, self.batch_size)
        per_actor = math.ceil(total / self.num_actors)
        share = self.envs_per_actor + math.ceil(self.batch_size / self.num_actors)
        return max(per_actor, share)

    @property
    def steps_per_batch(self) -> int:
        """Agent steps one learner step consumes: T * B."""
        return self.unroll_length * self.batch_size

    def replace(self, **changes) -> ImpalaConfig:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)


def field_help() -> dict[str, str]:
    """The one-line docstring of every ImpalaConfig field, by field name."""
    source = textwrap.dedent(inspect.getsource(ImpalaConfig))
    body = ast.parse(source).body[0].body
    docs: dict[str, str] = {}
    for node, following in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = following.value.value.strip()
    return docs
