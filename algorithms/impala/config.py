"""ImpalaConfig: every IMPALA setting in one typed, documented place.

Defaults are TorchBeast MonoBeast's flags (Küttler et al. 2019; docs/impala.md): RMSprop
with lr 4.8e-4
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
MODELS = ("auto", "mlp", "atari", "resnet", "minatar")
MODES = ("sync", "async", "distributed")
PLACEMENTS = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class ImpalaConfig:
    """IMPALA settings (TorchBeast MonoBeast defaults). Immutable: use :meth:`replace`."""

    # Mode, environment and actors.
    mode: str = "sync"
    """'sync': actor processes fill shared memory (MonoBeast); 'async': actor threads,
    batched inference and a learner queue (PolyBeast); 'distributed': actors as Ray actors
    on the nodes of a Ray cluster (the ray extra; see ray_address and placement)."""
    env: str = "CartPole-v1"
    """Gymnasium id (Atari ids get the DeepMind preprocessing of batchenv.wrappers;
    MinAtar/<Game>-v1 ids run the minatar package's games)."""
    num_actors: int = 4
    """Actors (sync: processes with a CPU model copy; async: threads), envs_per_actor each."""
    envs_per_actor: int = 1
    """Envs each actor steps in lockstep (one batched forward pass for all of them)."""
    env_workers: int = 0
    """Worker processes of an actor's envs (batchenv.make); 0: sync actors step their envs
    themselves, async actors use 1 worker."""
    env_batch_size: int = 0
    """Async: envs an actor runs the model on at once, the first of its envs to finish
    (batchenv's send/recv); 0: half of envs_per_actor (at least 1), so that the workers
    step one half while the model runs on the other; envs_per_actor: lockstep."""
    total_steps: int = 100_000
    """Agent steps to train for (the learning rate reaches 0 here)."""
    seed: int = 0
    """Seed of torch and of the envs (actor_seed(): env j of actor k gets seed + 1000 k E + j)."""

    # Data flow.
    unroll_length: int = 80
    """Steps T per unroll; slots hold T + 1 rows (row 0 repeats the previous unroll's last)."""
    batch_size: int = 8
    """Unrolls B per learner step (stacked to [T + 1, B])."""
    num_learner_threads: int = 2
    """Learner threads; each takes a batch, learns under a lock and returns the slots."""
    num_buffers: int | None = None
    """Sync: shared-memory slots in all; None: max(2 * actors * envs_per_actor, batch_size)."""
    num_inference_threads: int = 1
    """Async: threads running the acting model on dynamically batched actor steps."""
    max_learner_queue_size: int | None = None
    """Async: unrolls the learner queue holds before actors wait; None: 2 * batch_size."""
    device: str = "cpu"
    """Device of the learner (and of async inference): 'cpu', 'cuda', 'cuda:N' or 'auto'."""

    # Model.
    model: str = "auto"
    """'auto' (MinAtar net for MinAtar/ ids, MLP for vectors, Atari net for other images),
    'mlp', 'atari', 'resnet' or 'minatar' (the MinAtar paper's net, for (10, 10, C) frames)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the MLP agent."""
    use_lstm: bool = False
    """Add a one-layer LSTM core (its state is stored with each unroll)."""
    precision: str = "fp32"
    """'fp32', or 'bf16': forward passes (acting and learning) under torch.autocast with
    bfloat16; weights, gradients, optimiser and V-trace stay float32. Speeds up the conv
    agents ~1.8x on CPUs with AVX512-BF16 or AMX, and on GPUs; no gain on other CPUs."""

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
    log_every: int = 0
    """Agent steps between metrics rows instead of log_interval seconds (0: by time)."""
    checkpoint_interval: float = 600.0
    """Seconds between checkpoints (one is also written at the end, and on Ctrl-C once the
    actors have started)."""
    torch_threads: int = 1
    """torch threads of the learner process (actors always use 1)."""

    # Distributed mode.
    ray_address: str = ""
    """Distributed: the Ray cluster to join (HOST:PORT of `ray start --head`); '': the
    RAY_ADDRESS variable, or a local Ray instance on this machine."""
    placement: str = "SPREAD"
    """Distributed: how the actors are placed over the cluster's nodes: 'SPREAD' (one
    node each where possible), 'PACK' (as few nodes as fit), or Ray's STRICT_ variants."""

    def __post_init__(self) -> None:
        positive = (
            "num_actors",
            "envs_per_actor",
            "total_steps",
            "unroll_length",
            "batch_size",
            "num_learner_threads",
            "num_inference_threads",
            "torch_threads",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ImpalaConfig.{name} must be a positive integer, got {value!r}")
        if self.log_every < 0:
            raise ValueError(f"ImpalaConfig.log_every must be >= 0, got {self.log_every!r}")
        if self.env_workers < 0:
            raise ValueError(f"ImpalaConfig.env_workers must be >= 0, got {self.env_workers!r}")
        if not 0 <= self.env_batch_size <= self.envs_per_actor:
            raise ValueError(
                "ImpalaConfig.env_batch_size must be in [0, envs_per_actor="
                f"{self.envs_per_actor}], got {self.env_batch_size!r}"
            )
        if self.max_actor_restarts < 0:
            raise ValueError(
                f"ImpalaConfig.max_actor_restarts must be >= 0, got {self.max_actor_restarts!r}"
            )
        if self.mode not in MODES:
            raise ValueError(f"ImpalaConfig.mode must be one of {MODES}, got {self.mode!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"ImpalaConfig.placement must be one of {PLACEMENTS}, got {self.placement!r}"
            )
        if self.max_learner_queue_size is not None and self.max_learner_queue_size < 1:
            raise ValueError(
                "ImpalaConfig.max_learner_queue_size must be a positive integer or None, "
                f"got {self.max_learner_queue_size!r}"
            )
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"ImpalaConfig.device must be a device name, got {self.device!r}")
        if self.reward_clipping not in REWARD_CLIPPING:
            raise ValueError(
                f"ImpalaConfig.reward_clipping must be one of {REWARD_CLIPPING}, "
                f"got {self.reward_clipping!r}"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"ImpalaConfig.precision must be one of {PRECISIONS}, got {self.precision!r}"
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
    def learner_queue_size(self) -> int:
        """Async: the learner queue's capacity in unrolls (max_learner_queue_size resolved)."""
        if self.max_learner_queue_size is not None:
            return self.max_learner_queue_size
        return 2 * self.batch_size

    def actor_env_batch_size(self) -> int:
        """Envs per inference call of an async actor (``env_batch_size``, 0 resolved)."""
        return self.env_batch_size or max(1, self.envs_per_actor // 2)

    def actor_seed(self, actor: int, incarnation: int) -> int:
        """Seed of env 0 of ``actor``'s ``incarnation`` (env j gets this + j)."""
        return self.seed + 1000 * actor * self.envs_per_actor + 7919 * incarnation

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
