"""ReplayMemory: ring wrap-around, n-step returns, truncation vs termination, PER, state."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from batchenv.algorithms.replay import ReplayMemory

OBSERV = gym.spaces.Box(-10, 10, (1,))
ACTION = gym.spaces.Discrete(3)
GAMMA = 0.5  # powers of two: every expected value below is exact in float32


def _memory(capacity=8, num_envs=2, **kwargs) -> ReplayMemory:
    kwargs.setdefault("gamma", GAMMA)
    return ReplayMemory(capacity, OBSERV, ACTION, num_envs, **kwargs)


def _add(memory, t, terminated=(), truncated=()):
    """Transition t of every column: observ = 100 * column + t, reward = t + 1."""
    n = memory.num_envs
    observ = torch.tensor([[100.0 * c + t] for c in range(n)])
    ended = lambda cols: torch.tensor([c in cols for c in range(n)])
    memory.add(
        observ,
        torch.full((n,), t % 3),
        torch.full((n,), t + 1.0),
        observ + 0.5,
        ended(terminated),
        ended(truncated),
    )


def _all(memory) -> dict:
    """Every slot's n-step batch, keyed by (column, time) read from the observation."""
    slots = torch.arange(len(memory))
    batch = memory._n_step_batch(slots, torch.ones(len(slots)))
    out = {}
    for i in range(len(slots)):
        value = float(batch.observ[i, 0])
        key = (int(value // 100), int(value % 100))
        out[key] = (
            float(batch.reward[i]),
            float(batch.next_observ[i, 0]),
            float(batch.discount[i]),
        )
    return out


def test_ring_wraps_around_and_keeps_the_newest_rows():
    memory = _memory(capacity=6, num_envs=2)  # 3 rows
    for t in range(5):
        _add(memory, t)
    assert len(memory) == 6 and memory.position == 2
    assert memory.observ[:, 0, 0].tolist() == [3.0, 4.0, 2.0]
    assert memory.observ[:, 1, 0].tolist() == [103.0, 104.0, 102.0]
    assert sorted(_all(memory)) == [(0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4)]


def test_capacity_rounds_down_to_whole_rows():
    memory = _memory(capacity=7, num_envs=2)
    assert memory.capacity == 6 and memory.rows == 3


def test_n_step_returns_by_hand_with_an_episode_end_inside_the_window():
    # Column 0 terminates at t=1; column 1 is truncated at t=2. n=3, gamma=0.5.
    memory = _memory(capacity=16, num_envs=2, n_step=3)
    for t in range(5):
        _add(memory, t, terminated={0} if t == 1 else (), truncated={1} if t == 2 else ())
    got = _all(memory)
    # rewards are t + 1. Column 0, t=0: r0 + g r1, ends by termination at t=1.
    assert got[(0, 0)] == (1 + 0.5 * 2, 1.5, 0.0)
    assert got[(0, 1)] == (2.0, 1.5, 0.0)
    # t=2: full window 2,3,4 -> 3 + 0.5*4 + 0.25*5, bootstrap gamma**3 from next_observ of t=4.
    assert got[(0, 2)] == (3 + 2 + 1.25, 4.5, 0.125)
    # Newest transitions: the window stops at the newest one and bootstraps from it.
    assert got[(0, 3)] == (4 + 0.5 * 5, 4.5, 0.25)
    assert got[(0, 4)] == (5.0, 4.5, 0.5)
    # Column 1, truncated at t=2: stops there but still bootstraps (gamma**k, not 0).
    assert got[(1, 0)] == (1 + 1 + 0.75, 102.5, 0.125)
    assert got[(1, 1)] == (2 + 1.5, 102.5, 0.25)
    assert got[(1, 2)] == (3.0, 102.5, 0.5)
    assert got[(1, 3)] == (4 + 2.5, 104.5, 0.25)


def test_n_step_windows_never_cross_the_ring_seam():
    # 3 rows: after 5 adds the oldest row is t=2 (row 2) and the newest t=4 (row 1).
    memory = _memory(capacity=6, num_envs=2, n_step=3)
    for t in range(5):
        _add(memory, t)
    got = _all(memory)
    assert got[(0, 2)] == (3 + 0.5 * 4 + 0.25 * 5, 4.5, 0.125)
    assert got[(0, 4)] == (5.0, 4.5, 0.5)


def test_one_step_truncation_bootstraps_and_termination_does_not():
    memory = _memory(capacity=4, num_envs=2)
    _add(memory, 0, terminated={0}, truncated={1})
    got = _all(memory)
    assert got[(0, 0)] == (1.0, 0.5, 0.0)
    assert got[(1, 0)] == (1.0, 100.5, 0.5)


def test_terminated_and_truncated_at_once_counts_as_terminated():
    memory = _memory(capacity=4, num_envs=2)
    _add(memory, 0, terminated={0}, truncated={0})
    assert _all(memory)[(0, 0)][2] == 0.0
    assert not bool(memory.truncated[0, 0])


def test_truncate_newest_ends_the_running_episodes_with_a_bootstrap():
    memory = _memory(capacity=16, num_envs=2, n_step=3)
    memory.truncate_newest()  # empty: nothing to do
    _add(memory, 0)
    _add(memory, 1, terminated={1})
    memory.truncate_newest()  # a forced reset: column 0 is cut, column 1 already ended
    _add(memory, 2)
    got = _all(memory)
    assert got[(0, 0)] == (1 + 0.5 * 2, 1.5, 0.25)  # stops at t=1, does not reach t=2
    assert got[(1, 0)] == (1 + 0.5 * 2, 101.5, 0.0)  # termination kept: no bootstrap
    assert memory.truncated[1].tolist() == [True, False]


def test_uniform_sampling_is_seeded_and_covers_only_stored_slots():
    memory = _memory(capacity=20, num_envs=2)
    for t in range(3):
        _add(memory, t)
    first = memory.sample(64, torch.Generator().manual_seed(3))
    again = memory.sample(64, torch.Generator().manual_seed(3))
    assert torch.equal(first.indices, again.indices)
    assert set(first.indices.tolist()) == set(range(6))
    assert torch.equal(first.weights, torch.ones(64))


def test_prioritized_weights_by_hand():
    memory = _memory(capacity=4, num_envs=2, prioritized=True, alpha=1.0, eps=1e-6)
    _add(memory, 0)
    _add(memory, 1)
    memory.update_priorities(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    # Stratified: 4 segments of a total of 10 + 4e-6; one draw in each.
    batch = memory.sample(4, torch.Generator().manual_seed(0), beta=0.5)
    p = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64) + 1e-6
    probability = p / p.sum()
    # Segment edges 0, 2.5, 5, 7.5, 10 over cumsum 1, 3, 6, 10: leaves 0|1, 1|2, 2|3, 3.
    assert batch.indices[3] == 3
    expected = (4 * probability[batch.indices]) ** -0.5
    expected = (expected / expected.max()).float()
    assert torch.allclose(batch.weights, expected, rtol=0, atol=1e-7)
    assert memory.max_priority == 4.0


def test_prioritized_new_slots_get_the_max_priority():
    memory = _memory(capacity=4, num_envs=2, prioritized=True, alpha=0.5, eps=0.0001)
    _add(memory, 0)
    memory.update_priorities(torch.tensor([0, 1]), torch.tensor([9.0, 0.0]))
    _add(memory, 1)
    leaves = memory.tree.leaves().tolist()
    assert leaves == pytest.approx([9.0001**0.5, 0.0001**0.5, 9.0001**0.5, 9.0001**0.5])


def test_prioritized_sampling_frequency_follows_priority():
    memory = _memory(capacity=4, num_envs=2, prioritized=True, alpha=1.0)
    _add(memory, 0)
    _add(memory, 1)
    memory.update_priorities(torch.arange(4), torch.tensor([0.0, 1.0, 1.0, 2.0]))
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(50):
        counts += torch.bincount(memory.sample(100, generator).indices, minlength=4)
    assert counts[0] == 0  # priority eps only: a prefix sum almost never lands there
    assert counts.tolist()[1:] == pytest.approx([1250, 1250, 2500], abs=40)


def test_state_dict_round_trip_resumes_exactly():
    def build():
        return _memory(capacity=6, num_envs=2, n_step=2, prioritized=True)

    memory = build()
    for t in range(4):
        _add(memory, t, terminated={1} if t == 2 else ())
    memory.update_priorities(torch.tensor([0, 3]), torch.tensor([5.0, 0.25]))
    state = memory.state_dict()
    copy = build()
    copy.load_state_dict({k: v.clone() if torch.is_tensor(v) else v for k, v in state.items()})
    for t in range(4, 6):  # both keep going identically
        _add(memory, t)
        _add(copy, t)
    a = memory.sample(8, torch.Generator().manual_seed(5), beta=0.7)
    b = copy.sample(8, torch.Generator().manual_seed(5), beta=0.7)
    for name in ("observ", "action", "reward", "next_observ", "discount", "weights", "indices"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_load_state_dict_of_another_shape_names_the_fix():
    state = _memory(capacity=6).state_dict()
    with pytest.raises(ValueError, match="observ has shape .* build it with the capacity"):
        _memory(capacity=8).load_state_dict(state)
    with pytest.raises(ValueError, match="prioritized=False, this memory prioritized=True"):
        _memory(capacity=6, prioritized=True).load_state_dict(state)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(capacity=1, num_envs=2), "capacity 1 holds less than one row of 2 envs"),
        (dict(n_step=0), "n_step must be >= 1, got 0"),
        (dict(gamma=1.5), r"gamma must be in \[0, 1\], got 1.5"),
        (dict(num_envs=0), "num_envs must be >= 1, got 0"),
    ],
    ids=["capacity<num_envs", "n_step=0", "gamma=1.5", "num_envs=0"],
)
def test_bad_arguments_raise_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _memory(**kwargs)


def test_sampling_an_empty_memory_or_no_rows_raises():
    memory = _memory(capacity=8, num_envs=2)
    with pytest.raises(ValueError, match=r"sample\(3\) needs .* a transition stored \(0 now\)"):
        memory.sample(3, torch.Generator())
    _add(memory, 0)
    with pytest.raises(ValueError, match=r"sample\(0\) needs batch_size >= 1"):
        memory.sample(0, torch.Generator())


def test_bytes_per_transition_counts_every_buffer():
    memory = ReplayMemory(8, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 2)
    assert memory.bytes_per_transition() == 4 * 4 * 2 + 8 + 4 + 1 + 1
    per = ReplayMemory(8, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 2, prioritized=True)
    assert per.bytes_per_transition() == 46 + 16
