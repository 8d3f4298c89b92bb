"""``batchenv benchmark``: spec files as trials, one Markdown table in SLM Lab's style.

Every spec of the given files (a folder means its ``*.yaml``; specs with a ``search``
section are left out) runs as a trial of ``sessions`` seeds; the table has a row per spec
(env x algorithm): final return mean ± std over sessions, strength, sample efficiency,
stability, consistency and the trial's wall time, and each trial's band plot is copied
next to it.

    >>> table = benchmark(["specs/batchppo.yaml"], only=["cartpole"], out="benchmarks/experiments")
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from .experiment import run
from .spec import SpecError, load_spec, read_specs

__all__ = ["benchmark"]

TABLE_NAME = "README.md"
_COLUMNS = (
    "spec",
    "env",
    "algorithm",
    "steps",
    "final return",
    "strength",
    "sample efficiency",
    "stability",
    "consistency",
    "wall time",
)


def benchmark(
    paths: Sequence[str | Path],
    *,
    sessions: int = 4,
    only: Sequence[str] | None = None,
    out: str | Path = "benchmarks/experiments",
    runs_dir: str | Path = "runs",
    progress: bool = True,
) -> Path:
    """Run the specs of ``paths`` as trials; write ``out/README.md``; return its path."""
    specs = []
    for file in _spec_files(paths):
        for name, data in read_specs(file).items():
            if data.get("search") or (only and name not in only):
                continue
            specs.append(load_spec(file, name))
    if not specs:
        raise SpecError(f"no spec to benchmark in {', '.join(map(str, paths))}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Benchmark: {len(specs)} specs, trials of {sessions} sessions",
        "",
        f"`batchenv benchmark {' '.join(map(str, paths))} --sessions {sessions}`, "
        f"{time.strftime('%Y-%m-%d')}. Final return: mean ± std over sessions of the last "
        "checkpoint's return; the other columns are SLM Lab's trial metrics (means over "
        "sessions; consistency across them). Wall time: the whole trial, sessions in "
        "parallel within the CPU budget.",
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    plots = []
    for spec in specs:
        spec = dataclasses.replace(spec, meta=dataclasses.replace(spec.meta, sessions=sessions))
        started = time.perf_counter()
        result = run(spec, mode="train", runs_dir=runs_dir, progress=progress)
        seconds = time.perf_counter() - started
        (trial,) = result.trials
        metrics = trial.metrics
        lines.append(
            "| "
            + " | ".join(
                [
                    spec.name,
                    f"`{spec.env}`",
                    spec.algorithm,
                    f"{int(metrics['frames']):,}",
                    f"{_number(metrics['final_return'])} ± {_number(metrics['final_return_std'])}",
                    _number(metrics["strength"]),
                    _number(metrics["sample_efficiency"], 3),
                    _number(metrics["stability"], 3),
                    _number(metrics["consistency"], 3),
                    f"{seconds / 60:.1f} min",
                ]
            )
            + " |"
        )
        band = trial.path / "trial.png"
        if band.exists():
            target = out / f"{spec.name}_{re.sub(r'[^A-Za-z0-9]+', '_', spec.algorithm)}.png"
            shutil.copyfile(band, target)
            plots.append((spec, target.name))
    lines.append("")
    for spec, name in plots:
        lines += [f"![{spec.name}: {spec.algorithm} on {spec.env}]({name})", ""]
    table = out / TABLE_NAME
    table.write_text("\n".join(lines))
    return table


def _spec_files(paths: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(path.glob("*.yaml")) + sorted(path.glob("*.json"))
        elif path.is_file():
            files.append(path)
        else:
            raise SpecError(f"{path} is neither a spec file nor a folder of them")
    return files


def _number(value: float, digits: int = 1) -> str:
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "n/a"
    if digits > 1:
        return f"{value:.{digits}g}"
    return f"{value:,.{digits}f}"
