"""RunDirectory: config record, metrics with a phase column, curve, checkpoints, resume."""

import csv
import json
from dataclasses import dataclass

import pytest
import torch

from batchenv.run_dir import RunDirectory


@dataclass
class TinyConfig:
    learning_rate: float = 1e-3
    layers: tuple = (8, 8)


def test_run_directory_writes_everything_and_resumes(tmp_path):
    path = tmp_path / "run"
    run = RunDirectory(path, "batchppo", TinyConfig(), seed=7, env_id="Pendulum-v1")
    for step in range(1, 4):
        run.log(step * 100, "train", mean_score=-1000.0 + step, loss=0.5)
    run.log(300, "eval", mean_score=-900.0)
    run.save_checkpoint({"step": 300, "weights": torch.arange(3.0)})
    assert run.plot_curve().name == "curve.png"
    run.close()

    record = json.loads((path / "config.json").read_text())
    assert record["algorithm"] == "batchppo" and record["seed"] == 7
    assert record["config"] == {"learning_rate": 1e-3, "layers": [8, 8]}
    assert "git_commit" in record and record["env_id"] == "Pendulum-v1"
    with open(path / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [r["phase"] for r in rows] == ["train", "train", "train", "eval"]
    assert rows[-1]["mean_score"] == "-900.0" and rows[-1]["loss"] == ""
    assert float(rows[-1]["wall_time"]) >= float(rows[0]["wall_time"])
    assert (path / "curve.png").stat().st_size > 1000

    again = RunDirectory(path, "batchppo", resume=True)
    assert again.config["learning_rate"] == 1e-3 and again.seed == 7
    state = again.load_checkpoint()
    assert state["step"] == 300 and torch.equal(state["weights"], torch.arange(3.0))
    assert again.wall_time() >= float(rows[-1]["wall_time"])
    again.log(400, "train", mean_score=-800.0)
    again.close()
    with open(path / "metrics.csv", newline="") as file:
        assert len(list(csv.DictReader(file))) == 5


def test_run_directory_refuses_to_overwrite_or_resume_nothing(tmp_path):
    RunDirectory(tmp_path / "a", "impala", {"x": 1}, seed=0).close()
    with pytest.raises(FileExistsError, match="already holds a run"):
        RunDirectory(tmp_path / "a", "impala", {"x": 1}, seed=0)
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        RunDirectory(tmp_path / "b", "impala", resume=True)
    with pytest.raises(ValueError, match="resume needs the path"):
        RunDirectory(None, "impala", resume=True)


def test_default_path_is_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = RunDirectory(None, "batchppo", {"a": 1}, seed=1, env_id="batchenv.kernels:CartPole")
    assert run.path.parent.name == "runs" and run.path.name.startswith(
        "batchppo-batchenv.kernels_CartPole-"
    )
    assert run.load_checkpoint() is None
    run.close()
