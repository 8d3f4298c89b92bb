"""ContinuousTag: the rules of docs/tag.md on hand-built states, on both backends; the
two WarpDrive divergences as this package resolves them (end bonus on the last step; a tagger
catching two runners is rewarded twice); the triton kernel held to the torch step by the
consistency checker; starts; simulate().

Without CUDA the triton backend runs in Triton's interpreter (~70 ms per env per step here),
so sizes and step counts stay small; the few-dozen-env run and the GPU compile are slow.
"""

from __future__ import annotations

import doctest
import functools
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from batchenv.in_graph.algorithm import RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import simulate
from batchenv.kernels import ContinuousTag, tag_continuous
from batchenv.kernels.consistency import check_consistency

F32 = np.float32
ACCEL = np.concatenate(([0.0], np.linspace(-1, 1, 10))).astype(F32)
TURN = np.concatenate(([0.0], np.linspace(-math.pi / 2, math.pi / 2, 10))).astype(F32)
NOOP = (0, 0)


@pytest.fixture(params=["torch", "triton"])
def make(request):
    """``make(num_envs, **kwargs)`` on one backend (triton: the interpreter on CPU)."""
    if request.param == "triton":
        device = request.getfixturevalue("triton_device")
    else:
        device = torch.device("cpu")
    return functools.partial(ContinuousTag, device=device, backend=request.param, seed=0)


def _place(env, agents, elapsed=0):
    """Every env in the state ``agents``: rows ``[x, y, v, a, theta, alive]``."""
    state = torch.tensor(agents, dtype=torch.float32)
    if state.dim() == 2:
        state = state.expand(env.num_envs, *state.shape)
    env.set_state({"state": state, "elapsed": torch.full((env.num_envs,), elapsed)})


def _act(env, actions):
    action = torch.tensor(actions, dtype=torch.int64, device=env.device)
    if action.dim() == 2:
        action = action.expand(env.num_envs, -1, -1)
    return env.step(action.contiguous())


def _expected_move(agent, accel_index, turn_index, vmax=1.0, length=10.0):
    """Rule 1 of the module docstring for one agent, written out in float32 NumPy."""
    x, y, v, a, theta, alive = (F32(value) for value in agent)
    two_pi = F32(2 * math.pi)
    a = F32(a + ACCEL[accel_index])
    theta = F32(theta + TURN[turn_index])
    theta = F32(theta - F32(np.floor(F32(theta / two_pi))) * two_pi)
    v = F32(min(max(F32(v + a), F32(0)), F32(vmax)))
    if v in (F32(0), F32(vmax)):
        a = F32(0)
    x = F32(min(max(F32(x + F32(v * F32(np.cos(theta)))), F32(0)), F32(length)))
    y = F32(min(max(F32(y + F32(v * F32(np.sin(theta)))), F32(0)), F32(length)))
    return [x, y, v, a, theta, alive]


FAR_RUNNER = [9.0, 9.0, 0.0, 0.0, 0.0, 1.0]
DYNAMICS_CASES = {
    # name: (agent state, (accel index, turn index))
    "accelerate-and-turn": ([5.0, 5.0, 0.2, 0.1, 0.0, 1.0], (6, 10)),
    "speed-limit-zeroes-a": ([5.0, 5.0, 0.9, 0.5, 1.0, 1.0], (10, 0)),
    "standstill-zeroes-a": ([5.0, 5.0, 0.1, 0.0, 2.0, 1.0], (1, 3)),
    "heading-wraps": ([5.0, 5.0, 0.5, 0.0, 3 * math.pi / 2, 1.0], (0, 10)),
    "negative-heading-wraps": ([5.0, 5.0, 0.5, 0.0, 0.1, 1.0], (0, 1)),
    "clipped-at-the-wall": ([9.9, 0.1, 0.5, 0.2, 5.5, 1.0], (0, 0)),
}


@pytest.mark.parametrize("case", list(DYNAMICS_CASES))
def test_dynamics(make, case):
    agent, action = DYNAMICS_CASES[case]
    env = make(1, num_runners=1)
    _place(env, [agent, FAR_RUNNER])
    _act(env, [action, NOOP])
    state = env.get_state()["state"][0].cpu()
    np.testing.assert_allclose(state[0].numpy(), _expected_move(agent, *action), rtol=0, atol=2e-6)
    assert state[1].tolist() == FAR_RUNNER  # no action: nothing moves


def test_skill_levels_scale_the_speed_limit(make):
    env = make(1, num_runners=1, skill_level_tagger=0.75, skill_level_runner=0.5, max_speed=2.0)
    _place(env, [[1.0, 1.0, 0.0, 0.0, 0.0, 1.0], [5.0, 5.0, 0.0, 0.0, 0.0, 1.0]])
    for _ in range(3):
        _act(env, [(10, 0), (10, 0)])  # full throttle
    state = env.get_state()["state"][0].cpu()
    assert state[:, 2].tolist() == [1.5, 1.0]  # max_speed * skill
    assert state[:, 0].tolist() == pytest.approx([1.0 + 1.0 + 1.5 + 1.5, 5.0 + 1.0 + 1.0 + 1.0])


def _tag_env(make, **kwargs):
    return make(1, num_taggers=2, num_runners=3, tagging_distance=0.05, **kwargs)  # 0.5 units


def test_tagging_distance(make):
    env = _tag_env(make)
    taggers = [[2.0, 2.0, 0, 0, 0, 1], [8.0, 8.0, 0, 0, 0, 1]]
    runners = [[2.49, 2.0, 0, 0, 0, 1], [8.0, 8.51, 0, 0, 0, 1], [5.0, 5.0, 0, 0, 0, 1]]
    _place(env, taggers + runners)
    _, reward, terminated, _ = _act(env, [NOOP] * 5)
    assert reward[0].tolist() == [1.0, 0.0, -1.0, 0.0, 0.0]
    assert env.get_state()["state"][0, :, 5].tolist() == [1, 1, 0, 1, 1]
    assert terminated.tolist() == [False]


def test_nearest_tagger_tie_goes_to_the_lowest_id(make):
    env = _tag_env(make)
    # The runner sits exactly between both taggers, 0.25 from each.
    agents = [[4.75, 5.0, 0, 0, 0, 1], [5.25, 5.0, 0, 0, 0, 1]]
    agents += [[5.0, 5.0, 0, 0, 0, 1], [0.0, 0.0, 0, 0, 0, 1], [10.0, 0.0, 0, 0, 0, 1]]
    _place(env, agents)
    _, reward, _, _ = _act(env, [NOOP] * 5)
    assert reward[0].tolist() == [1.0, 0.0, -1.0, 0.0, 0.0]


def test_a_tagger_catching_two_runners_is_rewarded_for_each(make):
    env = _tag_env(make, tag_reward_for_tagger=10.0, tag_penalty_for_runner=-10.0)
    agents = [[3.0, 3.0, 0, 0, 0, 1], [9.0, 9.0, 0, 0, 0, 1]]
    agents += [[3.2, 3.0, 0, 0, 0, 1], [3.0, 2.7, 0, 0, 0, 1], [9.0, 1.0, 0, 0, 0, 1]]
    _place(env, agents)
    _, reward, terminated, _ = _act(env, [NOOP] * 5)
    assert reward[0].tolist() == [20.0, 0.0, -10.0, -10.0, 0.0]
    assert terminated.tolist() == [False]


def test_runners_leave_and_the_game_ends_when_none_is_left(make):
    env = make(
        1, num_taggers=1, num_runners=2, tagging_distance=0.05, num_other_agents_observed=None
    )
    _place(env, [[5.0, 5.0, 0, 0, 0, 1], [4.8, 5.0, 0.3, 0.2, 0.0, 1], [0.0, 0.0, 0, 0, 0, 1]])
    observ, reward, terminated, _ = _act(env, [NOOP, NOOP, NOOP])
    # Runner 1 moved to x = 5.3 (v = 0.3 + 0.2) -- within 0.5 of the tagger: tagged.
    assert reward[0].tolist() == [1.0, -1.0, 0.0] and terminated.tolist() == [False]
    frozen = env.get_state()["state"][0, 1].tolist()
    assert frozen[2:] == [0.0, 0.0, 0.0, 0.0]  # stopped (v = a = 0), heading 0, out
    # The tagger sees runner 1 with alive 0 (feature 6, slot 0) and runner 2 in (slot 1).
    assert observ[0, 0, 12:14].tolist() == [0.0, 1.0]
    # Runner 1's actions are ignored; it is never tagged again; runner 2 walks into the tagger.
    _place(env, env.get_state()["state"][0].tolist()[:2] + [[5.0, 4.8, 0, 0, 0, 1]], elapsed=1)
    _, reward, terminated, _ = _act(env, [NOOP, (10, 5), NOOP])
    assert env.get_state()["state"][0, 1].tolist() == frozen
    assert reward[0].tolist() == [1.0, 0.0, -1.0]
    assert terminated.tolist() == [True]


def test_end_bonus_on_the_last_step_only(make):
    env = make(
        1,
        num_taggers=1,
        num_runners=3,
        episode_length=3,
        tagging_distance=0.05,
        end_of_game_reward_for_runner=4.0,
    )
    runners = [[1.0, 1.0, 0, 0, 0, 1], [9.0, 9.0, 0, 0, 0, 0], [5.3, 5.0, 0, 0, 0, 1]]
    _place(env, [[5.0, 5.0, 0, 0, 0, 1], *runners], elapsed=1)
    _, reward, terminated, truncated = _act(env, [NOOP] * 4)  # elapsed 2: no bonus yet
    assert reward[0].tolist() == [1.0, 0.0, 0.0, -1.0]  # runner 3 tagged now
    assert truncated.tolist() == [False]
    _, reward, terminated, truncated = _act(env, [NOOP] * 4)  # elapsed 3 = T: the bonus
    # Runner 1 is in the game: +4; runner 2 left before the episode; runner 3 left at step 2.
    assert reward[0].tolist() == [0.0, 4.0, 0.0, 0.0]
    assert truncated.tolist() == [True] and terminated.tolist() == [False]
    _, reward, _, truncated = _act(env, [NOOP] * 4)  # stepped past T: no second bonus
    assert reward[0].tolist() == [0.0, 0.0, 0.0, 0.0] and truncated.tolist() == [True]


def test_a_runner_tagged_on_the_last_step_gets_no_bonus(make):
    env = make(1, num_taggers=1, num_runners=1, episode_length=2, tagging_distance=0.05)
    _place(env, [[5.0, 5.0, 0, 0, 0, 1], [5.2, 5.0, 0, 0, 0, 1]], elapsed=1)
    _, reward, terminated, truncated = _act(env, [NOOP, NOOP])
    assert reward[0].tolist() == [1.0, -1.0]
    assert terminated.tolist() == [True] and truncated.tolist() == [True]


def test_full_observation_of_a_known_state(make):
    env = make(2, num_taggers=1, num_runners=2, grid_length=10.0, max_speed=2.0, episode_length=4)
    agents = [
        [1.0, 2.0, 0.5, 0.0, 1.0, 1],
        [4.0, 6.0, 1.5, 0.0, 3.0, 1],
        [1.0, 2.0, 0.0, 0.0, 0.0, 0],
    ]
    _place(env, agents, elapsed=2)
    observ, _, _, _ = _act(env, [NOOP] * 3)
    assert observ.shape == (2, 3, 15)
    state = env.get_state()["state"][0].cpu().numpy()
    diag, two_pi = F32(math.sqrt(2) * 10), F32(2 * math.pi)
    for me in range(3):
        others = [j for j in range(3) if j != me]
        expected = []
        for column, scale in ((0, diag), (1, diag), (2, F32(2)), (3, F32(2)), (4, two_pi)):
            expected += [F32(state[j, column] - state[me, column]) / scale for j in others]
        expected += [F32(j == 0) for j in others] + [state[j, 5] for j in others] + [0.75]
        np.testing.assert_allclose(observ[0, me].cpu().numpy(), expected, rtol=0, atol=1e-6)
    assert torch.equal(observ[0], observ[1])


def test_nearest_others_observation(make):
    env = make(1, num_taggers=2, num_runners=3, num_other_agents_observed=2)
    # Seen from agent 0 at (5, 5): agents 2 and 3 tie at 1.0, agent 4 at 0.5, agent 1 far.
    agents = [[5.0, 5.0, 0, 0, 0, 1], [0.0, 0.0, 0, 0, 0, 1], [6.0, 5.0, 0, 0, 0, 1]]
    agents += [[4.0, 5.0, 0, 0, 0, 1], [5.0, 5.5, 0, 0, 0, 1]]
    _place(env, agents)
    observ, _, _, _ = _act(env, [NOOP] * 5)
    assert observ.shape == (1, 5, 15) and env.single_observation_space.shape == (15,)
    diag = F32(math.sqrt(2) * 10)
    mine = observ[0, 0].cpu().numpy()
    # Slot 0: agent 4 (nearest); slot 1: agent 2 (ties with 3, lower id).
    np.testing.assert_allclose(mine[0:2], [F32(0.0), F32(1.0) / diag], atol=1e-7)
    np.testing.assert_allclose(mine[2:4], [F32(0.5) / diag, F32(0.0)], atol=1e-7)
    assert mine[10:12].tolist() == [0.0, 0.0]  # type: both runners
    assert mine[12:14].tolist() == [1.0, 1.0] and mine[14] == pytest.approx(0.01)
    # Agent 1 at the corner: nearest are agent 0 (dist sqrt 50) and agent 3 (sqrt 41).
    theirs = observ[0, 1].cpu().numpy()
    assert theirs[10:12].tolist() == [0.0, 1.0]  # agent 3 (runner) first, then agent 0 (tagger)


def test_starts_are_random_in_the_square_and_never_repeat(make):
    env = make(12, num_taggers=1, num_runners=2, grid_length=10.0)
    starts = [env.get_state()["state"]]
    for _ in range(2):
        env.reset(torch.arange(12))
        starts.append(env.get_state()["state"])
    env.step(torch.zeros(12, 3, 2, dtype=torch.int64), torch.ones(12, dtype=torch.bool))
    starts.append(env.get_state()["state"])
    state = torch.cat(starts).cpu()  # [48, 3, 6]
    assert bool(((state[..., :2] >= 0) & (state[..., :2] <= 10)).all())
    quarters = state[..., 4] / (math.pi / 2)
    assert torch.allclose(quarters, quarters.round(), atol=1e-6)
    assert set(quarters.round().flatten().tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert state[..., 2:4].eq(0).all() and state[..., 5].eq(1).all()
    positions = state[..., :2].reshape(48, 6)
    assert torch.unique(positions, dim=0).shape[0] == 48, "two fresh starts repeat"
    assert int(env.get_state()["elapsed"].max()) == 0


@pytest.mark.parametrize("observed", [None, 3], ids=["all", "K=3"])
@pytest.mark.parametrize("n", [1, 7], ids=lambda n: f"n={n}")
def test_triton_matches_torch(n, observed, triton_device):
    kwargs = dict(
        num_taggers=2,
        num_runners=3,
        episode_length=5,
        tagging_distance=0.15,
        num_other_agents_observed=observed,
    )
    report = check_consistency(
        functools.partial(ContinuousTag, device=triton_device, backend="triton", **kwargs),
        functools.partial(ContinuousTag, device=triton_device, **kwargs),
        num_envs=n,
        steps=6 if n > 1 else 12,
        seed=n,
        atol=1e-5,
        rtol=1e-5,
    )
    assert report.passed, str(report)
    assert report.episodes > 0


@pytest.mark.slow  # ~3 min in Triton's interpreter (105 x 105 nearest-agent selections)
def test_triton_matches_torch_with_four_warps_a_program(triton_device):
    """105 agents: 4 warps a program, all reading the restart count one of them writes (see
    the discrete game's test of the same name)."""
    kwargs = dict(num_taggers=5, num_runners=100, episode_length=3, num_other_agents_observed=4)
    num_envs = 2048 if triton_device.type == "cuda" else 2
    report = check_consistency(
        functools.partial(ContinuousTag, device=triton_device, backend="triton", **kwargs),
        functools.partial(ContinuousTag, device=triton_device, **kwargs),
        num_envs=num_envs,
        steps=8,
        seed=5,
        atol=1e-5,
        rtol=1e-5,
    )
    assert report.passed, str(report)
    assert report.episodes >= 2 * num_envs


@pytest.mark.slow
def test_triton_matches_torch_few_dozen_envs(triton_device):
    kwargs = dict(num_taggers=3, num_runners=8, episode_length=8, tagging_distance=0.1)
    report = check_consistency(
        functools.partial(ContinuousTag, device=triton_device, backend="triton", **kwargs),
        functools.partial(ContinuousTag, device=triton_device, **kwargs),
        num_envs=24,
        steps=10,
        seed=3,
        atol=1e-5,
        rtol=1e-5,
    )
    assert report.passed, str(report)
    assert report.episodes >= 24


def test_works_under_simulate(make):
    env = make(3, num_taggers=1, num_runners=2, episode_length=6, num_other_agents_observed=1)
    batch = InGraphBatchEnv(env)
    algo = RandomAlgorithm(
        env.single_action_space,
        device=env.device,
        seed=0,
        observation_space=env.single_observation_space,
    )
    ended = 0
    for _ in range(8):
        done, score, _ = simulate(batch, algo)
        assert score.shape == (3, 3) and batch.action.shape == (3, 3, 2)
        ended += int(done.sum())
    assert ended >= 3  # every env reached T = 6


def test_argument_validation():
    with pytest.raises(ValueError, match=r"num_runners must be an int >= 1"):
        ContinuousTag(2, num_runners=0)
    with pytest.raises(ValueError, match=r"at most 10 other agents exist"):
        ContinuousTag(2, num_other_agents_observed=11)
    with pytest.raises(ValueError, match=r"max_speed must be > 0"):
        ContinuousTag(2, max_speed=0.0)
    with pytest.raises(ValueError, match=r"tagging_distance must be finite"):
        ContinuousTag(2, tagging_distance=float("nan"))
    env = ContinuousTag(2, num_runners=2, seed=0)
    with pytest.raises(
        ValueError, match=r"integer tensor of shape \(2, 3, 2\) \(envs, agents, 2\)"
    ):
        env.step(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"indices must be a 1-D int64 tensor, got torch.int32"):
        env.reset(torch.zeros(1, dtype=torch.int32))
    assert list(env.single_action_space.nvec) == [11, 11]
    assert env.acceleration_actions[0] == 0.0 and env.turn_actions[0] == 0.0
    np.testing.assert_allclose(env.acceleration_actions[1:], np.linspace(-1, 1, 10), atol=1e-7)
    np.testing.assert_allclose(
        env.turn_actions[1:], np.linspace(-np.pi / 2, np.pi / 2, 10), atol=1e-6
    )


def test_docstring_examples_run():
    result = doctest.testmod(tag_continuous)
    assert result.attempted > 0 and result.failed == 0


GPU_COMPILE_SCRIPT = textwrap.dedent(
    """
    import sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from batchenv.kernels import tag_continuous, tag_discrete

    target = GPUTarget("cuda", 90, 32)
    flags = {"elapsed_ptr": "*i32", "restarts_ptr": "*i64", "action_ptr": "*i64",
             "reset_mask_ptr": "*i1", "observ_ptr": "*fp32", "reward_ptr": "*fp32",
             "terminated_ptr": "*i1", "truncated_ptr": "*i1", "key_lo": "i32", "key_hi": "i32"}
    jobs = []
    for full in (True, False):
        for step, reset, random_start in ((True, True, True), (False, True, False)):
            signature = {"pos_ptr": "*i32", **flags}
            for name in ("wall_hit_penalty", "tag_reward", "tag_penalty", "step_cost"):
                signature[name] = "fp32"
            constants = {"E": 64, "N": 11, "L": 10, "T": 100, "FULL_OBS": full,
                         "OBS_DIM": 45 if full else 6, "RANDOM_START": random_start,
                         "STEP": step, "RESET": reset, "BLOCK_A": 16, "BLOCK_I": 16}
            signature.update({name: "constexpr" for name in constants})
            jobs.append((tag_discrete._step_kernel, signature, constants))
    for all_observed, k in ((True, 10), (False, 3)):
        for step, reset in ((True, True), (False, True)):
            signature = {"state_ptr": "*fp32", "elapsed_ptr": "*i32", "restarts_ptr": "*i64",
                         "action_ptr": "*i64", "accel_ptr": "*fp32", "turn_ptr": "*fp32"}
            signature.update({name: kind for name, kind in flags.items()
                              if name not in signature})
            for name in ("length", "vmax_tagger", "vmax_runner", "tag_dist2", "tag_reward",
                         "tag_penalty", "end_bonus", "diag", "max_speed", "two_pi"):
                signature[name] = "fp32"
            constants = {"E": 64, "N": 11, "NT": 1, "K": k, "ALL_OBSERVED": all_observed,
                         "T": 100, "NUM_ACCEL": 11, "NUM_TURN": 11, "STEP": step,
                         "RESET": reset, "BLOCK_A": 16, "BLOCK_I": 16}
            signature.update({name: "constexpr" for name in constants})
            jobs.append((tag_continuous._step_kernel, signature, constants))
    try:
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
    except Exception as error:
        print("SKIP no NVIDIA backend:", error)
        sys.exit(0)
    for kernel, signature, constants in jobs:
        try:
            compiled = triton.compile(ASTSource(kernel, signature, constants), target=target,
                                      options={"enable_fp_fusion": False})
        except RuntimeError as error:
            if "ptxas" in str(error):
                print("SKIP ptxas unavailable:", error)
                sys.exit(0)
            raise
        assert compiled.asm["ptx"], kernel
    print("compiled", len(jobs))
    """
)


@pytest.mark.slow
def test_tag_kernels_compile_for_a_gpu():
    """The interpreter accepts code the compiler rejects: compile both Tag kernels for an
    sm_90 GPU (PTX and cubin) in a process without the interpreter. No GPU needed."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", GPU_COMPILE_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    if result.stdout.startswith("SKIP"):
        pytest.skip(result.stdout.strip())
    assert "compiled 8" in result.stdout


@pytest.mark.slow  # compiling takes a minute or two on a 2-core CPU
def test_torch_compile_step_has_no_graph_breaks():
    """The torch backend's step, fresh starts of ``reset_mask`` rows included, compiles as
    one graph and agrees with eager (to float32 rounding of the fused code)."""
    kwargs = dict(num_taggers=1, num_runners=2, episode_length=3, tagging_distance=0.2, seed=3)
    eager, compiled = ContinuousTag(4, **kwargs), ContinuousTag(4, **kwargs)
    step = torch.compile(compiled.step, fullgraph=True)
    generator = torch.Generator().manual_seed(0)
    done = torch.zeros(4, dtype=torch.bool)
    for _ in range(5):
        compiled.set_state(eager.get_state())
        action = torch.randint(0, 11, (4, 3, 2), generator=generator)
        expected, got = eager.step(action, done), step(action, done)
        for x, y in zip(expected, got):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
        done = expected[2] | expected[3]
