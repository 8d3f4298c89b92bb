"""Freeway: golden sequences of hand-built scenes, draws, and the checker against MinAtar."""

from __future__ import annotations

import pytest
import torch

from batchenv.kernels.minatar import Freeway
from batchenv.kernels.minatar.consistency import check_minatar
from tests.kernels.minatar.scenes import act, row, scene

NOOP, UP, DOWN = 0, 1, 2  # the minimal action set
PARKED = {"car_x": [0] * 8, "car_timer": [5] * 8, "car_speed": [5] * 8}  # far from column 4


def test_fresh_start_is_minatars():
    state = Freeway(4, seed=0).get_state()
    assert state["pos"].tolist() == [9] * 4
    assert state["move_timer"].tolist() == [3] * 4
    assert state["terminate_timer"].tolist() == [2500] * 4
    assert state["car_x"].tolist() == [[0] * 8] * 4
    assert torch.equal(state["car_timer"], state["car_speed"].abs())
    assert set(state["car_speed"].abs().flatten().tolist()) <= {1, 2, 3, 4, 5}
    assert len({tuple(r) for r in state["car_speed"].tolist()}) == 4  # rows differ


def test_the_chicken_moves_once_every_three_frames():
    env = scene(Freeway, move_timer=0, **PARKED)
    seen = []
    for _ in range(5):
        act(env, UP)
        seen.append(row(env, "pos", "move_timer"))
    assert seen == [(8, 2), (8, 1), (8, 0), (7, 2), (7, 1)]


def test_chicken_walks_into_a_car():
    cars = dict(PARKED, car_x=[0] * 7 + [4])  # car 7 drives in row 8, parked at column 4
    env = scene(Freeway, move_timer=0, **cars)
    assert act(env, UP) == (0.0, False)
    assert row(env, "pos", "move_timer") == (9, 2)  # back to the bottom


def test_car_drives_into_the_chicken():
    cars = {"car_x": [0] * 7 + [3], "car_timer": [5] * 7 + [1], "car_speed": [5] * 7 + [1]}
    env = scene(Freeway, pos=8, move_timer=2, **cars)
    act(env, NOOP)  # the car's timer runs down: no move yet
    assert row(env, "pos", "car_x", "car_timer") == (8, [0] * 7 + [3], [4] * 7 + [0])
    act(env, NOOP)  # it moves into column 4: hit
    assert row(env, "pos", "car_x", "car_timer") == (9, [0] * 7 + [4], [3] * 7 + [1])


def test_reaching_the_top_scores_and_redraws_the_cars():
    env = scene(Freeway, pos=1, move_timer=0, **PARKED)
    speeds = [0.0, 0.2, 0.4, 0.6, 0.8, 0.99, 0.5, 0.1]  # randint(1, 6): 1 2 3 4 5 5 3 1
    directions = [0.1, 0.9, 0.6, 0.4, 0.3, 0.7, 0.2, 0.8]  # sign(rand() - 0.5)
    assert act(env, UP, speeds=speeds, directions=directions) == (1.0, False)
    pos, car_x, car_timer, car_speed = row(env, "pos", "car_x", "car_timer", "car_speed")
    assert pos == 9 and car_x == [0] * 8  # the cars keep their places
    assert car_speed == [-1, 2, 3, -4, -5, 5, -3, 1]
    assert car_timer == [0, 1, 2, 3, 4, 4, 2, 0]  # |speed|, less the frame just run


def test_the_episode_ends_when_the_2500_frames_run_out():
    env = scene(Freeway, terminate_timer=1, **PARKED)  # a fresh start has 2500 (see above)
    assert act(env, NOOP) == (0.0, False)
    assert act(env, NOOP) == (0.0, True)  # the timer dropped below 0: the 2501st step
    assert row(env, "terminate_timer") == (-1,)


def test_observation_channels():
    cars = {"car_x": [0, 5, 9] + [0] * 5, "car_speed": [-3, 2, 1] + [5] * 5}
    env = scene(Freeway, pos=6, **cars)
    observ = env.step(torch.tensor([NOOP]))[0][0]  # (cars with timer 5 stay put)
    chicken, car = observ[..., 0], observ[..., 1]
    assert torch.nonzero(chicken).tolist() == [[6, 4]]
    assert torch.nonzero(car).tolist()[:3] == [[1, 0], [2, 5], [3, 9]]
    speed3, speed2, speed1 = observ[..., 4], observ[..., 3], observ[..., 2]
    assert [1, 1] in torch.nonzero(speed3).tolist()  # left-moving: the trail is to its right
    assert torch.nonzero(speed2).tolist() == [[2, 4]]
    assert torch.nonzero(speed1).tolist() == [[3, 8]]
    assert int(observ.sum()) == 1 + 8 + 8


def test_draws_follow_minatars_distribution():
    state = Freeway(2000, seed=1).get_state()
    speed = state["car_speed"].flatten()
    counts = torch.bincount(speed.abs(), minlength=6)[1:].to(torch.float64) / speed.numel()
    assert torch.allclose(counts, torch.full((5,), 0.2, dtype=torch.float64), atol=0.015)
    assert abs(float((speed > 0).to(torch.float64).mean()) - 0.5) < 0.015


@pytest.mark.parametrize("ramping", [True, False], ids=["ramping", "no-ramping"])
def test_consistent_with_minatar(minatar, ramping):
    report = check_minatar(
        Freeway, num_envs=20, steps=2501, seed=5, episodes=20, difficulty_ramping=ramping
    )
    assert report.passed, str(report)
    assert report.episodes == 20 and report.steps_compared == 2501


def test_consistent_with_minatar_when_the_chicken_scores(minatar):
    # Mostly "up": the chicken reaches the top often, so the car redraws are compared too.
    report = check_minatar(Freeway, num_envs=10, steps=400, seed=6, action_probs=(0.1, 0.8, 0.1))
    assert report.passed, str(report)
    assert report.rewards >= 20
