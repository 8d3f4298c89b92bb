"""Seaquest: golden sequences of hand-built scenes (surfacing, oxygen, divers, shots), the
checker and scripted play against MinAtar, seeding, and the compiled rollout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchenv.kernels.minatar import Seaquest
from batchenv.kernels.minatar.consistency import check_minatar
from batchenv.kernels.minatar.seaquest import LISTS
from tests.kernels.minatar.play import cells, play, step
from tests.kernels.minatar.scenes import act, row, scene

NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)  # the minimal set is the full set
FRONT, BACK, F_BULLET, TRAIL, E_BULLET, FISH, SUB, OXYGEN, DIVERS, DIVER = range(10)
QUIET = {"e_spawn_timer": 50, "d_spawn_timer": 50}  # nothing spawns


def listed(name, *entries):
    """List ``name``'s table holding ``entries`` (MinAtar's ``[x, y, right, ...]``)."""
    slots, columns = LISTS[name]
    return {
        name: [[1, *entry] for entry in entries] + [[0] * len(columns)] * (slots - len(entries))
    }


def entry(env, name, slot):
    """Slot ``slot`` of list ``name`` in row 0: ``[alive, x, y, right, *timers]``."""
    return row(env, name)[0][slot]


def gauge(count, start=0):
    return [(9, x) for x in range(start, start + count)]


def test_surfacing_with_a_diver_refills_the_oxygen_and_drops_the_diver():
    env = scene(Seaquest, sub_y=1, surface=False, diver_count=2, oxygen=50, **QUIET)
    observ, reward, terminated = step(env, UP)
    assert (reward, terminated) == (0.0, False)
    assert row(env, "diver_count", "oxygen", "surface") == (1, 200, True)
    assert row(env, "ramp_index", "e_spawn_speed", "move_speed") == (1, 19, 5)
    assert cells(observ, FRONT) == [(0, 5)] and cells(observ, BACK) == [(0, 6)]
    assert cells(observ, OXYGEN) == gauge(10) and cells(observ, DIVERS) == [(9, 8)]
    step(env, NOOP)  # staying up is not another surfacing
    assert row(env, "diver_count", "ramp_index") == (1, 1)


def test_surfacing_without_a_diver_ends_the_game():
    env = scene(Seaquest, sub_y=1, surface=False, diver_count=0, oxygen=50, **QUIET)
    assert act(env, UP) == (0.0, True)
    assert row(env, "oxygen", "ramp_index") == (50, 0)


def test_surfacing_with_six_divers_pays_the_oxygen_and_never_ends_after():
    env = scene(Seaquest, sub_y=1, surface=False, diver_count=6, oxygen=150, **QUIET)
    observ, reward, terminated = step(env, UP)
    assert (reward, terminated) == (7.0, False)  # 150 * 10 // 200
    # MinAtar sets the count to 0, then drops one diver as on every surfacing: -1.
    assert row(env, "diver_count", "oxygen") == (-1, 200)
    assert cells(observ, DIVERS) == []
    act(env, DOWN)
    assert act(env, UP) == (0.0, False)  # "no divers" is a count of exactly 0
    assert row(env, "diver_count", "ramp_index") == (-2, 2)


def test_running_out_of_oxygen_ends_the_game():
    env = scene(Seaquest, sub_y=3, surface=False, oxygen=21, diver_count=3, **QUIET)
    observ, reward, terminated = step(env, NOOP)
    assert (terminated, cells(observ, OXYGEN)) == (False, gauge(1))  # 20 * 10 // 200
    env.set_state({"oxygen": torch.tensor([1])})
    assert act(env, NOOP) == (0.0, False)  # down to 0...
    observ, reward, terminated = step(env, NOOP)  # ...and the next step ends it
    assert (reward, terminated) == (0.0, True)
    assert row(env, "oxygen") == (-1,) and cells(observ, OXYGEN) == []


def test_a_diver_moving_onto_the_sub_is_picked_up():
    env = scene(Seaquest, sub_x=5, sub_y=3, **listed("diver", (4, 3, True, 0)), **QUIET)
    assert act(env, NOOP) == (0.0, False)
    assert row(env, "diver_count") == (1,) and entry(env, "diver", 0) == [0] * 5


def test_a_seventh_diver_is_left_in_the_water():
    env = scene(
        Seaquest, sub_x=5, sub_y=3, diver_count=6, **listed("diver", (5, 3, False, 2)), **QUIET
    )
    observ, _, _ = step(env, NOOP)
    assert row(env, "diver_count") == (6,) and entry(env, "diver", 0) == [1, 5, 3, 0, 1]
    assert cells(observ, DIVER) == [(3, 5)] and cells(observ, TRAIL) == [(3, 6)]


def test_a_bullet_shoots_the_first_fish_on_its_cell():
    # Two fish share a cell (move timers 3 and 4): the bullet removes the older one.
    fish = listed("fish", (6, 4, True, 3), (6, 4, True, 4))
    env = scene(Seaquest, sub_x=0, sub_y=8, **fish, **listed("bullet", (5, 4, True)), **QUIET)
    observ, reward, terminated = step(env, NOOP)
    assert (reward, terminated) == (1.0, False)
    # The timer-4 fish is left (counted down to 3), in the first slot now.
    assert entry(env, "fish", 0) == [1, 6, 4, 1, 3] and entry(env, "fish", 1) == [0] * 5
    assert cells(observ, FISH) == [(4, 6)] and cells(observ, F_BULLET) == []


def test_a_sub_shot_on_its_move_still_fires():
    # The enemy sub moves onto the bullet, is shot (+1), and still fires: MinAtar reads the
    # shot timer of the sub it has just removed.
    subs = listed("esub", (6, 4, False, 0, 0))
    env = scene(Seaquest, sub_x=0, sub_y=8, **subs, **listed("bullet", (4, 4, True)), **QUIET)
    observ, reward, terminated = step(env, NOOP)
    assert (reward, terminated) == (1.0, False)
    assert cells(observ, SUB) == [] and cells(observ, F_BULLET) == []
    assert cells(observ, E_BULLET) == [(4, 4)]  # fired at (4, 5), moved one cell left


def test_an_enemy_bullet_hitting_the_sub_ends_the_game():
    env = scene(
        Seaquest,
        sub_x=5,
        sub_y=4,
        ebullet_right=[[(y, x) == (4, 4) for x in range(10)] for y in range(10)],
        **QUIET,
    )
    assert act(env, NOOP) == (0.0, True)


def test_no_enemy_spawns_into_a_row_running_the_other_way():
    env = scene(
        Seaquest,
        sub_x=0,
        sub_y=8,
        **listed("fish", (2, 3, True, 4)),
        e_spawn_timer=0,
        d_spawn_timer=50,
    )
    row3 = [(3 - 1 + 0.5) / 8]
    act(
        env,
        NOOP,
        enemy_right=[0.9],
        enemy_sub=[0.9],
        enemy_row=row3,
        diver_right=[0.0],
        diver_row=[0.0],
    )
    assert entry(env, "fish", 1)[0] == 0
    assert row(env, "e_spawn_timer") == (19,)  # the timer restarts all the same
    env.set_state({"e_spawn_timer": torch.tensor([0])})
    act(
        env,
        NOOP,
        enemy_right=[0.1],
        enemy_sub=[0.1],
        enemy_row=row3,
        diver_right=[0.0],
        diver_row=[0.0],
    )
    assert entry(env, "esub", 0) == [1, 0, 3, 1, 4, 9]  # at the left edge, timers counted down


def test_own_draws_spawn_with_minatars_odds():
    # Every row spawns an enemy and a diver: the side, the kind and the row follow MinAtar's
    # rand() < 1/2, rand() < 1/3 and randint(1, 9) (bounds: 5 standard deviations).
    n = 24000
    env = Seaquest(n, seed=0, sticky_action_prob=0.0)
    zeros = torch.zeros(n, dtype=torch.int64)
    env.set_state({"e_spawn_timer": zeros, "d_spawn_timer": zeros})
    env.step(zeros)
    state = env.get_state()
    fish, esub, diver = (state[name][:, 0].to(torch.float64) for name in ("fish", "esub", "diver"))
    assert torch.equal(fish[:, 0] + esub[:, 0], torch.ones(n, dtype=torch.float64))
    assert abs(float(esub[:, 0].mean()) - 1 / 3) < 0.016
    enemy_right = fish[:, 3] + esub[:, 3]
    assert abs(float(enemy_right.mean()) - 1 / 2) < 0.017
    assert abs(float(diver[:, 3].mean()) - 1 / 2) < 0.017
    for rows in (fish[:, 2] + esub[:, 2], diver[:, 2]):
        share = torch.stack([(rows == y).to(torch.float64).mean() for y in range(1, 9)])
        assert (share - 1 / 8).abs().max() < 0.011


@pytest.mark.parametrize("ramping", [True, False], ids=["ramping", "no-ramping"])
def test_consistent_with_minatar(minatar, ramping):
    report = check_minatar(
        Seaquest, num_envs=20, steps=400, seed=11, episodes=40, difficulty_ramping=ramping
    )
    assert report.passed, str(report)
    assert report.episodes >= 40 and report.rewards > 0


def diver_hunter(seed):
    """Surface with six divers or low oxygen, shoot what is ahead, chase divers; else random
    (never surfacing empty-handed)."""
    rng = np.random.default_rng(seed)

    def policy(game):
        if game.diver_count >= 6 or (game.oxygen < 40 and game.diver_count != 0):
            return UP
        enemies = game.e_fish + game.e_subs
        if game.shot_timer == 0 and any(
            e[1] == game.sub_y and (e[0] > game.sub_x) == game.sub_or for e in enemies
        ):
            return FIRE
        if game.divers and rng.random() < 0.8:
            d = min(game.divers, key=lambda d: abs(d[0] - game.sub_x) + abs(d[1] - game.sub_y))
            if d[1] != game.sub_y:
                return DOWN if d[1] > game.sub_y else UP
            return RIGHT if d[0] > game.sub_x else LEFT
        action = int(rng.integers(6))
        return DOWN if action == UP and game.sub_y == 1 and game.diver_count == 0 else action

    return policy


@pytest.mark.parametrize("ramping", [True, False], ids=["ramping", "no-ramping"])
def test_scripted_play_with_divers_as_minatar(minatar, ramping):
    def four_on_board(game):
        game.diver_count = 4

    history = play(
        Seaquest, diver_hunter(1), 400, seed=3, difficulty_ramping=ramping, setup=four_on_board
    )
    assert max(state["diver_count"] for state, _, _ in history) == 6
    assert any(reward > 1 for _, reward, _ in history)  # a six-diver bonus
    assert max(state["ramp_index"] for state, _, _ in history) >= (2 if ramping else 0)


def test_scripted_play_on_a_crowded_screen_as_minatar(minatar):
    # Past the six-diver surfacing nothing ends the game at the surface: bob up and down,
    # ramp to an enemy every step, and fill the lists with fish, subs and their bullets.
    rng = np.random.default_rng(2)

    def crowd(game):
        game.e_spawn_speed, game.move_speed, game.diver_count = 2, 3, -1

    def bob(game):
        u = rng.random()
        return UP if game.sub_y == 1 else DOWN if u < 0.05 else FIRE if u < 0.2 else NOOP

    history = play(Seaquest, bob, 400, seed=3, setup=crowd)
    assert max(s["fish"][:, 0].sum() + s["esub"][:, 0].sum() for s, _, _ in history) >= 15
    assert max(s["ebullet_left"].sum() + s["ebullet_right"].sum() for s, _, _ in history) >= 4


def test_same_seed_same_game_other_seed_another():
    def run(seed):
        env = Seaquest(8, seed=seed)
        generator = torch.Generator().manual_seed(0)
        seen = []
        for _ in range(40):
            observ, reward, terminated, _ = env.step(torch.randint(0, 6, (8,), generator=generator))
            seen += [observ, reward, terminated]
        return seen

    first, again, other = run(1), run(1), run(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))
