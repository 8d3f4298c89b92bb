"""``batchenv train dqn`` / ``batchenv evaluate``, the spec presets and the session trainer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchenv.algorithms.dqn.session import TRAINER
from batchenv.cli import main
from batchenv.experiment.spec import SpecError, load_spec
from batchenv.experiment.trainers import load_trainer

ROOT = Path(__file__).resolve().parents[3]
SMALL = [
    "train",
    "dqn",
    "--env",
    "batchenv.kernels:CartPole",
    "--num-envs",
    "2",
    "--set",
    "eval_every=200",
    "eval_episodes=2",
    "hidden_layers=16",
    "buffer_size=400",
    "batch_size=16",
    "learning_starts=100",
    "--no-progress",
]


def test_train_resume_and_evaluate(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*SMALL, "--steps", "200", "--logdir", str(run)]) == 0
    assert main(["train", "dqn", "--resume", str(run), "--steps", "400", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "dqn: done, 2 evaluations" in out
    assert main(["evaluate", str(run), "--episodes", "3", "--epsilon", "0"]) == 0
    line = capsys.readouterr().out.strip()
    pattern = (
        rf"{re.escape(str(run))}: mean return [0-9.]+ over 3 episodes "
        r"\(mean length [0-9.]+\) at step 400"
    )
    assert re.fullmatch(pattern, line), line


@pytest.mark.parametrize(
    "options, message",
    [
        (["--set", "batch_size=20000"], "batch_size must be <= buffer_size=10000"),
        (["--set", "n_step=0"], "n_step must be >= 1, got 0"),
        (["--env", "Pendulum-v1"], "DQN needs a Discrete action space, but Pendulum-v1 has Box"),
        (["--env", "NoSuchEnv-v0"], "unknown env 'NoSuchEnv-v0'"),
        (["--set", "loss=l1"], "loss must be one of mse, huber"),
    ],
    ids=["batch>buffer", "n_step=0", "continuous", "unknown-env", "loss"],
)
def test_bad_configs_print_one_line_exit_2_and_write_nothing(tmp_path, capsys, options, message):
    run = tmp_path / "run"
    assert main(["train", "dqn", *options, "--logdir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchenv train dqn: error: ") and message in err
    assert len(err.splitlines()) == 1
    assert not run.exists()


def test_lunarlander_without_box2d_names_the_extra(tmp_path, capsys):
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401

        pytest.skip("Box2D is installed")
    except ImportError:
        pass
    assert main(["train", "dqn", "--preset", "lunarlander", "--logdir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "batchenv train dqn: error: LunarLander-v3 needs the Box2D package: "
        'pip install "gymnasium[box2d]"'
    )


def test_resume_refuses_other_settings(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*SMALL, "--steps", "200", "--logdir", str(run)]) == 0
    capsys.readouterr()
    assert main(["train", "dqn", "--resume", str(run), "--set", "double=true"]) == 2
    assert "only --steps, --device and --threads" in capsys.readouterr().err


def test_spec_presets_load_with_four_sessions():
    for name in ("cartpole", "cartpole_ddqn_per"):
        spec = load_spec(ROOT / "specs" / "dqn.yaml", name, sets={})
        assert spec.algorithm == "dqn" and spec.meta.sessions >= 4, name
    try:
        spec = load_spec(ROOT / "specs" / "dqn.yaml", "lunarlander", sets={})
        assert spec.meta.sessions >= 4 and spec.env == "LunarLander-v3"
    except SpecError as error:  # without Box2D: refused before anything runs
        assert "LunarLander-v3 needs the Box2D package" in str(error)
    per = load_spec(ROOT / "specs" / "dqn.yaml", "cartpole_ddqn_per", sets={})
    config = TRAINER.make_config(per.env, per.config, steps=per.meta.steps, seed=1, eval_every=None)
    assert (config.double, config.prioritized, config.n_step) == (True, True, 3)


def test_the_trainer_is_built_in():
    trainer = load_trainer("dqn")
    assert trainer is TRAINER
    config = trainer.make_config(
        "CartPole-v1", {}, steps=1000, seed=2, eval_every=500, log_frequency=100
    )
    assert (config.steps, config.seed, config.eval_every, config.log_frequency) == (
        1000,
        2,
        500,
        100,
    )
    assert trainer.cpus(config) == 2
    assert trainer.cpus(config.replace(env="batchenv.kernels:CartPole")) == 1
