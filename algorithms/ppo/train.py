"""train(): PPO on an in-graph env, read top to bottom like PureJaxRL's ``make_train``.

    for update in range(num_updates):
        rollout(env, ppo, steps=num_steps)   # T compiled steps of the four methods
        ppo.update()                          # compiled epochs of minibatch steps

On a CUDA device each update is, from the fourth on, one CUDA graph replay (CudaGraphLoop).

K seeds (``config.seeds``) train as one program: the env is a StackedEnv of K blocks
(block k seeded ``seed + k``) and PPO holds K parameter sets (docs/ppo.md).

    >>> result = train(PPOConfig(total_timesteps=4096, compile=False))
    >>> result.returns.shape          # [updates, seeds]
    torch.Size([8, 1])
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from batchenv.in_graph.cuda_graph import CudaGraphLoop, GraphCaptureError
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.rollout import rollout
from batchenv.in_graph.stacked_env import StackedEnv

from .algorithm import PPO
from .config import PPOConfig
from .precompile import UpdatePrecompile

#: In-graph envs by name -> the batchenv.kernels class that implements them.
ENVS = {
    "CartPole-v1": "CartPole",
    "Acrobot-v1": "Acrobot",
    "Pendulum-v1": "Pendulum",
    "MountainCarContinuous-v0": "MountainCarContinuous",
    "DiscreteTag": "DiscreteTag",
    "ContinuousTag": "ContinuousTag",
    "MinAtar/Asterix-v1": "Asterix",
    "MinAtar/Breakout-v1": "Breakout",
    "MinAtar/Freeway-v1": "Freeway",
    "MinAtar/Seaquest-v1": "Seaquest",
    "MinAtar/SpaceInvaders-v1": "SpaceInvaders",
}

#: Constructor options per env: MinAtar's games end at gymnax's episode limit (1,000 steps;
#: Freeway ends on its own 2,500-frame timer), so results compare with gymnax's ports.
ENV_OPTIONS = {
    "MinAtar/Asterix-v1": {"max_episode_steps": 1000},
    "MinAtar/Breakout-v1": {"max_episode_steps": 1000},
    "MinAtar/Seaquest-v1": {"max_episode_steps": 1000},
    "MinAtar/SpaceInvaders-v1": {"max_episode_steps": 1000},
}


#: Kernels that take one seed per block of rows (``seed=[...]``): classic control, MinAtar.
PER_BLOCK_SEEDS = (
    "CartPole-v1",
    "Acrobot-v1",
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    *(env_id for env_id in ENVS if env_id.startswith("MinAtar/")),
)


@dataclass
class PPOResult:
    """What :func:`train` returns."""

    returns: torch.Tensor
    """Mean return of the episodes finished in each update's rollout ``[updates, seeds]``
    (NaN where none finished)."""
    losses: dict[str, torch.Tensor] = field(default_factory=dict)
    """Mean loss terms per update ``[updates, seeds]``."""
    compile_seconds: float = 0.0
    """Time of the first update beyond a steady-state update (tracing and compiling)."""
    run_seconds: float = 0.0
    """Wall time of the whole run, compile included."""
    env_steps: int = 0
    """Env steps per seed."""
    ppo: PPO | None = None
    """The trained algorithm (parameters of every seed)."""

    @property
    def steps_per_second(self) -> float:
        """Env steps of all seeds per second of the run after compiling."""
        seeds = self.returns.shape[1]
        return self.env_steps * seeds / max(self.run_seconds - self.compile_seconds, 1e-9)

    def first_reaching(self, target: float, steps_per_update: int) -> list[int | None]:
        """Per seed, the env step at which the update return first reached ``target``."""
        reached = []
        for seed in range(self.returns.shape[1]):
            hits = torch.nonzero(self.returns[:, seed] >= target).squeeze(-1)
            reached.append(None if hits.numel() == 0 else (int(hits[0]) + 1) * steps_per_update)
        return reached


def make_env(config: PPOConfig) -> InGraphBatchEnv:
    """K blocks of ``num_envs`` in-graph envs, block k seeded ``seed + k``."""
    from batchenv import kernels

    if config.env_id not in ENVS:
        raise ValueError(
            f"PPO trains the in-graph envs {', '.join(ENVS)}; got {config.env_id!r} "
            "(for Gym envs in worker processes use `batchenv train batchppo --env ID`)"
        )
    cls = getattr(kernels, ENVS[config.env_id])
    options = dict(ENV_OPTIONS.get(config.env_id, {}), device=config.device)
    if config.env_id.startswith("MinAtar/"):
        options["sticky_action_prob"] = config.sticky_action_prob
    seeds = [config.seed + k for k in range(config.seeds)]
    if config.env_id in PER_BLOCK_SEEDS:
        # One env seeded per block: row r of block k draws what a lone env seeded seeds[k]
        # draws, and the compiled step holds one copy of the dynamics, not K.
        env = cls(num_envs=config.num_envs * config.seeds, seed=seeds, **options)
    else:
        env = StackedEnv([cls(num_envs=config.num_envs, seed=s, **options) for s in seeds])
    # rollout() checks for non-finite values once per update (tensor code in the steps).
    return InGraphBatchEnv(env)


def make_ppo(config: PPOConfig, env: InGraphBatchEnv) -> PPO:
    """The K agents of ``config`` for ``env`` (from :func:`make_env`)."""
    return PPO(
        config,
        env.single_observation_space,
        env.single_action_space,
        seeds=[config.seed + k for k in range(config.seeds)],
        num_agents=getattr(env.env, "num_agents", None) or 1,
    )


class UpdateResult(NamedTuple):
    """What one update leaves: per-agent mean return of the episodes finished during it
    (``PPO.episode_stats``), the mean loss terms, and the rollout's ``done`` and ``score``."""

    returns: torch.Tensor  # [K]
    terms: dict[str, torch.Tensor]  # name -> [K]
    done: torch.Tensor  # bool [T, B]
    score: torch.Tensor  # [T, B(, agents)]


class Updates:
    """PPO's updates, one per call: a rollout of ``num_steps`` then the minibatch epochs.

    On a CUDA device (``config.cuda_graph``, compiled), calls from the fourth on replay the
    update as one CUDA graph (:class:`~batchenv.in_graph.cuda_graph.CudaGraphLoop`); its
    outputs are copied, so every :class:`UpdateResult` is the caller's to keep. If the update
    cannot be recorded, a warning says why and the updates go on eagerly. ``backend``: a
    recording backend for the tests (a CPU stand-in for CUDA graphs).

    On a CPU (``config.precompile``), a helper process compiles the update's programs while
    the first rollout compiles, and the first update loads them from Inductor's cache
    (:class:`~batchenv.algorithms.ppo.precompile.UpdatePrecompile`).
    """

    def __init__(self, config: PPOConfig, env: InGraphBatchEnv, ppo: PPO, backend=None):
        self.config, self.env, self.ppo = config, env, ppo
        self.loop: CudaGraphLoop | None = None
        on_cuda = config.cuda_graph and config.compile and ppo.device.type == "cuda"
        if on_cuda or backend is not None:
            # All of PPO's state is under env and ppo; updates_done only counts (the anneal
            # reads update_index on the device).
            roots = {"env": env, "ppo": ppo}
            counters = ("ppo.updates_done",)
            self.loop = CudaGraphLoop(self.iteration, roots, counters=counters, backend=backend)
        # The update's programs compile in a helper process while the first rollout compiles.
        self.precompile: UpdatePrecompile | None = None
        if self.loop is None and UpdatePrecompile.wanted(config):
            self.precompile = UpdatePrecompile(config, torch.get_num_threads())

    def iteration(self) -> UpdateResult:
        config = self.config
        try:
            done, score, _ = rollout(
                self.env,
                self.ppo,
                steps=config.num_steps,
                unroll=config.unroll or None,
                compile=config.compile,
            )
        except BaseException:
            if self.precompile is not None:
                self.precompile.close()
            raise
        if self.precompile is not None:
            self.precompile.wait()  # then the update loads its programs from the cache
            self.precompile = None
        terms = self.ppo.update()
        return UpdateResult(self.ppo.episode_stats(), terms, done, score)

    def __call__(self) -> UpdateResult:
        if self.loop is None:
            return self.iteration()
        try:
            out = self.loop()
        except GraphCaptureError as error:  # nothing of this update ran: run it eagerly
            warnings.warn(f"PPO runs without a CUDA graph: {error}", stacklevel=2)
            self.loop = None
            return self.iteration()
        self.env.raise_if_nonfinite()  # a recorded rollout() leaves its check to the caller
        terms = {name: value.clone() for name, value in out.terms.items()}
        return UpdateResult(out.returns.clone(), terms, out.done.clone(), out.score.clone())


def train(
    config: PPOConfig,
    on_update: Callable[[int, torch.Tensor, dict[str, torch.Tensor]], None] | None = None,
) -> PPOResult:
    """Train ``config.seeds`` PPO agents; ``on_update(update, returns [K], losses)`` after each."""
    config.check()
    threads = config.threads()
    if threads:
        torch.set_num_threads(threads)
    env = make_env(config)
    ppo = make_ppo(config, env)
    updates = Updates(config, env, ppo)
    returns, losses = [], {}
    started = time.perf_counter()
    first_update = 0.0
    for update in range(config.num_updates):
        tic = time.perf_counter()
        update_returns, terms, _, _ = updates()
        returns.append(update_returns)
        for name, value in terms.items():
            losses.setdefault(name, []).append(value.detach())
        if update == 0:
            first_update = time.perf_counter() - tic
        if on_update is not None:
            on_update(update, update_returns, terms)
    run_seconds = time.perf_counter() - started
    updates = config.num_updates
    steady = (run_seconds - first_update) / max(updates - 1, 1)
    return PPOResult(
        returns=torch.stack(returns),
        losses={name: torch.stack(values) for name, values in losses.items()},
        compile_seconds=max(first_update - steady, 0.0),
        run_seconds=run_seconds,
        env_steps=updates * config.batch_size,
        ppo=ppo,
    )
