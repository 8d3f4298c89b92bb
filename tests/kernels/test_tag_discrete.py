"""DiscreteTag: every rule of docs/tag.md on hand-built states, on both backends; the
triton kernel held to the torch step by the consistency checker; starts; simulate().

Without CUDA the triton backend runs in Triton's interpreter (~15 ms per env per step), so
the sizes stay small; the few-dozen-env consistency run is marked slow.
"""

from __future__ import annotations

import doctest
import functools

import pytest
import torch

from batchenv.in_graph.algorithm import RandomAlgorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import simulate
from batchenv.kernels import DiscreteTag, tag_discrete
from batchenv.kernels.consistency import check_consistency

STAY, RIGHT, LEFT, UP, DOWN = range(5)


@pytest.fixture(params=["torch", "triton"])
def make(request):
    """``make(num_envs, **kwargs)`` on one backend (triton: the interpreter on CPU)."""
    if request.param == "triton":
        device = request.getfixturevalue("triton_device")
    else:
        device = torch.device("cpu")
    return functools.partial(DiscreteTag, device=device, backend=request.param, seed=0)


def _place(env, positions, elapsed=0):
    """Put every env in the given positions (``[N, 2]`` or ``[E, N, 2]``)."""
    pos = torch.tensor(positions, dtype=torch.int32)
    if pos.dim() == 2:
        pos = pos.expand(env.num_envs, *pos.shape)
    env.set_state({"state": pos, "elapsed": torch.full((env.num_envs,), elapsed)})


def _act(env, actions):
    action = torch.tensor(actions, dtype=torch.int64, device=env.device)
    if action.dim() == 1:
        action = action.expand(env.num_envs, -1)
    return env.step(action.contiguous())


def _f32(values):
    return torch.tensor(values, dtype=torch.float32)


def test_every_move(make):
    env = make(1, num_taggers=5, grid_length=4, random_start=False)
    _place(env, [[2, 2]] * 5 + [[0, 4]])
    _, reward, terminated, truncated = _act(env, [STAY, RIGHT, LEFT, UP, DOWN, STAY])
    state = env.get_state()["state"][0].tolist()
    assert state == [[2, 2], [3, 2], [1, 2], [2, 3], [2, 1], [0, 4]]
    assert torch.equal(reward[0].cpu(), _f32([-0.01] * 5 + [0.01]))
    assert terminated.tolist() == [False] and truncated.tolist() == [False]


def test_clipping_costs_the_wall_penalty(make):
    env = make(1, num_taggers=2, grid_length=4)
    _place(env, [[0, 0], [2, 4], [4, 1]])
    _, reward, _, _ = _act(env, [LEFT, UP, RIGHT])  # all three push into a wall
    assert env.get_state()["state"][0].tolist() == [[0, 0], [2, 4], [4, 1]]
    expected = _f32([-0.01, -0.01, 0.01]) - _f32([0.1, 0.1, 0.1])
    assert torch.equal(reward[0].cpu(), expected)
    _, reward, _, _ = _act(env, [DOWN, LEFT, UP])  # DOWN at y=0 clips, the others move
    assert env.get_state()["state"][0].tolist() == [[0, 0], [1, 4], [4, 2]]
    assert torch.equal(reward[0].cpu(), _f32([-0.01, -0.01, 0.01]) - _f32([0.1, 0.0, 0.0]))


def test_tag_on_the_same_cell_rewards_every_tagger(make):
    env = make(2, num_taggers=3, grid_length=5)
    # env 0: tagger 0 steps onto the runner; env 1: the runner steps onto tagger 2.
    _place(
        env,
        [
            [[1, 2], [5, 5], [0, 0], [2, 2]],
            [[1, 2], [5, 5], [3, 3], [3, 2]],
        ],
    )
    action = torch.tensor([[RIGHT, UP, STAY, STAY], [STAY, UP, STAY, UP]], device=env.device)
    _, reward, terminated, truncated = env.step(action)
    tagged = _f32([10.0, 10.0, 10.0, -2.0]) - _f32([0.0, 0.1, 0.0, 0.0])  # tagger 1 hit a wall
    assert torch.equal(reward[0].cpu(), tagged)
    assert torch.equal(reward[1].cpu(), tagged)
    assert terminated.tolist() == [True, True] and truncated.tolist() == [False, False]


def test_swapping_cells_is_not_a_tag(make):
    env = make(1, num_taggers=1, grid_length=5)
    _place(env, [[1, 0], [0, 0]])
    _, reward, terminated, _ = _act(env, [LEFT, RIGHT])  # they pass through each other
    assert terminated.tolist() == [False]
    assert torch.equal(reward[0].cpu(), _f32([-0.01, 0.01]))


def test_rewards_and_penalties_follow_the_arguments(make):
    env = make(
        1,
        num_taggers=2,
        grid_length=3,
        wall_hit_penalty=0.5,
        tag_reward_for_tagger=3.0,
        tag_penalty_for_runner=7.0,
        step_cost_for_tagger=0.25,
    )
    _place(env, [[0, 0], [3, 3], [1, 1]])
    _, reward, _, _ = _act(env, [DOWN, STAY, STAY])
    assert reward[0].tolist() == [-0.75, -0.25, 0.25]
    _, reward, terminated, _ = _act(env, [UP, STAY, LEFT])  # tagger 0 to (0,1) = runner
    assert terminated.tolist() == [True] and reward[0].tolist() == [3.0, 3.0, -7.0]


def test_truncated_at_episode_length_and_time_feature(make):
    env = make(1, num_taggers=1, grid_length=6, episode_length=3, random_start=False)
    env.reset(torch.tensor([0]))
    for t in range(1, 5):
        observ, _, terminated, truncated = _act(env, [STAY, STAY])
        assert truncated.tolist() == [t >= 3] and terminated.tolist() == [False]
        assert torch.equal(observ[0, :, -1].cpu(), torch.full((2,), t / 3, dtype=torch.float32))


def test_full_observation_of_a_known_state(make):
    env = make(2, num_taggers=2, grid_length=4, episode_length=10)
    _place(env, [[1, 2], [4, 0], [3, 3]], elapsed=1)
    observ, _, _, _ = _act(env, [STAY, STAY, STAY])
    shared = [0.25, 1.0, 0.75, 0.5, 0.0, 0.75, 0.0, 0.0, 1.0]
    expected = torch.stack(
        [torch.cat((_f32(shared), torch.eye(3)[i], torch.tensor([2.0]) / 10)) for i in range(3)]
    )
    assert observ.shape == (2, 3, 13) and observ.dtype == torch.float32
    assert torch.equal(observ[0].cpu(), expected) and torch.equal(observ[1].cpu(), expected)
    assert env.single_observation_space.shape == (13,)


def test_partial_observation_and_nearest_tagger_ties(make):
    env = make(2, num_taggers=3, grid_length=4, episode_length=8, full_observation=False)
    # Runner at (2, 2). env 0: taggers 0 and 1 tie at distance 2 -> tagger 0.
    # env 1: taggers 1 and 2 tie at distance 2, tagger 0 is farther -> tagger 1.
    _place(
        env,
        [
            [[4, 2], [2, 0], [0, 0], [2, 2]],
            [[0, 0], [4, 2], [2, 0], [2, 2]],
        ],
        elapsed=3,
    )
    observ, _, _, _ = _act(env, [STAY] * 4)
    assert observ.shape == (2, 4, 6)
    time = 4 / 8
    runner = [0.5, 0.5]
    assert observ[0].cpu().tolist() == [
        [1.0, 0.5, *runner, 0.0, time],
        [0.5, 0.0, *runner, 0.0, time],
        [0.0, 0.0, *runner, 0.0, time],
        [0.5, 0.5, 1.0, 0.5, 1.0, time],  # target: tagger 0 at (4, 2)
    ]
    assert observ[1, 3].cpu().tolist() == [0.5, 0.5, 1.0, 0.5, 1.0, time]  # tagger 1 at (4, 2)
    assert observ[1, 0].cpu().tolist() == [0.0, 0.0, *runner, 0.0, time]


def test_fixed_start_reproduces_warpdrive(make):
    for taggers, length in ((10, 10), (4, 100)):  # the defaults and WarpDrive's shipped config
        env = make(3, num_taggers=taggers, grid_length=length, random_start=False)
        expected = [[length // 2, length // 2]] * taggers + [[0, 0]]
        assert all(row == expected for row in env.get_state()["state"].tolist())
        _act(env, [RIGHT] * (taggers + 1))
        env.reset(torch.tensor([0, 2]))
        state = env.get_state()["state"].tolist()
        assert state[0] == expected and state[2] == expected and state[1] != expected
        _act(env, [UP] * (taggers + 1))
        env.step(torch.zeros(3, taggers + 1, dtype=torch.int64), torch.tensor([True] * 3))
        assert all(row == expected for row in env.get_state()["state"].tolist())


def test_random_starts_differ_across_envs_and_resets(make):
    env = make(16, num_taggers=2, grid_length=10)
    starts = [env.get_state()["state"]]
    for _ in range(3):
        env.reset(torch.arange(16))
        starts.append(env.get_state()["state"])
    starts.append(
        env.step(torch.zeros(16, 3, dtype=torch.int64), torch.ones(16, dtype=torch.bool))[0]
    )
    cells = torch.cat(starts[:-1]).reshape(64, 6)
    assert torch.unique(cells, dim=0).shape[0] == 64, "two fresh starts repeat"
    assert int(cells.min()) == 0 and int(cells.max()) == 10  # both ends of the grid drawn
    observ = starts[-1]  # the reset_mask start is fresh too
    assert not torch.equal(env.get_state()["state"], starts[-2])
    assert observ.shape == (16, 3, 13)


def test_reset_mask_autoreset_keeps_the_terminal_observation(make):
    env = make(2, num_taggers=1, grid_length=4, random_start=False)
    _place(env, [[1, 1], [1, 2]], elapsed=5)
    observ, _, terminated, _ = _act(env, [UP, STAY])
    assert terminated.tolist() == [True, True]
    terminal = observ.clone()
    assert observ[0, 0, :4].tolist() == [0.25, 0.25, 0.5, 0.5]  # both on (1, 2)
    mask = torch.tensor([True, False], device=env.device)
    fresh, reward, terminated, truncated = env.step(
        torch.full((2, 2), RIGHT, dtype=torch.int64, device=env.device), mask
    )
    assert torch.equal(observ, terminal)
    state = env.get_state()
    assert state["state"][0].tolist() == [[2, 2], [0, 0]] and int(state["elapsed"][0]) == 0
    assert state["state"][1].tolist() == [[2, 2], [2, 2]] and int(state["elapsed"][1]) == 7
    assert fresh[0, 0].tolist()[:4] == [0.5, 0.0, 0.5, 0.0]  # full obs: x of both, y of both
    assert reward[0].tolist() == [0.0, 0.0] and reward[1].tolist() == [10.0, -2.0]
    assert terminated.tolist() == [False, True] and truncated.tolist() == [False, False]


@pytest.mark.parametrize("full", [True, False], ids=["full", "partial"])
@pytest.mark.parametrize("n", [1, 7], ids=lambda n: f"n={n}")
def test_triton_matches_torch(n, full, triton_device):
    kwargs = dict(num_taggers=3, grid_length=3, episode_length=8, full_observation=full)
    report = check_consistency(
        functools.partial(DiscreteTag, device=triton_device, backend="triton", **kwargs),
        functools.partial(DiscreteTag, device=triton_device, **kwargs),
        num_envs=n,
        steps=12,
        seed=n,
        atol=0.0,
        rtol=0.0,
    )
    assert report.passed, str(report)
    obs_dim = 17 if full else 6
    assert report.values_compared == 12 * n * (4 * (obs_dim + 1) + 2)  # observ, reward, flags
    if n == 7:
        assert report.episodes > 0  # tags and time limits were reset and re-compared


@pytest.mark.slow
def test_triton_matches_torch_few_dozen_envs(triton_device):
    kwargs = dict(num_taggers=10, grid_length=4, episode_length=10)
    report = check_consistency(
        functools.partial(DiscreteTag, device=triton_device, backend="triton", **kwargs),
        functools.partial(DiscreteTag, device=triton_device, **kwargs),
        num_envs=32,
        steps=12,
        seed=9,
        atol=0.0,
        rtol=0.0,
    )
    assert report.passed, str(report)
    assert report.episodes > 10


@pytest.mark.parametrize("full", [True, False], ids=["full", "partial"])
def test_triton_matches_torch_with_four_warps_a_program(full, triton_device):
    """Past 64 agents a program runs 4 warps, and every warp reads the env's restart count
    that one of them then writes: fresh starts must draw the same starts as the torch
    backend (a race there is the likely cause of CUDA-graph replays that differed from eager
    steps on an H200). On CUDA many envs give the warps many chances to drift apart (fewer
    with full observations: 40k floats an env); Triton's interpreter runs a program as one,
    so there the test checks the rules at this size."""
    kwargs = dict(num_taggers=99, grid_length=2, episode_length=3, full_observation=full)
    num_envs = (512 if full else 4096) if triton_device.type == "cuda" else 2
    report = check_consistency(
        functools.partial(DiscreteTag, device=triton_device, backend="triton", **kwargs),
        functools.partial(DiscreteTag, device=triton_device, **kwargs),
        num_envs=num_envs,
        steps=8,
        seed=5,
        atol=0.0,
        rtol=0.0,
    )
    assert report.passed, str(report)
    assert report.episodes >= 2 * num_envs  # every env started afresh at least twice


def test_checker_reports_the_agent_and_feature(triton_device, monkeypatch):
    """A torch step with the wrong wall penalty is caught at the agent that hit the wall."""
    kwargs = dict(num_taggers=2, grid_length=2, episode_length=8, full_observation=False)
    broken = functools.partial(DiscreteTag, device=triton_device, wall_hit_penalty=0.5, **kwargs)
    report = check_consistency(
        functools.partial(DiscreteTag, device=triton_device, backend="triton", **kwargs),
        broken,
        num_envs=3,
        steps=10,
        seed=0,
    )
    assert not report.passed and report.mismatch.field == "reward"
    assert report.mismatch.agent in (0, 1, 2) and report.mismatch.feature is None
    assert abs(report.mismatch.value_a - report.mismatch.value_b) == pytest.approx(0.4)


def test_works_under_simulate(make):
    env = make(4, num_taggers=3, grid_length=3, episode_length=20)
    batch = InGraphBatchEnv(env)
    algo = RandomAlgorithm(
        env.single_action_space,
        device=env.device,
        seed=0,
        observation_space=env.single_observation_space,
    )
    ended = 0
    for _ in range(25):
        done, score, _ = simulate(batch, algo)
        assert score.shape == (4, 4) and done.shape == (4,)
        ended += int(done.sum())
    assert ended > 0
    assert batch.observ.shape == (4, 4, 17)


def test_argument_validation():
    with pytest.raises(ValueError, match=r"num_taggers must be an int >= 1"):
        DiscreteTag(2, num_taggers=0)
    with pytest.raises(ValueError, match=r"grid_length must be an int >= 1"):
        DiscreteTag(2, grid_length=2.5)
    with pytest.raises(ValueError, match=r"unknown backend"):
        DiscreteTag(2, backend="cuda")
    with pytest.raises(ValueError, match=r"full_observation must be a bool"):
        DiscreteTag(2, full_observation=1)
    env = DiscreteTag(2, num_taggers=2, seed=0)
    with pytest.raises(
        ValueError, match=r"integer tensor of shape \(2, 3\).*got torch.int64 \(2,\)"
    ):
        env.step(torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"got torch.float32 \(2, 3\)"):
        env.step(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"reset_mask must be a bool tensor of shape \(2,\)"):
        env.step(torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"'state' has shape \(2, 2, 2\), expected \(2, 3, 2\)"):
        env.set_state({"state": torch.zeros(2, 2, 2)})
    with pytest.raises(ValueError, match=r"unknown keys \['pos'\]"):
        env.set_state({"pos": torch.zeros(2, 3, 2)})
    if not torch.cuda.is_available():
        with pytest.raises(NotImplementedError, match="CUDA is not available"):
            DiscreteTag(2, device="cuda", backend="triton")


def test_docstring_examples_run():
    result = doctest.testmod(tag_discrete)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.slow  # compiling takes a minute or two on a 2-core CPU
def test_torch_compile_step_has_no_graph_breaks():
    """The torch backend's step, fresh starts of ``reset_mask`` rows included, compiles as
    one graph and agrees with eager exactly."""
    kwargs = dict(num_taggers=2, grid_length=2, episode_length=4, seed=3)
    eager, compiled = DiscreteTag(5, **kwargs), DiscreteTag(5, **kwargs)
    step = torch.compile(compiled.step, fullgraph=True)
    generator = torch.Generator().manual_seed(0)
    done = torch.zeros(5, dtype=torch.bool)
    for _ in range(6):
        action = torch.randint(0, 5, (5, 3), generator=generator)
        expected, got = eager.step(action, done), step(action, done)
        for x, y in zip(expected, got):
            assert torch.equal(x, y)
        done = expected[2] | expected[3]
    assert torch.equal(eager.get_state()["state"], compiled.get_state()["state"])
