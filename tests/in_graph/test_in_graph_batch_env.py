"""InGraphBatchEnv: state tensors, dtypes, non-finite checks and the BatchEnv custom ops."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import batchenv
from batchenv.in_graph.env import InGraphEnv
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv, _check_finite
from batchenv.in_graph.simulate import simulate
from tests.in_graph.fixed_length_envs import (
    FixedLengthEnv,
    FixedLengthInGraphEnv,
    StandInBatchEnv,
)

IMPLS = ["in-graph", "batch_env", "stand-in"]


def make_env(impl: str, lengths, actions: str = "discrete", nan_at=None, **kwargs):
    if impl == "in-graph":
        return InGraphBatchEnv(FixedLengthInGraphEnv(lengths, actions, nan_at=nan_at), **kwargs)
    envs = [FixedLengthEnv(n, actions, nan_at if i == 1 else None) for i, n in enumerate(lengths)]
    # REAL_BATCHENV
    batch = batchenv.BatchEnv(envs) if impl == "batch_env" else StandInBatchEnv(envs)
    return InGraphBatchEnv(batch, **kwargs)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("actions", ["discrete", "box"])
def test_state_tensors_start_done_with_space_dtypes(impl, actions):
    env = make_env(impl, (3, 3, 3), actions)
    assert isinstance(env, InGraphEnv) and len(env) == 3
    assert env.done.dtype == torch.bool and env.done.all()
    assert env.observ.shape == (3, 3) and env.observ.dtype == torch.float32
    expected = (torch.int64, (3,)) if actions == "discrete" else (torch.float32, (3, 2))
    assert (env.action.dtype, tuple(env.action.shape)) == expected
    assert env.reward.dtype == torch.float32 and env.length.dtype == torch.int64
    observ = env.reset(torch.tensor([0, 2]))
    assert observ.shape == (2, 3) and env.done.tolist() == [False, True, False]
    action = torch.ones(3, dtype=torch.int64) if actions == "discrete" else torch.ones(3, 2)
    env.reset(torch.tensor([1]))
    observ, reward, terminated, truncated = env.step(action)
    assert observ.dtype == torch.float32 and reward.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert env.observ is observ and env.reward.tolist() == [3.0 if actions == "box" else 2.0] * 3


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("what", ["observ", "reward"])
def test_non_finite_env_output_raises_naming_the_row(impl, what):
    env = make_env(impl, (5, 5, 5), nan_at=(what, 2))
    env.reset(torch.arange(3))
    env.step(torch.zeros(3, dtype=torch.int64))
    name = "observation" if what == "observ" else "reward"
    with pytest.raises(ValueError, match=rf"non-finite {name} in rows \[1\]"):
        env.step(torch.zeros(3, dtype=torch.int64))


@pytest.mark.parametrize("impl", IMPLS)
def test_non_finite_action_raises_and_check_can_be_turned_off(impl):
    env = make_env(impl, (5, 5, 5), "box")
    env.reset(torch.arange(3))
    action = torch.zeros(3, 2)
    action[2, 1] = float("inf")
    with pytest.raises(ValueError, match=r"non-finite action in rows \[2\]"):
        env.step(action)
    env = make_env(impl, (5, 5, 5), nan_at=("reward", 1), check_finite=False)
    env.reset(torch.arange(3))
    _, reward, _, _ = env.step(torch.zeros(3, dtype=torch.int64))
    assert reward[1].isnan()


@pytest.mark.parametrize("impl", ["in-graph", "batch_env"])
def test_bad_action_batches_are_refused_before_stepping(impl):
    env = make_env(impl, (5, 5))
    env.reset(torch.arange(2))
    with pytest.raises(ValueError, match=r"action batch has shape \(3,\), expected \(2,\)"):
        env.step(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="needs integers"):
        env.step(torch.zeros(2))


def test_unsupported_envs_and_spaces_are_refused():
    with pytest.raises(TypeError, match="wraps a BatchEnv"):
        InGraphBatchEnv(object())
    env = FixedLengthInGraphEnv((1,))
    env.single_observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})
    with pytest.raises(TypeError, match="flatten Tuple/Dict"):
        InGraphBatchEnv(env)


def test_finite_check_counts_in_tensor_code_and_names_the_rows():
    """Huge but finite values pass (no overflowing sum); integer tensors are not checked."""
    clock, rows = torch.zeros((), dtype=torch.int64), torch.tensor([10, 11, 12, 13])
    huge = torch.full((4, 3), 3e38)
    ints = torch.full((4,), 2**62)
    _check_finite(clock, [ints, huge], "action,observation", rows)
    assert int(clock) == 1
    huge[2, 0] = float("nan")
    huge[3, 1] = -float("inf")
    with pytest.raises(ValueError, match=r"non-finite observation in rows \[12, 13\]"):
        _check_finite(clock, [ints, huge], "action,observation", rows)
    _check_finite(clock, [ints], "action", rows)  # nothing to check: no op call
    assert int(clock) == 2


def test_batch_env_ops_pass_opcheck():
    env = make_env("batch_env", (5, 5, 5), "box")
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    reset_args = (env.clock, env.handle, torch.tensor([0, 2]))
    torch.library.opcheck(torch.ops.batchenv.batch_env_reset.default, reset_args, test_utils=checks)
    env.reset(torch.arange(3))
    step_args = (env.clock, env.handle, torch.zeros(3, 2))
    torch.library.opcheck(torch.ops.batchenv.batch_env_step.default, step_args, test_utils=checks)
    check_args = (env.clock, torch.tensor(0), [torch.zeros(3, 2)], "x", torch.arange(3))
    torch.library.opcheck(torch.ops.batchenv.raise_if_nonfinite.default, check_args)


@pytest.mark.parametrize("impl", ["in-graph", "batch_env"])
def test_env_step_compiles_without_graph_break(impl):
    """fullgraph=True fails on any graph break: the env step is one graph (one op)."""
    eager, compiled = make_env(impl, (2, 3)), make_env(impl, (2, 3))
    torch._dynamo.reset()
    step = torch.compile(lambda env, action: env.step(action), fullgraph=True, backend="aot_eager")
    for env in (eager, compiled):
        env.reset(torch.arange(2))
    for i in range(3):
        action = torch.tensor([i % 3, 1])
        expected = eager.step(action)
        got = step(compiled, action)
        for a, b in zip(expected, got):
            assert torch.equal(a, b)
    # One reset and three steps went through custom ops (env ops or finiteness checks):
    # none was dropped by the compiler.
    assert compiled.clock.item() == 4
    torch._dynamo.reset()


def test_closed_env_handle_is_forgotten():
    env = make_env("batch_env", (2,))
    handle = env.handle
    env.close()
    with pytest.raises(RuntimeError, match=f"no BatchEnv is registered under handle {handle}"):
        torch.ops.batchenv.batch_env_reset(env.clock, handle, torch.tensor([0]))


def test_seed_reaches_the_first_reset():
    def observ(seed):
        envs = [gym.make("CartPole-v1") for _ in range(2)]
        return InGraphBatchEnv(batchenv.BatchEnv(envs), seed=seed).reset(torch.arange(2))

    assert torch.equal(observ(3), observ(3)) and not torch.equal(observ(3), observ(4))


def test_simulate_over_worker_processes():
    """The custom ops drive a BatchEnv whose envs live in worker processes."""
    with batchenv.make("CartPole-v1", num_envs=4, num_workers=2) as batch:
        env = InGraphBatchEnv(batch, seed=0)
        algo = batchenv.RandomAlgorithm(env.single_action_space, seed=0)
        finished = 0
        for _ in range(60):
            done, score, _ = simulate(env, algo)
            finished += int(done.sum())
        assert finished > 0 and np.all(score.numpy() >= 1)


def test_in_graph_env_output_shapes_are_checked():
    class NoAgentAxis(FixedLengthInGraphEnv):
        num_agents = 2

    env = InGraphBatchEnv(NoAgentAxis((2, 2)))
    with pytest.raises(ValueError, match=r"NoAgentAxis.reset returned observ of shape \(2, 3\)"):
        env.reset(torch.arange(2))


def test_float64_observations_of_a_batch_env_become_float32():
    """Float64 Box observations (Pendulum-style) arrive as float32 tensors, values kept."""
    envs = [
        gym.wrappers.TransformObservation(
            gym.make("CartPole-v1"),
            lambda o: o.astype(np.float64),
            gym.spaces.Box(-np.inf, np.inf, (4,), np.float64),
        )
        for _ in range(2)
    ]
    env = InGraphBatchEnv(batchenv.BatchEnv(envs), seed=5)
    assert env.env.observation_space.dtype == np.float64
    observ = env.reset(torch.arange(2))
    expected = np.stack([gym.make("CartPole-v1").reset(seed=5 + i)[0] for i in range(2)])
    assert observ.dtype == torch.float32 and env.observ.dtype == torch.float32
    assert torch.equal(observ, torch.from_numpy(expected))
    simulate(env, batchenv.RandomAlgorithm(env.single_action_space, seed=0))
    assert env.observ.dtype == torch.float32


def test_bool_observations_are_not_checked_but_rewards_are(monkeypatch):
    # MinAtar's grids are bool: they cannot be non-finite, and checking them as 400 floats a
    # row cost half of a compiled Breakout step.
    import batchenv.in_graph.in_graph_batch_env as module
    from batchenv.kernels.minatar import Breakout

    checked = []

    def record(clock, tensors, names, rows):
        checked.append(names)

    monkeypatch.setattr(module, "_check_finite", record)
    env = InGraphBatchEnv(Breakout(4, seed=0))
    env.reset(torch.arange(4))
    env.reset_where(torch.ones(4, dtype=torch.bool))
    observ, *_ = env.step(torch.zeros(4, dtype=torch.int64))
    assert observ.dtype == torch.bool
    assert checked == ["action,reward"]


class BoolGridEnv(gym.Env):
    """A 2x2 bool grid whose cell ``step % 4`` is set: bool Box observations."""

    observation_space = gym.spaces.Box(0, 1, (2, 2), bool)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._grid(), {}

    def step(self, action):
        self.t += 1
        return self._grid(), 1.0, False, self.t >= 6, {}

    def _grid(self):
        grid = np.zeros(4, dtype=bool)
        grid[self.t % 4] = True
        return grid.reshape(2, 2)


def test_bool_box_observations_stay_bool_on_every_path():
    """A bool Box keeps its dtype (a quarter of float32's bytes); values are kept; the
    built-in algorithms cast it at their first layer."""
    from batchenv.kernels.minatar import Breakout

    kernel, env = Breakout(3, seed=0), InGraphBatchEnv(Breakout(3, seed=0))
    assert env.observ.dtype == torch.bool and env.observ.shape == (3, 10, 10, 4)
    assert torch.equal(env.reset(torch.arange(3)), kernel.reset(torch.arange(3)))
    everyone, noop = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.int64)
    assert torch.equal(env.reset_where(everyone), kernel.reset_where(everyone))
    observ, *_ = env.step(noop)
    assert observ.dtype == torch.bool and torch.equal(observ, kernel.step(noop)[0])

    env = InGraphBatchEnv(batchenv.BatchEnv([BoolGridEnv() for _ in range(2)]))
    assert env.observ.dtype == torch.bool
    observ = env.reset(torch.arange(2))
    assert observ.dtype == torch.bool and observ[:, 0, 0].tolist() == [True, True]
    observ, *_ = env.step(torch.zeros(2, dtype=torch.int64))
    assert observ.dtype == torch.bool and observ[:, 0, 1].tolist() == [True, True]
    assert observ.sum().item() == 2
    env.reset_where(torch.tensor([True, False]))
    assert env.observ[0, 0, 0] and env.observ[1, 0, 1]
