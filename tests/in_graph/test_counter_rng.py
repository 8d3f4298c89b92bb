"""Counter-based random numbers: pure functions of (key, row, count, element), same bits
eagerly and compiled, uniform enough for random starts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchenv.in_graph.counter_rng import counter_uniform, make_key, mix32


def test_mix32_stays_in_32_bits_and_is_deterministic():
    x = torch.tensor([0, 1, 2, 2**32 - 1], dtype=torch.int64)
    h = mix32(x)
    assert int(h.min()) >= 0 and int(h.max()) < 2**32
    assert torch.equal(h, mix32(x.clone()))
    assert len(set(h.tolist())) == 4


def test_draws_depend_on_key_row_and_count_only():
    rows = torch.tensor([0, 1, 2, 0])
    counts = torch.tensor([0, 0, 0, 1])
    u = counter_uniform(make_key(3), rows, counts, 5)
    assert u.shape == (4, 5) and u.dtype == torch.float32
    # the same (row, count) in another batch gives the same numbers
    again = counter_uniform(make_key(3), torch.tensor([2]), torch.tensor([0]), 5)
    assert torch.equal(u[2], again[0])
    # a new count, another row or another key give new numbers
    assert not torch.equal(u[0], u[3])
    assert not torch.equal(u[0], u[1])
    assert not torch.equal(u, counter_uniform(make_key(4), rows, counts, 5))


def test_uniform_in_unit_interval_with_flat_histogram():
    rows = torch.arange(20_000)
    u = counter_uniform(make_key(0), rows, torch.zeros_like(rows), 4).flatten().numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    counts, _ = np.histogram(u, bins=10, range=(0.0, 1.0))
    expected = u.size / 10
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 27.9  # 99.9% quantile of chi-square with 9 degrees of freedom
    # neighbouring elements are not correlated
    pairs = u.reshape(-1, 4)
    assert abs(np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1]) < 0.03


@pytest.mark.parametrize("seed", [0, 2**40 + 7], ids=["seed=0", "seed=2**40+7"])
def test_compiled_draws_equal_eager_draws(seed):
    key = make_key(seed)
    rows = torch.arange(37)
    counts = torch.arange(37) * 3

    def draw(rows, counts):
        return counter_uniform(key, rows, counts, 4)

    compiled = torch.compile(draw, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(rows, counts), draw(rows, counts))
