"""``batchenv train sac`` / ``batchenv evaluate``: configs from options, bad ones refused."""

from __future__ import annotations

import pytest

from batchenv.algorithms.sac import PRESETS, SACConfig
from batchenv.algorithms.sac.cli import make_config
from batchenv.algorithms.sac.session import TRAINER
from batchenv.cli import build_parser, main
from batchenv.experiment.trainers import load_trainer


def config_of(*argv: str) -> SACConfig:
    args = build_parser(["train", "sac", *argv]).parse_args(["train", "sac", *argv])
    return make_config(args)


def test_the_preset_comes_from_the_env_and_options_override_it():
    assert config_of() == PRESETS["pendulum"]
    config = config_of("--env", "batchenv.kernels:Pendulum", "--steps", "2e3", "--seed", "3")
    assert config == PRESETS["pendulum"].replace(
        env="batchenv.kernels:Pendulum", steps=2000, seed=3
    )
    config = config_of("--env", "CartPole-v1", "--set", "discrete=gumbel", "hidden_layers=64,64")
    assert config == PRESETS["cartpole_discrete"].replace(discrete="gumbel", hidden_layers=(64, 64))
    assert config_of("--env", "MountainCarContinuous-v0") == SACConfig(
        env="MountainCarContinuous-v0"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "gamma=2"], "SACConfig.gamma must be in [0, 1], got 2"),
        (["--set", "tua=0.1"], "SACConfig has no field 'tua' (did you mean 'tau'?)"),
        (
            ["--set", "discrete=softmax"],
            "SACConfig.discrete must be one of ('expectation', 'gumbel'), got 'softmax'",
        ),
        (["--steps", "many"], "override 'steps=many': steps must be int, got 'many' (str)"),
        (["--preset", "pendulm"], "unknown preset 'pendulm'; did you mean 'pendulum'? Presets:"),
        (["--env", "NoSuchEnv-v0"], "unknown env 'NoSuchEnv-v0'"),
        (["--set", "log_alpha_range=2,1"], "SACConfig.log_alpha_range must be () or (low, high)"),
    ],
    ids=[
        "invalid-value",
        "unknown-key",
        "unknown-variant",
        "bad-number",
        "unknown-preset",
        "unknown-env",
        "bad-range",
    ],  # fmt: skip
)
def test_bad_configs_exit_2_with_one_line_and_write_nothing(tmp_path, capsys, argv, message):
    run_dir = tmp_path / "run"
    argv = ["train", "sac", *argv, "--logdir", str(run_dir), "--no-progress"]
    try:
        status = main(argv)
    except SystemExit as exit_:  # refused while the command line was read
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("batchenv train sac: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not run_dir.exists()


def test_train_then_evaluate_from_the_command_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "sac", "--env", "batchenv.kernels:Pendulum", "--steps", "200", "--set",
            "learning_starts=100", "eval_every=100", "eval_episodes=1", "hidden_layers=8",
            "batch_size=16", "--logdir", str(run_dir), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert "sac: done, 2 evaluations, final eval score" in capsys.readouterr().out
    assert main(["evaluate", str(run_dir), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{run_dir}: mean return ") and "over 2 episodes" in out
    assert "at step 200" in out
    assert main(["train", "sac", "--resume", str(run_dir), "--set", "tau=0.1"]) == 2
    assert "only --steps, --device and --threads" in capsys.readouterr().err


def test_spec_sessions_take_the_preset_and_meta():
    assert load_trainer("sac") is TRAINER
    config = TRAINER.make_config("Acrobot-v1", {"discrete": "gumbel"}, steps=5_000, seed=2,
                                 eval_every=None, log_frequency=500)  # fmt: skip
    assert config == PRESETS["acrobot_discrete"].replace(
        discrete="gumbel", steps=5_000, seed=2, eval_every=500
    )
    assert TRAINER.cpus(config) == 2
    assert TRAINER.cpus(config.replace(env="batchenv.kernels:Acrobot")) == 1


@pytest.mark.parametrize("name", ["pendulum", "cartpole_discrete", "acrobot_discrete"])
def test_the_spec_presets_load(name):
    from pathlib import Path

    from batchenv.experiment.spec import load_spec

    spec = load_spec(Path(__file__).parents[3] / "specs" / "sac.yaml", name)
    assert spec.algorithm == "sac" and spec.meta.sessions == 4
    config = spec.make_config(spec.session_seed(0, 1))
    assert config.steps == spec.meta.steps and config.eval_every == spec.meta.eval_every
