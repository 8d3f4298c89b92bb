"""run(): a spec as one session (dev), one trial (train) or a search (search).

The run directory ``runs/{spec}_{YYYYmmdd-HHMMSS}/``::

    spec.yaml          the resolved spec, runnable as is
    run.json           mode, git commit and dirty flag, package versions, host, argv, the
                       random-policy return, every trial's seeds
    t{T}/              one folder per trial (trial.json, trial.png) with one per session
    experiment.csv     search: one row per trial, its values and metrics, by strength
    best_spec.yaml     search: the spec with the best trial's values, runnable as is
    experiment.png     search: each metric against each searched value, one point a trial
    trials.png         search: every trial's moving-average return
    study.journal      search: Optuna's journal (resume, or join from a second process)

Everything is checked before the folder is made. ``run(resume=RUN_DIR)`` continues an
interrupted run: finished sessions and trials are not rerun, interrupted sessions continue
from their checkpoints.

    >>> from batchenv.experiment import run
    >>> result = run("specs/batchppo.yaml", "cartpole", mode="train")
    >>> result.best.metrics["strength"]
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import platform
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchenv.atomic_file import write_atomic

from .executors import Executor, LocalExecutor, Plan
from .metrics import METRIC_NAMES
from .pool import available_cores
from .session import run_session
from .spec import MODES, Spec, SpecError, load_spec
from .trial import TRIAL_NAME, TrialResult, TrialRun, read_trial

__all__ = ["ExperimentResult", "run", "write_search_outputs"]

SPEC_NAME = "spec.yaml"
RECORD_NAME = "run.json"
TABLE_NAME = "experiment.csv"
BEST_NAME = "best_spec.yaml"


@dataclass
class ExperimentResult:
    """What ``run()`` did: the run directory, the mode and every trial in it so far."""

    path: Path
    mode: str
    trials: list[TrialResult] = field(default_factory=list)

    @property
    def best(self) -> TrialResult | None:
        """The finished trial with the highest strength."""
        done = [t for t in self.trials if t.status == "done"]
        return max(done, key=lambda t: _sort_key(t.metrics.get("strength")), default=None)


def run(
    spec: Spec | str | Path | None = None,
    name: str | None = None,
    *,
    mode: str = "train",
    sets: dict[str, str] | None = None,
    resume: str | Path | None = None,
    runs_dir: str | Path = "runs",
    progress: bool = True,
    executor: Executor | None = None,
    backend: str | None = None,
    address: str | None = None,
) -> ExperimentResult:
    """Run a spec; see the module docstring.

    Args:
        spec: a :class:`Spec`, or the path of a spec file.
        name: the spec's name in the file (needed when it holds several).
        mode: ``dev`` (one session, verbose, in this process), ``train`` (one trial of
            ``meta.sessions`` sessions) or ``search`` (``meta.trials`` trials over the
            spec's search space).
        sets: values of the spec's ``${var}`` placeholders.
        resume: an interrupted run directory to continue (spec and mode come from it).
        runs_dir: where new run directories go.
        progress: progress bar and a line per finished trial.
        executor: where trials run (default: the backend's).
        backend: ``local`` (sessions as processes of this machine, the default) or ``ray``
            (a search's trials as Ray Tune trials; see :mod:`.ray_backend`). A resumed run
            keeps the backend it was started with.
        address: the Ray cluster of ``backend="ray"`` (``HOST:PORT`` or ``auto``; None: the
            one ``ray.init()`` finds, or a new one on this machine).

    Raises:
        SpecError: the spec or the mode cannot run (nothing was written).
        SessionFailedError: in train and dev mode, a session raised, died or timed out
            (its traceback chained); a search records failed trials and goes on.
    """
    if resume is not None:
        path = Path(resume)
        if not (path / RECORD_NAME).exists() or not (path / SPEC_NAME).exists():
            raise SpecError(f"{path} is not a batchenv run directory (no {RECORD_NAME})")
        record = json.loads((path / RECORD_NAME).read_text())
        mode = record["mode"]
        spec = load_spec(path / SPEC_NAME)
        started_on = record.get("backend", "local")
        if backend not in (None, started_on):
            raise SpecError(
                f"{path} was run with --backend {started_on}; resume it with that backend"
            )
        backend = started_on
        _preflight(spec, mode, backend, address)
        executor = _executor(backend, mode, address, executor)
    else:
        if mode not in MODES:
            raise SpecError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if spec is None:
            raise SpecError("run() needs a spec (a Spec or a spec file) or resume=RUN_DIR")
        if not isinstance(spec, Spec):
            spec = load_spec(spec, name, sets)
        if mode == "dev":
            spec = dataclasses.replace(spec, meta=dataclasses.replace(spec.meta, sessions=1))
        backend = backend or "local"
        _preflight(spec, mode, backend, address)
        executor = _executor(backend, mode, address, executor)
        path = _new_run_directory(Path(runs_dir), spec.name)
        spec.dump(path / SPEC_NAME)
        record = _record(spec, mode, backend)
        _write_json(path / RECORD_NAME, record)

    trainer = spec.trainer()
    cpus = spec.meta.cpus_per_session or trainer.cpus(spec.make_config(spec.session_seed(0, 0)))
    cores = available_cores()
    if cpus > cores:
        warnings.warn(
            f"a session of {spec.name} uses {cpus} cores and this machine has {cores}: "
            "sessions run one at a time",
            stacklevel=2,
        )
    baselines: dict[str, float] = dict(record.get("random_return") or {})

    def random_return(env: str) -> float:
        if env not in baselines:
            baselines[env] = _random_return(trainer, env)
            record["random_return"] = baselines
            _write_json(path / RECORD_NAME, record)
        return baselines[env]

    def on_trial_start(number: int, seeds: list[int]) -> None:
        record.setdefault("seeds", {})[f"t{number}"] = seeds
        _write_json(path / RECORD_NAME, record)

    plan = Plan(
        spec,
        path,
        cpus,
        max(1, cores // cpus),
        random_return,
        study=_study(spec, path) if mode == "search" and backend == "local" else None,
        progress=progress,
        on_trial_start=on_trial_start,
    )
    if progress:
        print(f"batchenv run: {spec.name} ({mode}) -> {path}", file=sys.stderr)
    if mode == "dev":
        _run_dev(plan, progress)
    else:
        ran = _run_trials(plan, executor, mode, progress)
        failed = [trial.exception for trial in ran if trial.exception is not None]
        if mode == "train" and failed:
            raise failed[0]
    if resume is not None:  # every number again from the per-checkpoint data
        from .analyze import analyze_run

        result = analyze_run(path)
    else:
        result = ExperimentResult(path, mode, _read_trials(path, spec))
        if mode == "search":
            write_search_outputs(result, spec)
    if progress:
        if mode != "search":  # a search's trial lines carry their notes
            for trial in result.trials:
                if trial.note:
                    print(f"batchenv run: trial {trial.number}: {trial.note}", file=sys.stderr)
        _print_summary(result)
    return result


def write_search_outputs(result: ExperimentResult, spec: Spec) -> None:
    """A search's experiment.csv, best_spec.yaml, experiment.png and trials.png (also
    written by ``batchenv analyze``)."""
    from .analyze import plot_search

    _write_table(result, spec)
    _write_best(result, spec)
    plot_search(result, spec)


# --- modes ----------------------------------------------------------------------------------


def _run_dev(plan: Plan, progress: bool) -> None:
    spec = plan.spec
    run = TrialRun(spec, 0, plan.path / "t0", {}, plan.cpus, plan.random_return(spec.env), True)
    jobs = run.jobs()
    plan.on_trial_start(0, run.seeds)
    print(f"dev: {spec.algorithm} on {spec.env}, seed {run.seeds[0]}", file=sys.stderr)
    print(f"dev: config {spec.make_config(run.seeds[0])}", file=sys.stderr)

    def show(frame: int, ma: float) -> None:
        print(f"dev: checkpoint at {frame:,} env steps, total_reward_ma {ma:.2f}", file=sys.stderr)

    try:
        for job in jobs:
            run.on_done(job.session, run_session(job, show if progress else None))
    finally:
        run.close()  # the shared parameters of meta.distributed: shared
    run.result()


def _run_trials(plan: Plan, executor: Executor, mode: str, progress: bool) -> list[TrialResult]:
    bar = None
    if progress:
        from .progress import StepProgress

        finished = {t.number for t in _read_trials(plan.path, plan.spec) if t.status != "running"}
        bar = StepProgress(
            plan.path,
            trials=plan.max_trials if mode == "search" else 1,
            sessions=plan.spec.meta.sessions,
            steps=_session_steps(plan.spec),
            finished=finished,
        )

    def on_trial(result: TrialResult) -> None:
        if bar is None:
            return
        bar.trial_done(result.number)
        if mode == "search":  # train: the summary at the end is this trial's line
            bar.write(_trial_line(result))

    try:
        results = executor.run(plan, on_trial)
    except BaseException as error:
        if not _interrupted(error):
            raise
        if bar is not None:
            bar.close()
        print(f"\ninterrupted; resume with: batchenv run --resume {plan.path}", file=sys.stderr)
        if isinstance(error, KeyboardInterrupt):
            raise
        raise KeyboardInterrupt from error
    if bar is not None:
        bar.close()
    return results


def _interrupted(error: BaseException) -> bool:
    """Whether ``error`` is Ctrl-C, or was raised while Ctrl-C was being handled: Optuna's
    journal lock, interrupted in its release, unlinks its file twice and raises
    FileNotFoundError in place of the KeyboardInterrupt."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__context__
    return False


def _session_steps(spec: Spec) -> int | None:
    """Env steps of one session (its config's steps field), or None when unknown."""
    name = getattr(spec.trainer(), "meta_fields", {}).get("steps")
    steps = getattr(spec.make_config(spec.session_seed(0, 0)), name, None) if name else None
    return steps if isinstance(steps, int) and steps > 0 else None


#: The metrics a trial's line shows, in this order.
_LINE_METRICS = ("total_reward_ma", "final_return", "strength", "stability", "consistency")


def _metrics_text(metrics: dict[str, Any]) -> str:
    return ", ".join(
        f"{name} {metrics[name]:.4g}"
        for name in _LINE_METRICS
        if isinstance(metrics.get(name), (int, float)) and math.isfinite(metrics[name])
    )


def _trial_line(result: TrialResult) -> str:
    values = " ".join(f"{key}={_short(value)}" for key, value in result.values.items())
    head = f"trial {result.number}"
    if result.status == "done":
        body = _metrics_text(result.metrics)
    elif result.status == "pruned":
        body = "pruned"
    else:
        body = f"failed: {(result.error or '').splitlines()[0]}"
    note = f"; {result.note}" if result.note else ""
    return f"{head}: {body}{note}" + (f"  [{values}]" if values else "")


def _print_summary(result: ExperimentResult) -> None:
    best = result.best
    if best is None:
        print(f"batchenv run: no trial finished; see {result.path}", file=sys.stderr)
        return
    where = f"best trial {best.number}" if result.mode == "search" else "trial"
    print(f"batchenv run: {where}: {_metrics_text(best.metrics)}; {result.path}", file=sys.stderr)


# --- checks, run directory, study -----------------------------------------------------------


def _preflight(spec: Spec, mode: str, backend: str, address: str | None) -> None:
    """Everything that would fail later, checked before the run directory exists (the
    backend first: --backend ray names every package it misses, optuna included)."""
    from .ray_backend import check_backend

    check_backend(backend, mode, address)
    if mode == "search":
        if not spec.space:
            raise SpecError(
                f"spec {spec.name!r} has no search section, so mode search has nothing to "
                "search; add one (e.g. search: {config.learning_rate__loguniform: [1e-4, 1e-3]})"
                " or run --mode train"
            )
        _need("optuna", "search mode", "optuna")
        if spec.meta.sampler == "cmaes":
            _need("cmaes", "meta.sampler cmaes", "cmaes")
    if spec.meta.track == "wandb":
        _need("wandb", "meta.track wandb", "wandb")
    if mode != "dev":
        _need("yaml", "spec files", "pyyaml")


def _executor(backend: str, mode: str, address: str | None, given: Executor | None) -> Executor:
    """``given``, or the executor of ``backend``, connected (Ray) before anything is written."""
    from .ray_backend import RayExecutor

    if given is not None:
        return given
    if backend == "local":
        return LocalExecutor()
    executor = RayExecutor(address)
    executor.connect()
    return executor


def _need(module: str, what: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise SpecError(f'{what} needs {package}: pip install {package} (or -e ".[experiment]")')


def _new_run_directory(runs_dir: Path, name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = runs_dir / f"{name}_{stamp}"
    suffix = 1
    while path.exists():
        path = runs_dir / f"{name}_{stamp}-{suffix}"
        suffix += 1
    path.mkdir(parents=True)
    return path


def _record(spec: Spec, mode: str, backend: str) -> dict[str, Any]:
    from batchenv.run_dir import git_commit

    return {
        "spec": spec.name,
        "mode": mode,
        "backend": backend,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "git_commit": git_commit(),
        "git_dirty": _git_dirty(),
        "versions": _versions(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "argv": sys.argv,
        "seed_rule": "meta.seed + 1000 * trial + session",
        "seeds": {},
        "random_return": {},
    }


def _git_dirty() -> bool | None:
    here = Path(__file__).resolve().parent.parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip())


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for package in ("batchenv", "torch", "gymnasium", "numpy", "optuna", "triton"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            pass
    return versions


def _study(spec: Spec, path: Path):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from .samplers import make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    meta = spec.meta
    pruners = {
        "none": optuna.pruners.NopPruner,
        "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=2),
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
        "hyperband": lambda: optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=meta.steps or "auto"
        ),
    }
    storage = JournalStorage(JournalFileBackend(str(path / "study.journal")))
    return optuna.create_study(
        study_name=spec.name,
        storage=storage,
        sampler=make_sampler(spec),
        pruner=pruners[meta.pruner](),
        direction="maximize",
        load_if_exists=True,
    )


def _random_return(trainer, env: str) -> float:
    own = getattr(trainer, "random_return", None)
    try:
        if own is not None:
            return float(own(env))
        from .baseline import random_return

        return random_return(env)
    except Exception as error:  # a user's env the baseline cannot drive: strength = return
        warnings.warn(
            f"cannot measure the random-policy return of {env!r} ({error}); strength is "
            "computed against 0",
            stacklevel=2,
        )
        return 0.0


# --- results --------------------------------------------------------------------------------


def _read_trials(path: Path, spec: Spec) -> list[TrialResult]:
    files = sorted(path.glob(f"t*/{TRIAL_NAME}"), key=_trial_number)
    return [read_trial(trial_file.parent) for trial_file in files]


def _trial_number(path: Path) -> int:
    return int(path.parent.name[1:])


def _sort_key(value: Any) -> float:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else -math.inf


def _write_table(result: ExperimentResult, spec: Spec) -> Path:
    names = spec.space.names
    metric_names = [*METRIC_NAMES, "wall_time"]
    rows = sorted(result.trials, key=lambda t: _sort_key(t.metrics.get("strength")), reverse=True)
    target = result.path / TABLE_NAME
    with open(target, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["trial", "status", *names, *metric_names])
        for trial in rows:
            writer.writerow(
                [trial.number, trial.status]
                + [_cell(trial.values.get(name)) for name in names]
                + [_cell(trial.metrics.get(name)) for name in metric_names]
            )
    return target


def _write_best(result: ExperimentResult, spec: Spec) -> Path | None:
    best = result.best
    if best is None:
        return None
    # Its values, and the base seed that gives its sessions' seeds to a train run (trial 0).
    chosen = spec.with_values(best.values)
    seed = spec.session_seed(best.number, 0)
    meta = dataclasses.replace(chosen.meta, trials=1, seed=seed)
    chosen = dataclasses.replace(chosen, search={}, meta=meta)
    target = result.path / BEST_NAME
    chosen.dump(target)
    seeds = [chosen.session_seed(0, s) for s in range(meta.sessions)]
    header = (
        f"# The best trial (t{best.number}, strength {best.metrics.get('strength', math.nan):.4g})"
        f" of {result.path.name}: its values, and meta.seed {seed}\n# for its sessions' seeds "
        f"{seeds}. Rerun it: batchenv run {BEST_NAME} --mode train\n"
    )
    target.write_text(header + target.read_text())
    return target


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return value


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1, default=str))
