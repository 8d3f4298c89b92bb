"""Logger: scalar summaries to TensorBoard event files and to ``metrics.csv``.

TensorBoard files are written with ``torch.utils.tensorboard.SummaryWriter`` when the
``tensorboard`` package is installed (skipped otherwise). The CSV has one row per ``log()``
call: ``step`` then one column per summary name, in the order names first appear. When a
new name appears, the file is rewritten once with the grown header (earlier rows get empty
cells), so the CSV always has a single, complete header. Opening a logdir that already has
a ``metrics.csv`` continues it. :func:`curve_points` reads it back as the points of a
learning curve (``curve.png``).

    >>> with Logger("runs/cartpole") as logger:
    ...     logger.log(100, {"mean_score": torch.tensor(21.5)})
    ...     logger.log(200, {"mean_score": 40.0, "loss": 0.3})
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batchenv.atomic_file import replacing

CSV_NAME = "metrics.csv"
#: A row whose ``episodes`` is below this share of its phase's median is left off a curve.
FEW_EPISODES = 0.1


class Logger:
    """Write scalar summaries for a step to TensorBoard and CSV.

    Args:
        logdir: folder of the event files and ``metrics.csv`` (created if missing).
        tensorboard: write TensorBoard event files (when the package is installed).

    Example:
        >>> logger = Logger("/tmp/run")
        >>> logger.log(1, {"mean_score": 12.0})
        >>> logger.close()
    """

    def __init__(self, logdir: str | os.PathLike, tensorboard: bool = True):
        self.logdir = os.fspath(logdir)
        os.makedirs(self.logdir, exist_ok=True)
        self.csv_path = os.path.join(self.logdir, CSV_NAME)
        self.fields: list[str] = ["step"]
        if os.path.exists(self.csv_path) and os.path.getsize(self.csv_path):
            with open(self.csv_path, newline="") as file:
                header = next(csv.reader(file), None)
            if header and header[0] == "step":
                self.fields = header
            else:
                raise ValueError(
                    f"{self.csv_path} exists but is not a batchenv metrics file (its header "
                    f"is {header}); choose another logdir"
                )
        else:
            self._rewrite([])
        self._file = open(self.csv_path, "a", newline="")
        self.writer = _summary_writer(self.logdir) if tensorboard else None
        self._closed = False

    def log(self, step: int, summaries: Mapping[str, Any], tag_prefix: str = "") -> None:
        """Record the scalars in ``summaries`` (tensors or numbers) at ``step``.

        String values (a ``phase`` label, say) are written to the CSV only. ``tag_prefix``
        names the TensorBoard tags ``"<tag_prefix>/<name>"`` (so that, say, train and eval
        values of ``mean_score`` are two curves, not one); the CSV columns stay ``<name>``.
        """
        if self._closed:
            raise ValueError(f"log() called on a closed Logger for {self.logdir}")
        values = {name: _scalar(name, value) for name, value in summaries.items()}
        new = [name for name in values if name not in self.fields]
        if new:
            self._file.close()
            with open(self.csv_path, newline="") as file:
                rows = list(csv.DictReader(file))
            self.fields = self.fields + new
            self._rewrite(rows)
            self._file = open(self.csv_path, "a", newline="")
        row = {"step": int(step), **values}
        csv.DictWriter(self._file, self.fields, restval="").writerow(row)
        self._file.flush()
        if self.writer is not None:
            for name, value in values.items():
                if not isinstance(value, str):
                    tag = f"{tag_prefix}/{name}" if tag_prefix else name
                    self.writer.add_scalar(tag, value, int(step))

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        """Write the header and ``rows`` to a temporary file, then move it into place."""
        with replacing(self.csv_path) as temporary, open(temporary, "w", newline="") as file:
            writer = csv.DictWriter(file, self.fields, restval="")
            writer.writeheader()
            writer.writerows(rows)

    def flush(self) -> None:
        self._file.flush()
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        """Flush and close the files. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._file.close()
        if self.writer is not None:
            self.writer.close()

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _scalar(name: str, value: Any) -> float | str:
    if isinstance(value, str):
        return value
    if hasattr(value, "numel"):
        if value.numel() != 1:
            raise ValueError(
                f"summary {name!r} has shape {tuple(value.shape)}; summaries must be scalars"
            )
        value = value.item()
    return float(value)


def _summary_writer(logdir: str):
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(logdir)


@dataclass
class PhaseCurve:
    """One phase's learning curve read from metrics.csv (see :func:`curve_points`)."""

    steps: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    left_out: list[tuple[float, float, int]] = field(default_factory=list)
    """``(step, mean_score, episodes)`` of the rows left off the curve (too few episodes)."""
    least_episodes: int = 0
    """The fewest episodes a row of the curve holds."""


def curve_points(csv_path: str | os.PathLike, score: str = "mean_score") -> dict[str, PhaseCurve]:
    """The ``score`` column of a metrics.csv against ``step``, one curve per ``phase``.

    A row's score is the mean return of its ``episodes``; a row that holds fewer than
    :data:`FEW_EPISODES` of the median episodes of its phase's rows (the short last train
    phase of a run that stops mid-round, say, with one episode) is not a point of the
    curve: it goes to ``left_out``. Rows without an ``episodes`` column are all points.

        >>> curves = curve_points("runs/cartpole/metrics.csv")
        >>> curves["eval"].steps, curves["eval"].scores
    """
    rows: dict[str, list[tuple[float, float, float]]] = {}
    with open(csv_path, newline="") as file:
        for row in csv.DictReader(file):
            if not row.get(score):
                continue
            episodes = float(row["episodes"]) if row.get("episodes") else math.nan
            phase = row.get("phase") or "train"
            rows.setdefault(phase, []).append((float(row["step"]), float(row[score]), episodes))
    curves = {}
    for phase, points in rows.items():
        counts = [episodes for _, _, episodes in points if not math.isnan(episodes)]
        least = FEW_EPISODES * statistics.median(counts) if counts else 0.0
        curve = curves[phase] = PhaseCurve(least_episodes=math.ceil(least))
        for step, value, episodes in points:
            if episodes < least:
                curve.left_out.append((step, value, int(episodes)))
            else:
                curve.steps.append(step)
                curve.scores.append(value)
    return curves
