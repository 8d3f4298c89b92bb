"""rollout(scan=True): all steps as one compiled loop, with the golden sequences and states
of the step-by-step rollout; the first rollouts learn the step's plan, later ones run the
loop."""

from __future__ import annotations

import torch

from batchenv.in_graph.algorithm import RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.rollout import rollout
from batchenv.kernels import CartPole
from tests.in_graph.test_rollout import MaskedFixedLengthEnv, MaskRecorder, golden_env, rows

LENGTHS = [2, 3, 5]
STEPS = 6


def _loop(env, algo, steps):
    return env._rollout_programs[(id(algo), "scan", steps)][2]


def test_scanned_rollouts_give_the_golden_masks_of_step_by_step_ones():
    runs = {}
    for scan in (False, True):
        env = InGraphBatchEnv(MaskedFixedLengthEnv(LENGTHS))
        algo = MaskRecorder(len(LENGTHS), 4 * STEPS)
        dones, scores = [], []
        for _ in range(4):  # two learn the plan, the third compiles the loop, the fourth runs it
            done, score, _ = rollout(env, algo, steps=STEPS, scan=scan, compile=scan)
            dones.append(done)
            scores.append(score)
        runs[scan] = (algo, torch.cat(dones), torch.cat(scores), env)
    (plain, done_a, score_a, _), (scanned, done_b, score_b, env) = runs[False], runs[True]
    assert _loop(env, scanned, STEPS) is not None and _loop(env, scanned, STEPS).refused is None
    assert rows(done_b) == rows(done_a)
    assert torch.equal(score_b, score_a)
    assert rows(scanned.began) == rows(plain.began)
    assert rows(scanned.ended) == rows(plain.ended)
    assert int(scanned.step) == int(plain.step) == 4 * STEPS
    # episodes of lengths 2, 3, 5 over 24 steps: rows end at steps 1, 3, 5, ... (row 0)
    assert [r for r in rows(done_b)[:6]] == [[], [0], [1], [0], [2], [0, 1]]


def test_scanned_cartpole_rollouts_match_the_step_by_step_ones():
    states = {}
    for scan in (False, True):
        env = InGraphBatchEnv(CartPole(num_envs=16, seed=3))
        algo = RandomAlgorithm(env.single_action_space, seed=4)
        runs = [rollout(env, algo, steps=32, scan=scan, compile=scan) for _ in range(4)]
        done = torch.cat([run.done for run in runs])
        states[scan] = (done, env.env.state.clone(), env.score.clone(), env.episodes.clone())
    (done_a, state_a, score_a, episodes_a), (done_b, state_b, score_b, episodes_b) = (
        states[False],
        states[True],
    )
    assert bool(done_a.any())
    assert torch.equal(done_b, done_a)
    assert torch.equal(episodes_b, episodes_a)
    torch.testing.assert_close(score_b, score_a)
    # Inductor's fused dynamics agree with eager ones to rounding.
    torch.testing.assert_close(state_b, state_a, rtol=1e-5, atol=1e-5)


def test_a_step_that_cannot_loop_runs_in_compiled_chunks():
    """A NumPy BatchEnv's steps are custom ops whose Python no plan can replay: the step is
    refused, and later rollouts run as compiled chunks with the same golden masks."""
    runs = {}
    for scan in (False, True):
        env = golden_env("numpy", LENGTHS)
        algo = MaskRecorder(len(LENGTHS), 3 * STEPS)
        done = torch.cat([rollout(env, algo, steps=STEPS, scan=scan).done for _ in range(3)])
        runs[scan] = (env, algo, done)
    (_, plain, done_a), (env, scanned, done_b) = runs[False], runs[True]
    step = env._rollout_programs[(id(scanned), "scan", STEPS)][1]
    assert step.refused is not None and "custom ops" in step.refused
    assert rows(done_b) == rows(done_a)
    assert rows(scanned.ended) == rows(plain.ended)
