"""SumTree: a binary tree of non-negative leaf values whose nodes hold the sums below them.

Proportional prioritized replay (Schaul et al., 2016, "Prioritized Experience Replay",
arXiv:1511.05952) samples leaf ``i`` with probability ``value[i] / total``. The tree finds
the leaf where a prefix sum falls in ``O(log n)``; updates refresh one path per leaf. Both
are batched torch ops on the tree's device (float64, so sums of many small priorities stay
exact enough), with one python loop over the ``log2(n)`` levels.

    >>> tree = SumTree(4)
    >>> tree.set(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 0.0, 2.0, 1.0]))
    >>> tree.total()
    4.0
    >>> tree.find(torch.tensor([0.0, 0.999, 1.0, 2.5, 3.0])).tolist()
    [0, 0, 2, 2, 3]
"""

from __future__ import annotations

import torch

__all__ = ["SumTree"]


class SumTree:
    """Sums over ``capacity`` leaves, stored as a heap array of ``2 * size`` float64 nodes.

    Node 1 is the root; node ``k`` has children ``2k`` and ``2k + 1``; leaf ``i`` is node
    ``size + i`` where ``size`` is ``capacity`` rounded up to a power of two (the extra
    leaves stay zero and are never found).

    Args:
        capacity: number of leaves (>= 1).
        device: where the nodes live.
    """

    def __init__(self, capacity: int, device: torch.device | str = "cpu"):
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.size = 1 << max(0, (self.capacity - 1).bit_length())
        self.depth = self.size.bit_length() - 1
        self.nodes = torch.zeros(2 * self.size, dtype=torch.float64, device=device)

    def total(self) -> float:
        """The sum of all leaves (the root)."""
        return float(self.nodes[1])

    def leaves(self) -> torch.Tensor:
        """The ``[capacity]`` leaf values (a view)."""
        return self.nodes[self.size : self.size + self.capacity]

    def set(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves ``indices`` to ``values`` (>= 0) and refresh their ancestors.

        Repeated indices keep one of their values (the last write, as ``index_put_`` does).
        """
        nodes = indices.to(device=self.nodes.device, dtype=torch.int64) + self.size
        self.nodes[nodes] = values.to(self.nodes)
        for _ in range(self.depth):
            nodes = torch.unique(nodes // 2)
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find(self, prefix: torch.Tensor) -> torch.Tensor:
        """The leaf ``i`` per prefix sum ``u`` with ``sum(v[:i]) <= u < sum(v[:i+1])``.

        That is ``searchsorted(cumsum(v), u, right=True)``. Only leaves with a positive value
        are returned: a ``u`` at or above the total (rounding) gives the last positive leaf.
        The tree must hold a positive total.
        """
        u = prefix.to(device=self.nodes.device, dtype=torch.float64).clone()
        node = torch.ones(u.shape, dtype=torch.int64, device=self.nodes.device)
        for _ in range(self.depth):
            left = self.nodes[2 * node]
            right = self.nodes[2 * node + 1]
            go_right = (u >= left) & (right > 0)
            u = torch.where(go_right, u - left, u)
            node = 2 * node + go_right.to(torch.int64)
        return node - self.size
