"""Counter-based random numbers in plain tensor ops: no generator state, compile-friendly.

A draw is a pure function of a key (the seed) and integer counters (a row, how many fresh
starts that row has had, an element index), computed with a 32-bit multiply-xorshift hash.
Nothing is stateful, so ``torch.compile`` traces it without a graph break (a
``torch.Generator`` argument breaks the graph), and eager, compiled (C++ or Triton) and
CUDA code all give identical bits: values stay below 2**32 and constants below 2**27, so
int64 products never overflow.

    >>> key = make_key(7)
    >>> u = counter_uniform(key, torch.arange(3), torch.zeros(3, dtype=torch.int64), 4)
    >>> u.shape, bool((u >= 0).all() and (u < 1).all())
    (torch.Size([3, 4]), True)

Used by :class:`~batchenv.in_graph.algorithm.RandomAlgorithm` and by the torch backends of
the envs in ``batchenv.kernels`` for their random starts.
"""

from __future__ import annotations

import math

import torch

__all__ = ["MASK", "counter_uniform", "make_key", "mix32", "uniform"]

MASK = 0xFFFFFFFF
_GOLDEN = 0x9E3779B  # an odd constant below 2**27 that separates the counter words


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (two multiply-xorshift rounds) of int64 ``x`` in [0, 2**32)."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & MASK
    x = (((x >> 16) ^ x) * 0x45D9F3B) & MASK
    return (x >> 16) ^ x


def make_key(seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The int64 scalar key of a seed (any Python int; only its low 32 bits count twice)."""
    folded = (seed ^ (seed >> 32)) & MASK
    return mix32(torch.tensor(folded, dtype=torch.int64, device=device))


def _to_float(bits: torch.Tensor) -> torch.Tensor:
    return (bits >> 8).to(torch.float32) * (1.0 / (1 << 24))


def uniform(
    shape: tuple[int, ...], key: torch.Tensor, stream: int, device: torch.device
) -> torch.Tensor:
    """float32 numbers in [0, 1) for element ``i`` of ``shape``: hash(key, stream, i)."""
    count = math.prod(shape)
    index = torch.arange(count, dtype=torch.int64, device=device) * 2 + stream
    return _to_float(mix32(key ^ mix32(index & MASK))).reshape(shape)


def counter_uniform(
    key: torch.Tensor, rows: torch.Tensor, counts: torch.Tensor, width: int
) -> torch.Tensor:
    """float32 ``[K, width]`` in [0, 1): element j of row k is hash(key, rows[k], counts[k], j).

    ``rows`` and ``counts`` are int64 ``[K]``; give a row a new count for every new draw
    (e.g. the number of fresh starts it has had) and no two draws of a run repeat.
    """
    h = mix32(key ^ mix32(rows & MASK))
    h = mix32(h ^ mix32((counts * _GOLDEN + 1) & MASK))
    j = torch.arange(width, dtype=torch.int64, device=rows.device)
    return _to_float(mix32(h[:, None] ^ mix32(j * 2 + 1)))
