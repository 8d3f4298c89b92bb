"""The MinAtar base: spaces and action sets, sticky actions, seeding, resets, state access,
argument checks (shown on Breakout and Freeway)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from batchenv.kernels.minatar import Asterix, Breakout, Freeway, Seaquest, SpaceInvaders
from tests.kernels.minatar.scenes import row

GAMES = [pytest.param(Breakout, id="breakout"), pytest.param(Freeway, id="freeway")]


def trajectory(env, steps: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    seen = []
    for _ in range(steps):
        action = torch.randint(0, env.single_action_space.n, (env.num_envs,), generator=generator)
        observ, reward, terminated, _ = env.step(action, reset_mask=None)
        seen += [observ, reward, terminated]
        if terminated.any():
            env.reset(torch.nonzero(terminated).squeeze(1))
    return seen


def test_spaces_match_minatars_gym_ids():
    env = Breakout(2)
    assert env.single_observation_space == gym.spaces.Box(0.0, 1.0, (10, 10, 4), dtype=bool)
    assert env.single_action_space == gym.spaces.Discrete(3)  # MinAtar/Breakout-v1
    assert Breakout(2, minimal_action_set=False).single_action_space == gym.spaces.Discrete(6)
    assert Freeway(2).single_observation_space.shape == (10, 10, 7)


@pytest.mark.parametrize("minimal", [True, False], ids=["minimal", "full"])
def test_actions_map_to_minatars_full_set(minimal):
    up = 1 if minimal else 2  # minimal set (noop, up, down); full (n, l, u, r, d, f)
    env = Freeway(1, seed=0, sticky_action_prob=0.0, minimal_action_set=minimal)
    env.set_state({"move_timer": torch.tensor([0])})
    env.step(torch.tensor([up]))
    assert row(env, "pos", "last_action") == (8, 2)


def test_sticky_actions_repeat_the_last_action_with_probability_one_tenth():
    n = 20000
    env = Breakout(n, seed=0)
    env.set_state({"last_action": torch.full((n,), 1)})  # left
    env.step(torch.full((n,), 2))  # right
    kept = float((env.get_state()["last_action"] == 1).to(torch.float64).mean())
    assert abs(kept - 0.1) < 0.01  # 5 standard deviations


def test_sticky_draw_below_the_probability_repeats_the_action():
    env = Breakout(2, seed=0, sticky_action_prob=0.5)
    env.set_state({"last_action": torch.tensor([1, 1])})
    draws = {"sticky": torch.tensor([[0.49], [0.5]])}
    env.step(torch.tensor([2, 2]), draws=draws)
    assert env.get_state()["last_action"].tolist() == [1, 3]  # left kept; right taken


def test_last_action_survives_a_reset_as_in_minatar():
    env = Breakout(1, seed=0, sticky_action_prob=0.0)
    env.step(torch.tensor([2]))
    env.reset(torch.tensor([0]))
    assert row(env, "last_action") == (3,)


@pytest.mark.parametrize("game", GAMES)
def test_same_seed_same_trajectory_other_seed_another(game):
    first = trajectory(game(6, seed=11), 60)
    again = trajectory(game(6, seed=11), 60)
    other = trajectory(game(6, seed=12), 60)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_rows_draw_differently():
    state = Breakout(32, seed=0).get_state()
    assert 0 < int((state["ball_x"] == 0).sum()) < 32


@pytest.mark.parametrize("game", GAMES)
def test_per_block_seeds_are_lone_envs(game):
    stacked = game(8, seed=[5, 6])
    lone = game(4, seed=6)
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        action = torch.randint(0, 3, (4,), generator=generator)
        observ, reward, terminated, _ = stacked.step(torch.cat([action, action]))
        observ_lone, reward_lone, terminated_lone, _ = lone.step(action)
        assert torch.equal(observ[4:], observ_lone) and torch.equal(reward[4:], reward_lone)
        stacked.reset_where(torch.cat([terminated[:4], terminated_lone]))
        lone.reset_where(terminated_lone)


def test_ball_starts_on_either_side_evenly():
    right = Breakout(20000, seed=2).get_state()["ball_x"] == 9
    assert abs(float(right.to(torch.float64).mean()) - 0.5) < 0.01


@pytest.mark.parametrize(
    "game",
    [
        pytest.param(Asterix, id="asterix"),
        pytest.param(Seaquest, id="seaquest"),
        pytest.param(SpaceInvaders, id="space_invaders"),
    ],
)
def test_a_fresh_start_that_draws_nothing_takes_no_draws(game):
    assert game.reset_draws == ()  # MinAtar's reset makes no random call in these games
    env = game(3, seed=0)
    for _ in range(5):
        env.step(torch.zeros(3, dtype=torch.int64))
    observ = env.reset(torch.tensor([0, 2]), draws={})
    fresh = game(2, seed=1).reset(torch.tensor([0, 1]))
    assert torch.equal(observ, fresh)
    assert env.get_state()["elapsed"].tolist() == [0, 5, 0]
    with pytest.raises(ValueError, match=r"draws must have the keys \[\], got \['fresh_start'\]"):
        env.reset(torch.tensor([0]), draws={"fresh_start": torch.zeros(1, 0)})


def test_reset_where_starts_only_the_masked_rows():
    env = Breakout(4, seed=0, sticky_action_prob=0.0)
    for _ in range(3):
        env.step(torch.zeros(4, dtype=torch.int64))
    before = env.get_state()
    mask = torch.tensor([True, False, True, False])
    observ = env.reset_where(mask)
    after = env.get_state()
    assert observ.shape == (4, 10, 10, 4)
    assert after["ball_y"].tolist() == [3, before["ball_y"][1], 3, before["ball_y"][3]]
    assert after["elapsed"].tolist() == [0, 3, 0, 3]
    assert torch.equal(observ[1], env._observe({k: v[1:2] for k, v in after.items()})[0])


def test_reset_mask_starts_rows_instead_of_stepping_them():
    env = Breakout(2, seed=0, sticky_action_prob=0.0)
    observ, reward, terminated, truncated = env.step(
        torch.zeros(2, dtype=torch.int64), reset_mask=torch.tensor([True, False])
    )
    assert env.get_state()["elapsed"].tolist() == [0, 1]
    assert env.get_state()["ball_y"].tolist() == [3, 4]
    assert not terminated.any() and not reward.any()


def test_max_episode_steps_truncates():
    env = Freeway(2, seed=0, max_episode_steps=3)
    flags = [env.step(torch.zeros(2, dtype=torch.int64))[3].tolist() for _ in range(3)]
    assert flags == [[False, False], [False, False], [True, True]]


def test_set_state_round_trips_and_refuses_unknown_keys():
    env, other = Breakout(3, seed=0), Breakout(3, seed=1)
    other.set_state(env.get_state())
    assert all(torch.equal(v, other.get_state()[k]) for k, v in env.get_state().items())
    with pytest.raises(ValueError, match=r"unknown keys \['ball'\]"):
        env.set_state({"ball": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"'pos' has shape \(2,\), expected \(3,\)"):
        env.set_state({"pos": torch.zeros(2)})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_envs": 0}, r"num_envs must be an int >= 1"),
        ({"seed": [1, 2, 3]}, r"num_envs divisible by their number"),
        ({"sticky_action_prob": 1.5}, r"must be in \[0, 1\]"),
        ({"max_episode_steps": 0}, r"must be None or an int >= 1"),
    ],
)
def test_bad_arguments_fail_fast(kwargs, message):
    kwargs = {"num_envs": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        Breakout(**kwargs)


def test_bad_action_and_draws_are_refused():
    env = Breakout(2)
    with pytest.raises(ValueError, match=r"action must be an int64 tensor of shape \(2,\)"):
        env.step(torch.zeros(2))
    with pytest.raises(ValueError, match=r"draws must have the keys \['sticky'\]"):
        env.step(torch.zeros(2, dtype=torch.int64), draws={})
    with pytest.raises(ValueError, match=r"draws\['ball_start'\] must be a float tensor"):
        env.reset(torch.tensor([0]), draws={"ball_start": torch.zeros(2, 1)})
