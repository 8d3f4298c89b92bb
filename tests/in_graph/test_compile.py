"""torch.compile(simulate): same results as eager, graph breaks only at the index sets, and
no recompile per step at a fixed batch size."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

import batchenv
from batchenv.in_graph.algorithm import Algorithm, RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import simulate
from tests.in_graph.fixed_length_envs import FixedLengthEnv, FixedLengthInGraphEnv

LENGTHS = (1, 2, 3, 4, 5, 6, 7)


def make_env(impl: str, actions: str = "box"):
    if impl == "in-graph":
        return InGraphBatchEnv(FixedLengthInGraphEnv(LENGTHS, actions, record=False))
    # REAL_BATCHENV
    return InGraphBatchEnv(batchenv.BatchEnv([FixedLengthEnv(n, actions) for n in LENGTHS]))


class Counting(Algorithm):
    """Random actions; counts episodes per row in tensors (traceable callbacks)."""

    def __init__(self, env: InGraphBatchEnv):
        self.random = RandomAlgorithm(env.single_action_space, seed=0)
        self.began = torch.zeros(env.num_envs, dtype=torch.int64)
        self.ended = torch.zeros(env.num_envs, dtype=torch.int64)

    def begin_episodes(self, agent_indices):
        self.began = self.began.index_add(0, agent_indices, torch.ones_like(agent_indices))
        return {"began": (agent_indices >= 0).sum()}

    def perform(self, observ):
        return self.random.perform(observ)

    def experience(self, observ, action, reward, done, next_observ, truncated):
        return {"reward": reward.mean()}

    def end_episodes(self, agent_indices):
        self.ended = self.ended.index_add(0, agent_indices, torch.ones_like(agent_indices))
        return {"ended": (agent_indices >= 0).sum()}


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
    counters.clear()


def compare_for_20_steps(eager_env, compiled_env, eager_algo, compiled_algo, backend):
    compiled = torch.compile(simulate, backend=backend)
    graphs = []
    for step in range(20):
        kwargs = dict(reset=step == 4, log=step % 5 == 4)
        done, score, summaries = simulate(eager_env, eager_algo, **kwargs)
        done_c, score_c, summaries_c = compiled(compiled_env, compiled_algo, **kwargs)
        assert torch.equal(done, done_c), step
        torch.testing.assert_close(score, score_c)
        assert summaries.keys() == summaries_c.keys(), step
        for name in summaries:
            torch.testing.assert_close(summaries[name], summaries_c[name])
        torch.testing.assert_close(eager_env.observ, compiled_env.observ)
        graphs.append((counters["stats"]["unique_graphs"], counters["frames"]["total"]))
    return graphs


def assert_breaks_only_at_index_sets_and_logging():
    for reason in counters["graph_break"]:
        assert "aten.nonzero" in reason or "<function _finish" in reason, reason


@pytest.mark.parametrize("impl", ["in-graph", "batch_env"])
def test_compiled_equals_eager_without_per_step_recompiles(impl, fresh_dynamo):
    eager_env, compiled_env = make_env(impl), make_env(impl)
    eager_algo, compiled_algo = Counting(eager_env), Counting(compiled_env)
    graphs = compare_for_20_steps(eager_env, compiled_env, eager_algo, compiled_algo, "aot_eager")
    assert torch.equal(eager_algo.began, compiled_algo.began)
    assert torch.equal(eager_algo.ended, compiled_algo.ended)
    # Compiles happen while set sizes 0, 1 and "many" first show up and for the first
    # reset=True (step 4); the first log=True (step 9) and the last 15 steps compile nothing.
    assert graphs[4] == graphs[19], graphs
    assert graphs[19][0] <= 8, graphs
    assert_breaks_only_at_index_sets_and_logging()
    assert compiled_env.clock.item() > 0  # the custom ops (env or checks) ran


def test_raw_env_compiles_with_cached_wrapper(fresh_dynamo):
    raw = FixedLengthInGraphEnv(LENGTHS, "discrete", record=False)
    algo = RandomAlgorithm(raw.single_action_space, seed=0)
    compiled = torch.compile(simulate, backend="aot_eager")
    graphs = []
    for _ in range(12):
        compiled(raw, algo)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[5] == graphs[11], graphs
    assert batchenv.in_graph.simulate.in_graph_batch_env(raw).steps.item() == 12


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["in-graph", "batch_env"])
def test_inductor_compiled_equals_eager(impl, fresh_dynamo):
    eager_env, compiled_env = make_env(impl), make_env(impl)
    eager_algo, compiled_algo = Counting(eager_env), Counting(compiled_env)
    graphs = compare_for_20_steps(eager_env, compiled_env, eager_algo, compiled_algo, "inductor")
    assert graphs[9] == graphs[19], graphs
    assert_breaks_only_at_index_sets_and_logging()
