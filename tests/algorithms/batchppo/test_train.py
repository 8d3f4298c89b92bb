"""BatchPPO's training loop: phases, run directory, exact resume, envs, evaluation."""

from __future__ import annotations

import csv
import importlib
import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from batchenv.algorithms.batchppo import PRESETS, BatchPPOConfig, evaluate, train
from batchenv.algorithms.batchppo.envs import (
    InGraphRangeNormalize,
    gym_constructor,
    make_env,
    phase_seed,
)
from batchenv.algorithms.batchppo.train import METRICS, config_from_run
from batchenv.kernels import Pendulum
from batchenv.wrappers import ClipAction, ConvertTo32Bit, RangeNormalize

# In-graph Pendulum, 4 rows: a train phase is 4 episodes of 200 steps (one update), an eval
# phase 200 lockstep steps.
TINY = PRESETS["pendulum"].replace(
    env="batchenv.kernels:Pendulum",
    num_agents=4,
    update_every=4,
    eval_episodes=4,
    policy_layers=(16, 16),
    value_layers=(16, 16),
    update_epochs=3,
    learning_rate=1e-3,
    steps=800,
)
# The same on Gymnasium's Pendulum-v1 in worker processes.
TINY_GYM = TINY.replace(env="Pendulum-v1")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The learner runs one thread, as the CLI does (two threads crawl on a busy 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _rows(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def _without_timing(rows):
    return [{k: v for k, v in row.items() if k not in ("wall_time", "steps_per_s")} for row in rows]


def _flat_tensors(state, prefix=""):
    """(name, tensor) of every tensor in a nested state dict, in a fixed order."""
    if isinstance(state, torch.Tensor):
        yield prefix, state
    elif isinstance(state, dict):
        for key in sorted(state, key=str):
            yield from _flat_tensors(state[key], f"{prefix}.{key}")
    elif isinstance(state, (list, tuple)):
        for index, item in enumerate(state):
            yield from _flat_tensors(item, f"{prefix}.{index}")


def test_rounds_alternate_train_and_eval_and_write_the_run_directory(tmp_path):
    scores = train(TINY.replace(steps=1600), logdir=tmp_path, progress=False)

    assert len(scores) == 2 and all(math.isfinite(score) for score in scores)
    rows = _rows(tmp_path)
    assert [row["phase"] for row in rows] == ["train", "eval", "train", "eval"]
    assert [int(row["step"]) for row in rows] == [800, 800, 1600, 1600]
    assert list(rows[0]) == ["step", "wall_time", "phase", *METRICS]
    assert [float(row["mean_score"]) for row in rows[1::2]] == pytest.approx(scores)
    for row in rows[::2]:  # train rows: losses of the phase's updates, beta, steps/s
        assert int(float(row["updates"])) >= 1
        for name in ("policy_loss", "value_loss", "kl", "beta", "steps_per_s"):
            assert math.isfinite(float(row[name])), name
    for row in rows[1::2]:  # eval rows: scores only
        assert row["policy_loss"] == "" and int(float(row["episodes"])) == 4
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["algorithm"] == "batchppo" and record["seed"] == 0
    assert record["config"]["env"] == "batchenv.kernels:Pendulum"
    assert (tmp_path / "curve.png").stat().st_size > 0
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert checkpoint["counters"] == {
        "train_steps": 1600,
        "eval_steps": 1600,
        "rounds": 2,
        "evaluated_at": 1600,
    }
    assert checkpoint["scores"] == scores
    assert config_from_run(tmp_path) == TINY.replace(steps=1600)


def test_eval_every_runs_eval_phases_only_when_a_multiple_is_crossed(tmp_path):
    # Rounds of 800 train steps; eval_every=1500 crosses a multiple at 1600 and 3200, and
    # the last round (4000) always evaluates.
    calls = []
    scores = train(
        TINY.replace(steps=4000, eval_every=1500),
        logdir=tmp_path,
        progress=False,
        after_round=lambda steps, score: calls.append(steps),
    )
    rows = _rows(tmp_path)
    evals = [int(row["step"]) for row in rows if row["phase"] == "eval"]
    assert evals == [1600, 3200, 4000] and calls == evals and len(scores) == 3
    assert [int(row["step"]) for row in rows if row["phase"] == "train"] == [
        800,
        1600,
        2400,
        3200,
        4000,
    ]


def test_last_train_phase_is_cut_to_the_step_budget_and_writes_no_empty_row(tmp_path):
    # 900 steps: a whole round (800), then 25 lockstep calls in which no episode ends and
    # no update runs; that phase writes no (all-NaN) train row, its eval phase does.
    train(TINY.replace(steps=900), logdir=tmp_path, progress=False)
    rows = _rows(tmp_path)
    assert [(int(row["step"]), row["phase"]) for row in rows] == [
        (800, "train"),
        (800, "eval"),
        (900, "eval"),
    ]
    assert all(row["mean_score"] and row["mean_score"] != "nan" for row in rows)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert checkpoint["counters"]["train_steps"] == 900


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(TINY, id="in-graph-pendulum"),
        # (~10 s; test_cli's smoke test also resumes a worker run and compares the metrics)
        pytest.param(TINY_GYM, id="gymnasium-pendulum-in-workers", marks=pytest.mark.slow),
    ],
)
def test_resume_continues_bit_identically(tmp_path, config):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    total = 2 * config.steps
    expected = train(config.replace(steps=total), logdir=whole, progress=False)

    class Crash(Exception):
        pass

    def crash_after_first_round(step, score):
        raise Crash(step)

    with pytest.raises(Crash):
        train(
            config.replace(steps=total),
            logdir=parts,
            progress=False,
            after_round=crash_after_first_round,
        )
    assert len(_rows(parts)) == 2
    resumed = train(config.replace(steps=total), logdir=parts, resume=True, progress=False)

    assert resumed == expected
    assert _without_timing(_rows(parts)) == _without_timing(_rows(whole))
    assert [int(row["step"]) for row in _rows(parts)][::2] == [config.steps, 2 * config.steps]
    mine = torch.load(parts / "checkpoint.pt", weights_only=False)
    theirs = torch.load(whole / "checkpoint.pt", weights_only=False)
    assert mine["counters"] == theirs["counters"]
    pairs = zip(_flat_tensors(mine["algorithm"]), _flat_tensors(theirs["algorithm"]), strict=True)
    for (name, a), (_, b) in pairs:
        assert torch.equal(a, b), name


def test_resume_may_extend_steps_but_not_change_the_config(tmp_path):
    train(TINY, logdir=tmp_path, progress=False)
    with pytest.raises(
        ValueError, match=r"only steps, device and torch_threads may change.*discount: 0.995 -> 0.9"
    ):
        train(TINY.replace(discount=0.9), logdir=tmp_path, resume=True)
    scores = train(TINY.replace(steps=1600), logdir=tmp_path, resume=True, progress=False)
    assert len(scores) == 2
    assert [int(row["step"]) for row in _rows(tmp_path)] == [800, 800, 1600, 1600]


def test_a_new_run_never_overwrites_an_old_one(tmp_path):
    train(TINY, logdir=tmp_path, progress=False)
    with pytest.raises(FileExistsError, match="already holds a run; pass resume=True"):
        train(TINY, logdir=tmp_path, progress=False)


def test_evaluate_uses_the_checkpoint_and_mean_actions(tmp_path):
    train(TINY, logdir=tmp_path, progress=False)
    first = evaluate(tmp_path, episodes=8, num_agents=8)
    again = evaluate(tmp_path, episodes=8, num_agents=8)
    assert first["episodes"] == 8 and math.isfinite(first["mean_score"])
    assert first == {**again, "steps_per_s": first["steps_per_s"]}  # seeded: same episodes
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        evaluate(tmp_path / "missing")


def test_gymnasium_env_gets_batch_ppo_wrappers_in_order():
    env = gym_constructor("Pendulum-v1", 50, normalize_ranges=True)()
    stack = []
    layer = env
    while isinstance(layer, gym.Wrapper):
        stack.append(type(layer))
        layer = layer.env
    assert stack[:3] == [ConvertTo32Bit, ClipAction, RangeNormalize]
    assert isinstance(env.unwrapped, gym.envs.classic_control.PendulumEnv)
    assert env.spec.max_episode_steps == 50  # Gymnasium's TimeLimit: truncation
    env.reset(seed=0)
    for step in range(50):
        _, _, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
        assert not terminated and truncated == (step == 49)
    plain = gym_constructor("Pendulum-v1", 200, normalize_ranges=False)()
    assert plain.action_space == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def test_in_graph_range_normalize_matches_the_gymnasium_wrappers():
    torch_env = InGraphRangeNormalize(Pendulum(num_envs=3, seed=0, dtype=torch.float64))
    reference = ClipAction(RangeNormalize(gym.make("Pendulum-v1")))
    assert torch_env.single_observation_space == reference.observation_space
    assert torch_env.single_action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    raw = Pendulum(num_envs=3, seed=0, dtype=torch.float64)
    raw.reset(torch.arange(3))
    torch_env.reset(torch.arange(3))
    action = torch.tensor([[-3.0], [0.25], [0.9]])
    observ, reward, _, _ = torch_env.step(action)
    torch_raw = torch.tensor([[-2.0], [0.5], [1.8]])  # clipped, then mapped from [-1, 1]
    raw_observ, raw_reward, _, _ = raw.step(torch_raw)
    torch.testing.assert_close(reward, raw_reward)
    expected = torch.from_numpy(RangeNormalize(gym.make("Pendulum-v1")).observation(raw_observ))
    torch.testing.assert_close(observ, expected.float())


def test_in_graph_env_needs_a_long_enough_max_length():
    with pytest.raises(
        ValueError, match=r"after 500 steps, but config.max_length=200.*max_length=500"
    ):
        make_env(BatchPPOConfig(env="batchenv.kernels:CartPole", num_agents=2))


@pytest.mark.parametrize(
    "name, message",
    [
        ("NoSuchEnv-v0", "unknown env 'NoSuchEnv-v0': expected a registered Gymnasium id"),
        ("batchenv.kernels:NoSuch", "module 'batchenv.kernels' has no attribute 'NoSuch'"),
        ("no_such_module:Env", "cannot import module 'no_such_module'"),
    ],
)
def test_unknown_envs_are_explained(name, message):
    with pytest.raises(ValueError, match=message):
        make_env(BatchPPOConfig(env=name, num_agents=2))


def test_phases_reseed_the_envs():
    env = make_env(TINY)
    assert isinstance(env.env.env, Pendulum)
    first = [env.reset(torch.arange(4)) for _ in range(2)]
    from batchenv.algorithms.batchppo.envs import reseed

    assert reseed(env, phase_seed(0, 0))
    again = env.reset(torch.arange(4))
    assert reseed(env, phase_seed(0, 0))
    torch.testing.assert_close(env.reset(torch.arange(4)), again)
    assert not torch.equal(first[0], first[1])


@pytest.mark.slow
def test_learns_in_graph_cartpole(tmp_path):
    # The first 60k steps of `batchenv train batchppo` (about 1-3 minutes on 2 cores).
    config = PRESETS["cartpole"].replace(env="batchenv.kernels:CartPole", steps=60_000)
    scores = train(config, logdir=tmp_path, progress=False)
    # A random policy balances about 22 steps; 500 is the limit.
    assert len(scores) == 4 and scores[-1] >= 450, scores


def test_interrupt_mid_round_keeps_the_last_complete_round_and_resume_repeats_it(
    tmp_path, monkeypatch
):
    train_module = importlib.import_module("batchenv.algorithms.batchppo.train")

    whole, parts = tmp_path / "whole", tmp_path / "parts"
    config = TINY.replace(steps=1600)
    train(config, logdir=whole, progress=False)

    real, calls = train_module.run_phase, []

    def interrupted_phase(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # the eval phase of round 2: after its train phase
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "run_phase", interrupted_phase)
    with pytest.raises(train_module.TrainingInterrupted) as stop:
        train(config, logdir=parts, progress=False)
    assert isinstance(stop.value, KeyboardInterrupt)
    assert stop.value.step == 800 and stop.value.run_dir == parts
    checkpoint = torch.load(parts / "checkpoint.pt", weights_only=False)
    assert checkpoint["counters"]["train_steps"] == 800
    assert [int(row["step"]) for row in _rows(parts)] == [800, 800]  # round 2: no rows

    monkeypatch.setattr(train_module, "run_phase", real)
    train(config, logdir=parts, resume=True, progress=False)
    timing = ("wall_time", "steps_per_s")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert strip(_rows(parts)) == strip(_rows(whole))


def test_interrupt_in_the_first_round_saves_the_starting_state(tmp_path, monkeypatch):
    train_module = importlib.import_module("batchenv.algorithms.batchppo.train")

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "run_phase", interrupt)
    with pytest.raises(train_module.TrainingInterrupted) as stop:
        train(TINY, logdir=tmp_path / "run", progress=False)
    assert stop.value.step == 0
    checkpoint = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert checkpoint["counters"]["train_steps"] == 0 and checkpoint["scores"] == []
    monkeypatch.undo()
    fresh = train(TINY, logdir=tmp_path / "fresh", progress=False)
    assert train(TINY, logdir=tmp_path / "run", resume=True, progress=False) == fresh


def test_resume_without_a_checkpoint_says_so(tmp_path):
    from batchenv.run_dir import RunDirectory

    RunDirectory(tmp_path / "run", "batchppo", TINY, seed=0).close()  # died in round 1
    with pytest.raises(FileNotFoundError) as error:
        train(TINY, logdir=tmp_path / "run", resume=True, progress=False)
    assert str(error.value) == (
        f"{tmp_path / 'run'} has no checkpoint yet (one is written after every round), so "
        "there is nothing to resume; start a new run instead"
    )


def test_train_uses_the_configured_torch_threads_and_restores_them(tmp_path):
    seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train(
            TINY.replace(torch_threads=1),
            logdir=tmp_path / "one",
            progress=False,
            after_round=lambda steps, score: seen.append(torch.get_num_threads()),
        )
        assert seen == [1] and torch.get_num_threads() == 2
        train(
            TINY.replace(torch_threads=0),
            logdir=tmp_path / "keep",
            progress=False,
            after_round=lambda steps, score: seen.append(torch.get_num_threads()),
        )
        assert seen == [1, 2]
    finally:
        torch.set_num_threads(before)
    assert BatchPPOConfig().torch_threads == 1


def test_evaluate_runs_exactly_the_episodes_asked(tmp_path):
    train(TINY, logdir=tmp_path, progress=False)
    for episodes, num_agents in [(5, 4), (3, 4), (8, None)]:
        stats = evaluate(tmp_path, episodes=episodes, num_agents=num_agents)
        assert stats["episodes"] == episodes and stats["mean_length"] == 200.0
    with pytest.raises(ValueError, match="^episodes must be >= 1, got 0$"):
        evaluate(tmp_path, episodes=0)


def test_bad_device_and_env_fail_before_anything_is_made(tmp_path, monkeypatch):
    import sys

    if not torch.cuda.is_available():
        with pytest.raises(ValueError) as error:
            train(TINY.replace(device="cuda"), logdir=tmp_path / "run", progress=False)
        assert "use --device cpu" in str(error.value)
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ValueError) as error:
        train(TINY.replace(env="HalfCheetah-v5"), logdir=tmp_path / "run", progress=False)
    assert str(error.value) == 'HalfCheetah-v5 needs the mujoco package: pip install -e ".[mujoco]"'
    assert not (tmp_path / "run").exists()


def test_the_curve_is_drawn_every_curve_seconds_and_at_the_end(tmp_path, monkeypatch):
    from batchenv.run_dir import RunDirectory

    train_module = importlib.import_module("batchenv.algorithms.batchppo.train")
    drawn = []
    original = RunDirectory.plot_curve

    def plot_curve(self, *args, **kwargs):
        drawn.append(len(_rows(self.path)))  # metrics rows written when it is drawn
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RunDirectory, "plot_curve", plot_curve)
    train(TINY.replace(steps=1600), logdir=tmp_path / "slow", progress=False)
    assert drawn == [4]  # two rounds well within CURVE_SECONDS: only the final drawing
    drawn.clear()
    monkeypatch.setattr(train_module, "CURVE_SECONDS", 0.0)
    train(TINY.replace(steps=1600), logdir=tmp_path / "fast", progress=False)
    assert drawn == [2, 4]  # after each round (nothing new to draw at the end)
    drawn.clear()
    monkeypatch.setattr(train_module, "CURVE_SECONDS", 3600.0)

    def stop(steps: int, score: float) -> None:
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        train(
            TINY.replace(steps=1600), logdir=tmp_path / "stopped", progress=False, after_round=stop
        )
    assert drawn == [2]  # a callback ended the run after round 1: its rows are drawn
    assert (tmp_path / "stopped" / "curve.png").stat().st_size > 0
