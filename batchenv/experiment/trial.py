"""Trial: ``meta.sessions`` sessions of one spec that differ only in their seed.

The trial folder ``t{T}/`` holds a folder per session, ``trial.json`` (the searched
values, every seed, the status, the trial's metrics: means of the session metrics plus
consistency, or the error of the session that failed) and ``trial.png`` (mean return
± 1 std over sessions). A :class:`TrialRun` is fed the events of its sessions by the
executor; finished sessions of an interrupted trial are read back from their folders, not
rerun.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .metrics import trial_metrics
from .session import SESSION_NAME, SessionJob
from .spec import Spec

__all__ = ["TRIAL_NAME", "SessionFailedError", "TrialResult", "TrialRun", "read_trial"]

TRIAL_NAME = "trial.json"


class SessionFailedError(RuntimeError):
    """A session of a trial raised, died or timed out; the remote traceback is chained."""


class _RemoteTraceback(Exception):
    def __init__(self, text: str):
        super().__init__(text)

    def __str__(self) -> str:
        return f"\n\nthe session's traceback:\n{self.args[0]}"


@dataclass
class TrialResult:
    """What a trial did: its number, searched values, status and metrics."""

    number: int
    values: dict[str, Any]
    status: str
    """'done', 'failed' or 'pruned'."""
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    path: Path | None = None
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    """The :class:`SessionFailedError` of a failed trial run by this process."""


class TrialRun:
    """The sessions of one trial and what they reported (see the module docstring).

    Args:
        spec: the trial's spec (its searched values applied).
        number: the trial number (its folder is ``t{number}``).
        path: the trial folder.
        values: the searched values ``{dotted path: value}``.
        cpus: cores each session may use.
        random_return: the env's random-policy return (for strength).
        progress: show each session's progress bar (dev mode).
    """

    def __init__(
        self,
        spec: Spec,
        number: int,
        path: Path,
        values: dict[str, Any],
        cpus: int,
        random_return: float,
        progress: bool = False,
    ):
        self.spec = spec
        self.number = number
        self.path = Path(path)
        self.values = values
        self.cpus = cpus
        self.random_return = random_return
        self.progress = progress
        self.results: dict[int, dict] = {}
        self.error: SessionFailedError | None = None
        self.pruned = False
        self.ma_history: list[tuple[int, float]] = []

    def jobs(self) -> list[SessionJob]:
        """The sessions still to run (finished ones are read back from their folders)."""
        self.path.mkdir(parents=True, exist_ok=True)
        jobs = []
        for session in range(self.spec.meta.sessions):
            folder = self.path / f"s{session}"
            done = folder / SESSION_NAME
            if done.exists():
                self.results[session] = json.loads(done.read_text())
                continue
            jobs.append(
                SessionJob(
                    spec_name=self.spec.name,
                    spec=self.spec.to_dict(),
                    trial=self.number,
                    session=session,
                    seed=self.spec.session_seed(self.number, session),
                    path=str(folder),
                    cpus=self.cpus,
                    random_return=self.random_return,
                    progress=self.progress,
                    tags=dict(self.values),
                )
            )
        self._write("running")
        return jobs

    @property
    def seeds(self) -> list[int]:
        return [self.spec.session_seed(self.number, s) for s in range(self.spec.meta.sessions)]

    @property
    def finished(self) -> bool:
        return self.error is not None or self.pruned or len(self.results) == self.spec.meta.sessions

    def on_done(self, session: int, result: dict) -> None:
        self.results[session] = result

    def on_failed(self, session: int, kind: str, message: str, remote: str) -> None:
        if self.error is not None:
            return
        seed = self.spec.session_seed(self.number, session)
        error = SessionFailedError(
            f"trial {self.number} session {session} (seed {seed}) failed: {kind}: {message}"
        )
        if remote:
            error.__cause__ = _RemoteTraceback(remote)
        self.error = error

    def result(self) -> TrialResult:
        """Write trial.json (and trial.png) and return the trial's result."""
        if self.error is not None:
            status, metrics, error = "failed", {}, str(self.error)
        elif self.pruned:
            status, metrics, error = "pruned", {}, None
        else:
            sessions = [
                {
                    "returns": result["returns"],
                    "frames": result["frames"],
                    "opt_steps": _known(result.get("opt_steps")),
                    "random_return": self.random_return,
                }
                for _, result in sorted(self.results.items())
            ]
            metrics = trial_metrics(sessions)
            metrics["wall_time"] = max(
                (result["metrics"].get("wall_time", 0.0) for result in self.results.values()),
                default=0.0,
            )
            status, error = "done", None
            self._plot()
        self._write(status, metrics, error)
        return TrialResult(
            self.number, dict(self.values), status, metrics, error, self.path, self.error
        )

    def _write(self, status: str, metrics: dict | None = None, error: str | None = None) -> None:
        record = {
            "trial": self.number,
            "status": status,
            "values": self.values,
            "seeds": self.seeds,
            "random_return": self.random_return,
            "metrics": {key: _json_number(value) for key, value in (metrics or {}).items()},
            "error": error,
        }
        (self.path / TRIAL_NAME).write_text(json.dumps(record, indent=1))

    def _plot(self) -> None:
        try:
            from .plots import plot_trial
        except ImportError:
            return
        series = [(r["frames"], r["returns"]) for _, r in sorted(self.results.items())]
        try:
            plot_trial(
                series,
                self.path / "trial.png",
                f"{self.spec.name} trial {self.number}: {self.spec.algorithm} on {self.spec.env}",
            )
        except ImportError:
            pass


def read_trial(path: str | Path) -> TrialResult:
    """The :class:`TrialResult` recorded in a trial folder's trial.json (null metrics: NaN)."""
    folder = Path(path)
    record = json.loads((folder / TRIAL_NAME).read_text())
    metrics = {
        key: math.nan if value is None else value
        for key, value in (record.get("metrics") or {}).items()
    }
    return TrialResult(
        record["trial"],
        record.get("values") or {},
        record["status"],
        metrics,
        record.get("error"),
        folder,
    )


def _known(steps: list | None) -> list | None:
    if not steps or any(step is None or math.isnan(step) for step in steps):
        return None
    return steps


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
