"""simulate(): the TF Agents control flow, golden sequences included (docs/concepts.md)."""

from __future__ import annotations

import csv
import functools
import gc
import os
import weakref

import pytest
import torch

import batchenv
from batchenv.in_graph.algorithm import Algorithm, RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import in_graph_batch_env, simulate
from batchenv.logger import Logger
from batchenv.make import start_workers
from tests.in_graph.fixed_length_envs import (
    FixedLengthEnv,
    FixedLengthInGraphEnv,
    TwoAgentInGraphEnv,
)

# REAL_BATCHENV: the NumPy BatchEnv the "batch_env" cases run on (in-process envs). During
# development this was tests.in_graph.fixed_length_envs.StandInBatchEnv.
BatchEnvClass = batchenv.BatchEnv

IMPLS = ["in-graph", "batch_env"]
#: The golden sequences also run on envs in worker processes: one ExternalProcess per env
#: (the TF Agents way) and batchenv.make's shared-memory worker groups (reset ahead).
GOLDEN_IMPLS = [*IMPLS, "external", "make"]

_opened: list = []  # BatchEnvs with worker processes, closed after each test
_reset_ahead: list = []  # those of them that reset finished envs ahead (make())


@pytest.fixture(autouse=True)
def close_worker_envs():
    yield
    while _opened:
        _opened.pop().close()
    _reset_ahead.clear()


def make_env(impl: str, lengths, actions: str = "discrete", **kwargs):
    """The raw env (it records per-episode lengths) and its InGraphBatchEnv."""
    if impl == "in-graph":
        raw = FixedLengthInGraphEnv(lengths, actions)
        return raw, InGraphBatchEnv(raw, **kwargs)
    constructors = [functools.partial(FixedLengthEnv, n, actions) for n in lengths]
    if impl == "external":
        raw = BatchEnvClass([batchenv.ExternalProcess(c) for c in constructors])
    elif impl == "make":
        raw = start_workers(constructors, num_workers=2, reset_ahead=True)
        _reset_ahead.append(raw)
    else:
        raw = BatchEnvClass([c() for c in constructors])
    _opened.append(raw)
    return raw, InGraphBatchEnv(raw, **kwargs)


def episode_lengths(raw) -> list[list[int]]:
    if isinstance(raw, FixedLengthInGraphEnv):
        return raw.steps
    lengths = [list(steps) for steps in raw.get_attr("steps")]
    if any(raw is env for env in _reset_ahead):
        # A worker resets an env right after the step that ends its episode, so an env
        # whose last step ended an episode has already begun the next one (0 steps).
        lengths = [steps[:-1] if steps[-1] == 0 else steps for steps in lengths]
    return lengths


class Recorder(Algorithm):
    """Constant action 0; records every callback, one dict per simulate() call."""

    def __init__(self):
        self.calls: list[dict] = []

    def new_call(self) -> None:
        self.calls.append({"begin": [], "end": [], "experience": None})

    def begin_episodes(self, agent_indices):
        self.calls[-1]["begin"] = agent_indices.tolist()

    def perform(self, observ):
        return torch.zeros(len(observ), dtype=torch.int64)

    def experience(self, observ, action, reward, done, next_observ, truncated):
        self.calls[-1]["experience"] = (observ, action, reward, done, next_observ, truncated)

    def end_episodes(self, agent_indices):
        self.calls[-1]["end"] = agent_indices.tolist()


def run(env, algo: Recorder, resets) -> list[list[bool]]:
    dones = []
    for reset in resets:
        algo.new_call()
        done, _, _ = simulate(env, algo, reset=reset)
        dones.append(done.tolist())
    return dones


@pytest.mark.parametrize("impl", GOLDEN_IMPLS)
def test_golden_automatic_resets(impl):
    raw, env = make_env(impl, (1, 2, 3, 4))
    algo = Recorder()
    dones = run(env, algo, [False] * 10)
    T, F = True, False
    assert dones[:4] == [[T, F, F, F], [T, T, F, F], [T, F, T, F], [T, T, F, T]]
    assert [call["begin"] for call in algo.calls[:4]] == [[0, 1, 2, 3], [0], [0, 1], [0, 2]]
    assert [call["end"] for call in algo.calls[:4]] == [[0], [0, 1], [0, 2], [0, 1, 3]]
    assert episode_lengths(raw) == [[1] * 10, [2] * 5, [3, 3, 3, 1], [4, 4, 2]]


@pytest.mark.parametrize("impl", GOLDEN_IMPLS)
def test_golden_forced_resets(impl):
    raw, env = make_env(impl, (2, 4))
    algo = Recorder()
    resets = [False, True, False, True, False, False, False]
    dones = run(env, algo, resets)
    T, F = True, False
    assert dones == [[F, F], [F, F], [T, F], [F, F], [T, F], [F, F], [T, T]]
    begins = [[0, 1], [0, 1], [], [0, 1], [], [0], []]
    assert [call["begin"] for call in algo.calls] == begins
    # A forced reset cuts episodes short without end_episodes.
    assert [call["end"] for call in algo.calls] == [[], [], [0], [], [0], [], [0, 1]]
    assert episode_lengths(raw) == [[1, 2, 2, 2], [1, 2, 4]]


@pytest.mark.parametrize("impl", IMPLS)
def test_experience_sees_terminal_observation(impl):
    _, env = make_env(impl, (1, 2, 3))
    algo = Recorder()
    for _ in range(4):
        algo.new_call()
        simulate(env, algo)
        observ, action, reward, done, next_observ, truncated = algo.calls[-1]["experience"]
        begun = torch.tensor(algo.calls[-1]["begin"], dtype=torch.int64)
        assert (observ[begun, 0] == 0).all()  # reset rows start at step 0
        # observation = (steps, length, action sum): a done row shows its terminal state.
        assert torch.equal(done, next_observ[:, 0] == next_observ[:, 1])
        assert done.any() and (next_observ[done, 0] > 0).all()
        assert action.dtype == torch.int64 and reward.dtype == torch.float32
        assert not truncated.any()


@pytest.mark.parametrize("impl", IMPLS)
def test_state_tensors_and_score(impl):
    _, env = make_env(impl, (1, 3))
    assert env.done.tolist() == [True, True]
    assert env.observ.dtype == torch.float32 and env.action.dtype == torch.int64
    algo = Recorder()
    algo.new_call()
    done, score, _ = simulate(env, algo)
    algo.new_call()
    done, score, _ = simulate(env, algo)
    # Reward is 1 + action = 1 per step; row 0 restarted, row 1 is at its 2nd step.
    assert score.tolist() == [1.0, 2.0] and env.length.tolist() == [1, 2]
    assert done is env.done and env.reward.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("impl", IMPLS)
def test_running_means_cover_episodes_since_last_log(impl):
    _, env = make_env(impl, (1, 2, 3, 4))
    algo = Recorder()
    for _ in range(3):
        algo.new_call()
        _, _, summaries = simulate(env, algo)
        assert summaries == {}
    algo.new_call()
    _, _, summaries = simulate(env, algo, log=True)
    # Finished episodes in calls 1-4: 1 | 1, 2 | 1, 3 | 1, 2, 4 -> 15 / 8; score == length.
    assert summaries["mean_length"].item() == pytest.approx(15 / 8)
    assert summaries["mean_score"].item() == pytest.approx(15 / 8)
    algo.new_call()
    _, _, summaries = simulate(env, algo, log=True)  # call 5: only env 0 finishes
    assert summaries["mean_length"].item() == 1.0


def test_forced_reset_and_no_finished_episode_log_no_means():
    _, env = make_env("in-graph", (2, 4))
    algo = Recorder()
    algo.new_call()
    _, _, summaries = simulate(env, algo, log=True)
    assert summaries == {}
    algo.new_call()
    simulate(env, algo)  # env 0 finishes (length 2)
    algo.new_call()
    _, _, summaries = simulate(env, algo, reset=True, log=True)  # cut short: not counted
    assert summaries["mean_length"].item() == 2.0


class Summarizing(Algorithm):
    def begin_episodes(self, agent_indices):
        return {"began": torch.tensor(len(agent_indices))}

    def perform(self, observ):
        return torch.ones(len(observ), dtype=torch.int64)

    def experience(self, observ, action, reward, done, next_observ, truncated):
        return {"reward": reward.mean()}

    def end_episodes(self, agent_indices):
        return {"ended": torch.tensor(len(agent_indices))}


def test_summaries_of_all_callbacks_are_merged():
    _, env = make_env("in-graph", (1, 3))
    _, _, summaries = simulate(env, Summarizing(), log=True)
    assert {name: value.item() for name, value in summaries.items()} == {
        "began": 2,
        "reward": 2.0,
        "ended": 1,
        "mean_score": 2.0,
        "mean_length": 1.0,
    }
    _, _, summaries = simulate(env, Summarizing())
    assert set(summaries) == {"began", "reward", "ended"}


def test_raw_env_is_wrapped_once():
    raw = FixedLengthInGraphEnv((1, 2))
    wrapper = in_graph_batch_env(raw)
    assert isinstance(wrapper, InGraphBatchEnv) and in_graph_batch_env(raw) is wrapper
    algo = Recorder()
    for _ in range(3):
        algo.new_call()
        simulate(raw, algo)
    assert wrapper.length.tolist() == [1, 1] and raw.steps == [[1, 1, 1], [2, 1]]
    alive = weakref.ref(raw)
    del raw, wrapper
    gc.collect()
    assert alive() is None  # the cached wrapper does not keep the env alive


def test_log_writes_to_logger_argument_and_env_logger(tmp_path):
    _, env = make_env("in-graph", (1, 2))
    with Logger(tmp_path / "a") as logger:
        for _ in range(2):
            simulate(env, Summarizing(), log=True, logger=logger)
    env.logger = Logger(tmp_path / "b")
    simulate(env, Summarizing(), log=True)
    env.logger.close()
    with open(tmp_path / "a" / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    assert [row["step"] for row in rows] == ["1", "2"]
    assert rows[0]["mean_length"] == "1.0" and rows[1]["mean_length"] == "1.5"
    assert {"began", "reward", "ended", "mean_score"} <= set(rows[0])
    with open(tmp_path / "b" / "metrics.csv") as file:
        assert [row["step"] for row in csv.DictReader(file)] == ["3"]
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "a"))


def test_multi_agent_env_has_an_agent_axis():
    raw = TwoAgentInGraphEnv((1, 2), "box")
    env = InGraphBatchEnv(raw)
    assert env.observ.shape == (2, 2, 3) and env.reward.shape == (2, 2)
    algo = RandomAlgorithm(
        env.single_action_space, seed=0, observation_space=env.single_observation_space
    )
    done, score, summaries = simulate(env, algo, log=True)
    assert env.action.shape == (2, 2, 2) and score.shape == (2, 2)
    assert torch.equal(score, env.reward) and done.tolist() == [True, False]
    # Row 0 finished: the mean over its two agents' scores.
    assert summaries["mean_score"].item() == pytest.approx(score[0].mean().item())
    simulate(env, algo)
    assert raw.steps == [[1, 1], [2]]


def test_reset_may_be_a_bool_tensor():
    raw, env = make_env("in-graph", (2, 4))
    algo = Recorder()
    dones = run(env, algo, [torch.tensor(False), torch.tensor(True), torch.tensor(False)])
    assert dones == [[False, False], [False, False], [True, False]]
    assert raw.steps == [[1, 2], [1, 2]]
