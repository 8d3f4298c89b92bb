"""PNG plots of sessions, trials and experiments (SLM Lab's graphs, drawn with matplotlib).

Each plot has a function that builds its data (:func:`session_curves`, :func:`trial_band`,
:func:`trials_bands`, :func:`experiment_cells`), which tests and other tools can check,
and one that draws it. The moving averages are SLM Lab's: a trailing mean over the last
:data:`MA_WINDOW` checkpoints (fewer at the start), the ``total_reward_ma`` of
checkpoints.csv; SLM Lab's multi-trial graph draws each trial's mean over sessions of that
average, with a ±1 std band.

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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Most points in a plotted moving average (SLM Lab's PLOT_MA_WINDOW).
MA_WINDOW = 100
#: Figure resolution; sizes below are in inches at this dpi.
DPI = 100
#: Most trials drawn with a colour, a band and a legend entry by :func:`plot_trials`.
MAX_LEGEND = 10
#: The legend of the return and of its moving average (SLM Lab's checkpoint columns).
RAW_LABEL = "total_reward (each checkpoint)"
MA_LABEL = f"total_reward_ma (mean of the last {MA_WINDOW} checkpoints)"
#: Raw curves of at most this many checkpoints get a marker at every point.
MARKERS_UP_TO = 100
#: One cell of :func:`plot_experiment`'s grid, and the room around the cells, in inches.
CELL_SIZE = (3.2, 2.4)
GRID_MARGIN = (1.2, 0.6)

_CURVE_SIZE = (8.0, 4.5)
_TRIALS_SIZE = (11.0, 5.0)

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

    Like pandas' ``rolling(window, min_periods=1).mean()``, which SLM Lab plots (pandas
    counts a NaN in the window but leaves it out of the mean, as here).

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


def _pair(frames: Series, returns: Series) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(frames, dtype=np.float64)
    y = np.asarray(returns, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"frames {x.shape} and returns {y.shape} must be 1-D of one length")
    return x, y


# --- session --------------------------------------------------------------------------------


def session_curves(frames: Series, returns: Series) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The lines of :func:`plot_session`: ``{label: (frames, values)}``.

    :data:`RAW_LABEL`: each checkpoint's return; :data:`MA_LABEL`: its trailing mean over
    the last :data:`MA_WINDOW` checkpoints (SLM Lab's ``total_reward_ma``), whatever the
    number of checkpoints.

    Example::

        >>> curves = session_curves([10, 20, 30], [1.0, 3.0, 8.0])
        >>> curves[MA_LABEL][1].tolist()
        [1.0, 2.0, 4.0]
    """
    x, y = _pair(frames, returns)
    return {RAW_LABEL: (x, y), MA_LABEL: (x, moving_average(y))}


def plot_session(frames: Series, returns: Series, path: str | os.PathLike, title: str) -> Path:
    """Return against env steps: each checkpoint (thin, on top) and the moving average.

    The lines are :func:`session_curves`; the raw one has a marker at every checkpoint
    when there are at most :data:`MARKERS_UP_TO`. NaN returns (no episode finished) are
    gaps in the raw curve and skipped by the average. 800 x 450 pixels.

    Example::

        >>> plot_session([1000, 2000, 3000], [20.0, 35.0, 60.0], "/tmp/s.png", "CartPole")
        PosixPath('/tmp/s.png')
    """
    curves = session_curves(frames, returns)
    figure, axes = _figure(_CURVE_SIZE)
    x, y = curves[RAW_LABEL]
    marker = "o" if len(y) <= MARKERS_UP_TO else None
    axes.plot(
        x,
        y,
        color="C0",
        alpha=0.6,
        linewidth=1.0,
        marker=marker,
        markersize=3,
        zorder=3,
        label=RAW_LABEL,
    )
    x, ma = curves[MA_LABEL]
    axes.plot(x, ma, color="C1", linewidth=2.2, zorder=2, label=MA_LABEL)
    axes.set_ylabel("mean episode return")
    axes.set_title(title)
    _steps_axis(axes)
    axes.legend(loc="best")
    return _save(figure, path)


# --- trials ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Band:
    """A trial's curve: the mean over sessions at each checkpoint and its spread."""

    x: np.ndarray
    """Env steps of the checkpoints every session reached (the first session's)."""
    mean: np.ndarray
    """Mean over sessions (NaN returns left out; NaN where all are)."""
    std: np.ndarray | None
    """Sample standard deviation over sessions (ddof=1); None for one session."""
    sessions: int


def trial_band(sessions: Sequence[tuple[Series, Series]], smooth: bool = False) -> Band:
    """The mean ± 1 std over sessions of ``(frames, returns)`` pairs, cut to the shortest.

    With ``smooth``, each session's returns are first replaced by their moving average
    (:func:`moving_average`), as SLM Lab's ``_ma`` trial graphs do.

    Example::

        >>> band = trial_band([([1, 2, 3], [1.0, 2.0, 4.0]), ([1, 2], [3.0, 4.0])])
        >>> band.x.tolist(), band.mean.tolist(), band.std.tolist()
        ([1.0, 2.0], [2.0, 3.0], [1.4142135623730951, 1.4142135623730951])
    """
    if len(sessions) == 0:
        raise ValueError("a trial band needs at least one session")
    pairs = [_pair(f, r) for f, r in sessions]
    if smooth:
        pairs = [(x, moving_average(y)) for x, y in pairs]
    length = min(len(y) for _, y in pairs)
    table = np.stack([y[:length] for _, y in pairs])  # [sessions, checkpoints]
    with warnings.catch_warnings():  # all-NaN columns: NaN, and no warning
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(table, axis=0)
        std = np.nanstd(table, axis=0, ddof=1) if len(pairs) > 1 else None
    return Band(pairs[0][0][:length], mean, std, len(pairs))


def plot_trial(
    sessions: Sequence[tuple[Series, Series]], path: str | os.PathLike, title: str
) -> Path:
    """Mean return over sessions with a ±1 std band, and each session as a thin line.

    ``sessions`` holds ``(frames, returns)`` per session; the band is
    :func:`trial_band` (checkpoints all sessions reached). The thin lines are each
    session's whole raw curve. 800 x 450 pixels.

    Example::

        >>> plot_trial([([1, 2, 3], [1, 2, 4]), ([1, 2, 3], [2, 3, 3])], "/tmp/t.png", "t")
        PosixPath('/tmp/t.png')
    """
    band = trial_band(sessions)
    figure, axes = _figure(_CURVE_SIZE)
    n = band.sessions
    for index, (frames, returns) in enumerate(sessions):
        fx, fy = _pair(frames, returns)
        label = f"{n} sessions" if n > 1 and index == 0 else "_nolegend_"
        axes.plot(fx, fy, color="0.45", alpha=0.5, linewidth=0.7, label=label)
    if band.std is not None:
        low, high = band.mean - band.std, band.mean + band.std
        axes.fill_between(band.x, low, high, color="C0", alpha=0.25, linewidth=0)
        label = "mean \u00b1 1 std"
    else:
        label = "1 session"
    axes.plot(band.x, band.mean, color="C0", linewidth=2.2, label=label)
    axes.set_ylabel("mean episode return")
    axes.set_title(title)
    _steps_axis(axes)
    axes.legend(loc="best")
    return _save(figure, path)


def trials_bands(trials: Mapping[str, Sequence[tuple[Series, Series]]]) -> dict[str, Band]:
    """The curves of :func:`plot_trials`: per trial, :func:`trial_band` of its sessions'
    moving averages (SLM Lab's multi-trial ``mean_returns_ma`` graph).

    Example::

        >>> bands = trials_bands({"t0": [([1, 2], [2.0, 4.0]), ([1, 2], [4.0, 6.0])]})
        >>> bands["t0"].mean.tolist()
        [3.0, 4.0]
    """
    return {label: trial_band(sessions, smooth=True) for label, sessions in trials.items()}


def plot_trials(
    trials: Mapping[str, Sequence[tuple[Series, Series]]],
    path: str | os.PathLike,
    title: str,
    legend_title: str = "best first",
) -> Path:
    """Several trials on one graph: each trial's mean ± 1 std over sessions of the moving
    average (:func:`trials_bands`).

    ``trials`` maps a legend label (say ``"t3: lr=0.0007 discount=0.99"``) to the
    ``(frames, returns)`` of each of its sessions; pass them best first. The first
    :data:`MAX_LEGEND` get a colour, a band and a legend entry beside the plot, and are
    drawn on top; the rest are thin grey lines. Also draws several runs side by side
    (``batchenv analyze RUN RUN``). 1100 x 500 pixels.

    Example::

        >>> trials = {"t1: lr=0.001": [([1, 2, 3], [1, 2, 4]), ([1, 2, 3], [2, 3, 3])]}
        >>> plot_trials(trials, "/tmp/trials.png", "search")
        PosixPath('/tmp/trials.png')
    """
    bands = trials_bands(trials)
    figure, axes = _figure(_TRIALS_SIZE)
    for index, (label, band) in enumerate(bands.items()):
        named = index < MAX_LEGEND
        colour = f"C{index}" if named else "0.75"
        zorder = 3 + MAX_LEGEND - index if named else 2
        if named and band.std is not None:
            low, high = band.mean - band.std, band.mean + band.std
            axes.fill_between(
                band.x, low, high, color=colour, alpha=0.15, linewidth=0, zorder=zorder
            )
        axes.plot(
            band.x,
            band.mean,
            color=colour,
            linewidth=1.8 if named else 0.8,
            zorder=zorder,
            label=f"{label} ({band.sessions} s)" if named else "_nolegend_",
        )
    axes.set_ylabel(
        f"total_reward_ma (last {MA_WINDOW} checkpoints)\nmean \u00b1 1 std over sessions"
    )
    axes.set_title(title)
    _steps_axis(axes)
    count = len(bands)
    if count:
        shown = f"{MAX_LEGEND} of {count} named" if count > MAX_LEGEND else legend_title
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title=shown, fontsize=8)
    return _save(figure, path)


# --- experiment -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One panel of :func:`plot_experiment`: a metric against a searched parameter."""

    x: np.ndarray
    """Each trial's position on the parameter axis (NaN: value missing)."""
    y: np.ndarray
    """Each trial's metric (NaN where it is NaN or missing)."""
    strength: np.ndarray
    """Each trial's strength (its colour)."""
    scale: str
    """``log``, ``linear`` or ``category``."""
    categories: list[str]
    """The category names at positions 0, 1, ... (category scale only)."""

    @property
    def shown(self) -> np.ndarray:
        """Trials drawn as points."""
        return np.isfinite(self.x) & np.isfinite(self.y)

    @property
    def nan(self) -> np.ndarray:
        """Trials drawn as a NaN mark at the foot of the panel (value known, metric NaN)."""
        return np.isfinite(self.x) & ~np.isfinite(self.y)


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


def experiment_cells(
    rows: Sequence[Mapping[str, Any]],
    params: Sequence[str],
    metrics: Sequence[str],
    log_params: Collection[str] | None = None,
) -> dict[tuple[str, str], Cell]:
    """The panels of :func:`plot_experiment`, keyed ``(metric, param)``; trials in ``rows``
    order.

    A parameter in ``log_params`` (a ``loguniform`` or ``lograndint`` search leaf) gets a
    log axis; with ``log_params`` None, a numeric column whose values are positive and span
    more than two decades does. Strings, bools and other non-numbers (shown by ``str``)
    are categories at integer positions in sorted order, spread a little sideways so
    trials on one category stay apart.

    Example::

        >>> rows = [{"lr": 1e-4, "strength": 1.0}, {"lr": 3e-4, "strength": float("nan")}]
        >>> cell = experiment_cells(rows, ["lr"], ["strength"], log_params={"lr"})[
        ...     "strength", "lr"]
        >>> cell.scale, cell.shown.tolist(), cell.nan.tolist()
        ('log', [True, False], [False, True])
    """
    strength = np.array([_number(row.get("strength")) for row in rows])
    cells = {}
    for param in params:
        raw = [row.get(param) for row in rows]
        categories: list[str] = []
        if _is_categorical(raw):
            scale = "category"
            categories = sorted({str(v) for v in raw if v is not None})
            where = {label: index for index, label in enumerate(categories)}
            spread = np.linspace(-0.15, 0.15, 7)
            x = np.array(
                [
                    math.nan if v is None else where[str(v)] + spread[i % len(spread)]
                    for i, v in enumerate(raw)
                ]
            )
        else:
            x = np.array([_number(v) for v in raw])
            known = x[np.isfinite(x)]
            if log_params is not None:
                scale = "log" if param in log_params else "linear"
            else:
                wide = len(known) and known.min() > 0 and known.max() / known.min() > 100
                scale = "log" if wide else "linear"
        for metric in metrics:
            y = np.array([_number(row.get(metric)) for row in rows])
            cells[metric, param] = Cell(x, y, strength, scale, categories)
    return cells


def _tick_axis(axes, cell: Cell) -> None:
    """Few, short tick labels: 3 to 4 numbers (.3g), or the category names."""
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, StrMethodFormatter

    if cell.scale == "category":
        crowded = len(cell.categories) > 3 or max(map(len, cell.categories or [""])) > 8
        axes.set_xticks(
            range(len(cell.categories)),
            cell.categories,
            rotation=30 if crowded else 0,
            ha="right" if crowded else "center",
        )
        axes.set_xlim(-0.5, len(cell.categories) - 0.5)
        return
    if cell.scale == "log":
        axes.set_xscale("log")
        known = cell.x[np.isfinite(cell.x)]
        if len(known) and known.max() < 10 * known.min():  # within a decade: plain ticks
            axes.xaxis.set_major_locator(MaxNLocator(nbins=3))
        else:
            axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 3.0), numticks=5))
        axes.xaxis.set_minor_formatter(NullFormatter())
    else:
        axes.xaxis.set_major_locator(MaxNLocator(nbins=3))
    axes.xaxis.set_major_formatter(StrMethodFormatter("{x:.3g}"))


def plot_experiment(
    rows: Sequence[Mapping[str, Any]],
    params: Sequence[str],
    metrics: Sequence[str],
    path: str | os.PathLike,
    title: str,
    log_params: Collection[str] | None = None,
) -> Path:
    """A grid of metric against searched parameter, one point per trial.

    Rows of the grid are ``metrics``, columns ``params``; each ``rows`` entry is one trial's
    parameters and metrics (``strength`` colours its points; a trial without one is
    grey). The panels are :func:`experiment_cells` (``log_params``: the parameters searched
    on a log scale). A trial whose metric is NaN is an ``x`` at the foot of its panel, so
    no trial vanishes from a panel. Each cell is 320 x 240 pixels, plus 120 pixels of
    width (colorbar) and 60 of height.

    Example::

        >>> rows = [{"lr": 1e-4, "strength": 10.0}, {"lr": 1e-2, "strength": 30.0}]
        >>> plot_experiment(rows, ["lr"], ["strength"], "/tmp/e.png", "search", {"lr"})
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
    cells = experiment_cells(rows, params, metrics, log_params)
    strength = np.array([_number(row.get("strength")) for row in rows])
    order = np.argsort(np.where(np.isnan(strength), -np.inf, strength), kind="stable")
    finite = strength[np.isfinite(strength)]
    low, high = (finite.min(), finite.max()) if len(finite) else (0.0, 1.0)
    norm = Normalize(low, high if high > low else low + 1.0)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.7")
    colours = cmap(norm(np.ma.masked_invalid(strength)))
    marked = False
    for col, param in enumerate(params):
        for line, metric in enumerate(metrics):
            axes, cell = grid[line, col], cells[metric, param]
            shown = cell.shown[order]
            x, y = cell.x[order], cell.y[order]
            axes.scatter(
                x[shown], y[shown], c=colours[order][shown], s=28, edgecolors="0.2", lw=0.4
            )
            if cell.nan.any():
                marked = True
                axes.scatter(
                    cell.x[cell.nan],
                    np.full(int(cell.nan.sum()), 0.04),
                    transform=axes.get_xaxis_transform(),
                    marker="x",
                    color="C3",
                    s=30,
                    lw=1.2,
                    clip_on=False,
                )
            axes.grid(alpha=0.3)
            if col == 0:
                axes.set_ylabel(metric)
        bottom = grid[-1, col]
        _tick_axis(bottom, cells[metrics[0], param])
        bottom.set_xlabel(param)
    colorbar = figure.colorbar(ScalarMappable(norm, cmap), ax=grid, shrink=0.9, aspect=30)
    colorbar.set_label("strength")
    suffix = "  (\u00d7 at a panel's foot: that trial's metric is NaN)" if marked else ""
    figure.suptitle(title + suffix)
    return _save(figure, path)
