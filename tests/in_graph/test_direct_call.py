"""compile_program's CPU programs skip Dynamo after two agreeing calls, with the results
Dynamo's calls give; calls the plan cannot serve go through Dynamo, and programs whose calls
cannot be replayed never go direct."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from batchenv.in_graph import rollout as rollout_module
from batchenv.in_graph.algorithm import RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.rollout import compile_program, rollout
from batchenv.kernels import CartPole


class State:
    def __init__(self, size: int = 3):
        self.a = torch.zeros(size)
        self.b = torch.ones(size)
        self.d = {"x": torch.zeros(2)}
        self.count = 0


def accumulate(s: State, k: float):
    """Attribute and dict writes, an attribute made on the first call, a returned alias."""
    s.a = s.a + s.b * k
    s.d["x"] = s.d["x"] + 1
    s.c = s.a * 2
    s.count = s.count + 1  # Python: traced once, stored as that constant (tensor guards only)
    return s.a.sum(), {"c": s.c, "k": k}


def run_both(function, make_state, calls: int, between=None):
    """The same calls through a direct program and a Dynamo-only one: results and states."""
    runs = []
    for direct in (True, False):
        program = compile_program(function, "cpu", direct=direct)
        state, results = make_state(), []
        for i in range(calls):
            if between is not None:
                between(state, i)
            results.append(program(state, 2.0))
        runs.append((program, state, results))
    return runs


def test_direct_calls_give_dynamos_results_and_state():
    (direct, s1, r1), (_, s2, r2) = run_both(accumulate, State, calls=6)
    # Call 0 also stores count = 1 (later calls store nothing new there), so calls 1 and 2
    # agree on the plan and calls 3-5 go direct.
    assert direct.direct_calls == 3 and direct.refused is None
    for (total1, extra1), (total2, extra2) in zip(r1, r2):
        assert torch.equal(total1, total2)
        assert extra1.keys() == extra2.keys() == {"c", "k"} and extra1["k"] == 2.0
        assert torch.equal(extra1["c"], extra2["c"])
    assert r1[-1][1]["c"] is s1.c  # the returned tensor is the stored one, as with Dynamo
    assert s1.a.tolist() == s2.a.tolist() == [12.0] * 3
    assert s1.d["x"].tolist() == s2.d["x"].tolist() == [6.0, 6.0]
    assert s1.count == s2.count == 1


def test_a_tensor_replaced_between_calls_is_read_fresh():
    def replace(state, i):
        if i == 4:
            state.b = torch.full((3,), 10.0)

    (direct, s1, _), (_, s2, _) = run_both(accumulate, State, calls=6, between=replace)
    assert direct.direct_calls == 3
    assert s1.a.tolist() == s2.a.tolist() == [48.0] * 3


def test_another_shape_goes_through_dynamo_and_the_plan_is_learned_again():
    def resize(state, i):
        if i == 3:
            state.a, state.b = torch.zeros(5), torch.ones(5)

    (direct, s1, r1), (_, s2, r2) = run_both(accumulate, State, calls=8, between=resize)
    # Calls 0-2 learn; call 3 (new shapes) is recompiled by Dynamo and, storing count = 2,
    # learns again with calls 4 and 5; calls 6 and 7 go direct.
    assert direct.direct_calls == 2
    assert s1.a.tolist() == s2.a.tolist() == [10.0] * 5
    assert [r[0].item() for r in r1] == [r[0].item() for r in r2]


def test_a_deep_copied_owner_shares_the_program_and_gets_its_own_results():
    program = compile_program(accumulate, "cpu")
    state = State()
    for _ in range(4):
        program(state, 1.0)
    holder = copy.deepcopy({"program": program, "state": state})
    assert holder["program"] is program
    for _ in range(3):
        program(holder["state"], 1.0)
        program(state, 1.0)
    assert holder["state"].a.tolist() == state.a.tolist() == [7.0] * 3
    assert holder["state"].a is not state.a


def test_another_grad_mode_goes_through_dynamo():
    program = compile_program(lambda s: setattr(s, "a", s.a * 2) or s.a, "cpu")
    state = State()
    state.a = torch.ones(3)
    for _ in range(3):
        program(state)
    assert program.direct_calls == 1
    with torch.no_grad():
        program(state)
    assert program.direct_calls == 1
    assert state.a.tolist() == [16.0] * 3


def made_object(s: State):
    s.box = State(2)  # a new Python object: nothing the plan can build
    return s.a + 1


def deleted_entry(s: State):
    del s.d["x"]
    return s.a + 1


@pytest.mark.parametrize(
    ("function", "reason"),
    [
        pytest.param(made_object, "the call made a State", id="new-object"),
        pytest.param(deleted_entry, "the call deleted", id="deleted-entry"),
    ],
)
def test_calls_the_plan_cannot_replay_stay_with_dynamo(function, reason):
    program = compile_program(function, "cpu")
    state = State()
    for _ in range(4):
        if function is deleted_entry:
            state.d["x"] = torch.zeros(2)
        assert program(state).tolist() == [1.0] * 3
    assert program.direct_calls == 0
    assert program.refused.startswith(reason)


@torch.library.custom_op("batchenv_test::count_calls", mutates_args=())
def count_calls(x: torch.Tensor) -> torch.Tensor:
    COUNTER["calls"] += 1  # Python state that no graph output shows
    return x.clone()


@count_calls.register_fake
def _(x):
    return torch.empty_like(x)


COUNTER = {"calls": 0}


def test_a_graph_with_custom_ops_never_goes_direct():
    program = compile_program(lambda s: count_calls(s.a) + 1, "cpu")
    state, before = State(), COUNTER["calls"]
    for _ in range(4):
        program(state)
    assert program.direct_calls == 0
    assert "custom ops (batchenv_test.count_calls" in program.refused
    assert COUNTER["calls"] - before == 4


def test_rollout_chunks_go_direct_and_match_dynamos(monkeypatch):
    results = []
    for direct in (True, False):
        monkeypatch.setattr(
            rollout_module, "compile_program", functools.partial(compile_program, direct=direct)
        )
        env = InGraphBatchEnv(CartPole(num_envs=8, seed=0))
        algo = RandomAlgorithm(env.single_action_space, seed=1)
        done, score, _ = rollout(env, algo, steps=32, unroll=4)
        (program,) = [entry[1] for entry in env.__dict__["_rollout_programs"].values()]
        results.append((done, score, env.env.get_state(), program))
    (done_a, score_a, state_a, program), (done_b, score_b, state_b, _) = results
    assert program.direct_calls == 6  # 8 chunks: 2 to learn the plan, 6 direct
    assert torch.equal(done_a, done_b) and bool(done_a.any())
    assert torch.equal(score_a, score_b)
    for key in state_a:
        assert torch.equal(state_a[key], state_b[key])


def bump(s: State):
    s.a.add_(1)  # an input changed in place, inside the graph
    return s.a * 2


@pytest.mark.parametrize("cache", [False, True], ids=["compiled", "cache-or-compiled"])
def test_direct_calls_of_a_plain_graph_skip_its_wrappers(cache):
    # A graph compiled in this process and one loaded from AOTAutograd's cache are wrapped
    # differently; the first is certain only with the caches off.
    program = compile_program(bump, "cpu")
    state = State()
    for i in range(5):
        version = state.a._version
        with torch._inductor.config.patch(force_disable_caches=not cache):
            result = program(state)
        assert state.a._version > version  # as AOTAutograd's wrapper would bump it
        assert result.tolist() == [2.0 * (i + 1)] * 3 and not result.requires_grad
        assert torch.is_grad_enabled()  # turned off around the compiled call only
    assert program.direct_calls == 3  # calls 0 and 1 learn the plan
    assert program._plan.graph.entry.__qualname__ == "_inductor_entry.<locals>.call"


def view_of_input(s: State):
    s.b = s.b + 1
    return s.a[:2]  # an output that is a view of an input: AOTAutograd rebuilds it


def test_a_graph_whose_output_aliases_an_input_keeps_its_wrappers():
    program = compile_program(view_of_input, "cpu")
    state = State()
    for _ in range(4):
        view = program(state)
        assert view.untyped_storage().data_ptr() == state.a.untyped_storage().data_ptr()
    assert program.direct_calls == 2
    assert program._plan.graph.entry == program._plan.graph.compiled_call
    assert state.b.tolist() == [5.0] * 3
