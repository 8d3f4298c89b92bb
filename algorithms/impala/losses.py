"""IMPALA losses, summed over time and batch as in scalable_agent and TorchBeast.

The learner combines them as
``pg_loss + baseline_cost * baseline_loss + entropy_cost * entropy_loss`` with
``advantages = vs - values`` for the baseline and V-trace ``pg_advantages`` for the policy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "compute_baseline_loss",
    "compute_entropy_loss",
    "compute_policy_gradient_loss",
]


def compute_baseline_loss(advantages: torch.Tensor) -> torch.Tensor:
    """Value loss ``0.5 * sum(advantages ** 2)``.

    Pass ``advantages = vs - values`` with ``vs`` the (gradient-free) V-trace targets; the
    gradient with respect to ``values`` is then ``-(vs - values)``.

    Example:
        >>> import torch
        >>> compute_baseline_loss(torch.tensor([[1.0, -2.0]]))
        tensor(2.5000)
    """
    return 0.5 * torch.sum(advantages**2)


def compute_entropy_loss(logits: torch.Tensor) -> torch.Tensor:
    """Negative entropy of categorical policies, summed: ``sum(p * log p)``.

    Minimising it maximises the entropy. ``logits`` is ``[..., A]``.

    Example:
        >>> import torch
        >>> compute_entropy_loss(torch.zeros(3, 2, 4))  # 6 uniform policies: -6 log 4
        tensor(-8.3178)
    """
    policy = F.softmax(logits, dim=-1)
    log_policy = F.log_softmax(logits, dim=-1)
    return torch.sum(policy * log_policy)


def compute_policy_gradient_loss(
    logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """Policy-gradient loss ``sum(cross_entropy(logits, actions) * advantages)``.

    ``cross_entropy`` is ``-log softmax(logits)[action]``; the advantages are treated as
    constants (detached). The gradient with respect to ``logits`` is
    ``(softmax(logits) - one_hot(actions)) * advantages``.

    Args:
        logits: ``[..., A]`` policy logits, e.g. ``[T, B, A]``.
        actions: ``[...]`` integer actions, e.g. ``[T, B]``.
        advantages: ``[...]`` advantages, e.g. V-trace ``pg_advantages``.

    Raises:
        ValueError: when the leading shapes of the three inputs differ.

    Example:
        >>> import torch
        >>> logits = torch.zeros(1, 1, 2)
        >>> compute_policy_gradient_loss(logits, torch.tensor([[0]]), torch.tensor([[2.0]]))
        tensor(1.3863)
    """
    if logits.dim() < 1 or logits.shape[:-1] != actions.shape:
        raise ValueError(
            f"compute_policy_gradient_loss: logits must be actions' shape plus an action "
            f"dimension, got logits {tuple(logits.shape)} and actions {tuple(actions.shape)}"
        )
    if advantages.shape != actions.shape:
        raise ValueError(
            f"compute_policy_gradient_loss: advantages must have the shape of actions "
            f"{tuple(actions.shape)}, got {tuple(advantages.shape)}"
        )
    num_actions = logits.shape[-1]
    cross_entropy = F.cross_entropy(
        logits.reshape(-1, num_actions), actions.reshape(-1).long(), reduction="none"
    ).reshape(actions.shape)
    return torch.sum(cross_entropy * advantages.detach())
