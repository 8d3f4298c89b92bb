"""``batchenv analyze RUN_DIR [RUN_DIR ...]``: recompute runs from their checkpoints.csv.

SLM Lab's retro-analysis: every number and plot of a run directory is computed again from
the per-checkpoint data its sessions saved (``t{T}/s{S}/checkpoints.csv``):

- each session's ``session.json`` (metrics) and ``session.png``;
- each finished trial's ``trial.json`` (metrics, note on NaN metrics) and ``trial.png``;
  failed and pruned trials keep their status and error;
- for a search, ``experiment.csv``, ``best_spec.yaml``, ``experiment.png`` and
  ``trials.png`` (SLM Lab's multi-trial graph: each trial's mean ± 1 std over sessions).

An edited or stale value in a JSON file does not survive: nothing is read from
session.json or the trial metrics of trial.json. Given several run directories it also
draws them on one graph (what ``slm-lab plot`` and openrlbenchmark draw): for each run, its
best trial's mean ± 1 std over sessions of ``total_reward_ma``.

    batchenv analyze runs/cartpole_20261125-101500
    batchenv analyze runs/cartpole_a runs/cartpole_b --out cartpole.png

    >>> results, comparison = analyze(["runs/cartpole_a", "runs/cartpole_b"], "cmp.png")
    >>> results[0].best.metrics["total_reward_ma"]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .experiment import RECORD_NAME, SPEC_NAME, ExperimentResult
from .session import read_checkpoints
from .spec import Meta, Spec, SpecError, load_spec, read_specs
from .trial import TRIAL_NAME, TrialResult, analyze_trial

__all__ = [
    "COMPARISON_NAME",
    "EXPERIMENT_METRICS",
    "add_arguments",
    "analyze",
    "analyze_run",
    "command",
    "compare_runs",
    "plot_search",
]

#: Where the comparison of several runs goes unless ``--out`` says otherwise.
COMPARISON_NAME = "comparison.png"
#: The rows of experiment.png.
EXPERIMENT_METRICS = (
    "strength",
    "total_reward_ma",
    "sample_efficiency",
    "stability",
    "consistency",
)
#: Search leaves drawn on a log axis in experiment.png.
_LOG_DISTS = ("loguniform", "lograndint")


def analyze(
    paths: Sequence[str | Path], out: str | Path | None = None
) -> tuple[list[ExperimentResult], Path | None]:
    """Recompute every run of ``paths`` (:func:`analyze_run`); with two or more runs,
    also draw them on one graph at ``out`` (default ``comparison.png`` here).

    Every path is checked before anything is written (SpecError names the first bad one).
    """
    folders = [_check_run(Path(path)) for path in paths]
    if not folders:
        raise SpecError("give at least one run directory")
    target = Path(out) if out is not None else None
    if target is not None and target.suffix.lower() != ".png":
        raise SpecError(f"--out must name a .png file, got {target}")
    results = [analyze_run(folder) for folder in folders]
    comparison = None
    if len(results) > 1 or target is not None:
        comparison = compare_runs(results, target or Path(COMPARISON_NAME))
    return results, comparison


def analyze_run(path: str | Path) -> ExperimentResult:
    """Recompute the run directory ``path`` from its checkpoints.csv files (see the module
    docstring) and return what it holds."""
    folder = _check_run(Path(path))
    record = json.loads((folder / RECORD_NAME).read_text())
    spec, checked = _read_spec(folder)
    trials = []
    for trial_file in sorted(folder.glob(f"t*/{TRIAL_NAME}"), key=_trial_number):
        trial_record = json.loads(trial_file.read_text())
        values = trial_record.get("values") or {}
        trial_spec = _with_values(spec, values) if checked else spec
        random_return = trial_record.get("random_return")
        if random_return is None:
            random_return = (record.get("random_return") or {}).get(trial_spec.env, 0.0)
        trials.append(analyze_trial(trial_file.parent, trial_spec, float(random_return)))
    result = ExperimentResult(folder, record.get("mode", "train"), trials)
    if result.mode == "search" and checked:
        from .experiment import write_search_outputs

        write_search_outputs(result, spec)
    elif result.mode == "search":
        plot_search(result, spec)  # no checked spec: no best_spec.yaml or table
    return result


def plot_search(result: ExperimentResult, spec: Spec) -> None:
    """experiment.png (each metric against each searched value, log axes for log-scale
    leaves, NaN metrics marked) and trials.png (each finished trial's mean ± 1 std over
    sessions, best first, its searched values in the legend). Needs matplotlib (skipped
    without it)."""
    try:
        from .plots import plot_experiment, plot_trials
    except ImportError:
        return
    done = [trial for trial in result.trials if trial.status == "done"]
    if not done:
        return
    space = spec.space
    try:
        plot_experiment(
            [{**trial.values, **trial.metrics} for trial in done],
            space.names,
            list(EXPERIMENT_METRICS),
            result.path / "experiment.png",
            f"{spec.name}: {len(done)} trials",
            log_params={leaf.path for leaf in space.leaves if leaf.dist in _LOG_DISTS},
        )
        best_first = sorted(done, key=lambda t: _strength(t), reverse=True)
        plot_trials(
            {_trial_label(trial): _sessions(trial) for trial in best_first},
            result.path / "trials.png",
            f"{spec.name}: {len(done)} trials, best first",
        )
    except ImportError:
        pass


def compare_runs(results: Sequence[ExperimentResult], path: str | Path) -> Path:
    """Several runs on one graph: each run's best trial (its only one in train mode), as
    the mean ± 1 std over its sessions of ``total_reward_ma`` against env steps."""
    from .plots import plot_trials

    curves = {}
    for result in results:
        best = result.best
        if best is None:
            continue
        label = f"{result.path.name} t{best.number}"
        if best.values:
            label += f": {_values_text(best.values)}"
        curves[label] = _sessions(best)
    if not curves:
        raise SpecError("none of the runs has a finished trial to compare")
    title = f"{len(curves)} runs, the best trial of each"
    return plot_trials(curves, path, title, legend_title="run, trial (sessions)")


# --- the command ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``batchenv analyze``."""
    parser.description = (
        "Recompute the metrics (session.json, trial.json, experiment.csv, best_spec.yaml) "
        "and every plot of run directories from their per-checkpoint data "
        "(t*/s*/checkpoints.csv), as SLM Lab's retro-analysis does; with several runs, also "
        "draw their best trials on one graph."
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories")
    parser.add_argument(
        "--out",
        default=None,
        help=f"the comparison graph (a .png; default {COMPARISON_NAME} here, drawn when "
        "two or more runs are given or --out is set)",
    )
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``batchenv analyze``; print a line per run and the files drawn."""
    from batchenv.cli_common import fail

    started = time.perf_counter()
    try:
        results, comparison = analyze(args.run_dirs, args.out)
    except SpecError as error:
        return fail("analyze", error)
    for result in results:
        print(_run_line(result))
        for trial in result.trials:
            if trial.note:
                print(f"  t{trial.number}: {trial.note}")
    if comparison is not None:
        print(f"comparison: {comparison}")
    print(f"batchenv analyze: {len(results)} runs in {time.perf_counter() - started:.1f} s")
    return 0


# --- helpers --------------------------------------------------------------------------------


def _check_run(path: Path) -> Path:
    if not (path / RECORD_NAME).is_file() or not (path / SPEC_NAME).is_file():
        raise SpecError(
            f"{path} is not a batchenv run directory (no {RECORD_NAME} or {SPEC_NAME}); "
            "give the folder `batchenv run` printed, e.g. runs/cartpole_20261125-101500"
        )
    return path


def _read_spec(folder: Path) -> tuple[Spec, bool]:
    """The run's spec, checked; or, when it cannot be checked here (an env or extra this
    machine lacks), read as written, unchecked (``False``)."""
    try:
        return load_spec(folder / SPEC_NAME), True
    except SpecError as error:
        print(f"batchenv analyze: {folder}: spec not checked ({error})", file=sys.stderr)
    name, data = next(iter(read_specs(folder / SPEC_NAME).items()))
    meta = Meta(**(data.get("meta") or {}))
    spec = Spec(
        name,
        str(data.get("algorithm")),
        str(data.get("env")),
        dict(data.get("config") or {}),
        meta,
        dict(data.get("search") or {}),
    )
    return spec, False


def _with_values(spec: Spec, values: dict) -> Spec:
    return spec.with_values(values) if values else spec


def _trial_number(path: Path) -> int:
    return int(path.parent.name[1:])


def _strength(trial: TrialResult) -> float:
    value = trial.metrics.get("strength")
    return value if isinstance(value, (int, float)) and math.isfinite(value) else -math.inf


def _sessions(trial: TrialResult) -> list[tuple[list[float], list[float]]]:
    """``(frames, returns)`` of every session of ``trial`` that has checkpoints."""
    series = []
    folders = [p for p in trial.path.glob("s*") if p.is_dir() and p.name[1:].isdigit()]
    for folder in sorted(folders, key=lambda p: int(p.name[1:])):
        rows = read_checkpoints(folder)
        if rows:
            series.append(([r["frame"] for r in rows], [r["total_reward"] for r in rows]))
    return series


def _values_text(values: dict) -> str:
    def short(value) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    return " ".join(f"{name.split('.')[-1]}={short(value)}" for name, value in values.items())


def _trial_label(trial: TrialResult) -> str:
    label = f"t{trial.number}"
    return f"{label}: {_values_text(trial.values)}" if trial.values else label


def _run_line(result: ExperimentResult) -> str:
    best = result.best
    head = f"{result.path}: {result.mode}, {len(result.trials)} trials"
    if best is None:
        return f"{head}, none finished"
    metrics = best.metrics
    numbers = ", ".join(
        f"{name} {metrics[name]:.4g}"
        for name in ("total_reward_ma", "final_return", "strength", "consistency")
        if isinstance(metrics.get(name), float) and math.isfinite(metrics[name])
    )
    where = f"best t{best.number}" if result.mode == "search" else f"t{best.number}"
    return f"{head}; {where}: {numbers}"
