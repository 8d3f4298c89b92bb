"""The DQN class: update and target schedules, what it stores, epsilon-greedy, its state."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from batchenv.algorithms.dqn import DQN, DQNConfig

OBSERV = gym.spaces.Box(-1, 1, (3,))
ACTION = gym.spaces.Discrete(2)
SMALL = DQNConfig(
    hidden_layers=(8,),
    buffer_size=64,
    batch_size=4,
    learning_starts=5,
    train_frequency=3,
    target_network_frequency=4,
    steps=100,
)


def _algo(config=SMALL, num_envs=1) -> DQN:
    return DQN(OBSERV, ACTION, config, num_envs)


def _feed(algo: DQN, calls: int, done=None, truncated=None) -> list:
    """``calls`` experience batches; the summaries of each."""
    rows = algo.num_envs
    out = []
    for call in range(calls):
        observ = torch.full((rows, 3), 0.01 * call)
        action = torch.arange(rows) % 2
        false = torch.zeros(rows, dtype=torch.bool)
        out.append(
            algo.experience(
                observ,
                action,
                torch.ones(rows),
                false if done is None else done,
                observ + 0.01,
                false if truncated is None else truncated,
            )
        )
    return out


def test_one_env_follows_cleanrls_global_step_rules():
    algo = _algo()
    count = {"update": 0, "target": 0}

    def update(beta):
        count["update"] += 1
        return torch.zeros(()), torch.zeros(())

    algo.update = update
    algo.update_target = lambda: count.__setitem__("target", count["target"] + 1)
    _feed(algo, 30)
    # Steps s = 0..29; s > 5: updates at s % 3 == 0 (6..27: 8), targets at s % 4 == 0 (8..28: 6).
    assert count == {"update": 8, "target": 6}


@pytest.mark.parametrize("num_envs", [1, 2, 3, 7], ids=lambda n: f"envs={n}")
def test_several_envs_get_the_updates_one_env_would(num_envs):
    algo = _algo(num_envs=num_envs)
    counts = {"update": 0, "target": 0}
    algo.update = lambda beta: (
        counts.__setitem__("update", counts["update"] + 1),
        (torch.zeros(()), torch.zeros(())),
    )[1]
    algo.update_target = lambda: counts.__setitem__("target", counts["target"] + 1)
    _feed(algo, 42 // num_envs)  # 42 env steps (s = 0..41)
    assert algo.steps == 42
    assert counts == {"update": 12, "target": 9}  # s in 6..39 step 3; 8..40 step 4


def test_experience_stores_termination_and_truncation_apart():
    algo = _algo(num_envs=3)
    done = torch.tensor([True, True, False])
    truncated = torch.tensor([False, True, False])
    _feed(algo, 1, done=done, truncated=truncated)
    assert algo.memory.terminated[0].tolist() == [True, False, False]
    assert algo.memory.truncated[0].tolist() == [False, True, False]
    assert algo.memory.next_observ[0, :, 0].tolist() == pytest.approx([0.01] * 3)


def test_eval_mode_stores_and_learns_nothing():
    algo = _algo().eval_mode()
    assert _feed(algo, 10) == [None] * 10
    assert len(algo.memory) == 0 and algo.steps == 0


def test_updates_return_summaries_and_change_the_network():
    algo = _algo()
    before = [p.clone() for p in algo.q.parameters()]
    summaries = [s for s in _feed(algo, 12) if s is not None]
    assert [int(s["updates"]) for s in summaries] == [1, 1]  # s = 6 and 9
    assert algo.updates == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.q.parameters()))


def test_hard_and_polyak_target_updates():
    algo = _algo()
    with torch.no_grad():
        for p in algo.q.parameters():
            p.fill_(1.0)
        for p in algo.target.parameters():
            p.fill_(0.0)
    algo.update_target()
    assert all(torch.equal(p, torch.ones_like(p)) for p in algo.target.parameters())
    soft = _algo(SMALL.replace(tau=0.25))
    with torch.no_grad():
        for p in soft.q.parameters():
            p.fill_(1.0)
        for p in soft.target.parameters():
            p.fill_(0.0)
    soft.update_target()
    assert all(torch.allclose(p, torch.full_like(p, 0.25)) for p in soft.target.parameters())


def test_epsilon_greedy_actions():
    algo = _algo(SMALL.replace(start_e=0.0, end_e=0.0), num_envs=5)
    with torch.no_grad():  # make action 1 always best
        algo.q.network[-1].weight.zero_()
        algo.q.network[-1].bias.copy_(torch.tensor([0.0, 1.0]))
    assert algo.perform(torch.zeros(5, 3)).tolist() == [1] * 5
    explore = _algo(SMALL.replace(start_e=1.0, end_e=1.0, buffer_size=1000), num_envs=1000)
    actions = explore.perform(torch.zeros(1000, 3))
    assert 400 < int((actions == 0).sum()) < 600  # uniform over both actions
    explore.eval_mode()  # eval_epsilon 0: greedy
    assert explore.perform(torch.zeros(3, 3)).unique().numel() == 1


def test_epsilon_follows_the_run_length():
    algo = _algo(SMALL.replace(steps=1000, exploration_fraction=0.5))
    assert algo.epsilon() == 1.0
    algo.steps = 250
    assert algo.epsilon() == pytest.approx(0.525)
    algo.steps = 600
    assert algo.epsilon() == pytest.approx(0.05)


def test_beta_anneals_from_per_beta_to_one():
    algo = _algo(SMALL.replace(prioritized=True, per_beta=0.4, learning_starts=0, steps=100))
    assert [algo.beta(s) for s in (0, 50, 100, 200)] == pytest.approx([0.4, 0.7, 1.0, 1.0])


def test_continuous_actions_are_refused():
    with pytest.raises(ValueError, match="DQN needs a Discrete action space, got Box"):
        DQN(OBSERV, gym.spaces.Box(-1, 1, (1,)), SMALL, 1)


def test_discrete_start_is_kept_in_actions_and_removed_in_memory():
    algo = DQN(OBSERV, gym.spaces.Discrete(2, start=5), SMALL.replace(start_e=0.0, end_e=0.0), 2)
    assert set(algo.perform(torch.zeros(2, 3)).tolist()) <= {5, 6}
    algo.experience(
        torch.zeros(2, 3),
        torch.tensor([5, 6]),
        torch.ones(2),
        torch.zeros(2, dtype=torch.bool),
        torch.zeros(2, 3),
        torch.zeros(2, dtype=torch.bool),
    )
    assert algo.memory.action[0].tolist() == [0, 1]


@pytest.mark.parametrize("variant", ["dqn", "ddqn_per_3step"])
def test_state_dict_round_trip_continues_identically(variant):
    config = SMALL if variant == "dqn" else SMALL.replace(double=True, prioritized=True, n_step=3)
    first = _algo(config, num_envs=2)
    _feed(first, 10)
    state = first.state_dict()
    second = _algo(config.replace(seed=99), num_envs=2)  # other init, then restored
    second.load_state_dict(state)
    _feed(first, 10)
    _feed(second, 10)
    for a, b in zip(first.q.parameters(), second.q.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(first.perform(torch.ones(2, 3)), second.perform(torch.ones(2, 3)))
    assert (first.steps, first.updates) == (second.steps, second.updates) == (40, 12)
