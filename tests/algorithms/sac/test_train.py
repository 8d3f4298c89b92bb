"""SAC's training loop: run directories, exact resume, worker-process and in-graph envs."""

from __future__ import annotations

import csv

import pytest
import torch

from batchenv.algorithms.sac import SACConfig
from batchenv.algorithms.sac.train import (
    TrainingInterrupted,
    config_from_run,
    evaluate,
    make_env,
    train,
)
from batchenv.run_dir import CHECKPOINT_NAME

TINY = dict(
    num_envs=4,
    steps=400,
    eval_every=200,
    eval_episodes=2,
    learning_starts=100,
    hidden_layers=(16, 16),
    batch_size=32,
    buffer_size=1_000,
)


def metrics(run_dir) -> list[dict]:
    """metrics.csv without the columns that measure time."""
    with open(run_dir / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    return [{k: v for k, v in row.items() if k not in ("wall_time", "steps_per_s")} for row in rows]


def parameters(run_dir) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / CHECKPOINT_NAME, weights_only=False)["algorithm"]
    return {
        f"{net}.{name}": value
        for net in ("policy", "q1", "q2", "q1_target", "q2_target")
        for name, value in state[net].items()
    }


@pytest.mark.parametrize(
    "env, variant",
    [
        ("batchenv.kernels:Pendulum", "expectation"),
        ("Pendulum-v1", "expectation"),
        ("batchenv.kernels:CartPole", "gumbel"),
    ],
    ids=["in-graph-pendulum", "worker-pendulum", "in-graph-cartpole-gumbel"],
)
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, env, variant):
    config = SACConfig(env=env, discrete=variant, **TINY)
    straight = tmp_path / "straight"
    scores = train(config, logdir=straight, progress=False)
    assert len(scores) == 2

    def stop_after_first_round(steps, score, updates):
        raise KeyboardInterrupt

    broken = tmp_path / "broken"
    with pytest.raises(TrainingInterrupted) as stop:
        train(config, logdir=broken, progress=False, after_round=stop_after_first_round)
    assert stop.value.step == 200
    resumed = train(config, logdir=broken, resume=True, progress=False)
    assert resumed == scores
    assert metrics(broken) == metrics(straight)
    mine, theirs = parameters(broken), parameters(straight)
    assert all(torch.equal(mine[name], theirs[name]) for name in theirs)
    memory = torch.load(broken / CHECKPOINT_NAME, weights_only=False)["algorithm"]["memory"]
    assert memory["filled"] == 100  # 400 steps of 4 envs: the replay memory came along


def test_run_directory_and_evaluate(tmp_path):
    config = SACConfig(env="batchenv.kernels:Pendulum", **TINY)
    train(config, logdir=tmp_path, progress=False)
    assert {p.name for p in tmp_path.iterdir()} >= {
        "config.json", "metrics.csv", "curve.png", CHECKPOINT_NAME
    }  # fmt: skip
    assert config_from_run(tmp_path) == config
    rows = metrics(tmp_path)
    assert [(row["step"], row["phase"]) for row in rows] == [
        ("200", "train"), ("200", "eval"), ("400", "train"), ("400", "eval")
    ]  # fmt: skip
    assert float(rows[-2]["updates"]) == 300  # one gradient step per env step after 100
    stats = evaluate(tmp_path, episodes=3, num_envs=2)
    assert stats["episodes"] == 3 and stats["mean_length"] == 200.0


def test_resume_refuses_a_changed_config(tmp_path):
    config = SACConfig(env="batchenv.kernels:Pendulum", **{**TINY, "steps": 200})
    train(config, logdir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="only steps, device and torch_threads may change, but "
                       "these differ: tau: 0.005 -> 0.01"):  # fmt: skip
        train(config.replace(tau=0.01, steps=400), logdir=tmp_path, resume=True, progress=False)


def test_worker_envs_hold_several_envs_per_process():
    env = make_env(SACConfig(env="Pendulum-v1", num_envs=4), num_workers=2)
    try:
        assert env.num_envs == 4 and len(env.env.processes()) == 2
    finally:
        env.close()
