"""``batchenv train batchppo`` and ``batchenv evaluate``: the CI smoke test and the errors."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from batchenv.algorithms.batchppo import PRESETS, BatchPPOConfig, field_help
from batchenv.algorithms.batchppo import cli as batchppo_cli
from batchenv.algorithms.batchppo.train import METRICS
from batchenv.cli import main
from tests.cli_process import batchenv_command

ROOT = Path(__file__).resolve().parents[3]
# A few hundred steps: 4 Pendulum envs, a train phase of 4 episodes' worth (800 steps: each
# env finishes one episode, so every train phase makes an update and has a metrics row).
SMALL = [
    "--num-envs",
    "4",
    "--set",
    "update_every=4",
    "eval_episodes=4",
    "policy_layers=16,16",
    "value_layers=16,16",
    "update_epochs=3",
    "--no-progress",
]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def _files(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file of a run directory with its size and modification time."""
    return {path.name: (path.stat().st_size, path.stat().st_mtime_ns) for path in run_dir.iterdir()}


def _without_timing(rows):
    return [{k: v for k, v in row.items() if k not in ("wall_time", "steps_per_s")} for row in rows]


def _assert_run_directory(run_dir: Path, env: str, steps: list[int]) -> None:
    record = json.loads((run_dir / "config.json").read_text())
    assert record["algorithm"] == "batchppo" and record["seed"] == 0
    assert re.fullmatch(r"[0-9a-f]{40}", record["git_commit"]), record["git_commit"]
    assert record["config"]["env"] == env and record["config"]["num_agents"] == 4
    rows = _rows(run_dir)
    assert list(rows[0]) == ["step", "wall_time", "phase", *METRICS]
    assert [int(row["step"]) for row in rows] == steps
    assert [row["phase"] for row in rows] == ["train", "eval"] * (len(steps) // 2)
    if importlib.util.find_spec("tensorboard") is not None:
        assert list(run_dir.glob("events.out.tfevents.*"))
    assert (run_dir / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert checkpoint["counters"]["train_steps"] == steps[-1]


def test_train_resume_and_evaluate_in_process(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", "batchppo", "--env", "Pendulum-v1", *SMALL]
    assert main([*args, "--steps", "800", "--logdir", str(run)]) == 0
    _assert_run_directory(run, "Pendulum-v1", [800, 800])
    assert "final eval score" in capsys.readouterr().out

    resume = ["train", "batchppo", "--resume", str(run), "--steps", "1600", "--no-progress"]
    assert main(resume) == 0
    _assert_run_directory(run, "Pendulum-v1", [800, 800, 1600, 1600])

    whole = tmp_path / "whole"  # the same 1600 steps without a break
    assert main([*args, "--steps", "1600", "--logdir", str(whole)]) == 0
    assert _without_timing(_rows(run)) == _without_timing(_rows(whole))

    capsys.readouterr()
    before = _files(run)
    assert main(["evaluate", str(run), "--episodes", "4", "--num-envs", "2"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(
        rf"{re.escape(str(run))}: mean return -?\d+\.\d\d over 4 episodes \(mean length "
        r"200\.0\) at step 1,600\n",
        out,
    )
    assert _files(run) == before  # evaluate only reads the run
    for episodes in ("0", "-5"):
        assert main(["evaluate", str(run), "--episodes", episodes]) == 2
        assert capsys.readouterr().err == (
            f"batchenv evaluate: error: --episodes must be >= 1, got {episodes}\n"
        )
    assert _files(run) == before


def test_train_in_a_subprocess(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "batchenv.cli", "train", "batchppo"]
    command += ["--env", "batchenv.kernels:Pendulum", "--steps", "800", *SMALL]
    done = subprocess.run(
        [*command, "--logdir", str(run)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert (
        f"batchppo: training on batchenv.kernels:Pendulum for 800 env steps; run directory {run}"
        in done.stderr
    )
    assert done.stdout.rstrip().endswith(f"; {run}")  # and where it went, at the end
    assert re.search(r"final eval score -?\d+\.\d", done.stdout)
    _assert_run_directory(run, "batchenv.kernels:Pendulum", [800, 800])


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="batchenv train batchppo")
    batchppo_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_default_is_the_cartpole_preset_on_the_in_graph_cartpole():
    config = batchppo_cli.make_config(_parse())
    assert config == PRESETS["cartpole"].replace(env="batchenv.kernels:CartPole")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--env", "Pendulum-v1"], PRESETS["pendulum"]),
        (
            ["--env", "batchenv.kernels:Pendulum"],
            PRESETS["pendulum"].replace(env="batchenv.kernels:Pendulum"),
        ),
        (["--preset", "cheetah", "--num-envs", "10"], PRESETS["cheetah"].replace(num_agents=10)),
        (
            ["--env", "MountainCarContinuous-v0", "--steps", "2e5"],
            BatchPPOConfig(env="MountainCarContinuous-v0", max_length=999, steps=200_000),
        ),
        (  # the preset, then --set, then the named options
            ["--preset", "pendulum", "--set", "seed=3", "discount=0.9", "--seed", "5"],
            PRESETS["pendulum"].replace(seed=5, discount=0.9),
        ),
        (
            ["--device", "cuda", "--set", "gae_lambda=0.95", "policy_layers=64,64"],
            PRESETS["cartpole"].replace(
                env="batchenv.kernels:CartPole",
                device="cuda",
                gae_lambda=0.95,
                policy_layers=(64, 64),
            ),
        ),
    ],
    ids=["preset-of-env", "preset-of-in-graph-env", "preset", "no-preset", "precedence", "set"],
)
def test_options_build_the_config(argv, expected):
    assert batchppo_cli.make_config(_parse(*argv)) == expected


def test_help_lists_every_config_field(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "batchppo", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name, doc in field_help().items():
        assert f"{name} = {getattr(BatchPPOConfig(), name)!r}" in out
        assert " ".join(doc.split()) in out
    assert "--num-envs NUM_AGENTS Number of envs stepped in lockstep (batch rows)." in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--preset", "pendulm"],
            "argument --preset: unknown preset 'pendulm'; did you mean 'pendulum'? Presets: "
            "pendulum, cartpole, reacher, cheetah, walker, hopper, ant, humanoid",
        ),
        (
            ["--set", "learning_rat=1e-3"],
            "argument --set: BatchPPOConfig has no field 'learning_rat'; did you mean "
            "'learning_rate'? Fields: env, max_length,",
        ),
        (["--set", "discount"], "argument --set: override 'discount' is not of the form key=value"),
        (
            ["--steps", "many"],
            "argument --steps: override 'steps=many': cannot read 'many' as int",
        ),
        (["--device", "tpu"], "argument --device: device must be cpu or cuda[:N], got 'tpu'"),
    ],
    ids=["unknown-preset", "unknown-key", "no-value", "bad-value", "bad-device"],
)
def test_bad_options_exit_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "batchppo", *argv])
    assert exit_.value.code == 2
    assert f"batchenv train batchppo: error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--env", "NoSuchEnv-v0"],
            "unknown env 'NoSuchEnv-v0': expected a registered Gymnasium id",
        ),
        (["--set", "discount=2"], "BatchPPOConfig.discount must be in (0, 1], got 2.0"),
        (
            ["--env", "batchenv.kernels:CartPole", "--set", "max_length=100"],
            "ends its episodes after 500 steps, but config.max_length=100",
        ),
        (
            [
                "--env",
                "Pendulum-v1",
                "--num-envs",
                "10",
                "--set",
                "update_every=5",
                "--steps",
                "2e3",
            ],
            "update_every=5 is below num_agents=10: a train phase (update_every * max_length "
            "env steps over num_agents envs) is then shorter than max_length=200 steps, so "
            "episodes that reach the time limit never finish and no update runs; set "
            "update_every >= num_agents\n",
        ),
    ],
    ids=["unknown-env", "invalid-value", "short-max-length", "update-every-below-envs"],
)
def test_bad_configs_return_2_with_a_clear_message(tmp_path, argv, message, capsys):
    assert main(["train", "batchppo", *argv, "--logdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("batchenv train batchppo: error: ") and err.count("\n") == 1
    assert message in err
    assert not (tmp_path / "run").exists()  # nothing written for a run that never started


def test_resume_errors(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "batchppo", "--env", "batchenv.kernels:Pendulum", "--steps", "200", *SMALL]
    assert main([*argv, "--logdir", str(run)]) == 0
    capsys.readouterr()
    assert main(["train", "batchppo", "--resume", str(run), "--num-envs", "8"]) == 2
    assert "only --steps, --device and --threads may be given with it" in capsys.readouterr().err
    assert main(["train", "batchppo", "--resume", str(tmp_path / "nothing")]) == 2
    assert "is not a run directory (no config.json)" in capsys.readouterr().err
    assert main([*argv, "--logdir", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"batchenv train batchppo: error: {run} already holds a run; continue it with "
        f"--resume {run}, or choose another --logdir\n"
    )


def test_threads_sets_the_config_field():
    assert batchppo_cli.make_config(_parse()).torch_threads == 1
    assert batchppo_cli.make_config(_parse("--threads", "3")).torch_threads == 3


def test_resume_forms_and_a_run_without_checkpoint(tmp_path, capsys):
    from batchenv.run_dir import RunDirectory

    run = tmp_path / "run"
    RunDirectory(run, "batchppo", PRESETS["pendulum"], seed=0).close()  # no round finished
    assert main(["train", "batchppo", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"batchenv train batchppo: error: {run} has no checkpoint yet (one is written after "
        "every round), so there is nothing to resume; start a new run instead\n"
    )
    assert "resuming" not in err
    assert main(["train", "batchppo", "--logdir", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "note: --logdir RUN_DIR --resume is deprecated; write --resume RUN_DIR" in err
    assert "has no checkpoint yet" in err
    assert main(["train", "batchppo", "--resume"]) == 2
    assert capsys.readouterr().err == (
        "batchenv train batchppo: error: --resume needs the run: --resume RUN_DIR\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "cuda"], "device 'cuda' asked for, but this machine has"),
        (["--env", "ALE/Pong-v5"], "ALE/Pong-v5 is an Atari env and needs ale-py: pip install"),
    ],
    ids=["cuda-without-cuda", "atari-without-ale-py"],
)
def test_failures_before_training_are_one_line(tmp_path, monkeypatch, argv, message, capsys):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setitem(sys.modules, "ale_py", None)
    assert main(["train", "batchppo", *argv, "--logdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"batchenv train batchppo: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("made", [False, True], ids=["before-the-run-directory", "after-it"])
def test_ctrl_c_before_the_first_checkpoint_says_so(tmp_path, monkeypatch, capsys, made):
    import importlib

    from batchenv.run_dir import RunDirectory

    train_module = importlib.import_module("batchenv.algorithms.batchppo.train")

    run = tmp_path / "run"

    def interrupted(config, logdir, resume, progress):
        if made:
            RunDirectory(logdir, "batchppo", config, seed=0).close()
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "train", interrupted)
    argv = ["train", "batchppo", "--env", "batchenv.kernels:Pendulum", *SMALL]
    assert main([*argv, "--logdir", str(run)]) == 130
    err = capsys.readouterr().err.splitlines()[-1]
    if made:
        assert err == (
            f"interrupted before the first checkpoint was written: {run} has no checkpoint, "
            f"so it cannot be resumed; start a new run (in another --logdir, or delete {run} "
            "first)"
        )
    else:
        assert err == f"interrupted before {run} was created; nothing was written"


def _wait_for(path: Path, process: subprocess.Popen, seconds: float) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no {path} after {seconds} s"
        time.sleep(0.05)


@pytest.mark.parametrize("when", ["after-a-round", "in-the-first-round"])
def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path, when):
    import signal
    import time

    run = tmp_path / "run"
    command = batchenv_command("train", "batchppo")
    command += ["--env", "batchenv.kernels:Pendulum", "--steps", "1e7", *SMALL]
    if when == "in-the-first-round":  # a long first round (~10 s)
        command += ["--set", "update_every=400"]
    process = subprocess.Popen(
        [*command, "--logdir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        if when == "after-a-round":
            _wait_for(run / "checkpoint.pt", process, 60)
        else:
            _wait_for(run / "metrics.csv", process, 60)
            time.sleep(2.0)  # past the run directory's creation, into the first round
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert time.monotonic() - started < 10
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert (
        f"interrupted; checkpoint saved in {run} (resume with batchenv train batchppo "
        f"--resume {run}); it holds the last complete round, train step" in err
    )
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=False)
    rows = _rows(run)
    steps = checkpoint["counters"]["train_steps"]
    assert steps == (int(rows[-1]["step"]) if rows else 0)
    assert f"train step {steps:,}: the round in progress was dropped" in err
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchenv.cli",
            "train",
            "batchppo",
            "--resume",
            str(run),
            "--steps",
            str(steps + 800),
            "--no-progress",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert int(_rows(run)[-1]["step"]) == steps + 800
