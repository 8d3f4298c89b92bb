"""The ``batchenv`` command itself: one-line usage errors with exit status 2, Ctrl-C at any
moment, counts written as 2e6, and the examples' missing extras."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchenv import cli
from batchenv.cli import main
from batchenv.cli_common import whole_number

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-envs", "-4"], "--num-envs must be >= 1, got -4"),
        (["--num-envs", "0"], "--num-envs must be >= 1, got 0"),
        (["--steps", "-1"], "--steps must be >= 1, got -1"),
        (["--num-workers", "0"], "--num-workers must be >= 1 (or left out), got 0"),
        (["--env", "CartPol-v1"], "unknown env 'CartPol-v1': expected a registered Gymnasium"),
    ],
    ids=["envs=-4", "envs=0", "steps=-1", "workers=0", "unknown-env"],
)
def test_demo_refuses_bad_counts_in_one_line(capsys, argv, message) -> None:
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"batchenv demo: error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize("algorithm", ["batchppo", "dqn", "sac"])
def test_a_bad_option_value_is_refused_in_one_line(capsys, algorithm) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", algorithm, "--preset", "nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"batchenv train {algorithm}: error: argument --preset: unknown preset ")
    assert err.count("\n") == 1, err  # no usage block


@pytest.mark.parametrize(
    "argv, line",
    [
        ([], "batchenv: error: the following arguments are required: command"),
        (["train"], "batchenv train: error: the following arguments are required: ALGORITHM"),
        (["train", "sac", "--bogus"], "batchenv: error: unrecognized arguments: --bogus"),
    ],
    ids=["no-command", "no-algorithm", "unknown-option"],
)
def test_missing_or_unknown_arguments_get_one_line_that_points_to_help(capsys, argv, line):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"{line} (--help after the command lists its arguments)\n"


@pytest.mark.parametrize(
    "text, value", [("2e6", 2_000_000), ("2_000", 2000), ("64", 64), ("-4", -4), ("3.0", 3)]
)
def test_whole_numbers_may_use_float_notation(text: str, value: int) -> None:
    assert whole_number(text) == value and isinstance(whole_number(text), int)


@pytest.mark.parametrize("text", ["2.5", "1e-3", "nan", "inf", "ten", ""])
def test_other_numbers_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as error:
        whole_number(text)
    assert str(error.value) == f"expected a whole number such as 2000000 or 2e6, got {text!r}"


@pytest.mark.parametrize("algorithm", ["batchppo", "impala"])
def test_both_algorithms_take_steps_as_2e6(algorithm: str) -> None:
    from batchenv.algorithms.batchppo.cli import make_config
    from batchenv.algorithms.impala.cli import config_from_args

    module = cli.algorithm_cli(algorithm)
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args(["--steps", "2e6"])
    config = make_config(args) if algorithm == "batchppo" else config_from_args(args)
    steps = config.steps if algorithm == "batchppo" else config.total_steps
    assert steps == 2_000_000 and isinstance(steps, int)


@pytest.mark.parametrize("argv", [["train", "impala"], ["evaluate", "runs/x"], ["demo"]])
def test_ctrl_c_while_the_command_is_imported_is_one_line(
    monkeypatch, capsys, tmp_path, argv
) -> None:
    def interrupted(name_or_args):  # import_module("...cli") or the demo handler
        raise KeyboardInterrupt

    (tmp_path / "runs" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "config.json").write_text('{"algorithm": "impala"}')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "import_module", interrupted)
    monkeypatch.setattr(cli, "demo", interrupted)
    try:
        status = main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped batchenv.cli.main (a traceback for the user)")
    assert status == 130
    command = " ".join(argv[:2] if argv[0] == "train" else argv[:1])
    assert capsys.readouterr().err == f"\nbatchenv {command}: interrupted\n"


@pytest.mark.parametrize(
    "config, message",
    [
        (None, "runs/x is not a run directory (no config.json)"),
        ("{}", "runs/x/config.json does not name its algorithm; is runs/x a batchenv run?"),
        (
            '{"algorithm": "a3c"}',
            f"unknown algorithm 'a3c'; expected one of {', '.join(cli.ALGORITHMS)}",
        ),
    ],
    ids=["no-config", "no-algorithm", "unknown-algorithm"],
)
def test_evaluate_of_something_else_is_a_usage_error(
    monkeypatch, capsys, tmp_path, config, message
):
    (tmp_path / "runs" / "x").mkdir(parents=True)
    if config is not None:
        (tmp_path / "runs" / "x" / "config.json").write_text(config)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "runs/x"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"batchenv evaluate: error: {message}\n"


def test_the_pettingzoo_example_names_its_extra_when_missing(tmp_path) -> None:
    # A pettingzoo that cannot be imported, in this process and in every worker.
    fake = tmp_path / "pettingzoo"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pettingzoo'\", name='pettingzoo')\n"
    )
    script = ROOT / "examples" / "pettingzoo_training.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(script), "--updates", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "pettingzoo_training.py: error: Knights-Archers-Zombies needs the pettingzoo extra "
        '(pettingzoo is not installed): pip install -e ".[pettingzoo]"\n'
    )


def test_ctrl_c_held_waits_for_the_block_then_interrupts() -> None:
    import signal

    from batchenv.cli_common import ctrl_c_held

    # Start from Python's own handler: an earlier test (Ray Tune) may have installed its own.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        finished = []
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_held():
                os.kill(os.getpid(), signal.SIGINT)
                finished.append(True)  # still running: the signal was held back
        assert finished == [True]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with ctrl_c_held():  # no Ctrl-C, no KeyboardInterrupt
            pass
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_held_keeps_an_ignored_ctrl_c_ignored(monkeypatch) -> None:
    import signal

    from batchenv.cli_common import ctrl_c_held

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with ctrl_c_held():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_what_ctrl_c_before_a_checkpoint_says(tmp_path) -> None:
    from batchenv.cli_common import unsaved_interrupt_line

    run = tmp_path / "run"
    assert unsaved_interrupt_line("impala", run) == (
        f"interrupted before {run} was created; nothing was written"
    )
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert unsaved_interrupt_line("impala", run) == (
        f"interrupted before the first checkpoint was written: {run} has no checkpoint, so "
        f"it cannot be resumed; start a new run (in another --logdir, or delete {run} first)"
    )
    (run / "checkpoint.pt").write_bytes(b"")
    assert unsaved_interrupt_line("batchppo", run) == (
        f"interrupted before training resumed; the checkpoint in {run} is unchanged (resume "
        f"with batchenv train batchppo --resume {run})"
    )
