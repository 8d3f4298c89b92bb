"""curve_points: the rows of metrics.csv that make a learning curve (curve.png)."""

from __future__ import annotations

import csv

from batchenv.logger import curve_points


def write(path, rows):
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, ["step", "phase", "mean_score", "episodes"])
        writer.writeheader()
        writer.writerows(rows)


def test_a_row_of_too_few_episodes_is_not_a_point_of_the_curve(tmp_path):
    # train rows of 750, 300, 30, 30 episodes, then the one-episode row a resumed run's
    # short last phase writes: median 30, so rows under 3 episodes are left out
    train = [(15000, 20.0, 750), (30000, 60.0, 300), (45000, 500.0, 30), (60000, 500.0, 30)]
    rows = [{"step": s, "phase": "train", "mean_score": m, "episodes": e} for s, m, e in train]
    rows.append({"step": 60010, "phase": "train", "mean_score": 323.0, "episodes": 1})
    rows += [{"step": s, "phase": "eval", "mean_score": 500.0, "episodes": 30} for s in (15000,)]
    rows.append({"step": 61000, "phase": "eval", "mean_score": "", "episodes": 0})  # no score
    write(tmp_path / "metrics.csv", rows)

    curves = curve_points(tmp_path / "metrics.csv")

    assert curves["train"].steps == [15000, 30000, 45000, 60000]
    assert curves["train"].scores == [20.0, 60.0, 500.0, 500.0]
    assert curves["train"].left_out == [(60010, 323.0, 1)]
    assert curves["train"].least_episodes == 3
    assert curves["eval"].steps == [15000] and curves["eval"].left_out == []


def test_rows_without_an_episodes_column_are_all_points(tmp_path):
    with open(tmp_path / "metrics.csv", "w") as file:
        file.write("step,mean_score\n1,5.0\n2,6.0\n")
    curve = curve_points(tmp_path / "metrics.csv")["train"]
    assert curve.steps == [1.0, 2.0] and curve.left_out == []
