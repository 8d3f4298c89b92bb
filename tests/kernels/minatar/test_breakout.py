"""Breakout: golden sequences of hand-built scenes, and the checker against MinAtar."""

from __future__ import annotations

import pytest
import torch

from batchenv.kernels.minatar import Breakout
from batchenv.kernels.minatar.breakout import WALL, brick_bits, brick_grid
from batchenv.kernels.minatar.consistency import check_minatar
from tests.kernels.minatar.scenes import act, row, scene

NOOP, LEFT, RIGHT = 0, 1, 2  # the minimal action set
BALL = ("ball_y", "ball_x", "ball_dir")
UP_LEFT, UP_RIGHT, DOWN_RIGHT, DOWN_LEFT = range(4)


def full_wall():
    return [[1 <= y <= 3 for _ in range(10)] for y in range(10)]


def bricks_of(env):
    """Row 0's bricks as a 10x10 grid of bools."""
    return brick_grid(env.get_state()["brick"][0]).tolist()


def test_fresh_start_is_minatars():
    env = Breakout(64, seed=0)
    state = env.get_state()
    left = state["ball_x"] == 0
    assert 0 < int(left.sum()) < 64  # both starts occur
    assert torch.equal(state["ball_dir"], torch.where(left, DOWN_RIGHT, DOWN_LEFT))
    assert torch.equal(state["ball_y"], torch.full((64,), 3))
    assert torch.equal(state["pos"], torch.full((64,), 4))
    assert brick_grid(state["brick"][0]).tolist() == full_wall()


def test_ball_bounces_off_the_wall_then_a_brick():
    env = scene(Breakout, ball_y=6, ball_x=8, ball_dir=UP_RIGHT, last_y=7, last_x=7)
    seen = []
    for _ in range(4):
        reward, terminated = act(env, NOOP)
        seen.append((*row(env, *BALL), reward, terminated))
    assert seen == [
        (5, 9, UP_RIGHT, 0.0, False),
        (4, 9, UP_LEFT, 0.0, False),  # the wall: x stays 9, the direction turns left
        (4, 8, DOWN_LEFT, 1.0, False),  # the brick at (3, 8) breaks; the ball stays in row 4
        (5, 7, DOWN_LEFT, 0.0, False),
    ]
    bricks = bricks_of(env)
    assert not bricks[3][8] and sum(map(sum, bricks)) == 29
    assert row(env, "last_y", "last_x") == (4, 8)  # the trail


def test_ball_bounces_off_the_ceiling():
    env = scene(Breakout, ball_y=0, ball_x=1, ball_dir=UP_RIGHT)
    act(env, NOOP)
    assert row(env, *BALL) == (0, 2, DOWN_RIGHT)


def test_a_struck_ball_passes_through_the_next_brick():
    # MinAtar's strike flag: after breaking a brick the ball keeps its new column, may land
    # on a brick, and enters the next brick without breaking it.
    wall = full_wall()
    wall[2][4] = False
    bits = brick_bits(wall)
    env = scene(Breakout, ball_y=2, ball_x=4, ball_dir=UP_RIGHT, last_y=3, last_x=3, brick=bits)
    rewards = []
    for _ in range(3):
        rewards.append(act(env, NOOP)[0])
        rewards.append(row(env, "ball_y", "ball_x", "strike"))
    assert rewards == [1.0, (2, 5, True), 0.0, (3, 6, True), 0.0, (4, 7, False)]
    bricks = bricks_of(env)
    assert (bricks[1][5], bricks[2][5], bricks[3][6]) == (False, True, True)


@pytest.mark.parametrize(
    ("ball_x", "ball_dir", "action", "expected"),
    [
        pytest.param(4, DOWN_RIGHT, NOOP, (8, 5, UP_RIGHT, 4, False), id="over-the-paddle"),
        pytest.param(3, DOWN_RIGHT, NOOP, (8, 4, UP_LEFT, 4, False), id="into-the-paddle"),
        pytest.param(3, DOWN_LEFT, LEFT, (8, 2, UP_LEFT, 3, False), id="paddle-moved-under"),
        pytest.param(0, DOWN_RIGHT, NOOP, (9, 1, DOWN_RIGHT, 4, True), id="missed"),
    ],
)
def test_the_paddle(ball_x, ball_dir, action, expected):
    env = scene(Breakout, ball_y=8, ball_x=ball_x, ball_dir=ball_dir, pos=4)
    reward, terminated = act(env, action)
    assert (*row(env, *BALL, "pos"), terminated) == expected
    assert reward == 0.0


def test_a_terminal_row_stays_until_reset():
    env = scene(Breakout, ball_y=8, ball_x=0, ball_dir=DOWN_RIGHT, pos=4)
    act(env, NOOP)
    before = env.get_state()
    assert act(env, RIGHT) == (0.0, True)
    after = env.get_state()
    for key in Breakout.fields:
        assert torch.equal(after[key], before[key]), key
    assert after["last_action"].tolist() == [3]  # the wrapper still records the action
    env.reset(torch.tensor([0]))
    assert row(env, "terminal", "ball_y", "pos") == (False, 3, 4)


@pytest.mark.parametrize("caught", [True, False], ids=["caught", "missed"])
def test_the_bricks_refill_when_the_ball_reaches_the_bottom_row(caught):
    empty = [[False] * 10 for _ in range(10)]
    env = scene(Breakout, ball_y=7, ball_x=3 if caught else 0, ball_dir=DOWN_RIGHT, brick=0)
    act(env, NOOP)
    assert bricks_of(env) == empty  # row 8: not yet
    reward, terminated = act(env, NOOP)
    assert bricks_of(env) == full_wall()
    assert (reward, terminated) == (0.0, not caught)


def test_the_bricks_are_bits_of_their_cells():
    wall = full_wall()
    assert brick_bits(wall) == WALL == sum(1 << cell for cell in range(10, 40))
    wall[2][4] = False  # cell 24
    assert brick_bits(wall) == WALL - (1 << 24)
    grid = brick_grid(torch.tensor([WALL, WALL - (1 << 24), 0]))
    assert grid.shape == (3, 10, 10) and grid.dtype == torch.bool
    assert grid[0].tolist() == full_wall() and grid[1].tolist() == wall
    assert not grid[2].any()


def test_a_brick_outside_rows_1_to_3_is_refused():
    wall = full_wall()
    wall[5][2] = True
    with pytest.raises(ValueError, match=r"rows 1 to 3 only, got one at \(y, x\) = \(5, 2\)"):
        brick_bits(wall)


def test_the_observation_shows_the_bricks_of_the_mask():
    wall = full_wall()
    wall[1][0] = wall[3][9] = False
    env = scene(Breakout, brick=brick_bits(wall))  # the ball moves down from row 3
    observ, _, _, _ = env.step(torch.tensor([NOOP]))
    assert observ[0, :, :, 3].tolist() == wall


@pytest.mark.parametrize("ramping", [True, False], ids=["ramping", "no-ramping"])
def test_consistent_with_minatar(minatar, ramping):
    report = check_minatar(
        Breakout, num_envs=20, steps=400, seed=3, episodes=40, difficulty_ramping=ramping
    )
    assert report.passed, str(report)
    assert report.episodes >= 40 and report.rewards > 0


def test_consistent_with_minatar_full_action_set(minatar):
    report = check_minatar(Breakout, num_envs=8, steps=300, seed=4, minimal_action_set=False)
    assert report.passed, str(report)
    assert report.episodes >= 20
