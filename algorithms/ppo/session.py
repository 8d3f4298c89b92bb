"""In-graph PPO as a session of an experiment (the trainer protocol of batchenv.experiment).

A spec's ``config`` holds :class:`PPOConfig` fields on top of the preset of its env (the
same rule as ``batchenv train ppo --env``); ``meta.steps``, ``meta.seed`` and
``meta.log_frequency`` set ``total_timesteps``, ``seed`` and ``log_frequency``. The env is
one of PPO's in-graph env ids (``CartPole-v1``, ``MinAtar/Breakout-v1``, ...) or its class
(``batchenv.kernels:CartPole``).

Checkpoints are SLM Lab's: every ``log_frequency`` env frames of the session (its
``num_envs`` envs), the mean return of its last 100 training episodes, read from the
``done`` and ``score`` the compiled rollout returns (one host copy per update).

A trial's sessions train **together**: configs equal but for consecutive seeds (the usual
trial) run as one K-seed program (``PPOConfig.seeds = K``), and session k's folder gets
column k of everything, as if it had run alone: its checkpoints.csv, metrics.csv,
config.json (with its own seed), curve.png and a checkpoint.pt that ``batchenv evaluate``
reads. A PPO session keeps no mid-run checkpoint: ``--resume`` reruns a cut-short session
(or group) from its first step, with the same seeds.

    >>> config = TRAINER.make_config("CartPole-v1", {"learning_rate": 1e-3}, steps=50_000,
    ...                              seed=3, eval_every=None)
    >>> config.learning_rate, config.total_timesteps, config.seed, config.log_frequency
    (0.001, 50000, 3, 10000)
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchenv.algorithms.batchppo.log_checkpoints import RECENT_EPISODES

from .config import PRESETS, PPOConfig
from .train import ENVS

__all__ = ["TRAINER", "PPOSessionConfig", "PPOTrainer", "RolloutCheckpoints"]

#: Env frames between checkpoints when the spec sets no meta.log_frequency (SLM Lab's).
DEFAULT_LOG_FREQUENCY = 10_000


@dataclass
class PPOSessionConfig(PPOConfig):
    """PPOConfig plus the checkpoint cadence of an experiment session."""

    log_frequency: int = DEFAULT_LOG_FREQUENCY
    """Env frames of the session (all its envs) between checkpoints (SLM Lab's
    meta.log_frequency): each is the mean return of the last 100 training episodes."""

    def ppo_config(self) -> PPOConfig:
        """The same settings as a plain PPOConfig (what a checkpoint.pt records)."""
        return PPOConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(PPOConfig)})


class PPOTrainer:
    """In-graph PPO under the trainer protocol (see batchenv.experiment.trainers)."""

    config_class = PPOSessionConfig
    meta_fields = {
        "env": "env_id",
        "steps": "total_timesteps",
        "seed": "seed",
        "log_frequency": "log_frequency",
        "sessions": "seeds",  # a session is one seed; the trial's sessions are the K seeds
    }
    default_env = "CartPole-v1"

    def make_config(
        self,
        env: str,
        values: Mapping[str, Any],
        *,
        steps: int | None,
        seed: int,
        eval_every: int | None,
        log_frequency: int | None = None,
    ) -> PPOSessionConfig:
        """The preset of ``env`` (or the defaults) with ``values`` and the meta fields."""
        if eval_every is not None:
            raise ValueError(
                "meta.eval_every: PPO has no eval phases (its checkpoints are the training "
                "episodes of every meta.log_frequency frames); remove eval_every"
            )
        env_id = env_id_of(env)
        preset = next((v for v in PRESETS.values() if v.get("env_id") == env_id), {})
        meta: dict[str, Any] = {"env_id": env_id, "seed": seed}
        if steps is not None:
            meta["total_timesteps"] = steps
        if log_frequency is not None:
            meta["log_frequency"] = log_frequency
        return PPOSessionConfig(**{**preset, **dict(values), **meta})

    def check(self, config: PPOSessionConfig) -> None:
        """What would fail at a session's start: the env id, the config's own checks, the
        device (ValueError with one line saying what to do)."""
        if config.env_id not in ENVS:
            raise ValueError(
                f"PPO trains the in-graph envs {', '.join(ENVS)} (or their "
                f"batchenv.kernels classes); got env {config.env_id!r} (for a Gymnasium env "
                "in worker processes use algorithm: batchppo)"
            )
        config.check()
        if config.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ValueError(
                    f"config.device is {config.device!r} but torch sees no CUDA device; "
                    "set device: cpu"
                )

    def cpus(self, config: PPOSessionConfig) -> int:
        """One core: the envs step in the same torch program as the networks."""
        return 1

    def random_return(self, env: str) -> float:
        """The random-policy return of the in-graph env PPO trains on."""
        from batchenv.experiment.baseline import random_return

        return random_return(f"batchenv.kernels:{ENVS[env_id_of(env)]}")

    def can_train_together(self, configs: list[PPOSessionConfig]) -> bool:
        """Whether ``configs`` are one K-seed program: equal but for consecutive seeds."""
        first = configs[0]
        return all(
            dataclasses.replace(config, seed=first.seed) == first
            and config.seed == first.seed + k
            and config.seeds == 1
            for k, config in enumerate(configs)
        )

    def train(
        self,
        config: PPOSessionConfig,
        run_dir: Path,
        *,
        resume: bool,
        progress: bool,
        cpus: int,
        report,
    ) -> None:
        """One session into ``run_dir`` (a program of one seed)."""
        self.train_together(
            [config], [run_dir], resume=resume, progress=progress, cpus=cpus, reports=[report]
        )

    def train_together(
        self,
        configs: list[PPOSessionConfig],
        run_dirs: list[Path],
        *,
        resume: bool,
        progress: bool,
        cpus: int,
        reports: list,
    ) -> None:
        """Sessions ``configs`` (see :meth:`can_train_together`) as one program of
        ``len(configs)`` seeds; session k writes ``run_dirs[k]`` and calls ``reports[k]``."""
        import torch

        from batchenv.run_dir import RunDirectory

        from .train import Updates, make_env, make_ppo

        run_dirs = [Path(path) for path in run_dirs]
        if resume:  # no mid-run checkpoint: a cut-short session starts over, same seeds
            for path in run_dirs:
                shutil.rmtree(path, ignore_errors=True)
        count = len(configs)
        threads = max(1, cpus)
        program = dataclasses.replace(configs[0], seeds=count, torch_threads=threads)
        torch.set_num_threads(threads)
        env = make_env(program)
        ppo = make_ppo(program, env)
        one_update = Updates(program, env, ppo)
        lone = [dataclasses.replace(config, torch_threads=threads) for config in configs]
        runs = [
            RunDirectory(path, "ppo", config, seed=config.seed, env_id=config.env_id)
            for path, config in zip(run_dirs, lone)
        ]
        last_frame = program.num_updates * program.batch_size
        counters = [
            RolloutCheckpoints(config.log_frequency, program.num_envs, last_frame)
            for config in configs
        ]
        per_update = program.update_epochs * program.num_minibatches
        bar = _progress_bar(program.num_updates) if progress else None
        try:
            for update in range(program.num_updates):
                returns, terms, done, score = one_update()
                returns = returns.cpu()
                done, score = _per_seed(done, score, count)
                end = (update + 1) * program.batch_size
                for k in range(count):
                    for frame, total_reward in counters[k].rollout(done[:, k], score[:, k]):
                        updates = update + 1 if frame == end else update
                        reports[k](frame, total_reward, opt_step=updates * per_update)
                if (update + 1) % program.log_every == 0 or update + 1 == program.num_updates:
                    for k, run in enumerate(runs):
                        losses = {name: float(value[k]) for name, value in terms.items()}
                        run.log(end, "train", mean_score=float(returns[k]), **losses)
                if bar is not None:
                    bar.update(1)
            state = ppo.state_dict()
            for k, run in enumerate(runs):
                run.save_checkpoint(
                    {
                        "config": dataclasses.asdict(lone[k].ppo_config()),
                        "ppo": _agent_state(state, k, count),
                    }
                )
                run.plot_curve()
        finally:
            if bar is not None:
                bar.close()
            for run in runs:
                run.close()


class RolloutCheckpoints:
    """SLM Lab's log checkpoints of one seed, fed one rollout at a time.

    A checkpoint fires after the step at which ``frame % frequency < num_envs`` and after
    the step that reaches ``last_frame``; its return is the mean of the last 100 training
    episodes finished by then (NaN before the first). The same rule and episode order as
    BatchPPO's ``LogCheckpoints``, on a whole rollout's ``done`` and ``score`` at once.

    >>> checkpoints = RolloutCheckpoints(frequency=1000, num_envs=4, last_frame=499_712)
    >>> rows = checkpoints.rollout(done, score)   # [T, num_envs] each -> [(frame, return)]
    """

    def __init__(self, frequency: int, num_envs: int, last_frame: int):
        self.frequency = frequency
        self.num_envs = num_envs
        self.last_frame = last_frame
        self.frame = 0
        self.recent: deque[float] = deque(maxlen=RECENT_EPISODES)

    def rollout(self, done: np.ndarray, score: np.ndarray) -> list[tuple[int, float]]:
        """Account for a rollout's steps (bool ``done`` and float ``score``, ``[T,
        num_envs]``); the checkpoints due in it, ``(frame, total_reward)``."""
        frames = self.frame + self.num_envs * np.arange(1, done.shape[0] + 1)
        due = np.flatnonzero(
            (frames % self.frequency < self.num_envs) | (frames >= self.last_frame)
        )
        finished = score[done].tolist()  # step by step, rows in order within a step
        upto = np.cumsum(done.sum(1))  # episodes finished by the end of each step
        rows, taken = [], 0
        for step in due:
            self.recent.extend(finished[taken : upto[step]])
            taken = int(upto[step])
            mean = sum(self.recent) / len(self.recent) if self.recent else math.nan
            rows.append((int(frames[step]), mean))
        self.recent.extend(finished[taken:])
        self.frame = int(frames[-1])
        return rows


def env_id_of(env: str) -> str:
    """PPO's env id for a spec's env: an id as is, a ``batchenv.kernels:Class`` mapped back.

    >>> env_id_of("batchenv.kernels:Breakout")
    'MinAtar/Breakout-v1'
    """
    module, _, name = env.rpartition(":")
    if module == "batchenv.kernels":
        return next((env_id for env_id, cls in ENVS.items() if cls == name), env)
    return env


# --- helpers --------------------------------------------------------------------------------


def _per_seed(done, score, count: int) -> tuple[np.ndarray, np.ndarray]:
    """A rollout's ``done [T, K * N]`` and ``score [T, K * N(, agents)]`` on the host as
    ``[T, K, N]`` (the score averaged over agents, as BatchPPO's checkpoints average it)."""
    steps = done.shape[0]
    done = done.cpu().reshape(steps, count, -1)
    score = score.detach().float().cpu().reshape(steps, done.shape[2] * count, -1).mean(-1)
    return done.numpy(), score.reshape(steps, count, -1).numpy()


def _agent_state(state: Any, k: int, count: int) -> Any:
    """Agent k's part of a K-agent PPO state dict (tensors with a leading K axis sliced to
    one agent), so that a session's checkpoint.pt is that of a lone run."""
    import torch

    if isinstance(state, dict):
        return {name: _agent_state(value, k, count) for name, value in state.items()}
    if isinstance(state, torch.Tensor) and state.dim() and state.shape[0] == count:
        return state[k : k + 1].clone()
    return state


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="update", mininterval=0.5)


TRAINER = PPOTrainer()
