"""PNG plots of sessions, trials and experiments (SLM Lab's graphs, drawn with matplotlib).

matplotlib is imported inside the functions, so this module imports without it; a call
without it raises ImportError naming the ``plot`` extra. Figures are drawn on the Agg
canvas directly (no pyplot, no global backend switch), so plotting from a worker thread or
inside a notebook leaves the caller's matplotlib state alone. Every function returns the
path it wrote, creating the parent folder when needed.

    >>> import numpy as np
    >>> frames = np.arange(1, 201) * 1000
    >>> plot_session(frames, np.linspace(20, 500, 200), "/tmp/session.png", "CartPole-v1")
    PosixPath('/tmp/session.png')
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: Most points in a plotted moving average (SLM Lab's PLOT_MA_WINDOW).
MA_WINDOW = 100
#: Figure resolution; sizes below are in inches at this dpi.
DPI = 100
#: Most trials named in the legend of :func:`plot_trials_overlay`.
MAX_LEGEND = 10
#: One cell of :func:`plot_experiment`'s grid, and the room around the cells, in inches.
CELL_SIZE = (3.2, 2.4)
GRID_MARGIN = (1.2, 0.6)

_CURVE_SIZE = (8.0, 4.5)
_OVERLAY_SIZE = (10.0, 5.0)

Series = Sequence[float] | np.ndarray


def _figure(size: tuple[float, float], **subplots: Any):
    """A Figure on an Agg canvas (constrained layout) and its axes."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'batchenv.experiment.plots needs matplotlib: pip install -e ".[plot]"'
        ) from None
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(**subplots)


def _save(figure, path: str | os.PathLike) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=DPI)
    return target


def _steps_axis(axes) -> None:
    """Label the x axis as env steps, ticks as 50k, 1.2M."""
    from matplotlib.ticker import EngFormatter

    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_xlabel("env steps (frames)")
    axes.grid(alpha=0.3)


def moving_average(values: Series, window: int = MA_WINDOW) -> np.ndarray:
    """Trailing mean over the last ``window`` points, NaNs skipped (NaN where all are).

    Like pandas' ``rolling(window, min_periods=1).mean()``, which SLM Lab plots.

    Example::

        >>> moving_average([1.0, 3.0, float("nan"), 5.0], window=2).tolist()
        [1.0, 2.0, 3.0, 5.0]
    """
    y = np.asarray(values, dtype=np.float64)
    valid = np.isfinite(y)
    sums = np.concatenate(([0.0], np.cumsum(np.where(valid, y, 0.0))))
    counts = np.concatenate(([0], np.cumsum(valid)))
    ends = np.arange(1, len(y) + 1)
    starts = np.maximum(ends - window, 0)
    count = counts[ends] - counts[starts]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (sums[ends] - sums[starts]) / count, np.nan)


def smoothing_window(length: int) -> int:
    """Points averaged for a curve of ``length`` checkpoints: a tenth of them, 1 to 100.

    SLM Lab always averages 100; on a curve of a few hundred checkpoints that trailing
    window lags the raw curve by a large part of the run, so shorter curves get less.

    Example::

        >>> smoothing_window(200), smoothing_window(5000), smoothing_window(4)
        (20, 100, 1)
    """
    return max(1, min(MA_WINDOW, length // 10))


def _pair(frames: Series, returns: Series) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(frames, dtype=np.float64)
    y = np.asarray(returns, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"frames {x.shape} and returns {y.shape} must be 1-D of one length")
    return x, y


def plot_session(frames: Series, returns: Series, path: str | os.PathLike, title: str) -> Path:
    """Return against env steps: the raw curve (light) and its moving average (bold).

    The average is a trailing one over :func:`smoothing_window` checkpoints (named in the
    legend); NaN returns (no episode finished) are gaps in the raw curve and skipped by the
    average. 800 x 450 pixels.

    Example::

        >>> plot_session([1000, 2000, 3000], [20.0, 35.0, 60.0], "/tmp/s.png", "CartPole")
        PosixPath('/tmp/s.png')
    """
    x, y = _pair(frames, returns)
    figure, axes = _figure(_CURVE_SIZE)
    window = smoothing_window(len(y))
    axes.plot(x, y, color="C0", alpha=0.35, linewidth=1.0, label="return")
    label = f"moving average ({window} checkpoints)"
    axes.plot(x, moving_average(y, window), color="C0", linewidth=2.2, label=label)
    axes.set_ylabel("mean episode return")
    axes.set_title(title)
    _steps_axis(axes)
    axes.legend(loc="best")
    return _save(figure, path)


def plot_trial(
    sessions: Sequence[tuple[Series, Series]], path: str | os.PathLike, title: str
) -> Path:
    """Mean return over sessions with a +-1 std band, and each session as a thin line.

    ``sessions`` holds ``(frames, returns)`` per session. The mean and the sample standard
    deviation (ddof=1, none for one session) are taken on the checkpoints all sessions
    reached (cut to the shortest), plotted at the first session's frames; NaN returns are
    left out of them. The thin lines are each session's whole raw curve. 800 x 450 pixels.

    Example::

        >>> plot_trial([([1, 2, 3], [1, 2, 4]), ([1, 2, 3], [2, 3, 3])], "/tmp/t.png", "t")
        PosixPath('/tmp/t.png')
    """
    if len(sessions) == 0:
        raise ValueError("plot_trial needs at least one session")
    pairs = [_pair(f, r) for f, r in sessions]
    length = min(len(y) for _, y in pairs)
    table = np.stack([y[:length] for _, y in pairs])  # [sessions, checkpoints]
    x = pairs[0][0][:length]
    with warnings.catch_warnings():  # all-NaN columns: NaN, and no warning
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(table, axis=0)
        std = np.nanstd(table, axis=0, ddof=1) if len(pairs) > 1 else None

    figure, axes = _figure(_CURVE_SIZE)
    n = len(pairs)
    for index, (fx, fy) in enumerate(pairs):
        label = f"{n} sessions" if n > 1 and index == 0 else "_nolegend_"
        axes.plot(fx, fy, color="0.45", alpha=0.5, linewidth=0.7, label=label)
    if std is not None:
        axes.fill_between(x, mean - std, mean + std, color="C0", alpha=0.25, linewidth=0)
        label = "mean \u00b1 1 std"
    else:
        label = "1 session"
    axes.plot(x, mean, color="C0", linewidth=2.2, label=label)
    axes.set_ylabel("mean episode return")
    axes.set_title(title)
    _steps_axis(axes)
    axes.legend(loc="best")
    return _save(figure, path)


def _is_categorical(values: list[Any]) -> bool:
    """Strings, bools, and anything else that is not a real number (a list of layer sizes)."""
    return any(
        isinstance(v, (str, bool, np.bool_)) or not isinstance(v, numbers.Real)
        for v in values
        if v is not None
    )


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def plot_experiment(
    rows: Sequence[Mapping[str, Any]],
    params: Sequence[str],
    metrics: Sequence[str],
    path: str | os.PathLike,
    title: str,
) -> Path:
    """A grid of metric against searched parameter, one point per trial.

    Rows of the grid are ``metrics``, columns ``params``; each ``rows`` entry is one trial's
    parameters and metrics (``strength`` colours its points; a trial without one is
    grey). A column is logarithmic when its values are positive and span more than two
    decades; strings, bools and other non-numbers (shown by ``str``) are categories at
    integer positions in sorted order, spread a little sideways so trials on one category
    stay apart. Missing or NaN values are left out.
    Each cell is 320 x 240 pixels, plus 120 pixels of width (colorbar) and 60 of height.

    Example::

        >>> rows = [{"lr": 1e-4, "strength": 10.0}, {"lr": 1e-2, "strength": 30.0}]
        >>> plot_experiment(rows, ["lr"], ["strength"], "/tmp/e.png", "search")
        PosixPath('/tmp/e.png')
    """
    import matplotlib
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    if not params or not metrics:
        raise ValueError("plot_experiment needs at least one param and one metric")
    size = (
        CELL_SIZE[0] * len(params) + GRID_MARGIN[0],
        CELL_SIZE[1] * len(metrics) + GRID_MARGIN[1],
    )
    figure, grid = _figure(
        size, nrows=len(metrics), ncols=len(params), squeeze=False, sharex="col", sharey="row"
    )
    strength = np.array([_number(row.get("strength")) for row in rows])
    order = np.argsort(np.where(np.isnan(strength), -np.inf, strength), kind="stable")
    finite = strength[np.isfinite(strength)]
    low, high = (finite.min(), finite.max()) if len(finite) else (0.0, 1.0)
    norm = Normalize(low, high if high > low else low + 1.0)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.7")
    colours = cmap(norm(np.ma.masked_invalid(strength[order])))

    for col, param in enumerate(params):
        raw = [rows[i].get(param) for i in order]
        if _is_categorical(raw):
            labels = sorted({str(v) for v in raw if v is not None})
            where = {label: index for index, label in enumerate(labels)}
            spread = np.linspace(-0.15, 0.15, 7)
            x = np.array(
                [
                    math.nan if v is None else where[str(v)] + spread[i % len(spread)]
                    for i, v in enumerate(raw)
                ]
            )
            crowded = len(labels) > 3 or max(len(label) for label in labels) > 8
            grid[-1, col].set_xticks(
                range(len(labels)),
                labels,
                rotation=30 if crowded else 0,
                ha="right" if crowded else "center",
            )
            grid[-1, col].set_xlim(-0.5, len(labels) - 0.5)
        else:
            x = np.array([_number(v) for v in raw])
            known = x[np.isfinite(x)]
            if len(known) and known.min() > 0 and known.max() / known.min() > 100:
                grid[-1, col].set_xscale("log")
        grid[-1, col].set_xlabel(param)
        for line, metric in enumerate(metrics):
            axes = grid[line, col]
            y = np.array([_number(rows[i].get(metric)) for i in order])
            shown = np.isfinite(x) & np.isfinite(y)
            axes.scatter(x[shown], y[shown], c=colours[shown], s=28, edgecolors="0.2", lw=0.4)
            axes.grid(alpha=0.3)
            if col == 0:
                axes.set_ylabel(metric)
    colorbar = figure.colorbar(ScalarMappable(norm, cmap), ax=grid, shrink=0.9, aspect=30)
    colorbar.set_label("strength")
    figure.suptitle(title)
    return _save(figure, path)


def plot_trials_overlay(
    trials: Mapping[str, tuple[Series, Series]], path: str | os.PathLike, title: str
) -> Path:
    """Every trial's moving-average return on one plot.

    ``trials`` maps a label to ``(frames, returns)``; each curve is a trailing average over
    :func:`smoothing_window` checkpoints. The first :data:`MAX_LEGEND` trials (pass them
    best first) get their own colour and a legend entry, beside the plot, and are drawn on
    top; the rest are thin grey lines. 1000 x 500 pixels.

    Example::

        >>> curves = {"lr=1e-3": ([1, 2, 3], [1, 2, 4]), "lr=1e-2": ([1, 2, 3], [2, 3, 3])}
        >>> plot_trials_overlay(curves, "/tmp/o.png", "search")
        PosixPath('/tmp/o.png')
    """
    figure, axes = _figure(_OVERLAY_SIZE)
    count = len(trials)
    for index, (label, (frames, returns)) in enumerate(trials.items()):
        x, y = _pair(frames, returns)
        named = index < MAX_LEGEND
        axes.plot(
            x,
            moving_average(y, smoothing_window(len(y))),
            color=f"C{index}" if named else "0.75",
            linewidth=1.8 if named else 0.8,
            alpha=1.0 if named else 0.7,
            zorder=3 + MAX_LEGEND - index if named else 2,
            label=str(label) if named else "_nolegend_",
        )
    axes.set_ylabel("mean episode return (moving average)")
    axes.set_title(title)
    _steps_axis(axes)
    if count:
        shown = f"{MAX_LEGEND} of {count} trials named" if count > MAX_LEGEND else f"{count} trials"
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title=shown, fontsize=9)
    return _save(figure, path)
