"""DQN's targets and TD loss as pure functions (Mnih et al. 2015; van Hasselt et al. 2016).

The replay memory folds the n-step return and the bootstrap factor into each sampled
transition: ``reward`` is ``sum_{j<k} gamma**j r_{t+j}`` and ``discount`` is
``gamma**k * (1 - terminated)`` (docs/dqn.md), so both variants are one line:

- DQN: ``y = reward + discount * max_a Q_target(s', a)``;
- Double DQN: ``y = reward + discount * Q_target(s', argmax_a Q_online(s', a))``.

    >>> next_target = torch.tensor([[1.0, 3.0]])
    >>> next_online = torch.tensor([[2.0, 0.0]])
    >>> reward, discount = torch.tensor([1.0]), torch.tensor([0.5])
    >>> td_target(reward, discount, next_target)             # 1 + 0.5 * 3
    tensor([2.5000])
    >>> td_target(reward, discount, next_target, next_online)  # 1 + 0.5 * 1
    tensor([1.5000])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["td_loss", "td_target"]


def td_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_target: torch.Tensor,
    next_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """The bootstrapped target ``[B]`` from the next state's ``[B, A]`` action values.

    Args:
        reward: ``[B]`` (n-step) discounted reward sums.
        discount: ``[B]`` bootstrap factors (0 after a termination).
        next_target: ``Q_target(s')``.
        next_online: ``Q_online(s')`` for Double DQN (it picks the action); None: plain DQN.
    """
    if next_online is None:
        next_value = next_target.max(dim=1).values
    else:
        choice = next_online.argmax(dim=1, keepdim=True)
        next_value = next_target.gather(1, choice).squeeze(1)
    return reward + discount * next_value


def td_loss(
    q: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, kind: str = "mse"
) -> torch.Tensor:
    """The importance-weighted mean of the elementwise TD loss (``weights`` all 1 unless
    prioritized): ``kind`` ``"mse"`` is ``(target - q)**2``, ``"huber"`` smooth L1 with
    delta 1 (quadratic within 1, linear beyond).

        >>> td_loss(torch.tensor([0.0, 0.0]), torch.tensor([0.5, 3.0]), torch.ones(2), "huber")
        tensor(1.3125)
    """
    if kind == "mse":
        elementwise = F.mse_loss(q, target, reduction="none")
    elif kind == "huber":
        elementwise = F.smooth_l1_loss(q, target, reduction="none", beta=1.0)
    else:
        raise ValueError(f"td_loss kind must be 'mse' or 'huber', got {kind!r}")
    return (weights * elementwise).mean()
