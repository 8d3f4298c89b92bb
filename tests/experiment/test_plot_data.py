"""The data behind each plot, checked through the functions that build it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchenv.experiment import plots

pytest.importorskip("matplotlib")


def test_session_curves_use_slm_lab_s_100_checkpoint_window_whatever_the_length():
    returns = [10.0, 20.0, 30.0, 40.0] + [50.0] * 10  # 14 checkpoints, as one CartPole run
    curves = plots.session_curves(np.arange(1, 15) * 1000, returns)
    assert list(curves) == [
        "total_reward (each checkpoint)",
        "total_reward_ma (mean of the last 100 checkpoints)",
    ]
    raw, ma = (y.tolist() for _, y in curves.values())
    assert raw == returns  # the raw line is its own line, never replaced by the average
    # trailing mean, at most 100 points: at 14 checkpoints, the mean of all so far
    assert ma[:4] == [10.0, 15.0, 20.0, 25.0]
    assert ma[-1] == pytest.approx(sum(returns) / 14)
    long = plots.session_curves(np.arange(150), np.arange(150.0))[plots.MA_LABEL][1]
    assert long[-1] == sum(range(50, 150)) / 100  # the last 100 of 150


def test_trial_band_is_mean_and_sample_std_over_sessions_cut_to_the_shortest():
    band = plots.trial_band([([1, 2, 3], [1.0, 2.0, 9.0]), ([1, 2], [3.0, math.nan])])
    assert band.x.tolist() == [1.0, 2.0] and band.sessions == 2
    assert band.mean.tolist() == [2.0, 2.0]  # NaN left out of the mean
    assert band.std[0] == pytest.approx(math.sqrt(2)) and math.isnan(band.std[1])
    assert plots.trial_band([([1], [4.0])]).std is None


def test_trials_bands_average_each_session_s_moving_average_not_session_0():
    # session 0 reaches 1000, session 1 ends at 229: the trial is drawn at their mean
    trials = {"t0: lr=0.001": [([1, 2], [1000.0, 1000.0]), ([1, 2], [229.0, 229.0])]}
    band = plots.trials_bands(trials)["t0: lr=0.001"]
    assert band.mean.tolist() == [614.5, 614.5]
    assert band.std.tolist() == pytest.approx([771 / math.sqrt(2)] * 2)
    smooth = plots.trials_bands({"t": [([1, 2, 3], [0.0, 6.0, 3.0])]})["t"]
    assert smooth.mean.tolist() == [0.0, 3.0, 3.0]  # moving averages, then the mean


def test_experiment_cells_mark_nan_trials_and_take_the_log_scale_from_the_search():
    rows = [
        {"lr": 7e-4, "opt": "adam", "strength": 5.0, "stability": math.nan},
        {"lr": 8e-4, "opt": "sgd", "strength": 7.0, "stability": 0.5},
        {"lr": None, "opt": "sgd", "strength": 9.0, "stability": 0.2},
    ]
    cells = plots.experiment_cells(rows, ["lr", "opt"], ["strength", "stability"], {"lr"})
    cell = cells["stability", "lr"]
    assert cell.scale == "log"  # a loguniform leaf, though it spans less than a decade
    assert cell.shown.tolist() == [False, True, False]
    assert cell.nan.tolist() == [True, False, False]  # marked; the missing lr is not
    assert cells["stability", "opt"].scale == "category"
    assert cells["stability", "opt"].categories == ["adam", "sgd"]
    guessed = plots.experiment_cells(rows, ["lr"], ["strength"])["strength", "lr"]
    assert guessed.scale == "linear"  # no search given: two decades or more for log


@pytest.mark.parametrize("log", [True, False], ids=["log", "linear"])
def test_experiment_tick_labels_are_few_and_do_not_overlap(tmp_path, monkeypatch, log):
    figures = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda f, p: (figures.append(f), save(f, p))[1])
    lrs = np.linspace(7e-4, 9.5e-4, 8)
    rows = [{"lr": lr, "strength": float(i), "stability": 0.5} for i, lr in enumerate(lrs)]
    rows[2]["stability"] = math.nan
    plots.plot_experiment(
        rows, ["lr"], ["strength", "stability"], tmp_path / "e.png", "x", {"lr"} if log else set()
    )
    figure = figures[0]
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    bottom = [a for a in figure.axes if a.get_label() != "<colorbar>"][-1]
    labels = [
        t
        for t in bottom.get_xticklabels(which="both")
        if t.get_text()
        and t.get_visible()
        and bottom.get_xlim()[0] <= t.get_position()[0] <= bottom.get_xlim()[1]
    ]
    assert 1 <= len(labels) <= 5
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:]))
    assert "NaN" in figure.get_suptitle()  # the marked trial is explained
