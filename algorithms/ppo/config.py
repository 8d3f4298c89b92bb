"""PPOConfig: PPO as PureJaxRL's ``ppo.py`` and CleanRL's ``ppo.py`` write it (docs/ppo.md).

Defaults are PureJaxRL's CartPole config: 4 envs x 128 steps per update, 4 epochs of 4
minibatches, Adam (eps 1e-5) with the learning rate annealed linearly to 0, global gradient
norm clipped at 0.5, GAE(0.99, 0.95), clip 0.2, entropy 0.01, value 0.5, 64-64 tanh MLPs.

    >>> PPOConfig().batch_size, PPOConfig().minibatch_size, PPOConfig().num_updates
    (512, 128, 976)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: Up to this many env rows a step (all seeds), PPO on a CPU runs on one torch thread. On the
#: quiet 2-core machine one thread was ~1.3x faster at 4 rows (one seed of the CartPole
#: preset) and two threads ~1.4x faster at 32 (8 seeds); see benchmarks/RESULTS.md.
ONE_THREAD_ROWS = 16


@dataclass
class PPOConfig:
    """Every option of ``batchenv train ppo``; one line of documentation per field."""

    env_id: str = "CartPole-v1"
    """In-graph env: CartPole-v1, Acrobot-v1, Pendulum-v1, MountainCarContinuous-v0,
    DiscreteTag, ContinuousTag or MinAtar/{Asterix,Breakout,Freeway,Seaquest,SpaceInvaders}-v1
    (batchenv.kernels)."""
    num_envs: int = 4
    """Envs per seed, stepped in lockstep."""
    num_steps: int = 128
    """Steps per env in each rollout (T)."""
    total_timesteps: int = 500_000
    """Env steps per seed over the whole run (rounded down to whole updates)."""
    seed: int = 0
    """Seed of the first agent; agent k of ``seeds`` uses ``seed + k``."""
    seeds: int = 1
    """Independent agents trained at once, as one batched program (own parameters,
    optimiser state and env streams)."""
    learning_rate: float = 2.5e-4
    """Adam step size (the start of the anneal)."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the updates."""
    adam_eps: float = 1e-5
    """Adam's epsilon."""
    gamma: float = 0.99
    """Discount."""
    gae_lambda: float = 0.95
    """GAE's lambda."""
    update_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches per pass."""
    clip_eps: float = 0.2
    """PPO's ratio clip (also the value clip)."""
    clip_value: bool = True
    """Clip the value loss as PureJaxRL and CleanRL do."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient norm clip (per agent)."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    bootstrap_truncated: bool = True
    """Time-limit ends bootstrap from the value of the final observation (PureJaxRL treats
    them as terminal)."""
    hidden: int = 64
    """Units of each of the two hidden layers (actor and critic alike)."""
    activation: str = "tanh"
    """tanh or relu."""
    init_log_std: float = 0.0
    """Gaussian head: initial log standard deviation (state independent)."""
    init: str = "orthogonal"
    """Weight initialisation: orthogonal (PureJaxRL, CleanRL: gain sqrt 2, 0.01 on the policy
    output, 1 on the value output) or lecun (flax's Dense default, as gymnax-blines: truncated
    normal with variance 1/fan_in)."""
    bias_init: float = 0.0
    """Biases drawn from U[0, bias_init) (gymnax-blines: 0.05); 0 gives zeros."""
    normalize_reward: bool = False
    """Scale rewards by a running std of the discounted return (continuous presets)."""
    sticky_action_prob: float = 0.1
    """MinAtar games: chance that a step repeats the previous action (MinAtar's 0.1; 0 as
    gymnax's ports, which have none)."""
    compile: bool = True
    """Compile the rollout and the update with torch.compile (False: the same code eagerly)."""
    precompile: bool = True
    """On a CPU, compile the update's programs in a helper process while this one compiles
    the rollout, and load them from Inductor's cache (batchenv.algorithms.ppo.precompile);
    False: this process compiles all three."""
    unroll: int = 0
    """Steps per compiled rollout program; 0 picks the default (see rollout())."""
    device: str = "cpu"
    """Where envs and networks live."""
    cuda_graph: bool = True
    """On a CUDA device, record one update (rollout and minibatches) as a CUDA graph after
    three eager ones and replay it (batchenv.in_graph.cuda_graph); no effect on a CPU."""
    torch_threads: int = 0
    """torch.set_num_threads (process-wide); 0 picks: one thread on a CPU when a step has at
    most ONE_THREAD_ROWS env rows over all seeds, else torch's default (see ``threads``)."""
    log_every: int = 10
    """Write a metrics row every this many updates."""

    def threads(self) -> int:
        """The thread count ``train`` sets (0: torch's default is left alone).

        A small program (4 CartPoles a step) is a few dozen kernels of a few dozen elements
        each. Run on two threads, each of those kernels waits for OpenMP's fork and join,
        and for the other thread whenever another process holds the second core. On this
        project's 2-core machine with another process running, PPO's CartPole preset fell
        from ~40k steps/s to ~2k that way (benchmarks/RESULTS.md).
        """
        if self.torch_threads:
            return self.torch_threads
        on_cpu = self.device.split(":")[0] == "cpu"
        return 1 if on_cpu and self.num_envs * self.seeds <= ONE_THREAD_ROWS else 0

    @property
    def batch_size(self) -> int:
        """Transitions per update and agent."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    def check(self) -> PPOConfig:
        """Raise ValueError (one line, what to change) for an impossible combination."""
        for name in ("num_envs", "num_steps", "seeds", "update_epochs", "num_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size % self.num_minibatches:
            raise ValueError(
                f"num_envs x num_steps = {self.batch_size} does not split into "
                f"{self.num_minibatches} minibatches; pick num_minibatches dividing it"
            )
        if self.num_updates < 1:
            raise ValueError(
                f"total_timesteps {self.total_timesteps} is less than one update "
                f"({self.batch_size} steps); raise it"
            )
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        if self.init not in ("orthogonal", "lecun"):
            raise ValueError(f"init must be 'orthogonal' or 'lecun', got {self.init!r}")
        if self.bias_init < 0:
            raise ValueError(f"bias_init must be >= 0 (U[0, bias_init)), got {self.bias_init}")
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {self.sticky_action_prob}")
        if self.sticky_action_prob != 0.1 and not self.env_id.startswith("MinAtar/"):
            raise ValueError(
                f"sticky_action_prob is a MinAtar option; {self.env_id} has no sticky actions "
                "(leave it at 0.1)"
            )
        return self


#: Spec presets: name -> overrides of the defaults (``--preset NAME``).
PRESETS: dict[str, dict] = {
    "cartpole": {},
    "acrobot": {"env_id": "Acrobot-v1", "num_envs": 16, "total_timesteps": 500_000},
    "pendulum": {
        "env_id": "Pendulum-v1",
        "num_envs": 16,
        "num_steps": 256,
        "total_timesteps": 1_000_000,
        "learning_rate": 1e-3,
        "num_minibatches": 32,
        "update_epochs": 10,
        "gamma": 0.95,
        "ent_coef": 0.0,
        "normalize_reward": True,
        "init_log_std": -0.5,
    },
    # PureJaxRL's MinAtar config (its brax_minatar notebook, tuned on gymnax's MinAtar).
    **{
        f"minatar-{game.lower()}": {
            "env_id": f"MinAtar/{game}-v1",
            "num_envs": 64,
            "num_steps": 128,
            "total_timesteps": 10_000_000,
            "learning_rate": 5e-3,
            "num_minibatches": 8,
            "activation": "relu",
        }
        for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
    },
    "tag": {
        "env_id": "DiscreteTag",
        "num_envs": 16,
        "num_steps": 128,
        "total_timesteps": 2_000_000,
        "learning_rate": 3e-4,
        "num_minibatches": 8,
    },
}


def field_help() -> dict[str, str]:
    """Each field's one-line documentation (the attribute docstrings above)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(PPOConfig))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr):
            value = following.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docs[node.target.id] = " ".join(value.value.split())
    return docs


def make_config(preset: str | None = None, **overrides) -> PPOConfig:
    """A checked config: the defaults, then the preset, then ``overrides``."""
    values = dict(PRESETS.get(preset or "cartpole", {}))
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    values.update(overrides)
    names = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown PPO option(s) {unknown}; see `batchenv spec ppo`")
    return PPOConfig(**values).check()
