"""Plots: each writes a PNG of the expected size, and copes with one session, one trial, NaN."""

import math
import subprocess
import sys

import numpy as np
import pytest

from batchenv.experiment import plots

pytest.importorskip("matplotlib")
from matplotlib.image import imread  # noqa: E402

FRAMES = np.arange(1, 61) * 1000.0


def curve(seed, n=60):
    rng = np.random.default_rng(seed)
    return np.linspace(20, 500, n) + rng.normal(0, 30, n)


def pixels(path):
    assert path.stat().st_size > 0
    return imread(path).shape[:2]  # (height, width)


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib Figure of every plot saved in the test."""
    seen = []
    save = plots._save

    def keep(figure, path):
        seen.append(figure)
        return save(figure, path)

    monkeypatch.setattr(plots, "_save", keep)
    return seen


def test_session(tmp_path, figures):
    path = plots.plot_session(FRAMES, curve(0), tmp_path / "sub" / "session.png", "session")
    assert path == tmp_path / "sub" / "session.png"
    assert pixels(path) == (450, 800)
    axes = figures[0].axes[0]
    assert axes.get_xlabel() and axes.get_ylabel() and axes.get_title() == "session"
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [
        "total_reward (each checkpoint)",
        "total_reward_ma (mean of the last 100 checkpoints)",
    ]


def test_session_with_nan_and_one_point(tmp_path):
    returns = curve(0)
    returns[10:20] = math.nan
    assert pixels(plots.plot_session(FRAMES, returns, tmp_path / "nan.png", "t")) == (450, 800)
    assert pixels(plots.plot_session([0], [5.0], tmp_path / "one.png", "t")) == (450, 800)
    assert pixels(plots.plot_session([0], [math.nan], tmp_path / "nan1.png", "t")) == (450, 800)


def test_trial(tmp_path, figures):
    sessions = [(FRAMES[: 60 - k], curve(k)[: 60 - k]) for k in range(4)]  # unequal lengths
    sessions[1][1][5] = math.nan
    assert pixels(plots.plot_trial(sessions, tmp_path / "trial.png", "trial")) == (450, 800)
    legend = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert legend == ["4 sessions", "mean \u00b1 1 std"]


def test_trial_of_one_session(tmp_path, figures):
    path = plots.plot_trial([(FRAMES, curve(0))], tmp_path / "one.png", "trial")
    assert pixels(path) == (450, 800)
    assert [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()] == ["1 session"]


def experiment_rows(count):
    rng = np.random.default_rng(0)
    return [
        {
            "learning_rate": 10 ** rng.uniform(-5, -2),
            "discount": [0.9, 0.99][i % 2],
            "optimizer": ["adam", "sgd", "rmsprop"][i % 3],
            "strength": float(rng.uniform(0, 400)),
            "stability": float(rng.uniform(0, 1)),
            "consistency": math.nan if i == 0 else float(rng.uniform(-1, 1)),
        }
        for i in range(count)
    ]


def test_experiment_grid(tmp_path, figures):
    params = ["learning_rate", "discount", "optimizer"]
    metrics = ["strength", "stability", "consistency"]
    path = plots.plot_experiment(experiment_rows(12), params, metrics, tmp_path / "e.png", "x")
    # 320 x 240 pixels a cell, plus 120 x 60
    assert pixels(path) == (240 * len(metrics) + 60, 320 * len(params) + 120)
    figure = figures[0]
    grid = [a for a in figure.axes if a.get_label() != "<colorbar>"]
    assert len(grid) == len(metrics) * len(params)
    colorbars = [a for a in figure.axes if a.get_label() == "<colorbar>"]
    assert len(colorbars) == 1 and colorbars[0].get_ylabel() == "strength"
    bottom = grid[-len(params) :]
    assert [a.get_xlabel() for a in bottom] == params
    assert [grid[i * len(params)].get_ylabel() for i in range(len(metrics))] == metrics
    assert bottom[0].get_xscale() == "log"  # 1e-5 .. 1e-2 spans 3 decades
    assert bottom[1].get_xscale() == "linear"
    assert [t.get_text() for t in bottom[2].get_xticklabels()] == ["adam", "rmsprop", "sgd"]


def test_experiment_of_one_trial_with_nan(tmp_path, figures):
    rows = [{"flag": True, "lr": 1e-3, "strength": math.nan, "stability": math.nan}]
    path = plots.plot_experiment(rows, ["flag", "lr"], ["strength"], tmp_path / "one.png", "x")
    assert pixels(path) == (240 + 60, 320 * 2 + 120)
    assert len([a for a in figures[0].axes if a.get_label() != "<colorbar>"]) == 2


def test_trials_of_many(tmp_path, figures):
    trials = {f"t{i}": [(FRAMES, curve(i)), (FRAMES, curve(i + 50))] for i in range(12)}
    trials["t11"][0][1][3] = math.nan
    path = plots.plot_trials(trials, tmp_path / "trials.png", "search")
    assert pixels(path) == (500, 1100)
    legend = figures[0].axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [f"t{i} (2 s)" for i in range(10)]
    assert legend.get_title().get_text() == "10 of 12 named"


def test_trials_of_one_trial_of_one_session(tmp_path, figures):
    path = plots.plot_trials({"only": [(FRAMES, curve(0))]}, tmp_path / "o.png", "t")
    assert pixels(path) == (500, 1100)
    assert [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()] == ["only (1 s)"]


def test_moving_average_skips_nan():
    # window 2: [1], [1, 3], [3, nan], [nan, 5], [5, 7]
    assert plots.moving_average([1, 3, math.nan, 5, 7], 2).tolist() == [1, 2, 3, 5, 6]
    assert np.isnan(plots.moving_average([math.nan], 3)).all()


def test_missing_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[plot\]"'):
        plots.plot_session([0], [1.0], tmp_path / "x.png", "t")


def test_module_imports_without_matplotlib():
    code = "import sys, batchenv.experiment.plots; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
