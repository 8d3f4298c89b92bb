"""EpisodeMemory: padded episodes, commits, growth (nothing dropped), truncation data."""

from __future__ import annotations

import pytest
import torch

from batchenv.algorithms.batchppo import EpisodeMemory


def _memory(rows=3, max_length=4, capacity=1):
    return EpisodeMemory(
        rows,
        max_length,
        observ_size=2,
        action_shape=(1,),
        action_dtype=torch.float32,
        param_size=2,
        capacity=capacity,
    )


def _step(memory, value: float):
    rows = memory.num_rows
    memory.append(
        torch.full((rows, 2), value),
        torch.full((rows, 1), value),
        torch.full((rows,), value),
        torch.full((rows, 2), value),
    )


def test_episodes_are_padded_with_lengths():
    memory = _memory()
    for value in (1.0, 2.0):
        _step(memory, value)
    memory.commit(torch.tensor([1]), torch.full((3, 2), 9.0), torch.tensor([False, True, False]))
    _step(memory, 3.0)  # row 1 starts a new episode; rows 0, 2 continue
    memory.commit(torch.tensor([0]), torch.full((3, 2), 8.0), torch.zeros(3, dtype=torch.bool))
    episodes = memory.take()
    assert episodes.length.tolist() == [2, 3]
    assert episodes.reward.tolist() == [[1, 2, 0], [1, 2, 3]]  # padded to the longest
    assert episodes.truncated.tolist() == [True, False]
    assert episodes.last_observ.tolist() == [[9, 9], [8, 8]]
    assert episodes.mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert memory.episodes == 0 and memory.running_length.tolist() == [0, 1, 3]


def test_no_episode_dropped_when_many_finish_at_once():
    memory = _memory(rows=5, capacity=1)
    _step(memory, 1.0)
    memory.commit(torch.arange(5), torch.zeros(5, 2), torch.zeros(5, dtype=torch.bool))
    _step(memory, 2.0)
    memory.commit(torch.tensor([0, 4]), torch.zeros(5, 2), torch.zeros(5, dtype=torch.bool))
    assert memory.episodes == 7
    episodes = memory.take()
    assert len(episodes) == 7
    assert episodes.reward[:, 0].tolist() == [1] * 5 + [2] * 2


def test_begin_discards_the_unfinished_episode_and_padding_is_zeroed():
    memory = _memory(rows=1)
    for value in (5.0, 6.0, 7.0):
        _step(memory, value)
    memory.begin(torch.tensor([0]))  # cut short (a forced reset): never committed
    _step(memory, 1.0)
    memory.commit(torch.tensor([0]), torch.zeros(1, 2), torch.tensor([True]))
    episodes = memory.take()
    assert episodes.length.tolist() == [1]
    assert episodes.observ[0].tolist() == [[1, 1]]  # padded to the longest: 1 step
    assert memory.store["observ"][0, 1:3].tolist() == [[6, 6], [7, 7]]  # stale, never taken


def test_stepping_past_max_length_raises():
    memory = _memory(rows=2, max_length=2)
    _step(memory, 1.0)
    _step(memory, 1.0)
    with pytest.raises(RuntimeError, match=r"rows \[0, 1\] ran max_length=2 steps"):
        _step(memory, 1.0)


def test_state_dict_round_trip():
    memory = _memory()
    _step(memory, 1.0)
    memory.commit(torch.tensor([2]), torch.ones(3, 2), torch.tensor([False, False, True]))
    _step(memory, 2.0)
    other = _memory()
    other.load_state_dict(memory.state_dict())
    _step(memory, 3.0)
    _step(other, 3.0)
    for source in (memory, other):
        source.commit(torch.arange(3), torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    a, b = memory.take(), other.take()
    for name in a.__dataclass_fields__:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
