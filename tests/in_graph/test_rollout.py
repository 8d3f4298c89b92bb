"""rollout(): T steps of simulate() as one compiled program, with the same golden sequences,
states and summaries as T single calls; index-set callbacks and graph breaks are named."""

from __future__ import annotations

import pytest
import torch

import batchenv
from batchenv.in_graph.algorithm import Algorithm, RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.rollout import GraphBreakError, rollout
from batchenv.in_graph.simulate import simulate
from batchenv.in_graph.stacked_env import StackedEnv
from batchenv.kernels import CartPole, DiscreteTag, Pendulum
from tests.in_graph.fixed_length_envs import FixedLengthEnv, FixedLengthInGraphEnv

T, F = True, False


class MaskedFixedLengthEnv(FixedLengthInGraphEnv):
    """The fixed-length envs with a traceable masked reset (no recording)."""

    def __init__(self, lengths):
        super().__init__(lengths, "discrete", record=False)

    def reset_where(self, mask):
        self.t = torch.where(mask, 0.0, self.t)
        self.action_sum = torch.where(mask, 0.0, self.action_sum)
        return self._observ()


class MaskRecorder(Algorithm):
    """Action 0; writes each step's begin/end masks into tensors (traceable)."""

    episode_masks = True

    def __init__(self, num_envs: int, steps: int):
        self.began = torch.zeros(steps, num_envs, dtype=torch.bool)
        self.ended = torch.zeros(steps, num_envs, dtype=torch.bool)
        self.step = torch.zeros((), dtype=torch.int64)

    def begin_episodes(self, mask):
        self.began.index_copy_(0, self.step.reshape(1), mask[None])
        return {"began": mask.sum()}

    def perform(self, observ):
        return torch.zeros(observ.shape[0], dtype=torch.int64)

    def experience(self, observ, action, reward, done, next_observ, truncated):
        return {"reward": reward.sum()}

    def end_episodes(self, mask):
        self.ended.index_copy_(0, self.step.reshape(1), mask[None])
        self.step = self.step + 1
        return {"ended": mask.sum()}


def rows(masks: torch.Tensor) -> list[list[int]]:
    return [torch.nonzero(m).squeeze(-1).tolist() for m in masks]


def golden_env(kind: str, lengths):
    if kind == "masked":
        return InGraphBatchEnv(MaskedFixedLengthEnv(lengths))
    if kind == "index":  # no reset_where: the index fallback (eager only)
        return InGraphBatchEnv(FixedLengthInGraphEnv(lengths, record=False))
    return InGraphBatchEnv(batchenv.BatchEnv([FixedLengthEnv(n) for n in lengths]))


CASES = [
    pytest.param("masked", True, id="masked-compiled"),
    pytest.param("masked", False, id="masked-eager"),
    pytest.param("index", False, id="index-eager"),
    pytest.param("numpy", True, id="numpy-batchenv-compiled"),
]


@pytest.mark.parametrize(("kind", "compiled"), CASES)
def test_golden_automatic_resets(kind, compiled):
    env = golden_env(kind, (1, 2, 3, 4))
    algo = MaskRecorder(4, 10)
    done, score, _ = rollout(env, algo, steps=10, unroll=5, compile=compiled)
    assert done[:4].tolist() == [[T, F, F, F], [T, T, F, F], [T, F, T, F], [T, T, F, T]]
    assert rows(algo.began[:4]) == [[0, 1, 2, 3], [0], [0, 1], [0, 2]]
    assert rows(algo.ended[:4]) == [[0], [0, 1], [0, 2], [0, 1, 3]]
    # Reward is 1 per step: the running score is the step within the episode.
    assert score[9].tolist() == [1.0, 2.0, 1.0, 2.0]


@pytest.mark.parametrize(("kind", "compiled"), CASES)
def test_golden_forced_reset_cuts_episodes(kind, compiled):
    env = golden_env(kind, (2, 4))
    algo = MaskRecorder(2, 7)
    dones = [rollout(env, algo, steps=1, compile=compiled).done[0].tolist()]
    dones += rollout(env, algo, steps=2, reset=True, compile=compiled).done.tolist()
    dones += rollout(env, algo, steps=4, reset=True, compile=compiled).done.tolist()
    assert dones == [[F, F], [F, F], [T, F], [F, F], [T, F], [F, F], [T, T]]
    assert rows(algo.began) == [[0, 1], [0, 1], [], [0, 1], [], [0], []]
    assert rows(algo.ended) == [[], [], [0], [], [0], [], [0, 1]]


def random_pair(make_env, steps):
    """(done, score, env state) of T simulate() calls and of one rollout, same seeds."""
    results = []
    for use_rollout in (False, True):
        env = InGraphBatchEnv(make_env())
        algo = RandomAlgorithm(
            env.single_action_space, seed=3, observation_space=env.single_observation_space
        )
        if use_rollout:
            done, score, _ = rollout(env, algo, steps=steps, unroll=8)
        else:
            calls = [simulate(env, algo) for _ in range(steps)]
            done = torch.stack([c[0] for c in calls])
            score = torch.stack([c[1] for c in calls])
        results.append(
            (done, score, env.env.get_state() if hasattr(env.env, "get_state") else None)
        )
    return results


@pytest.mark.parametrize(
    ("make_env", "finishes"),
    [
        pytest.param(lambda: CartPole(num_envs=16, seed=0), True, id="cartpole"),
        pytest.param(lambda: Pendulum(num_envs=5, seed=1), False, id="pendulum"),
        pytest.param(lambda: DiscreteTag(num_envs=3, seed=2), True, id="tag"),
    ],
)
def test_compiled_rollout_equals_simulate_calls(make_env, finishes):
    (done_a, score_a, state_a), (done_b, score_b, state_b) = random_pair(make_env, 64)
    assert bool(done_a.any()) == finishes
    assert torch.equal(done_a, done_b)
    # Inductor fuses the dynamics (FMA contraction), so float states and rewards agree to
    # rounding only (CartPole's integer rewards exactly).
    torch.testing.assert_close(score_a, score_b, rtol=1e-5, atol=1e-4)
    for key in state_a:
        torch.testing.assert_close(state_a[key], state_b[key], rtol=1e-5, atol=1e-5)


def test_stacked_env_blocks_are_lone_envs():
    stacked = StackedEnv([CartPole(num_envs=4, seed=s) for s in (5, 6)])
    lone = CartPole(num_envs=4, seed=6)
    assert stacked.num_envs == 8
    assert torch.equal(
        stacked.reset_where(torch.ones(8, dtype=torch.bool))[4:],
        lone.reset_where(torch.ones(4, dtype=torch.bool)),
    )
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        action = torch.randint(0, 2, (8,), generator=generator)
        observ, reward, terminated, truncated = stacked.step(action)
        lone_observ, lone_reward, lone_terminated, _ = lone.step(action[4:])
        assert torch.equal(observ[4:], lone_observ) and torch.equal(reward[4:], lone_reward)
        assert torch.equal(terminated[4:], lone_terminated)
        stacked.reset_where(torch.cat([terminated[:4], terminated[4:]]))
        lone.reset_where(lone_terminated)
    # Index resets in any order return the rows in that order.
    observ = stacked.reset(torch.tensor([6, 1]))
    assert torch.equal(observ[0], stacked.envs[1].get_state()["state"][2].float())
    assert torch.equal(observ[1], stacked.envs[0].get_state()["state"][1].float())


def test_logging_writes_one_row_with_the_means(tmp_path):
    env = InGraphBatchEnv(MaskedFixedLengthEnv((1, 3)))

    class Rows:
        def __init__(self):
            self.rows = []

        def log(self, step, summaries):
            self.rows.append((step, {k: float(v) for k, v in summaries.items()}))

    logger = Rows()
    rollout(env, MaskRecorder(2, 6), steps=6, log=True, logger=logger)
    ((step, summary),) = logger.rows
    assert step == 6
    # Row 0 finished 6 episodes of return 1, row 1 two of return 3: mean over 8 episodes.
    assert summary["mean_score"] == pytest.approx((6 * 1 + 2 * 3) / 8)
    assert summary["mean_length"] == pytest.approx((6 * 1 + 2 * 3) / 8)
    assert summary["ended"] == 2.0  # the last step's summaries: both rows ended


class IndexSets(Algorithm):
    def perform(self, observ):
        return torch.zeros(observ.shape[0], dtype=torch.int64)

    def end_episodes(self, agent_indices):
        return None


def test_index_set_callbacks_are_refused_by_name():
    env = InGraphBatchEnv(CartPole(num_envs=4, seed=0))
    with pytest.raises(GraphBreakError, match=r"IndexSets\.end_episodes .*episode_masks = True"):
        rollout(env, IndexSets(), steps=4)


class ReadsAValue(Algorithm):
    def perform(self, observ):
        if observ.sum().item() > 1e9:  # a host read: Dynamo cannot keep this in the graph
            return torch.ones(observ.shape[0], dtype=torch.int64)
        return torch.zeros(observ.shape[0], dtype=torch.int64)


def test_a_graph_break_names_the_method_and_line():
    env = InGraphBatchEnv(CartPole(num_envs=4, seed=0))
    with pytest.raises(GraphBreakError) as caught:
        rollout(env, ReadsAValue(), steps=2)
    message = str(caught.value)
    assert "ReadsAValue.perform breaks the compiled graph at" in message
    assert "test_rollout.py:" in message
    assert "observ.sum().item() > 1e9" in message


@pytest.mark.parametrize(("steps", "unroll"), [(0, None), (4, 0), (4, 5), (2.0, None)])
def test_bad_steps_and_unroll(steps, unroll):
    env = InGraphBatchEnv(CartPole(num_envs=2, seed=0))
    with pytest.raises(ValueError, match="must be an int"):
        rollout(env, RandomAlgorithm(env.single_action_space), steps=steps, unroll=unroll)


def test_an_envs_compile_options_reach_inductor(monkeypatch):
    import batchenv.in_graph.rollout as rollout_module
    from batchenv.kernels.minatar import MinAtarEnv

    seen = []

    def fake_compile(function, device, env_options=None):
        seen.append(dict(env_options or {}))
        return function  # run eagerly: only the options are under test

    monkeypatch.setattr(rollout_module, "compile_program", fake_compile)
    env = InGraphBatchEnv(CartPole(num_envs=2, seed=0))
    env.env.compile_options = {"cpp.simdlen": 1}
    rollout(env, RandomAlgorithm(env.single_action_space, seed=0), steps=2, unroll=1)
    assert seen == [{"cpp.simdlen": 1}]
    # MinAtar's games compile without CPU vectorisation (4x slower with it, measured).
    assert MinAtarEnv.compile_options == {"cpp.simdlen": 1}


def test_programs_of_one_function_keep_their_own_python_constants():
    # Guards cover tensors only, so the Python values a program reads are frozen when it is
    # traced; a second program of the same function must be traced anew, not handed the
    # first one's graph because its tensors look alike.
    from types import SimpleNamespace

    from batchenv.in_graph.rollout import compile_program

    def scaled(owner, x):
        return x * owner.factor

    x = torch.ones(3)
    first = compile_program(scaled, "cpu")
    second = compile_program(scaled, "cpu")
    assert first(SimpleNamespace(factor=2.0), x).tolist() == [2.0, 2.0, 2.0]
    assert second(SimpleNamespace(factor=5.0), x).tolist() == [5.0, 5.0, 5.0]
    # Frozen, like jax.jit: the first program keeps the value it was traced with.
    assert first(SimpleNamespace(factor=7.0), x).tolist() == [2.0, 2.0, 2.0]


class NanAction(Algorithm):
    """Zero torques, but NaN in row ``row`` at this algorithm's step ``at`` (1-based)."""

    def __init__(self, num_envs: int, row: int, at: int):
        self.rows = torch.arange(num_envs)
        self.row, self.at = row, at
        self.t = torch.zeros((), dtype=torch.int64)

    def perform(self, observ):
        self.t = self.t + 1
        bad = (self.rows == self.row) & (self.t == self.at)
        return torch.where(bad, float("nan"), 0.0)[:, None]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_rollout_checks_non_finite_values_once_at_its_end(monkeypatch, compiled):
    import batchenv.in_graph.in_graph_batch_env as module

    per_step = []
    monkeypatch.setattr(module, "_check_finite", lambda *args: per_step.append(args))
    env = InGraphBatchEnv(Pendulum(num_envs=4, seed=0))
    algo = NanAction(4, row=2, at=3)
    with pytest.raises(ValueError) as caught:
        rollout(env, algo, steps=8, unroll=4, compile=compiled)
    # The NaN torque makes the row's next observation and reward NaN too; all 8 steps ran.
    assert str(caught.value).startswith(
        "non-finite action in rows [2]; observation in rows [2]; reward in rows [2], "
        "first at step 3 (found by rollout()'s check at its end)"
    )
    assert int(env.steps) == 8 and int(algo.t) == 8
    assert per_step == []  # no host call inside the steps
    # The marks were cleared: a clean rollout after it passes, and simulate() checks per step.
    assert not env.nonfinite.any() and int(env.nonfinite_step) == -1
    monkeypatch.undo()
    random = RandomAlgorithm(env.single_action_space, seed=0)
    rollout(env, random, steps=4, reset=True, compile=compiled)  # new episodes: finite
    algo.at = int(algo.t) + 1
    with pytest.raises(ValueError, match=r"^non-finite action in rows \[2\]; fix"):
        simulate(env, algo)


def test_deferred_check_marks_reset_rows_only_and_can_be_off():
    class NanOutsideMask(MaskedFixedLengthEnv):
        def reset_where(self, mask):  # rows it does not reset get NaN: not observations
            return torch.where(mask[:, None], super().reset_where(mask), float("nan"))

    env = InGraphBatchEnv(NanOutsideMask([3, 3]))
    rollout(env, RandomAlgorithm(env.single_action_space, seed=0), steps=5, compile=False)
    assert not env.nonfinite.any()
    env = InGraphBatchEnv(Pendulum(num_envs=4, seed=0), check_finite=False)
    rollout(env, NanAction(4, row=1, at=2), steps=4, compile=False)
    assert env.observ[1].isnan().all() and not env.nonfinite.any()
