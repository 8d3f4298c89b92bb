"""The MinAtar games in the compiled rollout: one program with no graph break (the draws
are counter-based, resets go through ``reset_where``), equal to the eager run."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from batchenv.in_graph.algorithm import RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.rollout import rollout
from batchenv.kernels.minatar import Asterix, Breakout, Freeway, Seaquest, SpaceInvaders


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
    counters.clear()


def run(game, compiled: bool):
    env = InGraphBatchEnv(game(64, seed=0))
    algo = RandomAlgorithm(env.single_action_space, seed=0)
    # unroll=1: one step per program keeps Inductor's compile time to a minute or two.
    done, score, _ = rollout(env, algo, steps=16, unroll=1, compile=compiled)
    return done, score, env.env.get_state()


@pytest.mark.parametrize(
    "game",
    [
        pytest.param(Breakout, id="breakout"),
        pytest.param(Freeway, id="freeway", marks=pytest.mark.slow),
        pytest.param(Asterix, id="asterix", marks=pytest.mark.slow),
        pytest.param(Seaquest, id="seaquest", marks=pytest.mark.slow),
        pytest.param(SpaceInvaders, id="space_invaders", marks=pytest.mark.slow),
    ],
)
def test_compiled_rollout_has_no_graph_break_and_equals_eager(game, fresh_dynamo):
    done, score, state = run(game, compiled=True)
    assert counters["graph_break"] == {}  # rollout() would have raised GraphBreakError
    eager_done, eager_score, eager_state = run(game, compiled=False)
    assert torch.equal(done, eager_done) and torch.equal(score, eager_score)
    for key, value in eager_state.items():
        assert torch.equal(state[key], value), key
    if game is Breakout:
        assert done.any()  # episodes ended and restarted inside the compiled program
