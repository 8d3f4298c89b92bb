"""Asterix: golden sequences of hand-built scenes, the checker and scripted play against
MinAtar, seeding, and the compiled rollout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchenv.kernels.minatar import Asterix
from batchenv.kernels.minatar.consistency import check_minatar
from tests.kernels.minatar.play import cells, play, step
from tests.kernels.minatar.scenes import act, row, scene

NOOP, LEFT, UP, RIGHT, DOWN = range(5)  # the minimal action set
PLAYER, ENEMY, TRAIL, GOLD = range(4)
ENTITY = ("entity_alive", "entity_x", "entity_right", "entity_gold")


def slots(**entities):
    """Entity fields with ``slot_i=(x, moving_right, gold)`` filled in (slot i is row i + 1)."""
    alive, x, right, gold = [False] * 8, [0] * 8, [False] * 8, [False] * 8
    for name, (column, going_right, is_gold) in entities.items():
        i = int(name.removeprefix("slot_"))
        alive[i], x[i], right[i], gold[i] = True, column, going_right, is_gold
    return dict(zip(ENTITY, (alive, x, right, gold)))


QUIET = {"spawn_timer": 50, "move_timer": 3}  # no spawn, no move this step


def test_fresh_start_is_minatars():
    env = Asterix(2, seed=0)
    observ = env.reset(torch.arange(2))[0]
    assert cells(observ, PLAYER) == [(5, 5)] and observ[:, :, 1:].sum() == 0
    assert row(env, "spawn_speed", "spawn_timer", "move_speed", "move_timer", "ramp_timer") == (
        10,
        10,
        5,
        5,
        100,
    )


def test_the_player_catches_gold():
    # Gold in row 5 at column 6; the player steps right onto it: +1, the gold is gone.
    env = scene(Asterix, player_x=5, player_y=5, **slots(slot_4=(6, False, True)), **QUIET)
    observ, reward, terminated = step(env, RIGHT)
    assert (reward, terminated) == (1.0, False)
    assert cells(observ, PLAYER) == [(5, 6)] and cells(observ, GOLD) == []
    assert row(env, "entity_alive")[0][4] is False


def test_gold_moving_onto_the_player_is_caught():
    env = scene(
        Asterix,
        player_x=5,
        player_y=5,
        **slots(slot_4=(4, True, True)),
        spawn_timer=50,
        move_timer=0,
    )
    assert act(env, NOOP) == (1.0, False)
    assert row(env, "entity_alive", "move_timer") == ([False] * 8, 4)


def test_hit_by_an_enemy():
    # An enemy moving left onto the player ends the game; it shows on the player's cell.
    env = scene(
        Asterix,
        player_x=5,
        player_y=5,
        **slots(slot_4=(6, False, False), slot_0=(2, True, True)),
        spawn_timer=50,
        move_timer=0,
    )
    observ, reward, terminated = step(env, NOOP)
    assert (reward, terminated) == (0.0, True)
    assert cells(observ, ENEMY) == [(5, 5)] and cells(observ, PLAYER) == [(5, 5)]
    assert cells(observ, TRAIL) == [(1, 2), (5, 6)]
    assert cells(observ, GOLD) == [(1, 3)]
    assert step(env, NOOP)[1:] == (0.0, True)  # frozen until reset


def test_walking_into_an_enemy_ends_the_game():
    env = scene(Asterix, player_x=5, player_y=4, **slots(slot_4=(5, True, False)), **QUIET)
    assert act(env, DOWN) == (0.0, True)


def test_an_entity_spawns_in_the_kth_free_slot():
    # Slots 0 and 2 are taken; randint(6) = 3 picks the fourth free slot, 5 (row 6).
    env = scene(
        Asterix,
        **slots(slot_0=(3, True, False), slot_2=(4, True, False)),
        spawn_timer=0,
        move_timer=3,
    )
    act(env, NOOP, spawn_right=[0.2], spawn_gold=[0.1], spawn_slot=[3.5 / 6])
    alive, x, right, gold = row(env, *ENTITY)
    assert alive == [True, False, True, False, False, True, False, False]
    assert (x[5], right[5], gold[5]) == (0, True, True)
    assert row(env, "spawn_timer") == (9,)  # reset to spawn_speed, counted down once


def test_a_full_screen_spawns_nothing():
    full = slots(**{f"slot_{i}": (i, True, False) for i in range(8)})
    env = scene(Asterix, player_x=9, player_y=8, **full, spawn_timer=0, move_timer=3)
    act(env, NOOP, spawn_right=[0.9], spawn_gold=[0.9], spawn_slot=[0.0])
    assert row(env, "entity_x")[0] == list(range(8))


@pytest.mark.parametrize(
    ("ramping", "ramp_index", "expected"),
    [
        pytest.param(True, 0, (9, 5, 100, 1), id="spawn-faster"),
        pytest.param(True, 1, (9, 4, 100, 2), id="spawn-and-move-faster"),
        pytest.param(False, 1, (10, 5, 0, 1), id="no-ramping"),
    ],
)
def test_difficulty_ramps_every_102_steps(ramping, ramp_index, expected):
    env = Asterix(1, seed=0, sticky_action_prob=0.0, difficulty_ramping=ramping)
    env.set_state(
        {
            "ramp_timer": torch.tensor([0]),
            "ramp_index": torch.tensor([ramp_index]),
            "spawn_timer": torch.tensor([50]),
        }
    )
    act(env, NOOP)  # the timer runs out...
    act(env, NOOP)  # ...and the next step ramps
    assert row(env, "spawn_speed", "move_speed", "ramp_timer", "ramp_index") == expected


def test_own_draws_spawn_with_minatars_odds():
    # Every row spawns once into an empty screen: the side, the kind and the slot follow
    # MinAtar's rand() < 1/2, rand() < 1/3 and randint(8) (bounds: 5 standard deviations).
    n = 24000
    env = Asterix(n, seed=0, sticky_action_prob=0.0)
    env.set_state({"spawn_timer": torch.zeros(n, dtype=torch.int64)})
    env.step(torch.zeros(n, dtype=torch.int64))
    alive, _, right, gold = (env.get_state()[key].to(torch.float64) for key in ENTITY)
    assert torch.equal(alive.sum(dim=1), torch.ones(n, dtype=torch.float64))
    assert (alive.mean(dim=0) - 1 / 8).abs().max() < 0.011
    assert abs(float(right.sum(dim=1).mean()) - 1 / 2) < 0.017
    assert abs(float(gold.sum(dim=1).mean()) - 1 / 3) < 0.016


@pytest.mark.parametrize("ramping", [True, False], ids=["ramping", "no-ramping"])
def test_consistent_with_minatar(minatar, ramping):
    report = check_minatar(
        Asterix, num_envs=20, steps=400, seed=7, episodes=40, difficulty_ramping=ramping
    )
    assert report.passed, str(report)
    assert report.episodes >= 40 and report.rewards > 0


def test_consistent_with_minatar_full_action_set(minatar):
    report = check_minatar(
        Asterix, num_envs=10, steps=300, seed=8, episodes=20, minimal_action_set=False
    )
    assert report.passed, str(report)
    assert report.episodes >= 20


def test_scripted_play_on_a_crowded_fast_screen(minatar):
    # Deep ramps (an entity every step, moving every other step) fill all eight slots.
    rng = np.random.default_rng(0)

    def fast(game):
        game.spawn_speed, game.move_speed, game.ramp_index, game.ramp_timer = 1, 2, 9, 3

    history = play(Asterix, lambda game: int(rng.integers(5)), 300, seed=1, setup=fast)
    assert max(sum(state["entity_alive"]) for state, _, _ in history) == 8
    assert min(state["move_speed"] for state, _, _ in history) == 1
    assert sum(reward for _, reward, _ in history) > 0


def test_same_seed_same_game_other_seed_another():
    def run(seed):
        env = Asterix(8, seed=seed)
        generator = torch.Generator().manual_seed(0)
        seen = []
        for _ in range(30):
            observ, reward, terminated, _ = env.step(torch.randint(0, 5, (8,), generator=generator))
            seen += [observ, reward, terminated]
        return seen

    first, again, other = run(1), run(1), run(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))
