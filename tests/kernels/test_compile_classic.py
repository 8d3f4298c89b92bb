"""torch.compile over the torch backend of the classic envs: a step that starts finished
rows afresh compiles to one graph (no graph break at the random starts) and does not
recompile from step to step."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from batchenv.kernels import Acrobot, CartPole, MountainCarContinuous, Pendulum

ENVS = {
    "CartPole": CartPole,
    "Pendulum": Pendulum,
    "MountainCar": MountainCarContinuous,
    "Acrobot": Acrobot,
}


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
    counters.clear()


@pytest.mark.parametrize("name", list(ENVS))
def test_compiled_step_with_resets_has_no_graph_break_and_matches_eager(name, fresh_dynamo):
    num_envs = 7
    eager_env, compiled_env = ENVS[name](num_envs, seed=3), ENVS[name](num_envs, seed=3)
    space = eager_env.single_action_space
    generator = torch.Generator().manual_seed(0)

    def step(env, action, reset_mask):
        observ, reward, terminated, truncated = env.step(action, reset_mask)
        return observ, reward, terminated | truncated

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=False)
    done_e = done_c = torch.ones(num_envs, dtype=torch.bool)  # every row starts afresh
    for _ in range(12):
        if hasattr(space, "n"):
            action = torch.randint(0, int(space.n), (num_envs,), generator=generator)
        else:
            action = torch.rand((num_envs, *space.shape), generator=generator) * 2 - 1
        observ_e, reward_e, done_e = step(eager_env, action, done_e)
        observ_c, reward_c, done_c = compiled(compiled_env, action, done_c)
        torch.testing.assert_close(observ_c, observ_e)
        torch.testing.assert_close(reward_c, reward_e)
        assert torch.equal(done_c, done_e)
    assert counters["graph_break"] == {}  # fullgraph=True would have raised anyway
    assert counters["stats"]["unique_graphs"] == 1  # one graph, compiled once for 12 steps


def test_fresh_starts_differ_between_rows_and_between_resets():
    env = CartPole(4, seed=0)
    first = env.get_state()["state"]
    assert len({tuple(row.tolist()) for row in first}) == 4
    env.reset(torch.tensor([0, 0 + 1]))
    second = env.get_state()["state"]
    assert not torch.equal(second[:2], first[:2]) and torch.equal(second[2:], first[2:])
    again = CartPole(4, seed=0)
    assert torch.equal(again.get_state()["state"], first)  # the same seed starts the same
