"""Space Invaders: golden sequences of hand-built scenes, the checker and scripted play
against MinAtar, seeding, and the compiled rollout."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from batchenv.kernels.minatar import SpaceInvaders
from batchenv.kernels.minatar.consistency import check_minatar
from batchenv.kernels.minatar.space_invaders import _popcount, grid_rows, rows_grid
from tests.kernels.minatar.play import cells, play, step
from tests.kernels.minatar.scenes import row, scene

NOOP, LEFT, RIGHT, FIRE = range(4)  # the minimal action set
CANNON, ALIEN, ALIEN_LEFT, ALIEN_RIGHT, F_BULLET, E_BULLET = range(6)
QUIET = {"alien_move_timer": 5, "alien_shot_timer": 5}  # nothing moves or fires this step


def grid(*cells):
    """The ten row masks of a grid with the given (row, column) cells set."""
    return grid_rows([[(y, x) in cells for x in range(10)] for y in range(10)])


def aliens(state):
    """The number of aliens of one row's state (its row masks)."""
    return int(rows_grid(torch.as_tensor(state["alien"])).sum())


def test_grids_are_row_masks():
    cells = [(0, 0), (0, 9), (3, 4), (9, 2)]
    masks = grid(*cells)
    assert masks == [1 + 512, 0, 0, 16, 0, 0, 0, 0, 0, 4]
    back = rows_grid(torch.tensor([masks]))
    assert back.shape == (1, 10, 10) and back.dtype == torch.bool
    assert [tuple(c) for c in torch.nonzero(back[0]).tolist()] == cells


def test_popcount_counts_every_ten_bit_mask():
    masks = torch.arange(1024)
    assert _popcount(masks).tolist() == [bin(m).count("1") for m in range(1024)]


def test_the_block_rolls_as_numpy_rolls_the_grid():
    # Sideways rolls wrap within a row, a move down wraps the bottom row to the top, as
    # np.roll does in MinAtar (with the block's timer up, for each direction and an edge).
    rng = np.random.default_rng(0)
    for alien_dir, turn in [(-1, False), (1, False), (-1, True), (1, True)]:
        layout = rng.random((10, 10)) < 0.3
        edge = 0 if alien_dir < 0 else 9
        layout[:, edge] = turn  # an alien at the edge it heads to turns the block down
        layout[9] = False  # nothing on the bottom row: the game goes on
        env = scene(
            SpaceInvaders,
            alien=grid_rows(layout),
            alien_dir=alien_dir,
            alien_move_timer=0,
            alien_shot_timer=5,
            pos=0 if alien_dir > 0 else 9,
        )
        step(env, NOOP)
        expected = np.roll(layout, 1, axis=0) if turn else np.roll(layout, alien_dir, axis=1)
        assert rows_grid(env.get_state()["alien"][0]).numpy().tolist() == expected.tolist()


def test_fresh_start_is_minatars():
    env = SpaceInvaders(3, seed=0)
    observ = env.reset(torch.arange(3))[2]
    wave = [(y, x) for y in range(4) for x in range(2, 8)]
    assert cells(observ, ALIEN) == cells(observ, ALIEN_LEFT) == wave
    assert cells(observ, CANNON) == [(9, 5)]
    assert row(env, "alien_dir", "alien_move_timer", "alien_shot_timer", "shot_timer") == (
        -1,
        12,
        10,
        0,
    )


def test_an_alien_is_shot():
    # The bullet below the alien at (3, 4) moves up onto it: both vanish, +1.
    env = scene(SpaceInvaders, alien=grid((3, 4), (3, 7)), f_bullet=grid((4, 4)), **QUIET)
    observ, reward, terminated = step(env, NOOP)
    assert (reward, terminated) == (1.0, False)
    assert cells(observ, ALIEN) == [(3, 7)]
    assert cells(observ, F_BULLET) == []


def test_a_shot_climbs_one_row_per_step_and_reloads_in_five():
    env = scene(SpaceInvaders, alien=grid((0, 0)), pos=3, alien_move_timer=50, alien_shot_timer=50)
    observ, _, _ = step(env, FIRE)
    assert cells(observ, F_BULLET) == [(8, 3)]  # placed on row 9, moved up at once
    observ, _, _ = step(env, FIRE)  # not loaded: nothing happens
    assert cells(observ, F_BULLET) == [(7, 3)]
    assert row(env, "shot_timer") == (3,)


def test_the_nearest_alien_fires_from_the_bottom_of_its_column():
    # Columns 3 and 7 are both 2 away from the cannon at 5: the lower column fires.
    env = scene(
        SpaceInvaders, alien=grid((1, 3), (2, 3), (0, 7)), alien_shot_timer=0, alien_move_timer=5
    )
    observ, _, _ = step(env, NOOP)
    assert cells(observ, E_BULLET) == [(2, 3)]
    assert row(env, "alien_shot_timer") == (9,)
    observ, _, _ = step(env, NOOP)
    assert cells(observ, E_BULLET) == [(3, 3)]


def test_the_block_turns_and_steps_down_at_the_edge():
    env = scene(SpaceInvaders, alien=grid((2, 0), (2, 1)), alien_move_timer=0)
    observ, _, _ = step(env, NOOP)
    assert cells(observ, ALIEN) == cells(observ, ALIEN_RIGHT) == [(3, 0), (3, 1)]
    assert cells(observ, ALIEN_LEFT) == []  # now heading right
    assert row(env, "alien_move_timer") == (1,)  # min(2 aliens, 12), counted down once


def test_aliens_reaching_the_bottom_end_the_game():
    # The block on the bottom row turns at the edge: the game ends, and MinAtar's np.roll
    # wraps the block to the top row in the terminal observation.
    env = scene(SpaceInvaders, alien=grid((9, 0), (9, 1)), alien_move_timer=0, pos=5)
    observ, reward, terminated = step(env, NOOP)
    assert (reward, terminated) == (0.0, True)
    assert cells(observ, ALIEN) == [(0, 0), (0, 1)]
    assert step(env, LEFT)[1:] == (0.0, True)  # frozen until reset


def test_an_alien_landing_on_the_cannon_ends_the_game():
    env = scene(SpaceInvaders, alien=grid((8, 0), (8, 5)), alien_move_timer=0, pos=5)
    observ, reward, terminated = step(env, NOOP)
    assert (reward, terminated) == (0.0, True)
    assert cells(observ, ALIEN) == [(9, 0), (9, 5)]


@pytest.mark.parametrize(
    ("ramping", "interval"), [(True, 11), (False, 12)], ids=["ramping", "no-ramping"]
)
def test_a_new_wave_follows_the_last_alien(ramping, interval):
    env = SpaceInvaders(1, seed=0, sticky_action_prob=0.0, difficulty_ramping=ramping)
    scene_state = {"alien": grid((2, 3)), "f_bullet": grid((3, 3)), **QUIET}
    env.set_state({key: torch.tensor([value]) for key, value in scene_state.items()})
    observ, reward, terminated = step(env, NOOP)
    assert (reward, terminated) == (1.0, False)
    assert cells(observ, ALIEN) == [(y, x) for y in range(4) for x in range(2, 8)]
    assert row(env, "enemy_move_interval", "ramp_index") == (interval, int(ramping))


@pytest.mark.parametrize("ramping", [True, False], ids=["ramping", "no-ramping"])
def test_consistent_with_minatar(minatar, ramping):
    report = check_minatar(
        SpaceInvaders, num_envs=20, steps=400, seed=5, episodes=40, difficulty_ramping=ramping
    )
    assert report.passed, str(report)
    assert report.episodes >= 40 and report.rewards > 0


def test_consistent_with_minatar_full_action_set(minatar):
    report = check_minatar(
        SpaceInvaders, num_envs=10, steps=300, seed=6, episodes=20, minimal_action_set=False
    )
    assert report.passed, str(report)
    assert report.episodes >= 20


def lookahead(game) -> int:
    """The action (full set) whose next 10 steps (then idle) score most without dying."""
    best, choice = None, 0
    for action in (0, 1, 3, 5):
        trial, total, dead = copy.deepcopy(game), 0, False
        for k in range(10):
            reward, dead = trial.act(action if k == 0 else 0)
            total += reward
            if dead:
                break
        columns = np.flatnonzero(trial.alien_map.any(axis=0))
        near = np.abs(columns - trial.pos).min() if len(columns) else 0
        score = -1000 * dead + 10 * total - near
        if best is None or score > best:
            best, choice = score, action
    return choice


@pytest.mark.parametrize("ramping", [True, False], ids=["ramping", "no-ramping"])
def test_scripted_play_clears_waves_as_minatar_does(minatar, ramping):
    # Random play never clears a wave; a lookahead player from thinned waves clears several.
    rng = np.random.RandomState(5)

    def thin(game):
        game.alien_map = np.zeros((10, 10))
        for i in rng.choice(24, 4, replace=False):
            game.alien_map[i // 6, 2 + i % 6] = 1
        game.enemy_move_interval = rng.randint(6, 13)

    history = play(SpaceInvaders, lookahead, 500, seed=2, difficulty_ramping=ramping, setup=thin)
    waves = sum(
        int(aliens(after) == 24 and aliens(before) < 24 and not done)
        for (before, _, done), (after, _, _) in zip(history, history[1:])
    )
    assert waves >= 2
    ramps = max(state["ramp_index"] for state, _, _ in history)
    assert ramps >= 2 if ramping else ramps == 0


def test_same_seed_same_game_other_seed_another():
    def run(seed):
        env = SpaceInvaders(8, seed=seed)
        generator = torch.Generator().manual_seed(0)
        seen = []
        for _ in range(30):
            observ, reward, terminated, _ = env.step(torch.randint(0, 4, (8,), generator=generator))
            seen += [observ, reward, env.get_state()["last_action"]]
        return seen

    first, again, other = run(1), run(1), run(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))  # other sticky draws
