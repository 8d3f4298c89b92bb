"""Session: one seed of a trial, trained by the algorithm's trainer into its own folder.

The session folder ``t{T}/s{S}/`` holds what ``batchenv train`` writes (config.json,
metrics.csv, TensorBoard events, curve.png, checkpoint.pt) plus:

    checkpoints.csv   one row per checkpoint (SLM Lab's columns): frame, opt_step,
                      total_reward, total_reward_ma, wall_t
    session.json      seed, status and the session's metrics, once it finished
    session.png       return vs env steps, raw and 100-checkpoint moving average

``run_session(job)`` runs a session in this process; the trial runs each in a process of
its own (:mod:`batchenv.experiment.pool`), which calls :func:`session_main`. A job with a
``group`` trains several sessions of its trial as one program (a trainer's
``train_together``, e.g. in-graph PPO's K seeds): :func:`run_sessions` writes each
session's folder as if it had run alone. Everything in session.json and session.png is
computed from checkpoints.csv (:func:`analyze_session`), so ``batchenv analyze`` and
``--resume`` recompute them from the per-checkpoint data.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchenv.atomic_file import write_atomic

from .metrics import MA_WINDOW, session_metrics
from .spec import spec_from_dict

__all__ = [
    "CHECKPOINTS_NAME",
    "SESSION_NAME",
    "SessionJob",
    "analyze_session",
    "read_checkpoints",
    "run_session",
    "run_sessions",
    "session_main",
    "session_title",
]

CHECKPOINTS_NAME = "checkpoints.csv"
SESSION_NAME = "session.json"
_COLUMNS = ("frame", "opt_step", "total_reward", "total_reward_ma", "wall_t")


@dataclass(frozen=True)
class SessionJob:
    """Everything a session process needs (picklable)."""

    spec_name: str
    spec: dict[str, Any]
    """The trial's spec as a dict (its searched values applied)."""
    trial: int
    session: int
    seed: int
    path: str
    """The session folder."""
    cpus: int
    random_return: float
    progress: bool = False
    tags: dict[str, Any] = field(default_factory=dict)
    """The trial's searched values (for trackers)."""
    shared: str | None = None
    """meta.distributed: shared: the trial's shared-parameter folder
    (:class:`~batchenv.experiment.shared.SharedParameters`); None: networks of its own."""
    group: tuple[SessionJob, ...] = ()
    """More sessions of the same trial that this process trains together with this one, as
    one program (the trainer's ``train_together``); each keeps its folder, seed and events."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.trial, self.session)

    @property
    def members(self) -> tuple[SessionJob, ...]:
        """The sessions this job trains: itself, then its group."""
        return (self, *self.group)

    @property
    def label(self) -> str:
        return f"t{self.trial}_s{self.session}"

    @property
    def title(self) -> str:
        return session_title(self.spec_name, self.trial, self.session, self.seed)


def session_title(name: str, trial: int, session: int, seed: int) -> str:
    """The title of a session's plot."""
    return f"{name} trial {trial} session {session} (seed {seed})"


def run_session(job: SessionJob, on_report: Callable[[int, float], None] | None = None) -> dict:
    """Train the session of ``job`` in this process and return its result.

    Continues from the session folder's checkpoint when one exists. ``on_report(frame,
    total_reward_ma)`` is called at every checkpoint (the pruner's feed); it may raise to
    stop the session. The result: ``frames``, ``returns``, ``opt_steps``, ``metrics``.
    """
    spec = spec_from_dict(job.spec_name, job.spec)
    trainer = spec.trainer()
    config = spec.make_config(job.seed)
    path = Path(job.path)
    resume = path.exists() and any(path.iterdir())
    tracker = _tracker(spec.meta.track, job, config)
    report = _reporter(path, time.perf_counter(), tracker, on_report)
    hogwild = {}
    if job.shared is not None:  # passed only then: trainers without the argument work unshared
        from .shared import SharedParameters

        hogwild["shared"] = SharedParameters(job.shared)
    try:
        trainer.train(
            config,
            path,
            resume=resume,
            progress=job.progress,
            cpus=job.cpus,
            report=report,
            **hogwild,
        )
    finally:
        if tracker is not None:
            tracker.finish()
    return analyze_session(path, job.seed, job.random_return, job.title)


def run_sessions(
    job: SessionJob, on_report: Callable[[int, int, float], None] | None = None
) -> dict[int, dict]:
    """Train ``job.members`` in this process as one program (the trainer's
    ``train_together``) and return each session's result by its number.

    Every session gets its own folder, checkpoints.csv and metrics, as :func:`run_session`
    would write them; ``on_report(session, frame, total_reward_ma)`` is called at each of
    its checkpoints. The trial makes such jobs only for trainers that declare the sessions
    trainable together (see :mod:`batchenv.experiment.trainers`); trackers other than
    TensorBoard are not offered here (one W&B run per process).
    """
    spec = spec_from_dict(job.spec_name, job.spec)
    trainer = spec.trainer()
    members = job.members
    configs = [spec.make_config(member.seed) for member in members]
    paths = [Path(member.path) for member in members]
    resume = any(path.exists() and any(path.iterdir()) for path in paths)
    started = time.perf_counter()
    reports = [
        _reporter(path, started, None, _session_feed(on_report, member.session))
        for member, path in zip(members, paths)
    ]
    trainer.train_together(
        configs, paths, resume=resume, progress=job.progress, cpus=job.cpus, reports=reports
    )
    return {
        member.session: analyze_session(path, member.seed, member.random_return, member.title)
        for member, path in zip(members, paths)
    }


def _reporter(
    path: Path,
    started: float,
    tracker: Any,
    on_report: Callable[[int, float], None] | None,
) -> Callable[..., None]:
    """The ``report(frame, total_reward, opt_step=None)`` a trainer calls for one session:
    a checkpoints.csv row, the tracker's point, then ``on_report(frame, ma)``."""
    checkpoints = _Checkpoints(path)

    def report(frame: int, total_reward: float, opt_step: int | None = None) -> None:
        ma = checkpoints.add(frame, total_reward, opt_step, time.perf_counter() - started)
        if tracker is not None:
            tracker.log({"total_reward": total_reward, "total_reward_ma": ma}, step=int(frame))
        if on_report is not None:
            on_report(int(frame), ma)

    return report


def _session_feed(
    on_report: Callable[[int, int, float], None] | None, session: int
) -> Callable[[int, float], None] | None:
    """``on_report`` of a group, bound to one of its sessions."""
    if on_report is None:
        return None
    return lambda frame, ma: on_report(session, frame, ma)


def analyze_session(path: str | os.PathLike, seed: int, random_return: float, title: str) -> dict:
    """Compute a session's metrics from its checkpoints.csv; write session.json and
    session.png; return the result (``seed``, ``frames``, ``returns``, ``opt_steps``,
    ``metrics``, ``notes``: why metrics are NaN, one line each).

    The metrics are :func:`~batchenv.experiment.metrics.session_metrics` of the rows, plus
    ``wall_time`` (the last row's ``wall_t``); ``training_efficiency`` needs every row's
    ``opt_step``.
    """
    path = Path(path)
    rows = read_checkpoints(path)
    frames = [row["frame"] for row in rows]
    returns = [row["total_reward"] for row in rows]
    opt_steps = [row["opt_step"] for row in rows]
    known = all(not math.isnan(step) for step in opt_steps) and opt_steps
    notes: list = []
    metrics = session_metrics(
        returns, frames, opt_steps if known else None, random_return=random_return, notes=notes
    )
    metrics["wall_time"] = round(rows[-1]["wall_t"], 3) if rows else math.nan
    result = {
        "seed": seed,
        "frames": frames,
        "returns": returns,
        "opt_steps": opt_steps,
        "metrics": metrics,
        "notes": [str(note) for note in notes],
    }
    write_atomic(path / SESSION_NAME, json.dumps({"status": "done", **result}, indent=1))
    _plot(path, title, frames, returns)
    return result


def session_main() -> None:
    """Entry point of a session's own process (see :mod:`batchenv.experiment.pool`).

    Reads ``(sys.path, job)`` pickled on stdin, runs the session and sends what happens on
    the pipe whose descriptor is ``sys.argv[1]``: ``("report", key, frame,
    total_reward_ma)`` at every checkpoint, then ``("done", key, result)`` or ``("failed",
    key, type name, message, traceback text)``. A job with a group sends each member's
    reports and ``done`` under the member's key, and a failure under the job's key.
    """
    from multiprocessing.connection import Connection

    connection = Connection(int(sys.argv[1]), readable=False)
    path, job = pickle.loads(sys.stdin.buffer.read())
    sys.path[:] = path
    _exit_with_parent(os.getppid())
    # Ctrl-C is the driver's to handle: it stops every session and keeps the checkpoints.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if job.group:
            results = run_sessions(
                job,
                lambda session, frame, ma: connection.send(
                    ("report", (job.trial, session), frame, ma)
                ),
            )
        else:
            result = run_session(
                job, lambda frame, ma: connection.send(("report", job.key, frame, ma))
            )
            results = {job.session: result}
    except BaseException as error:  # sent to the driver, which records the trial as failed
        connection.send(
            ("failed", job.key, type(error).__name__, str(error), traceback.format_exc())
        )
        connection.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    for session, result in results.items():
        connection.send(("done", (job.trial, session), result))
    connection.close()


def read_checkpoints(path: str | os.PathLike) -> list[dict[str, float]]:
    """The rows of a session's checkpoints.csv, one per frame (a resumed session that
    repeated a checkpoint keeps the latest row)."""
    target = Path(path) / CHECKPOINTS_NAME
    if not target.exists():
        return []
    by_frame: dict[int, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(_whole_rows(target).decode(), newline="")):
        values = {name: float(row[name]) if row[name] else math.nan for name in _COLUMNS}
        by_frame[int(values["frame"])] = values
    return [by_frame[frame] for frame in sorted(by_frame)]


# --- helpers --------------------------------------------------------------------------------


class _Checkpoints:
    """Appends checkpoint rows to checkpoints.csv and keeps the moving average (SLM Lab's
    ``total_reward_ma``: the mean of the last 100 rows' finite returns)."""

    def __init__(self, path: Path):
        self.path = path
        target = path / CHECKPOINTS_NAME
        if target.exists():  # a resumed session: drop a row its killed process left half
            whole = _whole_rows(target)
            if len(whole) < target.stat().st_size:
                with open(target, "r+b") as file:
                    file.truncate(len(whole))
        self.returns = {int(row["frame"]): row["total_reward"] for row in read_checkpoints(path)}

    def add(self, frame: int, total_reward: float, opt_step: int | None, wall: float) -> float:
        earlier = [value for key, value in sorted(self.returns.items()) if key < frame]
        self.returns = {key: value for key, value in self.returns.items() if key < frame}
        self.returns[int(frame)] = float(total_reward)
        recent = earlier[-(MA_WINDOW - 1) :] + [float(total_reward)]
        finite = [value for value in recent if not math.isnan(value)]
        ma = sum(finite) / len(finite) if finite else math.nan
        target = self.path / CHECKPOINTS_NAME
        fresh = not target.exists() or target.stat().st_size == 0
        self.path.mkdir(parents=True, exist_ok=True)
        with open(target, "a", newline="") as file:
            writer = csv.writer(file)
            if fresh:
                writer.writerow(_COLUMNS)
            writer.writerow(
                [
                    int(frame),
                    "" if opt_step is None else int(opt_step),
                    repr(float(total_reward)),
                    repr(ma),
                    round(wall, 3),
                ]
            )
        return ma


def _whole_rows(target: Path) -> bytes:
    """checkpoints.csv up to its last line break: a session killed while appending a row
    leaves part of it, which is not a checkpoint."""
    data = target.read_bytes()
    return data[: data.rfind(b"\n") + 1]


def _plot(path: Path, title: str, frames: list, returns: list) -> None:
    try:
        from .plots import plot_session

        plot_session(frames, returns, path / "session.png", title)
    except ImportError:
        pass  # matplotlib is optional: metrics and CSVs are written without it


def _tracker(track: str, job: SessionJob, config: Any):
    if track != "wandb":
        return None
    import dataclasses

    import wandb

    return wandb.init(
        project=job.spec_name,
        group=f"t{job.trial}",
        name=job.label,
        dir=job.path,
        config={"seed": job.seed, **job.tags, **dataclasses.asdict(config)},
        reinit="finish_previous",
    )


def _exit_with_parent(parent: int) -> None:
    """End this session process when the driver that started it is gone."""

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
