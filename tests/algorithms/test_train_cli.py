"""``ConfigOptions``: how ``batchenv train``'s options, presets and ``--resume`` make a
config, on a small config of its own (the three algorithms' CLI tests run it for real)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from batchenv.algorithms.train_cli import ConfigOptions, add_run_arguments
from batchenv.cli_common import OneLineParser


@dataclass(frozen=True)
class Small:
    """A config."""

    env: str = "Pendulum-v1"
    """The env."""
    num_envs: int = 1
    """Envs."""
    steps: int = 100
    """Steps."""
    eval_every: int = 10
    """Evaluation cadence."""
    lr: float = 1e-3
    """Learning rate."""
    seed: int = 0
    """Seed."""
    device: str = "cpu"
    """Device."""
    torch_threads: int = 1
    """Threads."""

    def replace(self, **changes) -> Small:
        return dataclasses.replace(self, **changes)


def parse(items):
    types = {field.name: field.type for field in dataclasses.fields(Small)}
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in types:
            raise ValueError(f"bad override {item!r}")
        values[key] = {"int": int, "float": float}.get(types[key], str)(text)
    return values


OPTIONS = ConfigOptions(
    config_class=Small,
    presets={"pendulum": Small(lr=3e-4), "cartpole": Small(env="CartPole-v1", lr=5e-4)},
    default_preset="pendulum",
    parse_overrides=parse,
    defaults_from="nowhere",
    set_example="lr=1e-2",
)


def args_of(*argv: str) -> argparse.Namespace:
    parser = OneLineParser(prog="batchenv train small")
    OPTIONS.add_arguments(parser)
    add_run_arguments(parser)
    return parser.parse_args(argv)


def saved_run(run_dir: str) -> Small:
    assert run_dir == "runs/old"
    return Small(env="CartPole-v1", lr=0.5, steps=50)


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], Small(lr=3e-4)),  # the default preset
        (["--env", "CartPole-v1"], Small(env="CartPole-v1", lr=5e-4)),  # the preset of the env
        (["--env", "Acrobot-v1"], Small(env="Acrobot-v1")),  # no preset: the defaults
        (["--preset", "cartpole", "--env", "Acrobot-v1"], Small(env="Acrobot-v1", lr=5e-4)),
        (["--set", "env=CartPole-v1", "steps=7"], Small(env="CartPole-v1", lr=5e-4, steps=7)),
        (["--set", "steps=7", "--steps", "9"], Small(lr=3e-4, steps=9)),  # named options last
    ],
    ids=["default", "env-preset", "no-preset", "preset-and-env", "set", "precedence"],
)
def test_options_make_the_config(argv, expected):
    assert OPTIONS.make_config(args_of(*argv), saved_run) == expected


def test_resume_takes_the_saved_config_and_only_the_resumable_options():
    resumed = OPTIONS.make_config(args_of("--resume", "runs/old", "--steps", "80"), saved_run)
    assert resumed == Small(env="CartPole-v1", lr=0.5, steps=80)
    for argv in (["--seed", "1"], ["--set", "lr=1"], ["--preset", "cartpole"]):
        with pytest.raises(ValueError, match="only --steps, --device and --threads"):
            OPTIONS.make_config(args_of("--resume", "runs/old", *argv), saved_run)


def test_a_session_config_leaves_out_meta_fields_that_are_none():
    config = OPTIONS.session_config(
        "CartPole-v1", {"lr": 0.1}, {"seed": 3, "steps": None, "eval_every": 5}
    )
    assert config == Small(env="CartPole-v1", lr=0.1, seed=3, eval_every=5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "pendulm"], "argument --preset: unknown preset 'pendulm'; did you mean"),
        (["--set", "nope=1"], "argument --set: bad override 'nope=1'"),
        (["--steps", "x"], "argument --steps: invalid literal for int()"),
        (["--device", "tpu"], "argument --device: device must be cpu or cuda[:N], got 'tpu'"),
    ],
    ids=["preset", "set", "named", "device"],
)
def test_bad_values_stop_the_parse_in_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        args_of(*argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"batchenv train small: error: {message}") and err.count("\n") == 1
