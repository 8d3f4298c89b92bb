"""SumTree against brute force: prefix-sum search and updates."""

from __future__ import annotations

import pytest
import torch

from batchenv.algorithms.replay import SumTree


def _brute_find(values: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
    """searchsorted(cumsum(v), u, right=True), clipped to the last positive leaf."""
    cumsum = torch.cumsum(values.double(), 0)
    found = torch.searchsorted(cumsum, prefix.double(), right=True)
    last_positive = int(torch.nonzero(values > 0).max())
    return torch.clamp(found, max=last_positive)


@pytest.mark.parametrize("capacity", [1, 2, 7, 8, 1000], ids=lambda c: f"capacity={c}")
def test_find_matches_brute_force_prefix_sums(capacity):
    generator = torch.Generator().manual_seed(capacity)
    values = torch.rand(capacity, generator=generator, dtype=torch.float64)
    values[torch.rand(capacity, generator=generator) < 0.3] = 0.0  # zero leaves are skipped
    values[0] = max(float(values[0]), 0.5)
    tree = SumTree(capacity)
    tree.set(torch.arange(capacity), values)
    assert tree.total() == pytest.approx(float(values.sum()), rel=1e-12)
    prefix = torch.rand(500, generator=generator, dtype=torch.float64) * tree.total()
    found = tree.find(prefix)
    assert torch.equal(found, _brute_find(values, prefix))
    assert bool(torch.all(values[found] > 0))


def test_exact_boundaries_go_to_the_next_positive_leaf():
    tree = SumTree(5)
    tree.set(torch.arange(5), torch.tensor([1.0, 0.0, 0.0, 2.0, 1.0]))
    found = tree.find(torch.tensor([0.0, 1.0, 2.999, 3.0, 4.0, 5.0]))
    assert found.tolist() == [0, 3, 3, 4, 4, 4]


def test_updates_keep_sums_equal_to_brute_force():
    generator = torch.Generator().manual_seed(1)
    capacity = 37
    values = torch.zeros(capacity, dtype=torch.float64)
    tree = SumTree(capacity)
    for _ in range(50):
        indices = torch.randint(0, capacity, (5,), generator=generator)
        new = torch.rand(5, generator=generator, dtype=torch.float64)
        indices = torch.unique(indices)
        new = new[: len(indices)]
        tree.set(indices, new)
        values[indices] = new
        assert torch.equal(tree.leaves(), values)
        # Every internal node is the sum of its two children.
        nodes = tree.nodes
        internal = torch.arange(1, tree.size)
        assert torch.allclose(nodes[internal], nodes[2 * internal] + nodes[2 * internal + 1])
        assert tree.total() == pytest.approx(float(values.sum()), rel=1e-12)


def test_sampling_frequencies_follow_the_values():
    tree = SumTree(4)
    tree.set(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    prefix = (torch.arange(10_000, dtype=torch.float64) + 0.5) / 10_000 * tree.total()
    counts = torch.bincount(tree.find(prefix), minlength=4)
    assert counts.tolist() == [1000, 2000, 3000, 4000]


def test_capacity_below_one_raises():
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        SumTree(0)
