"""Trial: ``meta.sessions`` sessions of one spec that differ only in their seed.

The trial folder ``t{T}/`` holds a folder per session, ``trial.json`` (the searched
values, every seed, the status, the trial's metrics: means of the session metrics plus
consistency, or the error of the session that failed, and a ``note`` saying which metrics
are NaN and why) and ``trial.png`` (mean return ± 1 std over sessions). A
:class:`TrialRun` is fed the events of its sessions by the executor; finished sessions of
an interrupted trial are not rerun: their metrics are recomputed from their
checkpoints.csv. :func:`analyze_trial` recomputes a finished trial folder the same way
(``batchenv analyze``).

When the trainer can train sessions together (``can_train_together``, e.g. in-graph PPO:
configs equal but for consecutive seeds), the sessions still to run become one job, one
process and one K-seed program, which writes every session's folder as if it had run
alone (see :mod:`batchenv.experiment.trainers`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchenv.atomic_file import write_atomic

from .metrics import explain_nan, trial_metrics
from .session import SESSION_NAME, SessionJob, analyze_session, session_title
from .shared import SharedParameters
from .spec import Spec

__all__ = [
    "TRIAL_NAME",
    "SessionFailedError",
    "TrialResult",
    "TrialRun",
    "analyze_trial",
    "read_trial",
]

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
    note: str | None = None
    """Which metrics came out NaN and why, in one line (None: none did)."""


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
        self.shared: SharedParameters | None = None

    def jobs(self) -> list[SessionJob]:
        """The sessions still to run (finished ones are read back from their folders).

        With meta.distributed: shared, their networks live in a shared-memory folder made
        here and removed by :meth:`close` (which :meth:`result` calls). Sessions the trainer
        can train together come back as one job with a ``group``.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        if self.spec.meta.distributed == "shared" and self.shared is None:
            self.shared = SharedParameters.create(f"t{self.number}")
        jobs = []
        for session in range(self.spec.meta.sessions):
            folder = self.path / f"s{session}"
            seed = self.spec.session_seed(self.number, session)
            if (folder / SESSION_NAME).exists():  # finished: recomputed, not rerun
                title = session_title(self.spec.name, self.number, session, seed)
                self.results[session] = analyze_session(folder, seed, self.random_return, title)
                continue
            jobs.append(
                SessionJob(
                    spec_name=self.spec.name,
                    spec=self.spec.to_dict(),
                    trial=self.number,
                    session=session,
                    seed=seed,
                    path=str(folder),
                    cpus=self.cpus,
                    random_return=self.random_return,
                    progress=self.progress,
                    tags=dict(self.values),
                    shared=None if self.shared is None else self.shared.path,
                )
            )
        self._write("running")
        return self._together(jobs)

    def _together(self, jobs: list[SessionJob]) -> list[SessionJob]:
        """``jobs`` as one job when the trainer trains their configs as one program."""
        if len(jobs) < 2 or self.shared is not None or self.spec.meta.track != "tensorboard":
            return jobs
        trainer = self.spec.trainer()
        can = getattr(trainer, "can_train_together", None)
        if can is None or not can([self.spec.make_config(job.seed) for job in jobs]):
            return jobs
        return [dataclasses.replace(jobs[0], group=tuple(jobs[1:]))]

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

    def on_lost(self) -> None:
        """Fail the trial when its sessions' processes have all ended and one of them never
        reported that session done (rather than waiting for it forever)."""
        if self.finished:
            return
        session = min(set(range(self.spec.meta.sessions)) - set(self.results))
        self.on_failed(
            session, "SessionLostError", "its process ended without reporting it done", ""
        )

    def close(self) -> None:
        """Remove the shared-parameter folder, if any (its sessions must have ended)."""
        if self.shared is not None:
            self.shared.remove()
            self.shared = None

    def result(self) -> TrialResult:
        """Write trial.json (and trial.png), remove the shared parameters and return the
        trial's result."""
        self.close()
        note = None
        if self.error is not None:
            status, metrics, error = "failed", {}, str(self.error)
        elif self.pruned:
            status, metrics, error = "pruned", {}, None
        else:
            results = [result for _, result in sorted(self.results.items())]
            metrics, note = _metrics(results, self.random_return)
            status, error = "done", None
            _plot(self.path, self.spec, self.number, results)
        _write(
            self.path,
            self.number,
            status,
            self.values,
            self.seeds,
            self.random_return,
            metrics,
            error,
            note,
        )
        return TrialResult(
            self.number, dict(self.values), status, metrics, error, self.path, self.error, note
        )

    def _write(self, status: str) -> None:
        _write(self.path, self.number, status, self.values, self.seeds, self.random_return)


def analyze_trial(path: str | Path, spec: Spec, random_return: float) -> TrialResult:
    """Recompute a trial folder from its sessions' checkpoints.csv: the session.json and
    session.png of every finished session, and for a finished trial trial.json's metrics
    and trial.png (a failed, pruned or running trial keeps its status and error).
    ``spec`` is the trial's spec (its searched values applied); the values, seeds and
    status come from trial.json.
    """
    folder = Path(path)
    record = json.loads((folder / TRIAL_NAME).read_text())
    number = record["trial"]
    seeds = record.get("seeds") or []
    results = []
    for session, seed in enumerate(seeds):
        session_folder = folder / f"s{session}"
        if not (session_folder / SESSION_NAME).exists():
            continue  # not finished (or still running elsewhere): left as it is
        title = session_title(spec.name, number, session, seed)
        results.append(analyze_session(session_folder, seed, random_return, title))
    status, error = record["status"], record.get("error")
    metrics, note = {}, None
    if status == "done" and results:
        metrics, note = _metrics(results, random_return)
        _plot(folder, spec, number, results)
    values = record.get("values") or {}
    _write(folder, number, status, values, seeds, random_return, metrics, error, note)
    return TrialResult(number, values, status, metrics, error, folder, None, note)


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
        note=record.get("note"),
    )


def _metrics(results: list[dict], random_return: float) -> tuple[dict, str | None]:
    """A trial's metrics from its sessions' results, and the line on its NaN metrics."""
    sessions = [
        {
            "returns": result["returns"],
            "frames": result["frames"],
            "opt_steps": _known(result.get("opt_steps")),
            "random_return": random_return,
        }
        for result in results
    ]
    notes: list = []
    metrics = trial_metrics(sessions, notes=notes)
    metrics["wall_time"] = max(
        (result["metrics"].get("wall_time", 0.0) for result in results), default=0.0
    )
    return metrics, explain_nan(notes, len(sessions), random_return)


def _write(
    path: Path,
    number: int,
    status: str,
    values: dict,
    seeds: list[int],
    random_return: float,
    metrics: dict | None = None,
    error: str | None = None,
    note: str | None = None,
) -> None:
    record = {
        "trial": number,
        "status": status,
        "values": values,
        "seeds": seeds,
        "random_return": random_return,
        "metrics": {key: _json_number(value) for key, value in (metrics or {}).items()},
        "error": error,
        "note": note,
    }
    write_atomic(path / TRIAL_NAME, json.dumps(record, indent=1))


def _plot(path: Path, spec: Spec, number: int, results: list[dict]) -> None:
    try:
        from .plots import plot_trial

        plot_trial(
            [(result["frames"], result["returns"]) for result in results],
            path / "trial.png",
            f"{spec.name} trial {number}: {spec.algorithm} on {spec.env}",
        )
    except ImportError:
        pass  # matplotlib is optional


def _known(steps: list | None) -> list | None:
    if not steps or any(step is None or math.isnan(step) for step in steps):
        return None
    return steps


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
