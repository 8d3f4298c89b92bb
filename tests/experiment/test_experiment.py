"""Trials and searches end to end: run directory, reproducibility, resume, failures, pruning.

Most tests use tests/experiment/toy_trainer.py (no torch, exact returns with a known
optimum); the reproducibility test trains BatchPPO. tests/conftest.py fails any test that
leaves a process behind.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from batchenv.atomic_file import write_atomic
from batchenv.experiment import SpecError, load_spec, run
from batchenv.experiment.metrics import trial_metrics
from batchenv.experiment.session import SessionJob, read_checkpoints, run_session
from batchenv.experiment.trial import SessionFailedError
from tests.cli_process import batchenv_command
from tests.experiment.toy_trainer import ToyConfig, toy_return

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.experiment.toy_trainer:ToyTrainer"


def toy_spec(tmp_path, name="toy", config=None, meta=None, search=None) -> Path:
    spec = {"algorithm": TOY, "env": "toy", "config": config or {}, "meta": meta or {}}
    if search:
        spec["search"] = search
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({name: spec}))
    return path


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_train_mode_writes_a_trial_of_seeded_sessions(tmp_path):
    path = toy_spec(tmp_path, config={"x": 0.1}, meta={"sessions": 3, "steps": 500, "seed": 7})
    result = run(path, mode="train", runs_dir=tmp_path / "runs", progress=False)

    assert result.path.parent == tmp_path / "runs" and result.path.name.startswith("toy_")
    record = json.loads((result.path / "run.json").read_text())
    assert record["mode"] == "train" and record["seeds"] == {"t0": [7, 8, 9]}
    assert set(record) >= {"git_commit", "git_dirty", "versions", "host", "random_return"}
    assert record["versions"]["batchenv"] and record["random_return"] == {"toy": 0.0}
    assert load_spec(result.path / "spec.yaml").config == {"x": 0.1}

    (trial,) = result.trials
    assert trial.status == "done" and trial.number == 0
    sessions = []
    for session, seed in enumerate((7, 8, 9)):
        folder = result.path / "t0" / f"s{session}"
        checkpoints = read_checkpoints(folder)
        config = ToyConfig(x=0.1, seed=seed, steps=500)
        assert [row["frame"] for row in checkpoints] == [100, 200, 300, 400, 500]
        assert [row["total_reward"] for row in checkpoints] == [
            toy_return(config, frame) for frame in (100, 200, 300, 400, 500)
        ]
        assert json.loads((folder / "session.json").read_text())["seed"] == seed
        assert (folder / "session.png").stat().st_size > 0
        sessions.append(
            {
                "returns": [row["total_reward"] for row in checkpoints],
                "frames": [row["frame"] for row in checkpoints],
                "opt_steps": [row["opt_step"] for row in checkpoints],
                "random_return": 0.0,
            }
        )
    expected = trial_metrics(sessions)
    for name, value in expected.items():
        assert trial.metrics[name] == pytest.approx(value, nan_ok=True), name
    assert (result.path / "t0" / "trial.png").stat().st_size > 0
    assert not (result.path / "experiment.csv").exists()


def test_the_same_spec_reproduces_batchppo_byte_for_byte(tmp_path):
    spec = tmp_path / "ppo.yaml"
    spec.write_text(
        """
cartpole:
  algorithm: batchppo
  env: batchenv.kernels:CartPole
  config: {num_agents: 4, update_every: 4, update_epochs: 2, eval_episodes: 4,
           policy_layers: [16], value_layers: [16]}
  meta: {sessions: 2, steps: 4000, seed: 3, log_frequency: 500}
"""
    )
    first = run(spec, mode="train", runs_dir=tmp_path / "a", progress=False)
    second = run(spec, mode="train", runs_dir=tmp_path / "b", progress=False)
    timing = {"wall_time", "steps_per_s", "wall_t"}
    for session in ("s0", "s1"):
        for name in ("metrics.csv", "checkpoints.csv"):
            a = rows(first.path / "t0" / session / name)
            b = rows(second.path / "t0" / session / name)
            assert len(a) >= 2
            strip = [{k: v for k, v in row.items() if k not in timing} for row in a]
            assert strip == [{k: v for k, v in row.items() if k not in timing} for row in b]
    ma, mb = first.trials[0].metrics, second.trials[0].metrics
    assert {k: v for k, v in ma.items() if k != "wall_time"} == {
        k: v for k, v in mb.items() if k != "wall_time"
    }
    # The two sessions differ only in seed, and do differ.
    assert rows(first.path / "t0/s0/checkpoints.csv") != rows(first.path / "t0/s1/checkpoints.csv")


def test_grid_search_finds_the_optimum_and_writes_the_table(tmp_path):
    path = toy_spec(
        tmp_path,
        meta={"sessions": 1, "trials": 9, "steps": 200, "sampler": "grid", "max_concurrent": 2},
        config={"noise": 0.0},
        search={"config": {"x__grid_search": [0.1, 0.3, 0.5], "y__grid_search": [1, 2, 3]}},
    )
    result = run(path, mode="search", runs_dir=tmp_path / "runs", progress=False)

    assert len(result.trials) == 9 and all(t.status == "done" for t in result.trials)
    assert result.best.values == {"config.x": 0.3, "config.y": 2}
    table = rows(result.path / "experiment.csv")
    assert [(float(r["config.x"]), int(r["config.y"])) for r in table][0] == (0.3, 2)
    strengths = [float(r["strength"]) for r in table]
    assert strengths == sorted(strengths, reverse=True)
    best = load_spec(result.path / "best_spec.yaml")
    assert best.config == {"noise": 0.0, "x": 0.3, "y": 2} and not best.search
    assert best.meta.trials == 1
    for picture in ("experiment.png", "trials.png"):
        assert (result.path / picture).stat().st_size > 0


def test_a_seeded_sampler_suggests_the_same_values_in_the_same_order(tmp_path):
    path = toy_spec(
        tmp_path,
        meta={"sessions": 1, "trials": 4, "steps": 100, "max_concurrent": 1, "seed": 11},
        search={"config.x__uniform": [0, 1], "config.y__randint": [0, 5]},
    )
    first = run(path, mode="search", runs_dir=tmp_path / "a", progress=False)
    second = run(path, mode="search", runs_dir=tmp_path / "b", progress=False)
    assert [t.values for t in first.trials] == [t.values for t in second.trials]
    assert len({t.values["config.x"] for t in first.trials}) == 4


def test_a_crashing_trial_is_recorded_and_the_search_goes_on(tmp_path):
    path = toy_spec(
        tmp_path,
        config={"crash_above": 0.45},
        meta={"sessions": 2, "trials": 4, "steps": 200, "sampler": "grid"},
        search={"config.x__grid_search": [0.1, 0.3, 0.5, 0.7]},
    )
    result = run(path, mode="search", runs_dir=tmp_path / "runs", progress=False)

    by_x = {t.values["config.x"]: t for t in result.trials}
    assert [by_x[x].status for x in (0.1, 0.3, 0.5, 0.7)] == ["done", "done", "failed", "failed"]
    error = by_x[0.5].error
    assert error.startswith("trial ") and "failed: RuntimeError: toy crash: x=0.5" in error
    record = json.loads((by_x[0.5].path / "trial.json").read_text())
    assert record["status"] == "failed" and "toy crash" in record["error"]
    table = rows(result.path / "experiment.csv")
    assert [r["status"] for r in table] == ["done", "done", "failed", "failed"]
    assert result.best.values == {"config.x": 0.3}


def test_pruning_stops_weak_trials_early(tmp_path):
    # x near 0.3 is strong, far from it weak; trials run one at a time, 20 checkpoints each.
    path = toy_spec(
        tmp_path,
        config={"noise": 0.0, "delay": 0.02},
        meta={
            "sessions": 1,
            "trials": 5,
            "steps": 2000,
            "sampler": "grid",
            "pruner": "median",
            "max_concurrent": 1,
        },
        search={"config.x__grid_search": [0.3, 0.35, 1.5, 2.0, 2.5]},
    )
    result = run(path, mode="search", runs_dir=tmp_path / "runs", progress=False)

    pruned = [t for t in result.trials if t.status == "pruned"]
    assert pruned, [t.status for t in result.trials]
    for trial in pruned:
        assert trial.values["config.x"] >= 1.5
        assert len(read_checkpoints(trial.path / "s0")) < 20
    assert result.best.values["config.x"] in (0.3, 0.35)
    import optuna

    study = optuna.load_study(
        study_name="toy",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(result.path / "study.journal"))
        ),
    )
    states = {t.number: t.state.name for t in study.trials}
    assert sorted(n for n, s in states.items() if s == "PRUNED") == sorted(t.number for t in pruned)


def test_a_session_past_its_timeout_fails_its_trial(tmp_path):
    path = toy_spec(
        tmp_path,
        config={"stall_seed": 1, "stall_at": 100},
        meta={"sessions": 2, "steps": 300, "session_timeout": 3},
    )
    started = time.monotonic()
    with pytest.raises(SessionFailedError) as caught:
        run(path, mode="train", runs_dir=tmp_path / "runs", progress=False)
    assert time.monotonic() - started < 20
    message = str(caught.value)
    assert message.startswith("trial 0 session 1 (seed 1) failed: SessionTimeoutError")
    assert "meta.session_timeout=3 s" in message
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "t0/trial.json").read_text())["status"] == "failed"


def test_a_session_that_raises_fails_the_trial_with_its_traceback_chained(tmp_path):
    path = toy_spec(tmp_path, config={"x": 0.9, "crash_above": 0.5}, meta={"sessions": 2})
    with pytest.raises(SessionFailedError, match=r"failed: RuntimeError: toy crash") as caught:
        run(path, mode="train", runs_dir=tmp_path / "runs", progress=False)
    remote = str(caught.value.__cause__)
    assert "Traceback (most recent call last)" in remote and "toy_trainer.py" in remote


def _start_driver(spec: Path, mode: str, runs: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = batchenv_command("run", str(spec), "--mode", mode)
    command += ["--runs-dir", str(runs), "--no-progress"]
    return subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def _interrupt(driver: subprocess.Popen) -> str:
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=30)
    assert driver.returncode == 130, err
    return err


def _starts(folder: Path) -> list[int]:
    return [int(line.split()[1]) for line in (folder / "starts.txt").read_text().splitlines()]


def test_resume_of_an_interrupted_trial_reruns_nothing_that_finished(tmp_path):
    # Session 1 stalls after its checkpoint at 300 on its first start; session 0 finishes.
    path = toy_spec(
        tmp_path,
        config={"stall_seed": 1, "stall_at": 300},
        meta={"sessions": 2, "steps": 600},
    )
    runs = tmp_path / "runs"
    driver = _start_driver(path, "train", runs)
    try:
        wait_for(lambda: len(list(runs.glob("toy_*/t0/s0/session.json"))) == 1, 60, "s0")
        (run_dir,) = runs.glob("toy_*")
        wait_for(lambda: (run_dir / "t0/s1/toy_checkpoint.json").exists(), 60, "s1")
        err = _interrupt(driver)
    finally:
        driver.kill()
        driver.wait()
    assert f"interrupted; resume with: batchenv run --resume {run_dir}" in err
    assert json.loads((run_dir / "t0/trial.json").read_text())["status"] == "running"

    result = run(resume=run_dir, progress=False)
    assert result.trials[0].status == "done"
    assert _starts(run_dir / "t0/s0") == [0]  # not rerun
    assert _starts(run_dir / "t0/s1") == [0, 300]  # continued from its checkpoint
    frames = [row["frame"] for row in read_checkpoints(run_dir / "t0/s1")]
    assert frames == [100, 200, 300, 400, 500, 600]


def test_a_row_left_half_written_by_a_killed_session_is_dropped_when_it_resumes(tmp_path):
    # The process was killed while appending the row of frame 200, after its checkpoint at 100.
    spec = load_spec(toy_spec(tmp_path, meta={"steps": 300}))
    folder = tmp_path / "s0"
    folder.mkdir()
    header = "frame,opt_step,total_reward,total_reward_ma,wall_t"
    # Lines end in \r\n, as csv.writer writes them.
    (folder / "checkpoints.csv").write_bytes(
        f"{header}\r\n100,10,1.5,1.5,0.1\r\n200,20,2.".encode()
    )
    (folder / "toy_checkpoint.json").write_text(json.dumps({"frame": 100}))
    assert [row["frame"] for row in read_checkpoints(folder)] == [100]

    job = SessionJob(spec.name, spec.to_dict(), 0, 0, 0, str(folder), cpus=1, random_return=0.0)
    run_session(job)
    lines = (folder / "checkpoints.csv").read_text().splitlines()
    assert lines[:2] == [header, "100,10,1.5,1.5,0.1"]
    assert [line.split(",")[:2] for line in lines[2:]] == [["200", "20"], ["300", "30"]]
    config = ToyConfig(steps=300, seed=0)
    second = toy_return(config, 200)
    assert [row["total_reward"] for row in read_checkpoints(folder)] == [
        1.5,
        second,
        toy_return(config, 300),
    ]
    assert read_checkpoints(folder)[1]["total_reward_ma"] == (1.5 + second) / 2


def test_a_session_killed_while_writing_its_first_header_starts_the_file_again(tmp_path):
    spec = load_spec(toy_spec(tmp_path, meta={"steps": 200}))
    folder = tmp_path / "s0"
    folder.mkdir()
    (folder / "checkpoints.csv").write_text("frame,opt_st")
    job = SessionJob(spec.name, spec.to_dict(), 0, 0, 0, str(folder), cpus=1, random_return=0.0)
    run_session(job)
    assert [row["frame"] for row in read_checkpoints(folder)] == [100, 200]


def test_a_record_write_that_fails_midway_keeps_the_old_record(tmp_path):
    # trial.json and session.json are written this way: a reader never sees half a file.
    target = tmp_path / "trial.json"
    write_atomic(target, '{"status": "running"}')
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, '{"status": "done", "note": "\udc80"}')  # fails while writing
    assert target.read_text() == '{"status": "running"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trial.json"]


def test_resume_of_an_interrupted_search_keeps_finished_trials(tmp_path):
    # One trial at a time; trial 1 (seed 1000) stalls after its first checkpoint.
    path = toy_spec(
        tmp_path,
        config={"stall_seed": 1000, "stall_at": 100},
        meta={"sessions": 1, "trials": 3, "steps": 300, "max_concurrent": 1},
        search={"config.x__uniform": [0, 1]},
    )
    runs = tmp_path / "runs"
    driver = _start_driver(path, "search", runs)
    try:
        wait_for(lambda: len(list(runs.glob("toy_*/t1/s0/toy_checkpoint.json"))) == 1, 60, "t1")
        (run_dir,) = runs.glob("toy_*")
        _interrupt(driver)
    finally:
        driver.kill()
        driver.wait()
    interrupted = json.loads((run_dir / "t1/trial.json").read_text())["values"]

    result = run(resume=run_dir, progress=False)
    assert [t.number for t in result.trials] == [0, 1, 2]
    assert all(t.status == "done" for t in result.trials)
    assert result.trials[1].values == interrupted  # rerun under its own number and values
    assert _starts(run_dir / "t0/s0") == [0]
    assert _starts(run_dir / "t1/s0") == [0, 100]
    assert len(rows(run_dir / "experiment.csv")) == 3


def test_a_search_without_a_search_section_fails_before_writing(tmp_path):
    path = toy_spec(tmp_path)
    with pytest.raises(SpecError, match="has no search section, so mode search has nothing"):
        run(path, mode="search", runs_dir=tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists()


def test_cli_errors_are_one_line_with_exit_code_2_and_write_nothing(tmp_path):
    path = toy_spec(tmp_path, config={"xx": 1})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (
        ["run", str(path), "--runs-dir", str(tmp_path / "runs")],
        ["run", str(toy_spec(tmp_path, "ok")), "--mode", "search", "--runs-dir", str(tmp_path)],
        ["run"],
        ["spec", "nosuch"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "batchenv.cli", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "error:" in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists()
    assert not list(tmp_path.glob("ok_*"))


def test_wandb_tracking_works_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    path = toy_spec(tmp_path, meta={"sessions": 1, "steps": 200, "track": "wandb"})
    result = run(path, mode="train", runs_dir=tmp_path / "runs", progress=False)
    assert result.trials[0].status == "done"
    assert list((result.path / "t0/s0").glob("wandb/offline-run-*"))


def test_benchmark_writes_a_markdown_row_and_band_plot_per_spec(tmp_path):
    from batchenv.experiment.benchmark import benchmark

    specs = tmp_path / "specs"
    specs.mkdir()
    toy_spec(specs, "a", config={"x": 0.3}, meta={"steps": 300})
    toy_spec(specs, "b", config={"x": 0.9}, meta={"steps": 300})
    toy_spec(specs, "c", search={"config.x__uniform": [0, 1]})  # searches are left out
    table = benchmark(
        [specs], sessions=2, out=tmp_path / "out", runs_dir=tmp_path / "runs", progress=False
    )
    lines = table.read_text().splitlines()
    rows_ = [line for line in lines if line.startswith("| a ") or line.startswith("| b ")]
    assert len(rows_) == 2 and not any(line.startswith("| c ") for line in lines)
    cells = [cell.strip() for cell in rows_[0].split("|")[1:-1]]
    assert cells[:4] == ["a", "`toy`", TOY, "300"]
    final = [toy_return(ToyConfig(x=0.3, seed=seed, steps=300), 300) for seed in (0, 1)]
    assert cells[4].startswith(f"{sum(final) / 2:,.1f} ± ")
    for name in ("a", "b"):
        picture = tmp_path / "out" / f"{name}_tests_experiment_toy_trainer_ToyTrainer.png"
        assert picture.stat().st_size > 0 and f"]({picture.name})" in table.read_text()


class _InterruptedInLockRelease:
    """An executor whose run fails as Optuna's journal lock does when Ctrl-C lands in its
    release: FileNotFoundError, raised while the KeyboardInterrupt was being handled."""

    def run(self, plan, on_trial):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            # as Optuna raises it: implicitly chained, not `from`
            raise FileNotFoundError(2, "No such file", "study.journal.lock.rename")  # noqa: B904


def test_ctrl_c_inside_optunas_lock_release_is_an_interrupt(capsys):
    from types import SimpleNamespace

    from batchenv.experiment.experiment import _run_trials

    plan = SimpleNamespace(path=Path("runs/toy_x"))
    with pytest.raises(KeyboardInterrupt) as caught:
        _run_trials(plan, _InterruptedInLockRelease(), "search", progress=False)
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    assert "interrupted; resume with: batchenv run --resume runs/toy_x" in capsys.readouterr().err


def test_other_errors_during_a_run_are_not_taken_for_an_interrupt():
    from types import SimpleNamespace

    from batchenv.experiment.experiment import _run_trials

    class Failing:
        def run(self, plan, on_trial):
            raise FileNotFoundError("a missing file")

    with pytest.raises(FileNotFoundError, match="a missing file"):
        _run_trials(SimpleNamespace(path=Path("p")), Failing(), "train", progress=False)
