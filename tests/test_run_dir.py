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


def test_tensorboard_tags_are_per_phase_and_csv_columns_are_not(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunDirectory(tmp_path / "run", "batchppo", {"a": 1}, seed=0) as run:
        run.log(100, "train", mean_score=10.0)
        run.log(100, "eval", mean_score=50.0)
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/mean_score", "eval/mean_score"} <= tags and "mean_score" not in tags
    assert [e.value for e in events.Scalars("train/mean_score")] == [10.0]
    assert [e.value for e in events.Scalars("eval/mean_score")] == [50.0]
    with open(tmp_path / "run" / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["phase"], r["mean_score"]) for r in rows] == [("train", "10.0"), ("eval", "50.0")]


def test_git_commit_comes_from_the_build_when_there_is_no_checkout(monkeypatch):
    import sys
    import types

    from batchenv import run_dir

    monkeypatch.setattr(run_dir, "__file__", "/nonexistent/site-packages/batchenv/run_dir.py")
    monkeypatch.delitem(sys.modules, "batchenv._build_info", raising=False)
    import batchenv

    monkeypatch.delattr(batchenv, "_build_info", raising=False)
    monkeypatch.setitem(sys.modules, "batchenv._build_info", None)  # not built: no file
    assert run_dir.git_commit() is None
    info = types.ModuleType("batchenv._build_info")
    info.GIT_COMMIT = "0123abcd" * 5
    monkeypatch.setitem(sys.modules, "batchenv._build_info", info)
    monkeypatch.setattr(batchenv, "_build_info", info, raising=False)
    assert run_dir.git_commit() == "0123abcd" * 5


def test_config_json_records_the_package_version(tmp_path):
    from importlib.metadata import version

    with RunDirectory(tmp_path / "run", "impala", {"a": 1}, seed=0) as run:
        assert run.record["batchenv_version"] == version("batchenv")


def test_setup_py_records_the_commit_in_the_built_package(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    stub = tmp_path / "stub" / "pybind11"  # setup.py needs pybind11 only for the C++ ext
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "setup_helpers.py").write_text(
        "from setuptools import Extension\n"
        "def Pybind11Extension(name, sources, cxx_std=17, **kw):\n"
        "    return Extension(name, sources, **kw)\n"
    )
    build = tmp_path / "build"
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(build)],
        cwd=root,
        env={**__import__("os").environ, "PYTHONPATH": str(stub.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = (build / "batchenv" / "_build_info.py").read_text()
    assert f"GIT_COMMIT = {head.stdout.strip()!r}" in text
