"""Executors: where the trials of an experiment run, behind one protocol.

An executor takes a :class:`Plan` (the spec, the run directory, the CPU budget and, for a
search, the Optuna study) and runs trials until the plan has none left, calling
``on_trial(result)`` as each one ends. :class:`LocalExecutor` runs sessions as processes
of this machine (:class:`~batchenv.experiment.pool.SessionPool`);
:class:`~batchenv.experiment.ray_backend.RayExecutor` runs a search's trials as Ray Tune
trials (each running its sessions in a SessionPool on its node) over the same spec and run
directory.

A search asks Optuna for each trial's values, feeds the pruner the env steps and
``total_reward_ma`` of the trial's first session at every checkpoint, and tells Optuna
each trial's ``total_reward_ma`` (or that it failed or was pruned). The study lives in the
run directory's journal file, so an interrupted search resumes and a second process can
join: trials left running by a process that is gone are rerun from their sessions'
checkpoints, under the same trial number.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .pool import SessionPool
from .search_space import SearchSpace
from .spec import Spec
from .trial import TrialResult, TrialRun

__all__ = ["Executor", "LocalExecutor", "Plan", "owner_alive", "route_event"]

OWNER_NAME = "owner.json"
_POLL_SECONDS = 0.5


@dataclass
class Plan:
    """What an executor runs."""

    spec: Spec
    path: Path
    """The run directory."""
    cpus: int
    """Cores one session may use."""
    slots: int
    """Sessions at once on this machine."""
    random_return: Callable[[str], float]
    """The random-policy return of an env id."""
    study: Any = None
    """The Optuna study of a search (None: one trial, number 0)."""
    progress: bool = True
    on_trial_start: Callable[[int, list[int]], None] | None = None
    """Called with a trial's number and seeds when it starts."""
    space: SearchSpace = field(init=False)

    def __post_init__(self) -> None:
        self.space = self.spec.space

    @property
    def max_trials(self) -> int:
        """meta.trials, or the size of the grid when the sampler walks a smaller grid."""
        if self.spec.meta.sampler != "grid":
            return self.spec.meta.trials
        size = 1
        for values in self.space.grid().values():
            size *= len(values)
        return min(self.spec.meta.trials, size)

    @property
    def max_concurrent(self) -> int:
        budget = max(1, self.slots // self.spec.meta.sessions)
        return self.spec.meta.max_concurrent or budget


class Executor(Protocol):
    """Runs the trials of a :class:`Plan`; returns the results of the trials it ran."""

    def run(self, plan: Plan, on_trial: Callable[[TrialResult], None]) -> list[TrialResult]: ...


class LocalExecutor:
    """Sessions as processes on this machine, within the plan's CPU budget."""

    def run(self, plan: Plan, on_trial: Callable[[TrialResult], None]) -> list[TrialResult]:
        active: dict[int, tuple[TrialRun, Any]] = {}
        try:
            return self._run(plan, on_trial, active)
        finally:  # an interrupted trial's shared parameters, once its sessions are stopped
            for run, _ in active.values():
                run.close()

    def _run(
        self,
        plan: Plan,
        on_trial: Callable[[TrialResult], None],
        active: dict[int, tuple[TrialRun, Any]],
    ) -> list[TrialResult]:
        results: list[TrialResult] = []
        source = _TrialSource(plan)
        with SessionPool(plan.slots, plan.spec.meta.session_timeout) as pool:
            while True:
                while len(active) < plan.max_concurrent:
                    taken = source.next()
                    if taken is None:
                        break
                    run, optuna_trial = taken
                    for job in run.jobs():
                        pool.submit(job)
                    active[run.number] = (run, optuna_trial)
                    if plan.on_trial_start is not None:
                        plan.on_trial_start(run.number, run.seeds)
                if not active:
                    return results
                for event in pool.poll(_POLL_SECONDS) if pool.busy else []:
                    entry = active.get(event[1][0])
                    if entry is not None:
                        route_event(event, *entry, pool)
                if not pool.busy:  # every process ended: a session never reported is lost
                    for run, _ in active.values():
                        run.on_lost()
                for number in [n for n, (run, _) in active.items() if run.finished]:
                    run, optuna_trial = active.pop(number)
                    pool.cancel(number)
                    result = run.result()
                    source.finish(result, optuna_trial)
                    results.append(result)
                    on_trial(result)


def owner_alive(trial_path: Path) -> bool:
    """Whether another process that runs the trial in ``trial_path`` is still running."""
    try:
        owner = json.loads((trial_path / OWNER_NAME).read_text())
    except (OSError, ValueError):
        return False
    if owner.get("host") != socket.gethostname():
        return True  # another machine's: assume it is alive
    if owner.get("pid") == os.getpid():
        return False  # an earlier run() of this process that was interrupted
    try:
        os.kill(int(owner["pid"]), 0)
    except (ProcessLookupError, ValueError, KeyError):
        return False
    except PermissionError:
        return True
    return True


def route_event(event: tuple, run: TrialRun, trial: Any, pool: SessionPool) -> None:
    """Hand a SessionPool event of ``run`` on: a session-0 checkpoint to ``trial`` (the
    Optuna trial, or what stands in for it; None: no pruning), which may prune the run; a
    finished or failed session to ``run`` (a failure cancels the run's other sessions)."""
    kind, (_, session) = event[0], event[1]
    if kind == "report":
        if trial is None or session != 0 or run.pruned:
            return
        frame, ma = event[2], event[3]
        if math.isfinite(ma):
            trial.report(ma, frame)
            if trial.should_prune():
                run.pruned = True
                pool.cancel(run.number)
    elif kind == "done":
        run.on_done(session, event[2])
    elif kind == "failed":
        run.on_failed(session, event[2], event[3], event[4])
        pool.cancel(run.number)


# --- helpers --------------------------------------------------------------------------------


class _TrialSource:
    """The trials to run: trial 0 (train), or orphans then Optuna's asks (search)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.started = False
        self.orphans = _orphans(plan) if plan.study is not None else []

    def next(self) -> tuple[TrialRun, Any] | None:
        plan = self.plan
        if plan.study is None:
            if self.started:
                return None
            self.started = True
            if owner_alive(plan.path / "t0"):
                raise RuntimeError(
                    f"{plan.path} is being run by another process (see t0/{OWNER_NAME}); "
                    "wait for it or stop it before resuming"
                )
            return self._run(0, {}), None
        import optuna

        if self.orphans:
            frozen = self.orphans.pop(0)
            trial = optuna.trial.Trial(plan.study, frozen._trial_id)
            return self._run(frozen.number, plan.space.decode(frozen.params)), trial
        if len(plan.study.trials) >= plan.max_trials:
            return None
        trial = plan.study.ask(plan.space.distributions())
        return self._run(trial.number, plan.space.decode(trial.params)), trial

    def finish(self, result: TrialResult, trial: Any) -> None:
        if trial is None:
            return
        import optuna

        state = optuna.trial.TrialState
        value = result.metrics.get("total_reward_ma", math.nan)
        if result.status == "pruned":
            self.plan.study.tell(trial, state=state.PRUNED)
        elif result.status == "failed" or not math.isfinite(value):
            trial.set_user_attr("error", result.error or "total_reward_ma is not finite")
            self.plan.study.tell(trial, state=state.FAIL)
        else:
            self.plan.study.tell(trial, value)

    def _run(self, number: int, values: dict[str, Any]) -> TrialRun:
        plan = self.plan
        spec = plan.spec.with_values(values) if values else plan.spec
        path = plan.path / f"t{number}"
        path.mkdir(parents=True, exist_ok=True)
        owner = {"host": socket.gethostname(), "pid": os.getpid()}
        (path / OWNER_NAME).write_text(json.dumps(owner))
        run = TrialRun(
            spec,
            number,
            path,
            values,
            plan.cpus,
            plan.random_return(spec.env),
            progress=False,
        )
        return run


def _orphans(plan: Plan) -> list:
    """RUNNING trials of the study whose process is gone (to rerun under their number)."""
    import optuna

    running = plan.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    return [trial for trial in running if not owner_alive(plan.path / f"t{trial.number}")]
