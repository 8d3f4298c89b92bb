"""ImpalaConfig defaults and validation, the generated command line, and a CLI smoke run."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import re
from pathlib import Path

import pytest

from batchenv.algorithms.impala import cli
from batchenv.algorithms.impala.actor_pool import prestart
from batchenv.algorithms.impala.config import ImpalaConfig, field_help
from batchenv.cli import main

prestart()  # the fork server and resource tracker outlive the tests (see test_sync.py)


def test_defaults_are_monobeast_flags() -> None:
    config = ImpalaConfig()
    assert (config.learning_rate, config.alpha, config.epsilon, config.momentum) == (
        4.8e-4,
        0.99,
        0.01,
        0.0,
    )
    assert (config.grad_norm_clipping, config.entropy_cost, config.baseline_cost) == (
        40.0,
        6e-4,
        0.5,
    )
    assert (config.discount, config.unroll_length, config.batch_size) == (0.99, 80, 8)
    assert (config.num_learner_threads, config.num_actors, config.reward_clipping) == (
        2,
        4,
        "abs_one",
    )
    # num_buffers = max(2 * actors, batch) = 8 slots, each actor at least 1 + 8 / 4.
    assert config.num_slots_per_actor == 3


def test_every_field_is_documented() -> None:
    docs = field_help()
    assert set(docs) == {item.name for item in dataclasses.fields(ImpalaConfig)}
    assert docs["grad_norm_clipping"] == "Clip the global gradient norm to this."


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_actors": 0}, "ImpalaConfig.num_actors must be a positive integer, got 0"),
        ({"batch_size": 2.5}, "ImpalaConfig.batch_size must be a positive integer, got 2.5"),
        ({"reward_clipping": "soft"}, "reward_clipping must be one of ('abs_one', 'none')"),
        ({"model": "vit"}, "ImpalaConfig.model must be one of"),
        ({"discount": 1.5}, r"discount must lie in \[0, 1\], got 1.5"),
        ({"num_buffers": 3}, "num_buffers=3 is too few: each of the 4 actors fills 1 slots"),
        ({"actor_timeout": 0}, "ImpalaConfig.actor_timeout must be > 0, got 0"),
        (
            {"mode": "polybeast"},
            "ImpalaConfig.mode must be one of ('sync', 'async', 'distributed')",
        ),
        ({"placement": "ANYWHERE"}, "ImpalaConfig.placement must be one of ('PACK', 'SPREAD'"),
        ({"max_learner_queue_size": 0}, "max_learner_queue_size must be a positive integer"),
        ({"num_inference_threads": 0}, "num_inference_threads must be a positive integer"),
    ],
    ids=[
        "actors=0",
        "batch=2.5",
        "clipping",
        "model",
        "discount",
        "buffers",
        "timeout",
        "mode",
        "placement",
        "queue",
        "inference",
    ],  # fmt: skip
)
def test_invalid_configs(changes: dict, message: str) -> None:
    with pytest.raises(
        ValueError,
        match=message.replace("(", r"\(").replace(")", r"\)") if "[" not in message else message,
    ):
        ImpalaConfig(**changes)


def test_command_line_is_generated_from_the_config() -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "--env",
            "ALE/Pong-v5",
            "--num-actors",
            "2",
            "--steps",
            "5000",
            "--hidden-sizes",
            "32,16",
            "--use-lstm",
            "--num-buffers",
            "none",
            "--learning-rate",
            "1e-3",
        ]
    )
    config = cli.config_from_args(args)
    assert config == ImpalaConfig(
        env="ALE/Pong-v5",
        num_actors=2,
        total_steps=5000,
        hidden_sizes=(32, 16),
        use_lstm=True,
        learning_rate=1e-3,
    )
    assert config.mode == "sync" and args.mode is None and not args.resume
    help_text = parser.format_help()
    assert "--unroll-length" in help_text and "Unrolls B per learner step" in help_text


def _files(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file of a run directory with its size and modification time."""
    return {path.name: (path.stat().st_size, path.stat().st_mtime_ns) for path in run_dir.iterdir()}


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def test_cli_smoke_train_resume_evaluate(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    common = [
        "--num-actors",
        "2",
        "--envs-per-actor",
        "2",
        "--unroll-length",
        "10",
        "--batch-size",
        "2",
        "--log-interval",
        "0.2",
        "--no-progress",
    ]
    assert (
        main(
            [
                "train",
                "impala",
                "--env",
                "CartPole-v1",
                "--steps",
                "400",
                "--logdir",
                str(run_dir),
                *common,
            ]
        )
        == 0
    )
    for name in ("config.json", "metrics.csv", "checkpoint.pt", "curve.png"):
        assert (run_dir / name).exists(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    record = json.loads((run_dir / "config.json").read_text())
    assert record["algorithm"] == "impala" and record["config"]["total_steps"] == 400
    first = _rows(run_dir)
    assert first and all(row["phase"] == "train" for row in first)
    assert int(first[-1]["step"]) == 400

    assert (
        main(
            [
                "train",
                "impala",
                "--logdir",
                str(run_dir),
                "--resume",
                "--steps",
                "800",
                "--no-progress",
            ]
        )
        == 0
    )
    rows = _rows(run_dir)
    assert int(rows[-1]["step"]) == 800 and len(rows) > len(first)
    assert "done: 800 steps" in capsys.readouterr().out

    before = _files(run_dir)
    assert main(["evaluate", str(run_dir), "--episodes", "2"]) == 0
    assert _files(run_dir) == before  # evaluate only reads the run
    assert re.fullmatch(
        rf"{re.escape(str(run_dir))}: mean return \d+\.\d\d over 2 episodes \(mean length "
        r"\d+\.\d\) at step 800\n",
        capsys.readouterr().out,
    )


def test_cli_async_mode_trains_and_resumes_in_async_mode(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    flags = ["--num-actors", "2", "--envs-per-actor", "2", "--unroll-length", "10",
             "--batch-size", "2", "--no-progress", "--logdir", str(run_dir)]  # fmt: skip
    assert main(["train", "impala", "--mode", "async", "--steps", "400", *flags]) == 0
    out = capsys.readouterr().out
    assert "impala async CartPole-v1: 2 actors x 2 envs" in out and "done: 400 steps" in out
    assert json.loads((run_dir / "config.json").read_text())["config"]["mode"] == "async"
    # --resume keeps the stored mode.
    assert main(["train", "impala", "--resume", "--steps", "600", *flags]) == 0
    out = capsys.readouterr().out
    assert "impala async CartPole-v1" in out and "done: 600 steps" in out
    assert int(_rows(run_dir)[-1]["step"]) == 600


def test_cli_resume_needs_a_run(tmp_path: Path, capsys) -> None:
    assert main(["train", "impala", "--resume", "--logdir", str(tmp_path / "none")]) == 2
    assert "is not a run directory" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["config", "envs", "errors", "actor", "sync", "cli"])
def test_docstring_examples(name: str) -> None:
    import doctest
    import importlib

    module = importlib.import_module(f"batchenv.algorithms.impala.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_cli_resume_takes_the_run_directory(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    flags = ["--num-actors", "1", "--envs-per-actor", "2", "--unroll-length", "10",
             "--batch-size", "2", "--no-progress"]  # fmt: skip
    assert main(["train", "impala", "--steps", "200", "--logdir", str(run_dir), *flags]) == 0
    out = capsys.readouterr().out
    assert f"run directory {run_dir}" in out and out.rstrip().endswith(str(run_dir))
    assert main(["train", "impala", "--resume", str(run_dir), "--steps", "400", *flags]) == 0
    captured = capsys.readouterr()
    assert "done: 400 steps" in captured.out and "deprecated" not in captured.err
    assert main(["train", "impala", "--logdir", str(run_dir), "--resume", "--steps", "600",
                 *flags]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "done: 600 steps" in captured.out
    assert captured.err.startswith(
        "batchenv train impala: note: --logdir RUN_DIR --resume is deprecated; write "
        "--resume RUN_DIR\n"
    )
    assert main(["train", "impala", "--resume"]) == 2
    assert capsys.readouterr().err == (
        "batchenv train impala: error: --resume needs the run: --resume RUN_DIR\n"
    )


def test_cli_resume_of_a_run_without_checkpoint(tmp_path: Path, capsys) -> None:
    from batchenv.algorithms.impala.config import ImpalaConfig
    from batchenv.run_dir import RunDirectory

    RunDirectory(tmp_path / "run", "impala", ImpalaConfig(), seed=0).close()
    assert main(["train", "impala", "--resume", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        f"batchenv train impala: error: {tmp_path / 'run'} has no checkpoint yet, so there is "
        "nothing to resume; start a new run instead\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "NoSuchEnv-v0"], "unknown env 'NoSuchEnv-v0': expected a registered"),
        (["--env", "PongNoFrameskip-v4"], "PongNoFrameskip-v4 is an Atari env and needs ale-py"),
        (["--device", "cuda"], "device 'cuda' asked for, but this machine has"),
    ],
    ids=["unknown-env", "atari-without-ale-py", "cuda-without-cuda"],
)
def test_cli_failures_before_training_are_one_line(
    tmp_path: Path, monkeypatch, capsys, argv, message
) -> None:
    import sys

    import torch

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setitem(sys.modules, "ale_py", None)
    assert main(["train", "impala", *argv, "--logdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"batchenv train impala: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_cli_warns_when_bf16_is_slow(tmp_path: Path, monkeypatch, capsys) -> None:
    from batchenv import preflight

    monkeypatch.setattr(preflight, "cpu_flags", lambda: {"avx2"})
    flags = ["--num-actors", "1", "--envs-per-actor", "2", "--unroll-length", "10",
             "--batch-size", "2", "--no-progress", "--steps", "40"]  # fmt: skip
    argv = ["train", "impala", "--precision", "bf16", *flags, "--logdir", str(tmp_path / "a")]
    assert main(argv) == 0
    assert (
        "batchenv train impala: warning: --precision bf16 asked for, but this CPU has "
        "neither AVX512-BF16 nor AMX, so bf16 runs ~4x slower than fp32; use --precision fp32"
        in capsys.readouterr().err
    )
    monkeypatch.setattr(preflight, "cpu_flags", lambda: {"avx2", "amx_bf16"})
    argv[-1] = str(tmp_path / "b")
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err


def _impala_run(path: Path, step: int = 800) -> Path:
    """A run directory with an (untrained) IMPALA checkpoint, made without training."""
    from batchenv.algorithms.impala.trainer import build_model
    from batchenv.run_dir import RunDirectory

    config = ImpalaConfig(env="CartPole-v1", hidden_sizes=(8,))
    model = build_model(config, (4,), 2)
    with RunDirectory(path, "impala", config, seed=0, env_id=config.env) as run:
        run.log(step, "train", mean_score=20.0)
        state = {"step": step, "model": model.state_dict(), "observation_shape": (4,)}
        run.save_checkpoint({**state, "num_actions": 2})
    return path


@pytest.mark.parametrize("episodes", ["0", "-5"])
def test_evaluate_refuses_fewer_than_one_episode_and_writes_nothing(
    tmp_path: Path, capsys, episodes: str
) -> None:
    run_dir = _impala_run(tmp_path / "run")
    before = _files(run_dir)
    assert main(["evaluate", str(run_dir), "--episodes", episodes]) == 2
    assert (
        capsys.readouterr().err
        == f"batchenv evaluate: error: --episodes must be >= 1, got {episodes}\n"
    )
    assert _files(run_dir) == before


def test_evaluate_prints_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    run_dir = _impala_run(tmp_path / "run", step=1200)
    before = _files(run_dir)
    assert main(["evaluate", str(run_dir), "--episodes", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    # An untrained policy on CartPole: short episodes, the same for the same seeds.
    assert re.fullmatch(
        rf"{re.escape(str(run_dir))}: mean return (\d+\.\d\d) over 3 episodes \(mean length "
        r"(\d+\.\d)\) at step 1,200\n",
        out,
    )
    mean_return, mean_length = re.search(r"return (\S+) .* length (\S+)\)", out).groups()
    assert float(mean_return) == pytest.approx(float(mean_length), abs=0.05)  # 1 per step
    assert _files(run_dir) == before
    assert main(["evaluate", str(run_dir), "--episodes", "3", "--seed", "1"]) == 0
    assert capsys.readouterr().out == out


def test_evaluate_of_a_run_without_checkpoint_is_a_usage_error(tmp_path: Path, capsys) -> None:
    from batchenv.run_dir import RunDirectory

    RunDirectory(tmp_path / "run", "impala", ImpalaConfig(), seed=0).close()
    before = _files(tmp_path / "run")
    assert main(["evaluate", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        f"batchenv evaluate: error: {tmp_path / 'run'} has no checkpoint yet, so there is "
        "nothing to evaluate\n"
    )
    assert _files(tmp_path / "run") == before


def test_steps_may_be_written_in_float_notation() -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--steps", "2e6", "--num-buffers", "1e2", "--batch-size", "16.0"])
    config = cli.config_from_args(args)
    assert (config.total_steps, config.num_buffers, config.batch_size) == (2_000_000, 100, 16)
    assert isinstance(config.total_steps, int)


@pytest.mark.parametrize("value", ["2.5e0", "many", "inf"])
def test_steps_must_be_a_whole_number(capsys, value: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "impala", "--steps", value])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        "batchenv train impala: error: argument --steps: expected a whole number such as "
        f"2000000 or 2e6, got {value!r}\n"
    )


class _Interrupted:
    """A trainer that Ctrl-C stops: before it writes any checkpoint (``at="init"``), or
    after it wrote one (``at="train"``, as the real trainers do on the way out)."""

    at = "init"

    def __init__(self, config, run_dir, checkpoint, progress):
        self.run_dir = run_dir
        if self.at == "init":
            raise KeyboardInterrupt

    def train(self):
        self.run_dir.save_checkpoint({"step": 80})
        raise KeyboardInterrupt


@pytest.mark.parametrize("at", ["init", "train"])
def test_ctrl_c_says_whether_a_checkpoint_was_saved(
    tmp_path: Path, monkeypatch, capsys, at: str
) -> None:
    from batchenv.algorithms.impala import modes

    monkeypatch.setattr(_Interrupted, "at", at)
    monkeypatch.setattr(modes, "trainer_class", lambda mode: _Interrupted)
    run_dir = tmp_path / "run"
    assert main(["train", "impala", "--logdir", str(run_dir), "--no-progress"]) == 130
    err = capsys.readouterr().err
    if at == "init":
        assert err == (
            f"\ninterrupted before the first checkpoint was written: {run_dir} has no "
            "checkpoint, so it cannot be resumed; start a new run (in another --logdir, or "
            f"delete {run_dir} first)\n"
        )
        assert not (run_dir / "checkpoint.pt").exists()
    else:
        assert err == (
            f"\ninterrupted; checkpoint saved in {run_dir} (resume with batchenv train impala "
            f"--resume {run_dir}); it holds every learner step taken\n"
        )
        assert (run_dir / "checkpoint.pt").exists()


def test_ctrl_c_before_a_resumed_run_trains_keeps_its_checkpoint(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from batchenv.algorithms.impala import modes

    run_dir = _impala_run(tmp_path / "run", step=80)
    before = _files(run_dir)["checkpoint.pt"]
    monkeypatch.setattr(modes, "trainer_class", lambda mode: _Interrupted)
    assert main(["train", "impala", "--resume", str(run_dir), "--steps", "800"]) == 130
    assert capsys.readouterr().err == (
        f"\ninterrupted before training resumed; the checkpoint in {run_dir} is unchanged "
        f"(resume with batchenv train impala --resume {run_dir})\n"
    )
    assert _files(run_dir)["checkpoint.pt"] == before
