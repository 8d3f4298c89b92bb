"""What Ray Tune runs for a search: the trial trainable, the searcher, the scheduler.

Imports Ray: only :class:`~batchenv.experiment.ray_backend.RayExecutor` imports this
module, and this module imports nothing from ray_backend (the layers point one way).
:func:`run_search` builds (or restores from ``RUN_DIR/tune``) a ``Tuner`` of

- :class:`SpecTrainable`: one Tune trial = one trial of the search. It runs the trial's
  sessions in a :class:`~batchenv.experiment.pool.SessionPool` on its node (the local
  backend's session processes, watched and timed out the same way), returns a Tune result
  at every checkpoint of session 0 (``frame``: env steps, ``total_reward_ma``), and a final
  result with the trial's ``total_reward_ma`` and ``trial_status`` once ``trial.json`` is
  written. Finished sessions of a restarted trial are read back, not rerun.
- :class:`SpecSearch`: Ray's ``OptunaSearch`` with the spec's sampler, which numbers each
  trial as its Optuna trial (its folder ``t{N}``) and tells Optuna what the local backend
  tells it: the value, or that the trial failed or was pruned.
- :class:`TrialEvents`: a Tune callback on the driver that records each trial's seeds in
  run.json, writes trial.json for trials the scheduler stopped (pruned) or Tune saw fail,
  and hands every finished trial to the executor.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune.search.optuna import OptunaSearch

from .executors import Plan, route_event
from .pool import SessionPool
from .spec import Spec, SpecError, spec_from_dict
from .trial import SessionFailedError, TrialResult, TrialRun, read_trial

__all__ = [
    "SpecSearch",
    "SpecTrainable",
    "TrialContext",
    "TrialEvents",
    "run_search",
    "trial_resources",
]

#: The key of the trial number in a Tune trial's config.
TRIAL_KEY = "batchenv_trial"
METRIC = "total_reward_ma"
FRAME = "frame"
STATUS = "trial_status"
_POLL_SECONDS = 0.5
#: The driver state of each search this process runs, by run directory (see TrialEvents).
_DRIVERS: dict[str, _Driver] = {}


@dataclass
class TrialContext:
    """What every trial of a search needs, sent once to the cluster (picklable)."""

    spec_name: str
    spec: dict[str, Any]
    path: str
    """The run directory (absolute; every node must see it)."""
    cpus: int
    """Cores one session may use."""
    slots: int
    """Sessions of a trial at once."""
    random_returns: dict[str, float]
    """The random-policy return of every env the search may pick."""
    sys_path: list[str] = field(default_factory=list)
    """The driver's sys.path (a user's trainer module must import on the trial's node)."""

    def base_spec(self) -> Spec:
        return spec_from_dict(self.spec_name, self.spec)

    def trial_run(self, number: int, config: dict[str, Any]) -> TrialRun:
        """The TrialRun of Tune trial config ``config`` (trial ``number``)."""
        spec = self.base_spec()
        names = set(spec.space.names)
        values = spec.space.decode({k: v for k, v in config.items() if k in names})
        trial_spec = spec.with_values(values) if values else spec
        return TrialRun(
            trial_spec,
            number,
            Path(self.path) / f"t{number}",
            values,
            self.cpus,
            self.random_returns[trial_spec.env],
        )


class SpecTrainable(tune.Trainable):
    """One trial of a search: its sessions in a SessionPool (see the module docstring)."""

    def setup(self, config: dict[str, Any], context: TrialContext) -> None:
        for entry in reversed(context.sys_path):
            if entry not in sys.path and Path(entry or ".").is_dir():
                sys.path.insert(0, entry)
        if not (Path(context.path) / "spec.yaml").exists():
            raise RuntimeError(
                f"the run directory {context.path} is not on {socket.gethostname()}: put "
                "--runs-dir on a filesystem every node of the cluster mounts (NFS)"
            )
        self.trial = context.trial_run(int(config[TRIAL_KEY]), config)
        self.latest = _LatestReport()
        self.pool = SessionPool(context.slots, self.trial.spec.meta.session_timeout)
        for job in self.trial.jobs():
            self.pool.submit(job)

    def step(self) -> dict[str, Any]:
        trial = self.trial
        while not trial.finished and self.pool.busy:
            for event in self.pool.poll(_POLL_SECONDS):
                route_event(event, trial, self.latest, self.pool)
            report = self.latest.take()
            if report is not None and not trial.finished:
                return {FRAME: report[0], METRIC: report[1]}
        self.pool.close()
        result = trial.result()
        frames = (trial.results.get(0) or {}).get("frames") or [0]
        return {
            FRAME: int(frames[-1]),
            METRIC: result.metrics.get(METRIC, math.nan),
            "strength": result.metrics.get("strength", math.nan),
            STATUS: result.status,
            "done": True,
        }

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        """Nothing: the session folders are the trial's checkpoint (sessions resume from
        theirs, finished sessions are read back)."""
        return {}

    def load_checkpoint(self, checkpoint: dict | str) -> None:
        pass

    def cleanup(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()
        trial = getattr(self, "trial", None)
        if trial is not None:
            trial.close()  # its shared parameters (meta.distributed: shared)


class SpecSearch(OptunaSearch):
    """Ray's OptunaSearch that numbers trials as Optuna does and tells Optuna each trial's
    outcome as the local backend does (value; failed; pruned by the scheduler)."""

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if isinstance(config, dict):
            config[TRIAL_KEY] = self._ot_trials[trial_id].number
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._completed_trials or STATUS in result:
            return
        value = result.get(METRIC)
        if isinstance(value, (int, float)) and math.isfinite(value):
            self._ot_trials[trial_id].report(value, int(result[FRAME]))

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        import optuna

        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        state = optuna.trial.TrialState
        status = (result or {}).get(STATUS)
        value = (result or {}).get(METRIC)
        ot_trial = self._ot_trials[trial_id]
        if status == "done" and isinstance(value, (int, float)) and math.isfinite(value):
            self._ot_study.tell(ot_trial, value)
        elif status is None and not error:
            self._ot_study.tell(ot_trial, state=state.PRUNED)
        else:
            ot_trial.set_user_attr("error", "the trial failed (see its trial.json)")
            self._ot_study.tell(ot_trial, state=state.FAIL)
        self._completed_trials.add(trial_id)


class TrialEvents(tune.Callback):
    """Driver-side trial bookkeeping (see the module docstring). Pickled with the Tuner as
    its run directory only; a restored Tuner finds this process's driver state by it."""

    def __init__(self, key: str):
        self.key = key

    def __getstate__(self) -> dict:
        return {"key": self.key}

    def __setstate__(self, state: dict) -> None:
        self.key = state["key"]

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        driver = _DRIVERS.get(self.key)
        if driver is not None and driver.plan.on_trial_start is not None:
            number = int(trial.config[TRIAL_KEY])
            spec = driver.context.base_spec()
            seeds = [spec.session_seed(number, s) for s in range(spec.meta.sessions)]
            driver.plan.on_trial_start(number, seeds)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        driver = _DRIVERS.get(self.key)
        if driver is None:
            return
        run = driver.context.trial_run(int(trial.config[TRIAL_KEY]), trial.config)
        if (trial.last_result or {}).get(STATUS) is None:  # stopped by the scheduler
            run.pruned = True
            run.result()
        driver.finished(read_trial(run.path))

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        driver = _DRIVERS.get(self.key)
        if driver is None:
            return
        run = driver.context.trial_run(int(trial.config[TRIAL_KEY]), trial.config)
        if _status(run.path) != "failed":
            run.error = SessionFailedError(f"trial {run.number} failed on Ray: {_error(trial)}")
            run.result()
        driver.finished(read_trial(run.path))


def run_search(plan: Plan, tune_dir: Path, finished: Callable[[TrialResult], None]) -> None:
    """Run the search of ``plan`` on the connected Ray cluster, or resume it from
    ``tune_dir``; ``finished(result)`` is called on the driver as each trial ends."""
    import optuna

    tune_dir = tune_dir.resolve()  # Tune takes a relative path for a URI with no scheme

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = plan.spec
    envs = [spec.env] + [
        value for leaf in spec.space.leaves if leaf.path == "env" for value in leaf.args
    ]
    context = TrialContext(
        spec.name,
        spec.to_dict(),
        str(plan.path.resolve()),
        plan.cpus,
        1,
        {env: plan.random_return(env) for env in dict.fromkeys(envs)},
        list(sys.path),
    )
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    node_cpus = max((node.get("CPU", 0.0) for node in nodes), default=0.0)
    gpus = spec.meta.gpus_per_session
    context.slots, resources = trial_resources(plan, node_cpus, gpus)
    if gpus and not any(node.get("GPU", 0.0) >= resources["gpu"] for node in nodes):
        raise SpecError(
            f"meta.gpus_per_session {gpus:g}: a trial asks for {resources['gpu']:g} GPUs and "
            "no node of the Ray cluster has them; lower it or add GPU nodes"
        )
    trainable = tune.with_resources(tune.with_parameters(SpecTrainable, context=context), resources)
    key = context.path
    _DRIVERS[key] = _Driver(plan, context, finished)
    try:
        if tune.Tuner.can_restore(str(tune_dir)):
            tuner = tune.Tuner.restore(
                str(tune_dir),
                trainable,
                resume_unfinished=True,
                resume_errored=False,
                restart_errored=False,
            )
        else:
            total_cpus = sum(node.get("CPU", 0.0) for node in nodes)
            at_once = spec.meta.max_concurrent or max(1, int(total_cpus // resources["cpu"]))
            tuner = tune.Tuner(
                trainable,
                tune_config=tune.TuneConfig(
                    search_alg=SpecSearch(
                        space=plan.space.distributions(),
                        metric=METRIC,
                        mode="max",
                        sampler=_sampler(spec),
                    ),
                    scheduler=_scheduler(spec),
                    num_samples=plan.max_trials,
                    max_concurrent_trials=at_once,
                    # Tune keeps a reusable actor (and its sessions) after the scheduler
                    # stops its trial; a fresh actor costs ~2 s and stops them at once.
                    reuse_actors=False,
                    trial_name_creator=_trial_name,
                    trial_dirname_creator=_trial_name,
                ),
                run_config=tune.RunConfig(
                    name=tune_dir.name,
                    storage_path=str(tune_dir.parent.resolve()),
                    verbose=0,
                    callbacks=[TrialEvents(key)],
                    failure_config=tune.FailureConfig(max_failures=0),
                    checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
                ),
            )
        with _quiet_tune():
            tuner.fit()
    finally:
        _DRIVERS.pop(key, None)


def trial_resources(plan: Plan, node_cpus: float, gpus_per_session: float) -> tuple[int, dict]:
    """``(sessions at once, Tune resources)`` of one trial: ``sessions x cpus`` CPUs, capped
    at the largest node's CPUs (sessions then take turns, as on one machine), and as many
    ``gpus_per_session`` shares of a GPU as sessions run at once.

        >>> trial_resources(plan, node_cpus=4, gpus_per_session=0.25)  # 4 sessions of 2 CPUs
        (2, {'cpu': 4, 'gpu': 0.5})
    """
    sessions = plan.spec.meta.sessions
    fit = max(1, int(node_cpus // plan.cpus)) if node_cpus >= plan.cpus else 1
    slots = min(sessions, fit)
    resources: dict[str, float] = {"cpu": slots * plan.cpus}
    if gpus_per_session:
        resources["gpu"] = slots * gpus_per_session
    return slots, resources


# --- helpers --------------------------------------------------------------------------------


@dataclass
class _Driver:
    plan: Plan
    context: TrialContext
    finished: Callable[[TrialResult], None]


class _LatestReport:
    """Stands in for the Optuna trial of executors.route_event: keeps session 0's latest
    checkpoint for Tune, whose scheduler does the pruning."""

    def __init__(self) -> None:
        self.latest: tuple[int, float] | None = None

    def report(self, value: float, step: int) -> None:
        self.latest = (int(step), float(value))

    def should_prune(self) -> bool:
        return False

    def take(self) -> tuple[int, float] | None:
        latest, self.latest = self.latest, None
        return latest


@contextlib.contextmanager
def _quiet_tune():
    """Tune's console output off (batchenv prints its own progress and trial lines):
    verbose=0 silences Tune's old reporter only, so select it while Tune runs."""
    saved = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = saved


def _sampler(spec: Spec):
    from .samplers import make_sampler

    return make_sampler(spec)


def _scheduler(spec: Spec):
    """meta.pruner as a Tune scheduler on env steps (None: first in, first out)."""
    from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

    pruner = spec.meta.pruner
    if pruner == "none":
        return None
    max_t, first = _budget(spec)
    if pruner == "median":
        return MedianStoppingRule(
            time_attr=FRAME,
            metric=METRIC,
            mode="max",
            grace_period=first,
            min_samples_required=2,
        )
    # ASHA stops every trial at max_t, before its other sessions finish: put it past the
    # last checkpoint (an extra rung there is never reached).
    return ASHAScheduler(
        time_attr=FRAME,
        metric=METRIC,
        mode="max",
        max_t=4 * max_t,
        grace_period=min(first, max_t),
        reduction_factor=4,
        brackets=1 if pruner == "successive_halving" else 3,
    )


def _budget(spec: Spec) -> tuple[int, int]:
    """(env steps of a session, env steps of its first checkpoint) for the scheduler."""
    trainer = spec.trainer()
    config = spec.make_config(spec.session_seed(0, 0))
    fields = getattr(trainer, "meta_fields", {})
    steps = spec.meta.steps or getattr(config, fields.get("steps", ""), None)
    every = spec.meta.eval_every or getattr(config, fields.get("eval_every", ""), None)
    steps = int(steps) if isinstance(steps, (int, float)) and steps > 0 else 10**9
    every = int(every) if isinstance(every, (int, float)) and every > 0 else max(1, steps // 64)
    return steps, every


def _trial_name(trial) -> str:
    return f"t{trial.config[TRIAL_KEY]}"


def _status(path: Path) -> str | None:
    try:
        return read_trial(path).status
    except (OSError, ValueError, KeyError):
        return None


def _error(trial) -> str:
    """The last line of a Tune trial's error (the exception and its message)."""
    text = ""
    try:
        error_file = trial.error_file if hasattr(trial, "error_file") else None
        if error_file and Path(error_file).exists():
            text = Path(error_file).read_text()
    except OSError:
        pass
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "the trial's Ray actor raised or died"
