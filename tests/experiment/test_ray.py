"""Searches on Ray Tune (``--backend ray``): same suggestions as the local backend, the same
run directory, failures, ASHA pruning, resume without rerunning, and fast one-line errors.

All tests share one local Ray instance (``ray_cluster``, session-scoped: ``ray.init`` takes
~5 s; tests/ray_session.py, shared with tests/test_ray_workers.py) and skip when Ray is not
installed. They use tests/experiment/toy_trainer.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchenv.experiment import SpecError, run
from batchenv.experiment.session import read_checkpoints
from tests import ray_session
from tests.cli_process import batchenv_command
from tests.experiment.test_experiment import ROOT, rows, toy_spec, wait_for
from tests.experiment.test_search import interrupted_search

ray = pytest.importorskip("ray", reason="the ray extra is not installed")
pytest.importorskip("ray.tune", reason="the ray extra is not installed")

ray_cluster = ray_session.ray_cluster  # the session's one Ray instance


def search_spec(tmp_path, **kwargs) -> Path:
    meta = {"sessions": 2, "trials": 3, "steps": 300, "seed": 5, **kwargs.pop("meta", {})}
    search = kwargs.pop("search", {"config.x__uniform": [0.0, 1.0], "config.y__randint": [0, 5]})
    return toy_spec(tmp_path, meta=meta, search=search, **kwargs)


def test_the_same_spec_suggests_the_same_trials_on_both_backends(tmp_path, ray_cluster):
    # One trial at a time on both, so each backend asks after telling the last result.
    path = search_spec(tmp_path, meta={"sampler": "tpe", "max_concurrent": 1})
    local = run(path, mode="search", runs_dir=tmp_path / "local", progress=False)
    remote = run(path, mode="search", runs_dir=tmp_path / "ray", backend="ray", progress=False)

    assert [t.number for t in remote.trials] == [0, 1, 2]
    assert [t.values for t in remote.trials] == [t.values for t in local.trials]
    assert [_metrics(t) for t in remote.trials] == [_metrics(t) for t in local.trials]
    assert json.loads((remote.path / "run.json").read_text())["backend"] == "ray"
    # The same run directory; Tune's state in tune/ where the local backend keeps its
    # journal and each trial's owner (for joining a search from a second process).
    assert _tree(remote.path) - {"tune"} == _tree(local.path) - {"study.journal", "t/owner.json"}
    assert [_row(r) for r in rows(remote.path / "experiment.csv")] == [
        _row(r) for r in rows(local.path / "experiment.csv")
    ]
    assert (remote.path / "best_spec.yaml").read_text() == (
        local.path / "best_spec.yaml"
    ).read_text().replace(local.path.name, remote.path.name)


def test_a_crashing_trial_is_recorded_and_the_search_goes_on(tmp_path, ray_cluster):
    path = search_spec(
        tmp_path,
        config={"crash_above": 0.5},
        meta={"sampler": "grid"},
        search={"config.x__grid_search": [0.2, 0.9, 0.1]},
    )
    result = run(path, mode="search", runs_dir=tmp_path / "runs", backend="ray", progress=False)

    statuses = {t.number: t.status for t in result.trials}
    assert len(statuses) == 3 and "failed" in statuses.values() and "done" in statuses.values()
    for trial in result.trials:
        assert (trial.status == "failed") == (trial.values["config.x"] > 0.5)
        if trial.status == "failed":
            record = json.loads((trial.path / "trial.json").read_text())
            assert "RuntimeError: toy crash" in record["error"]
    table = rows(result.path / "experiment.csv")
    assert sorted(row["status"] for row in table) == sorted(statuses.values())


def test_asha_stops_weak_trials_on_env_steps(tmp_path, ray_cluster):
    # One trial at a time, the best first (the grid's order for seed 5): it sets the cutoff
    # of each rung (100 and 400 env steps), and the far worse trials stop at the first.
    path = search_spec(
        tmp_path,
        config={"delay": 0.25},
        meta={
            "sessions": 1,
            "max_concurrent": 1,
            "trials": 3,
            "steps": 800,
            "sampler": "grid",
            "pruner": "successive_halving",
        },
        search={"config.x__grid_search": [0.3, 2.0, 3.0]},
    )
    result = run(path, mode="search", runs_dir=tmp_path / "runs", backend="ray", progress=False)

    assert [(t.values["config.x"], t.status) for t in result.trials] == [
        (0.3, "done"),
        (2.0, "pruned"),
        (3.0, "pruned"),
    ]
    for trial in result.trials[1:]:  # stopped at the first rung (Tune takes a moment)
        assert len(read_checkpoints(trial.path / "s0")) < 8, trial
        assert json.loads((trial.path / "trial.json").read_text())["status"] == "pruned"
    assert len(read_checkpoints(result.trials[0].path / "s0")) == 8


def _start_driver(spec: Path, runs: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = batchenv_command("run", str(spec), "--mode", "search")
    command += ["--runs-dir", str(runs), "--no-progress", "--backend", "ray", *extra]
    return subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def _starts(folder: Path) -> list[int]:
    return [int(line.split()[1]) for line in (folder / "starts.txt").read_text().splitlines()]


def test_resume_reruns_no_finished_trial(tmp_path, ray_cluster):
    # One trial at a time; trial 2's session 1 (seed 5 + 2000 + 1) stalls at frame 100.
    path = search_spec(tmp_path, config={"stall_seed": 2006, "stall_at": 100})
    runs = tmp_path / "runs"
    driver = _start_driver(path, runs, "--address", ray_cluster)
    try:
        wait_for(lambda: list(runs.glob("toy_*/t2/s1/toy_checkpoint.json")), 120, "trial 2")
        (run_dir,) = runs.glob("toy_*")
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
        driver.wait()
    assert driver.returncode == 130, err
    assert f"resume with: batchenv run --resume {run_dir}" in err
    assert [json.loads((run_dir / f"t{n}/trial.json").read_text())["status"] for n in range(3)] == [
        "done",
        "done",
        "running",
    ]
    interrupted = json.loads((run_dir / "t2/trial.json").read_text())["values"]

    result = run(resume=run_dir, progress=False)
    statuses = [(t.number, t.status) for t in result.trials]
    assert statuses == [(0, "done"), (1, "done"), (2, "done")], [t.error for t in result.trials]
    assert result.trials[2].values == interrupted
    for trial in (0, 1):  # finished: not rerun
        for session in (0, 1):
            assert _starts(run_dir / f"t{trial}/s{session}") == [0]
    assert _starts(run_dir / "t2/s1") == [0, 100]  # continued from its checkpoint
    assert _starts(run_dir / "t2/s0")[0] == 0
    assert len(rows(run_dir / "experiment.csv")) == 3


def test_a_resumed_search_suggests_what_an_uninterrupted_one_does(tmp_path, ray_cluster):
    # TPE only: both samplers reach Tune through the same OptunaSearch, and test_search.py
    # checks each of them on the local backend.
    meta = {"sessions": 1, "trials": 3, "steps": 300, "seed": 5, "max_concurrent": 1}
    meta["sampler"] = "tpe"
    path = search_spec(tmp_path, meta=meta)
    whole = run(path, mode="search", runs_dir=tmp_path / "whole", backend="ray", progress=False)
    options = ("--backend", "ray", "--address", ray_cluster)
    resumed = run(resume=interrupted_search(tmp_path, meta, *options), progress=False)

    assert [t.number for t in resumed.trials] == [0, 1, 2]
    assert [t.values for t in resumed.trials] == [t.values for t in whole.trials]
    assert len({t.values["config.x"] for t in whole.trials}) == 3


def test_a_relative_runs_dir_runs_and_resumes(tmp_path, ray_cluster, monkeypatch):
    # What the README runs: `batchenv run SPEC --mode search --backend ray` in the repo root.
    monkeypatch.chdir(tmp_path)
    path = search_spec(tmp_path, meta={"sessions": 1, "trials": 2, "steps": 200})
    result = run(path, mode="search", runs_dir="runs", backend="ray", progress=False)

    assert not result.path.is_absolute() and (result.path / "tune").is_dir()
    assert [(t.number, t.status) for t in result.trials] == [(0, "done"), (1, "done")]
    again = run(resume=result.path, progress=False)  # Tune's state, found by a relative path
    assert [t.values for t in again.trials] == [t.values for t in result.trials]
    for trial in (0, 1):
        assert _starts(result.path / f"t{trial}/s0") == [0]


def test_bad_input_fails_fast_in_one_line_before_writing(tmp_path, ray_cluster):
    path = search_spec(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for extra, message in (
        (["--mode", "train", "--backend", "ray"], "--backend ray runs searches"),
        (["--mode", "search", "--backend", "ray", "--address", "nohost"], "expected HOST:PORT"),
        (["--mode", "search", "--backend", "ray", "--address", "127.0.0.1:1"], "no Ray cluster"),
        (["--mode", "search", "--address", "127.0.0.1:6379"], "add --backend ray"),
    ):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "batchenv.cli", "run", str(path), "--runs-dir", str(tmp_path)]
            + extra,
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
        assert time.monotonic() - started < 20
    assert not list(tmp_path.glob("toy_*"))


def test_the_local_backend_never_imports_ray(tmp_path):
    path = toy_spec(tmp_path, meta={"sessions": 1, "steps": 200})
    code = (
        "import sys; from batchenv.experiment import run; "
        f"run({str(path)!r}, mode='train', runs_dir={str(tmp_path / 'runs')!r}, progress=False); "
        "assert 'ray' not in sys.modules, 'ray was imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, timeout=60)


def test_trial_resources_are_sessions_times_cpus_capped_at_a_node(tmp_path):
    from batchenv.experiment import load_spec
    from batchenv.experiment.executors import Plan
    from batchenv.experiment.ray_tune import trial_resources

    spec = load_spec(search_spec(tmp_path, meta={"sessions": 4, "gpus_per_session": 0.25}))
    plan = Plan(spec, tmp_path, 2, 1, lambda env: 0.0)
    assert trial_resources(plan, 16, 0.25) == (4, {"cpu": 8, "gpu": 1.0})
    assert trial_resources(plan, 4, 0.25) == (2, {"cpu": 4, "gpu": 0.5})
    assert trial_resources(plan, 1, 0) == (1, {"cpu": 2})
    with pytest.raises(SpecError, match="gpus_per_session must be >= 0"):
        load_spec(search_spec(tmp_path, meta={"gpus_per_session": -1}))


def _metrics(trial) -> dict:
    return {key: value for key, value in trial.metrics.items() if key != "wall_time"}


def _row(row: dict) -> dict:
    return {key: value for key, value in row.items() if key != "wall_time"}


def _tree(path: Path) -> set[str]:
    """The names under ``path`` (files of t*/ and t*/s*/ too), for comparing layouts."""
    names = {item.name for item in path.iterdir()}
    for trial in path.glob("t[0-9]*"):
        names |= {f"t/{item.name}" for item in trial.iterdir() if item.is_file()}
        for session in trial.glob("s[0-9]*"):
            names |= {f"t/s/{item.name}" for item in session.iterdir()}
    return names
