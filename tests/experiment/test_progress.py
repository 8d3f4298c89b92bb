"""What batchenv run prints: its progress bar (env steps over every session), its one
summary line, and a failed session as an error line."""

from __future__ import annotations

import re

import yaml

from batchenv.experiment import run
from batchenv.experiment.progress import StepProgress, last_frame

TOY = "tests.experiment.toy_trainer:ToyTrainer"


def _checkpoints(path, frames: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{frame},,1.0,1.0,0.1\n" for frame in frames)
    path.write_text("frame,opt_step,total_reward,total_reward_ma,wall_t\n" + rows)


def test_last_frame_reads_the_last_row(tmp_path):
    target = tmp_path / "checkpoints.csv"
    assert last_frame(target) == 0  # no file yet
    _checkpoints(target, [])
    assert last_frame(target) == 0
    _checkpoints(target, [100, 200, 300])
    assert last_frame(target) == 300
    target.write_text(target.read_text() + "40")  # a row being written
    assert last_frame(target) == 300
    target.write_text(target.read_text() + "0,,1.0,1.0,0.1\n")
    assert last_frame(target) == 400


def test_steps_are_summed_over_sessions_and_finished_trials_count_whole(tmp_path):
    _checkpoints(tmp_path / "t0/s0/checkpoints.csv", [100, 200])
    _checkpoints(tmp_path / "t0/s1/checkpoints.csv", [100])
    _checkpoints(tmp_path / "t1/s0/checkpoints.csv", [100, 200, 300, 400, 500])  # past steps
    _checkpoints(tmp_path / "t2/s0/checkpoints.csv", [100])  # finished in an earlier run
    progress = StepProgress(tmp_path, trials=4, sessions=2, steps=400, finished={2})
    try:
        assert progress.bar.total == 4 * 2 * 400
        assert progress.bar.n == 200 + 100 + 400 + 800
        assert progress.bar.desc == "1/4 trials"
        progress.trial_done(1)  # pruned at 400 of its 800 steps: counts whole
        assert progress.bar.n == 200 + 100 + 800 + 800
        assert progress.bar.desc == "2/4 trials"
    finally:
        progress.close()


def test_train_mode_shows_steps_while_the_trial_runs_and_ends_with_one_line(tmp_path, capsys):
    spec = {
        "algorithm": TOY,
        "env": "toy",
        "config": {"delay": 1.0},  # 4 checkpoints of 1 s in each of the 2 sessions
        "meta": {"sessions": 2, "steps": 400, "eval_every": 100},
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump({"toy": spec}))
    result = run(path, mode="train", runs_dir=tmp_path / "runs", progress=True)

    err = capsys.readouterr().err
    reached = [int(n) for n in re.findall(r"0/1 trials: +\d+%\|[^|]*\| (\d+)/800 ", err)]
    assert any(0 < n < 800 for n in reached), err  # not stuck at 0/1 until the end
    assert "1/1 trials: 100%" in err
    lines = [line for line in err.replace("\r", "\n").splitlines() if "trial" in line]
    summary = [line for line in lines if "total_reward_ma" in line or "final_return" in line]
    metrics = result.trials[0].metrics
    assert summary == [
        f"batchenv run: trial: total_reward_ma {metrics['total_reward_ma']:.4g}, final_return "
        f"{metrics['final_return']:.4g}, strength {metrics['strength']:.4g}, stability "
        f"{metrics['stability']:.4g}, consistency {metrics['consistency']:.4g}; {result.path}"
    ]


def test_a_failed_session_is_an_error_line_with_exit_status_1(tmp_path, capsys):
    from batchenv.cli import main

    spec = {"algorithm": TOY, "env": "toy", "config": {"x": 0.9, "crash_above": 0.5}}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump({"toy": {**spec, "meta": {"sessions": 1, "steps": 200}}}))
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "batchenv run: error: trial 0 session 0 (seed 0) failed: RuntimeError: toy crash"
    ), err
