"""RunDirectory: everything one training run writes, in one folder.

    runs/batchppo-Pendulum-v1-20261122-101500/
      config.json      the resolved config, the algorithm, the seed, the git commit and
                       package version, argv
      metrics.csv      one row per log() call: step, wall_time, phase, then the metrics
      events.out.*     TensorBoard event files (when tensorboard is installed)
      curve.png        train and eval return vs env steps (matplotlib, when installed)
      checkpoint.pt    the latest checkpoint (written atomically)

    >>> run = RunDirectory(None, "batchppo", config, seed=0, env_id="Pendulum-v1")
    >>> run.log(1000, "train", mean_score=-1200.0)
    >>> run.save_checkpoint({"step": 1000, "model": model.state_dict()})
    >>> run.plot_curve()

``RunDirectory(path, ..., resume=True)`` reopens a run: the config comes from its
``config.json`` and ``load_checkpoint()`` returns the latest checkpoint.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from batchenv.atomic_file import replacing
from batchenv.logger import Logger, curve_points

CONFIG_NAME = "config.json"
CHECKPOINT_NAME = "checkpoint.pt"
CURVE_NAME = "curve.png"


def git_commit() -> str | None:
    """The commit of batchenv this code runs from, or None when it cannot be known.

    From a git checkout of batchenv (an editable install, ``pip install -e .``): ``git
    rev-parse HEAD`` of that checkout. From a built package (``pip install .``, a wheel): the
    commit setup.py recorded in ``batchenv/_build_info.py`` when it built the package from a
    checkout (None when it was built from a source tree without git). Local changes that
    were not committed are not recorded either way.
    """
    here = Path(__file__).resolve().parent.parent
    if (here / "setup.cfg").exists() and (here / "batchenv").is_dir():
        try:
            out = subprocess.run(
                ["git", "-C", str(here), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            pass
        else:
            if out.stdout.strip():
                return out.stdout.strip()
    return _build_commit()


def _build_commit() -> str | None:
    """The commit recorded at build time (``batchenv/_build_info.py``), if any."""
    try:
        from batchenv import _build_info  # written by setup.py's build_py; not in git
    except ImportError:
        return None
    return getattr(_build_info, "GIT_COMMIT", None) or None


def package_version() -> str | None:
    """The installed version of the batchenv package (its metadata), if installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("batchenv")
    except PackageNotFoundError:
        return None


def default_path(algorithm: str, env_id: str = "") -> Path:
    """``runs/<algorithm>-<env_id>-<YYYYmmdd-HHMMSS>``, the folder of a run given no path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = "-".join(filter(None, [algorithm, env_id.replace("/", "_").replace(":", "_"), stamp]))
    return Path("runs") / name


class RunDirectory:
    """The folder of one training run: config, metrics, TensorBoard, curve, checkpoint.

    Args:
        path: the folder; None makes ``runs/<algorithm>-<env_id>-<time>``.
        algorithm: name of the algorithm ("batchppo", "impala").
        config: the resolved config (a dataclass or a dict); ignored when resuming.
        seed: the run's seed (stored in config.json).
        env_id: for the default folder name and config.json.
        resume: reopen an existing run instead of creating a new one.
    """

    def __init__(
        self,
        path: str | os.PathLike | None,
        algorithm: str,
        config: Any = None,
        *,
        seed: int | None = None,
        env_id: str = "",
        resume: bool = False,
        tensorboard: bool = True,
    ):
        if path is None:
            if resume:
                raise ValueError("resume needs the path of an existing run directory")
            path = default_path(algorithm, env_id)
        self.path = Path(path)
        if resume:
            if not (self.path / CONFIG_NAME).exists():
                raise FileNotFoundError(f"{self.path} is not a run directory (no {CONFIG_NAME})")
            self.record = json.loads((self.path / CONFIG_NAME).read_text())
        else:
            if (self.path / CONFIG_NAME).exists():
                raise FileExistsError(
                    f"{self.path} already holds a run; pass resume=True (--resume) to continue "
                    "it, or choose another directory"
                )
            self.path.mkdir(parents=True, exist_ok=True)
            self.record = {
                "algorithm": algorithm,
                "env_id": env_id,
                "seed": seed,
                "git_commit": git_commit(),
                "batchenv_version": package_version(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "argv": sys.argv,
                "config": _to_dict(config),
            }
            (self.path / CONFIG_NAME).write_text(json.dumps(self.record, indent=2, default=str))
        self.logger = Logger(self.path, tensorboard=tensorboard)
        self._started = time.perf_counter()
        self._wall_offset = self._last_wall_time() if resume else 0.0

    @property
    def config(self) -> dict:
        """The config as stored in config.json (a dict)."""
        return self.record["config"]

    @property
    def seed(self) -> int | None:
        return self.record.get("seed")

    def wall_time(self) -> float:
        """Seconds of training so far, including earlier sessions of a resumed run."""
        return self._wall_offset + time.perf_counter() - self._started

    def log(self, step: int, phase: str, **metrics: Any) -> None:
        """One metrics row at env step ``step`` for ``phase`` ("train", "eval", ...).

        metrics.csv gets the columns ``wall_time``, ``phase`` and the metrics by their own
        names; TensorBoard gets the tags ``<phase>/<name>`` (``train/mean_score``,
        ``eval/mean_score``, ...), one curve per phase.
        """
        row = {"wall_time": round(self.wall_time(), 3), "phase": phase}
        row.update(metrics)
        self.logger.log(step, row, tag_prefix=phase)

    def save_checkpoint(self, state: dict) -> Path:
        """Write ``state`` with torch.save, atomically (a crash never leaves half a file)."""
        import torch

        target = self.path / CHECKPOINT_NAME
        with replacing(target) as partial:
            torch.save(state, partial)
        self.logger.flush()
        return target

    def load_checkpoint(self) -> dict | None:
        """The latest checkpoint, or None when the run has none yet."""
        import torch

        target = self.path / CHECKPOINT_NAME
        if not target.exists():
            return None
        return torch.load(target, map_location="cpu", weights_only=False)

    def plot_curve(self, title: str | None = None) -> Path | None:
        """Draw train and eval return against env steps into curve.png (needs matplotlib)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        self.logger.flush()
        series = curve_points(self.logger.csv_path)  # rows of too few episodes left out
        figure, axes = plt.subplots(figsize=(7, 4))
        for index, (phase, curve) in enumerate(sorted(series.items())):
            marker = "o" if phase == "eval" else None
            axes.plot(curve.steps, curve.scores, f"C{index}", label=phase, marker=marker, ms=3)
            if curve.left_out:
                steps, scores, _ = zip(*curve.left_out)
                label = f"{phase}: < {curve.least_episodes} episodes, not in the curve"
                axes.plot(steps, scores, "o", mfc="none", mec=f"C{index}", ms=5, label=label)
        axes.set_xlabel("env steps")
        axes.set_ylabel("mean episode return")
        axes.set_title(title or f"{self.record['algorithm']} on {self.record.get('env_id', '')}")
        axes.grid(alpha=0.3)
        if series:
            axes.legend()
        figure.tight_layout()
        target = self.path / CURVE_NAME
        figure.savefig(target, dpi=100)
        plt.close(figure)
        return target

    def close(self) -> None:
        self.logger.close()

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _last_wall_time(self) -> float:
        try:
            with open(self.logger.csv_path, newline="") as file:
                rows = list(csv.DictReader(file))
            return float(rows[-1].get("wall_time") or 0.0) if rows else 0.0
        except (OSError, ValueError):
            return 0.0


def _to_dict(config: Any) -> Any:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    return config
