"""In-graph PPO's trainer: configs from specs, checks, grouping, checkpoint accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from batchenv.algorithms.batchppo.log_checkpoints import LogCheckpoints
from batchenv.algorithms.ppo.session import TRAINER, RolloutCheckpoints, _agent_state, env_id_of
from batchenv.experiment.spec import SpecError, load_spec


def make(env="CartPole-v1", values=None, **meta):
    meta = {"steps": None, "seed": 0, "eval_every": None, **meta}
    return TRAINER.make_config(env, values or {}, **meta)


def test_the_env_picks_its_preset_and_meta_sets_budget_seed_and_cadence():
    config = make("MinAtar/Breakout-v1", {"update_epochs": 2}, steps=40_960, seed=7)
    assert (config.env_id, config.num_envs, config.learning_rate, config.activation) == (
        "MinAtar/Breakout-v1",
        64,
        5e-3,
        "relu",
    )
    assert (config.update_epochs, config.total_timesteps, config.seed) == (2, 40_960, 7)
    assert config.log_frequency == 10_000
    assert make(log_frequency=500).log_frequency == 500


@pytest.mark.parametrize(
    "env, expected",
    [
        ("batchenv.kernels:CartPole", "CartPole-v1"),
        ("batchenv.kernels:Breakout", "MinAtar/Breakout-v1"),
        ("Acrobot-v1", "Acrobot-v1"),
        ("batchenv.kernels:Nope", "batchenv.kernels:Nope"),
    ],
)
def test_env_classes_map_to_ppo_env_ids(env, expected):
    assert env_id_of(env) == expected


def test_eval_every_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^meta.eval_every: PPO has no eval phases") as caught:
        make(eval_every=1000)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "env: CartPole-v0",
            "spec 'bad': PPO trains the in-graph envs CartPole-v1, Acrobot-v1",
        ),
        (
            "env: CartPole-v1\n  config:\n    seeds: 4",
            "config.seeds comes from the spec's meta.sessions; set it there",
        ),
        (
            "env: CartPole-v1\n  config:\n    num_minibatches: 3",
            "spec 'bad': num_envs x num_steps = 512 does not split into 3 minibatches",
        ),
        ("env: CartPole-v1\n  meta:\n    eval_every: 5", "spec 'bad': meta.eval_every: PPO has"),
    ],
    ids=["env", "seeds", "minibatches", "eval_every"],
)
def test_bad_specs_fail_on_load_in_one_line(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(f"bad:\n  algorithm: ppo\n  {text}\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_sessions_train_together_only_when_equal_but_for_consecutive_seeds():
    base = [make(seed=s) for s in (10, 11, 12)]
    assert TRAINER.can_train_together(base)
    assert not TRAINER.can_train_together([make(seed=10), make(seed=12)])
    assert not TRAINER.can_train_together([make(seed=11), make(seed=10)])
    other = make(values={"learning_rate": 1e-3}, seed=11)
    assert not TRAINER.can_train_together([base[0], other])


@pytest.mark.parametrize("frequency", [7, 12, 100], ids=["f7", "f12", "f100"])
def test_rollout_checkpoints_equal_batchppo_log_checkpoints_step_by_step(frequency):
    """Same rule, same episode order: the rows equal LogCheckpoints' exactly."""
    generator = np.random.default_rng(0)
    num_envs, steps, rollouts = 3, 16, 9
    last = num_envs * steps * rollouts
    ours = RolloutCheckpoints(frequency, num_envs, last)
    reference = LogCheckpoints(frequency, num_envs, last)
    rows, expected = [], []
    for _ in range(rollouts):
        done = generator.random((steps, num_envs)) < 0.15
        score = generator.normal(20.0, 5.0, (steps, num_envs)).astype(np.float32)
        rows += ours.rollout(done, score)
        for t in range(steps):
            reference.step(torch.from_numpy(done[t]), torch.from_numpy(score[t]), updated=False)
        expected += [(frame, total) for frame, total, _ in reference.take()]
    assert len(rows) == len(expected) >= 5
    assert [r[0] for r in rows] == [e[0] for e in expected]
    assert rows[-1][0] == last
    for (_, got), (_, want) in zip(rows, expected):
        assert got == want or (math.isnan(got) and math.isnan(want))


def test_recent_keeps_the_last_100_episodes():
    checkpoints = RolloutCheckpoints(frequency=10, num_envs=10, last_frame=20)
    done = np.ones((2, 10), dtype=bool)
    score = np.stack([np.arange(10.0), np.arange(10.0, 20.0)]).astype(np.float32)
    assert checkpoints.rollout(done, score) == [(10, 4.5), (20, 9.5)]
    many = RolloutCheckpoints(frequency=1000, num_envs=150, last_frame=150)
    (row,) = many.rollout(np.ones((1, 150), dtype=bool), np.arange(150.0)[None].astype(np.float32))
    assert row == (150, float(np.arange(50.0, 150.0).mean()))


def test_agent_state_slices_the_agent_axis_only():
    state = {
        "params": torch.arange(6.0).reshape(3, 2),
        "opt_state": {"m": torch.ones(3, 2), "count": torch.tensor(4.0)},
        "draws": torch.tensor(9),
        "updates_done": 5,
        "ret_mean": torch.tensor([1.0, 2.0, 3.0]),
    }
    one = _agent_state(state, 1, 3)
    assert torch.equal(one["params"], torch.tensor([[2.0, 3.0]]))
    assert one["opt_state"]["m"].shape == (1, 2)
    assert float(one["opt_state"]["count"]) == 4.0
    assert int(one["draws"]) == 9 and one["updates_done"] == 5
    assert torch.equal(one["ret_mean"], torch.tensor([2.0]))
