"""SLM Lab's session and trial metrics: strength, efficiency, stability, consistency.

The definitions follow SLM Lab's experiment analysis (Keng & Graesser, "SLM Lab: A
Comprehensive Benchmark and Modular Software Framework for Reproducible Deep Reinforcement
Learning", and SLM Lab's ``analysis`` module). For one session, with ``R_i`` the mean return
at checkpoint ``i = 1..N``, ``R_rand`` the mean return of a uniformly random policy and
``t_i`` the frames (or optimiser steps) at that checkpoint:

- local strength ``str_i = R_i - R_rand``; ``strength`` is their mean, ``max_strength`` the
  largest, ``final_strength`` the last.
- ``sample_efficiency = sum_i(str_i / t_i) / sum_i(str_i)``, checkpoints with ``t_i = 0``
  left out of the numerator only (``training_efficiency`` is the same with optimiser steps).
  SLM Lab's docstring writes ``sum_i(1 / t_i)`` as the divisor; its code divides by the sum
  of *all* local strengths, a strength-weighted mean of ``1 / t``. This module does what
  the code does.
- ``stability = 1 - |sum_{i<N} min(str_{i+1} - str_i, 0) / sum_{i<N} str_i|``: only drops
  between consecutive checkpoints count.
- ``total_reward_ma`` is the mean of the last ``min(100, N)`` returns.

For a trial (several sessions of one configuration) every session scalar is averaged over
the sessions, and ``consistency = 1 - 2 * sum_i sigma_i / sum_i mu_i`` is added, with
``mu_i``, ``sigma_i`` the mean and sample standard deviation (ddof=1) of the sessions' local
strengths at checkpoint ``i`` (as SLM Lab computes it: on strengths, not raw returns), the
sessions cut to the shortest.

Where SLM Lab divides by a sum that is zero or negative (the ratio blows up or flips sign),
these functions return NaN and emit a :class:`MetricWarning` that names the metric; given a
``notes`` list they append the warnings to it instead, and :func:`explain_nan` turns the
notes of a trial into one line (what the experiment prints once per trial).

Edge cases:

- a checkpoint whose return is NaN (no episode finished there) is dropped before anything
  is computed, for every metric; ``frames`` still reports the last frame count given.
- an empty session (no finite return) gives NaN everywhere and one warning.
- one checkpoint: ``stability`` is NaN (there is no step to judge), silently.
- one session: ``consistency`` and ``final_return_std`` are NaN (a sample standard
  deviation needs two sessions), silently; SLM Lab's pandas code reports 1.0 there.

Example::

    >>> m = session_metrics([1, 3, 2, 5], frames=[10, 20, 30, 40], random_return=1.0)
    >>> m["strength"], m["stability"]
    (1.75, 0.6666666666666667)
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

#: How many of the last checkpoints ``total_reward_ma`` averages (SLM Lab's PLOT_MA_WINDOW).
MA_WINDOW = 100

#: The scalars of :func:`session_metrics`, in display order.
SESSION_METRIC_NAMES: tuple[str, ...] = (
    "frames",
    "total_reward_ma",
    "final_return",
    "strength",
    "max_strength",
    "final_strength",
    "sample_efficiency",
    "training_efficiency",
    "stability",
)

#: The scalars of :func:`trial_metrics`, in display order.
METRIC_NAMES: tuple[str, ...] = (
    "frames",
    "total_reward_ma",
    "final_return",
    "final_return_std",
    "strength",
    "max_strength",
    "final_strength",
    "sample_efficiency",
    "training_efficiency",
    "stability",
    "consistency",
    "sessions",
)


#: Why a metric came out NaN (:attr:`MetricWarning.reason`).
NO_RETURN = "no finite return"
NOT_ABOVE_RANDOM = "not above random"


class MetricWarning(RuntimeWarning):
    """A metric came out NaN because its definition breaks down on this data.

    ``metric`` names it (``"*"``: every metric); ``reason`` is :data:`NO_RETURN` or
    :data:`NOT_ABOVE_RANDOM`.
    """

    def __init__(self, message: str, metric: str = "*", reason: str = NOT_ABOVE_RANDOM):
        super().__init__(message)
        self.metric = metric
        self.reason = reason


Notes = list  # of MetricWarning: what a ``notes=`` argument collects


def _warn(warning: MetricWarning, notes: Notes | None) -> None:
    if notes is not None:
        notes.append(warning)
    else:
        warnings.warn(warning, stacklevel=3)


def _as_series(values: Sequence[float], name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got shape {array.shape}")
    return array


def _efficiency(strengths: np.ndarray, ts: np.ndarray, name: str, notes: Notes | None) -> float:
    """``sum(str_i / t_i) / sum(str_i)``; ``t_i = 0`` left out of the numerator only."""
    counted = np.isfinite(ts) & (ts != 0)
    denominator = float(strengths.sum())
    if denominator <= 0:
        message = (
            f"{name} is NaN: the sum of local strengths ({denominator:.6g}) is <= 0, so the "
            "strength-weighted mean of 1/t is undefined (the policy is no better than random)."
        )
        _warn(MetricWarning(message, name), notes)
        return float("nan")
    return float((strengths[counted] / ts[counted]).sum() / denominator)


def _stability(strengths: np.ndarray, notes: Notes | None) -> float:
    if len(strengths) < 2:
        return float("nan")
    drops = np.minimum(np.diff(strengths), 0.0)
    denominator = float(strengths[:-1].sum())
    if denominator <= 0:
        message = (
            f"stability is NaN: the sum of local strengths before the last checkpoint "
            f"({denominator:.6g}) is <= 0, so the relative size of the drops is undefined."
        )
        _warn(MetricWarning(message, "stability"), notes)
        return float("nan")
    return float(1.0 - abs(drops.sum() / denominator))


def session_metrics(
    returns: Sequence[float],
    frames: Sequence[float],
    opt_steps: Sequence[float] | None = None,
    random_return: float = 0.0,
    *,
    notes: Notes | None = None,
) -> dict[str, float]:
    """The scalar metrics of one session, keyed as :data:`SESSION_METRIC_NAMES`.

    Args:
        returns: mean episode return at each checkpoint (NaN where no episode finished;
            such checkpoints are dropped).
        frames: env frames at each checkpoint (same length).
        opt_steps: optimiser steps at each checkpoint (same length), or None, which makes
            ``training_efficiency`` NaN.
        random_return: mean return of a uniformly random policy on the env
            (see ``batchenv.experiment.baseline.random_return``).
        notes: a list that collects the :class:`MetricWarning` of each NaN metric instead
            of warning (None: warn).

    Returns:
        ``strength``, ``max_strength``, ``final_strength``, ``sample_efficiency``,
        ``training_efficiency``, ``stability``, ``total_reward_ma``, ``final_return`` (the
        last finite return) and ``frames`` (the last entry of ``frames``, dropped
        checkpoint or not: how far the session ran).

    Example::

        >>> m = session_metrics([1, 3, 2, 5], [10, 20, 30, 40], random_return=1.0)
        >>> m["strength"], m["max_strength"], m["sample_efficiency"]
        (1.75, 4.0, 0.03333333333333333)
    """
    returns_ = _as_series(returns, "returns")
    frames_ = _as_series(frames, "frames")
    if len(frames_) != len(returns_):
        raise ValueError(f"frames has {len(frames_)} entries, returns {len(returns_)}")
    steps = None
    if opt_steps is not None:
        steps = _as_series(opt_steps, "opt_steps")
        if len(steps) != len(returns_):
            raise ValueError(f"opt_steps has {len(steps)} entries, returns {len(returns_)}")
    nan = float("nan")
    last_frame = float(frames_[-1]) if len(frames_) else nan

    kept = ~np.isnan(returns_)
    returns_, frames_ = returns_[kept], frames_[kept]
    if len(returns_) == 0:
        message = "session_metrics got no checkpoint with a finite return; every metric is NaN."
        _warn(MetricWarning(message, "*", NO_RETURN), notes)
        result = dict.fromkeys(SESSION_METRIC_NAMES, nan)
        result["frames"] = last_frame
        return result
    strengths = returns_ - float(random_return)
    return {
        "frames": last_frame,
        "total_reward_ma": float(returns_[-MA_WINDOW:].mean()),
        "final_return": float(returns_[-1]),
        "strength": float(strengths.mean()),
        "max_strength": float(strengths.max()),
        "final_strength": float(strengths[-1]),
        "sample_efficiency": _efficiency(strengths, frames_, "sample_efficiency", notes),
        "training_efficiency": (
            nan
            if steps is None
            else _efficiency(strengths, steps[kept], "training_efficiency", notes)
        ),
        "stability": _stability(strengths, notes),
    }


def consistency(series: Sequence[Sequence[float]], *, notes: Notes | None = None) -> float:
    """SLM Lab's consistency of several sessions' local-strength series.

    ``1 - 2 * sum_i sigma_i / sum_i mu_i``, with ``mu_i`` and ``sigma_i`` the mean and sample
    standard deviation (ddof=1) across sessions at checkpoint ``i``. The series are cut to
    the shortest; a checkpoint where any session is NaN is left out. NaN for fewer than two
    sessions or no common checkpoint (silently), and when ``sum_i mu_i <= 0`` (with a
    :class:`MetricWarning`, or a note in ``notes``).

    Example::

        >>> consistency([[1, 2, 3], [3, 4, 5]])  # 1 - 2 * (3 * sqrt(2)) / (2 + 3 + 4)
        0.05719095841793653
    """
    if len(series) < 2:
        return float("nan")
    arrays = [_as_series(s, "each series") for s in series]
    length = min(len(a) for a in arrays)
    table = np.stack([a[:length] for a in arrays])  # [sessions, checkpoints]
    table = table[:, np.isfinite(table).all(axis=0)]
    if table.shape[1] == 0:
        return float("nan")
    mu = table.mean(axis=0)
    sigma = table.std(axis=0, ddof=1)
    denominator = float(mu.sum())
    if denominator <= 0:
        message = (
            f"consistency is NaN: the sum over checkpoints of the mean local strength "
            f"({denominator:.6g}) is <= 0, so the relative spread is undefined."
        )
        _warn(MetricWarning(message, "consistency"), notes)
        return float("nan")
    return float(1.0 - 2.0 * sigma.sum() / denominator)


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if not np.isnan(v)]
    return float(np.mean(finite)) if finite else float("nan")


def trial_metrics(sessions: Sequence[Mapping], *, notes: Notes | None = None) -> dict[str, float]:
    """The scalar metrics of one trial, keyed as :data:`METRIC_NAMES`.

    Args:
        sessions: one mapping per session with ``returns``, ``frames``, optionally
            ``opt_steps`` and ``random_return`` (default 0.0), as :func:`session_metrics`
            takes them.
        notes: a list that collects the :class:`MetricWarning` of each NaN metric (of
            every session, and consistency) instead of warning (None: warn).

    Returns:
        The mean over sessions of every :func:`session_metrics` scalar (sessions where it
        is NaN left out, as pandas' ``mean`` does in SLM Lab; NaN when all are), plus
        ``consistency`` of the sessions' local strengths, ``final_return_std`` (sample
        standard deviation, ddof=1, of the sessions' final returns; NaN for one session) and
        ``sessions`` (how many were given).

    Example::

        >>> t = trial_metrics([
        ...     {"returns": [1, 3], "frames": [10, 20], "random_return": 0.0},
        ...     {"returns": [3, 5], "frames": [10, 20], "random_return": 0.0},
        ... ])
        >>> t["strength"], t["final_return_std"], t["sessions"]
        (3.0, 1.4142135623730951, 2)
    """
    if len(sessions) == 0:
        raise ValueError("trial_metrics needs at least one session")
    per_session = []
    strengths = []
    for session in sessions:
        base = float(session.get("random_return", 0.0))
        per_session.append(
            session_metrics(
                session["returns"],
                session["frames"],
                session.get("opt_steps"),
                base,
                notes=notes,
            )
        )
        strengths.append(_as_series(session["returns"], "returns") - base)
    result: dict[str, float] = {
        name: _nanmean([m[name] for m in per_session]) for name in SESSION_METRIC_NAMES
    }
    finals = [m["final_return"] for m in per_session if not np.isnan(m["final_return"])]
    result["final_return_std"] = float(np.std(finals, ddof=1)) if len(finals) > 1 else float("nan")
    result["consistency"] = consistency(strengths, notes=notes)
    result["sessions"] = len(sessions)
    return {name: result[name] for name in METRIC_NAMES}


def explain_nan(notes: Sequence[MetricWarning], sessions: int, random_return: float) -> str | None:
    """One line saying which metrics of a trial came out NaN and why (None: none did).

    ``notes`` are what :func:`trial_metrics` collected for a trial of ``sessions`` sessions.

    Example::

        >>> notes = []
        >>> rows = [{"returns": [1, 2], "frames": [1, 2], "random_return": 5.0}]
        >>> _ = trial_metrics(rows, notes=notes)
        >>> explain_nan(notes, 1, 5.0).split(":")[0]
        'sample_efficiency, stability NaN in 1 of 1 sessions'
    """
    parts = []
    empty = sum(1 for note in notes if note.reason == NO_RETURN)
    if empty:
        parts.append(f"{empty} of {sessions} sessions had no checkpoint with a finished episode")
    weak: dict[str, int] = {}
    for note in notes:
        if note.reason == NOT_ABOVE_RANDOM:
            weak[note.metric] = weak.get(note.metric, 0) + 1
    if weak:
        counts = [count for metric, count in weak.items() if metric != "consistency"]
        where = f" in {max(counts)} of {sessions} sessions" if counts else ""
        parts.append(
            f"{', '.join(weak)} NaN{where}: the return never beat the random policy's "
            f"{random_return:.4g} on the whole (local strengths sum to <= 0)"
        )
    return "; ".join(parts) or None
