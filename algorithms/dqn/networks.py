"""The Q-network: an MLP from a flattened observation to one value per discrete action.

CleanRL's ``dqn.py`` uses 120-84 ReLU layers for CartPole (docs/dqn.md); PyTorch's default
``nn.Linear`` initialisation, as there.

    >>> q = QNetwork(4, 2, (120, 84))
    >>> q(torch.zeros(5, 4)).shape
    torch.Size([5, 2])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["QNetwork"]


class QNetwork(nn.Module):
    """``Q(s, .)``: ``[B, *observ_shape]`` observations -> ``[B, num_actions]`` values."""

    def __init__(self, observ_size: int, num_actions: int, hidden_layers: Sequence[int]):
        super().__init__()
        layers: list[nn.Module] = []
        size = observ_size
        for hidden in hidden_layers:
            layers += [nn.Linear(size, hidden), nn.ReLU()]
            size = hidden
        layers.append(nn.Linear(size, num_actions))
        self.network = nn.Sequential(*layers)

    def forward(self, observ: torch.Tensor) -> torch.Tensor:
        return self.network(observ.flatten(1).float())
