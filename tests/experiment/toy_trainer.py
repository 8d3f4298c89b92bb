"""A trainer that follows batchenv.experiment's protocol without torch: fast and exact.

Its "return" at checkpoint k (every ``eval_every`` steps) is a smooth function of the
config values ``x`` and ``y`` that peaks at x = 0.3, y = 2, rising with the steps, plus a
seeded noise term, so searches have a known optimum and sessions differ by seed only.
It keeps a checkpoint (the last frame) in its folder and appends to ``starts.txt`` every
time it starts, which tests read to see what was rerun.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

from batchenv.atomic_file import write_atomic


@dataclass(frozen=True)
class ToyConfig:
    """Settings of the toy trainer."""

    env: str = "toy"
    """The env name (only recorded)."""
    steps: int = 1000
    """Env steps per session."""
    eval_every: int = 100
    """Env steps between checkpoints."""
    seed: int = 0
    """Seed of the noise."""
    x: float = 0.0
    """First parameter (best at 0.3)."""
    y: int = 0
    """Second parameter (best at 2)."""
    noise: float = 1.0
    """Scale of the seeded noise."""
    crash_above: float | None = None
    """Raise at the first checkpoint when x is above this."""
    delay: float = 0.0
    """Seconds to sleep at every checkpoint."""
    stall_seed: int | None = None
    """The session with this seed stalls (sleeps an hour) after its checkpoint at stall_at,
    on its first start only: a run to interrupt, or to time out."""
    stall_at: int = 100
    """The frame after which the stall_seed session stalls."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"ToyConfig.steps must be >= 1, got {self.steps}")


def toy_return(config: ToyConfig, frame: int) -> float:
    peak = 100.0 - 100.0 * (config.x - 0.3) ** 2 - 5.0 * (config.y - 2) ** 2
    noise = random.Random(config.seed * 100_003 + frame).uniform(-1, 1) * config.noise
    return peak * frame / config.steps + noise


class ToyTrainer:
    config_class = ToyConfig
    meta_fields = {"env": "env", "steps": "steps", "seed": "seed", "eval_every": "eval_every"}
    default_env = "toy"

    def make_config(self, env, values, *, steps, seed, eval_every):
        overrides = {"env": env, "seed": seed}
        if steps is not None:
            overrides["steps"] = steps
        if eval_every is not None:
            overrides["eval_every"] = eval_every
        return ToyConfig(**{**dict(values), **overrides})

    def cpus(self, config):
        return 1

    def random_return(self, env):
        return 0.0

    def train(self, config, run_dir, *, resume, progress, cpus, report):
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = run_dir / "toy_checkpoint.json"
        start = json.loads(checkpoint.read_text())["frame"] if resume and checkpoint.exists() else 0
        starts = run_dir / "starts.txt"
        first = not starts.exists()
        with open(starts, "a") as file:
            file.write(f"{os.getpid()} {start}\n")
        for frame in range(start + config.eval_every, config.steps + 1, config.eval_every):
            if config.crash_above is not None and config.x > config.crash_above:
                raise RuntimeError(f"toy crash: x={config.x} is above {config.crash_above}")
            time.sleep(config.delay)
            write_atomic(checkpoint, json.dumps({"frame": frame}))  # as the real trainers do
            report(frame, toy_return(config, frame), opt_step=frame // 10)
            if first and config.stall_seed == config.seed and frame == config.stall_at:
                time.sleep(3600)
