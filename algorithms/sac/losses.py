"""SAC's loss terms as plain functions of tensors (docs/sac.md has the formulas' sources).

Continuous actions (Haarnoja et al. 2018; CleanRL's ``sac_continuous_action.py``):

- :func:`soft_q_target`: ``y = r + d * (min(Q1', Q2')(s', a') - alpha * log pi(a'|s'))`` with
  ``a' ~ pi(.|s')`` and ``d`` the memory's discount (``gamma^k``, 0 after a termination, so
  a time-limit truncation still bootstraps);
- :func:`q_loss`: ``MSE(Q1, y) + MSE(Q2, y)``;
- :func:`policy_loss`: ``mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a))``, ``a`` reparameterised;
- :func:`temperature_loss`: ``mean(alpha * (H - H_target))`` with ``H = -log pi`` per sample,
  i.e. CleanRL's ``-mean(alpha * (log pi + H_target))``.

Discrete actions, exact expectation (Christodoulou 2019; SLM Lab v5 ``sac.py``):

- :func:`expected_soft_q_target`: ``y = r + d * sum_a pi(a|s') (Q'(s', a) - alpha log pi(a|s'))``;
- :func:`expected_policy_loss`: ``mean_s sum_a pi(a|s) (alpha log pi(a|s) - Q(s, a))``;
- the temperature loss with ``H = -sum_a pi log pi``;

where ``Q`` combines the twins by :func:`combine_twins` (SLM Lab v5: their mean;
CleanRL's ``sac_atari.py``: their min). The Gumbel-Softmax variant uses the continuous
forms with one-hot actions. :func:`polyak_update` moves the target networks.

    >>> soft_q_target(torch.tensor([1.0]), torch.tensor([0.99]), torch.tensor([2.0]),
    ...               torch.tensor([3.0]), torch.tensor([-0.5]), 0.2)
    tensor([3.0790])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "combine_twins",
    "expected_policy_loss",
    "expected_soft_q_target",
    "policy_loss",
    "polyak_update",
    "q_loss",
    "soft_q_target",
    "temperature_loss",
]


def combine_twins(q1: torch.Tensor, q2: torch.Tensor, rule: str) -> torch.Tensor:
    """The twin Qs as one: their elementwise ``"min"`` or ``"mean"``."""
    if rule == "min":
        return torch.minimum(q1, q2)
    if rule == "mean":
        return (q1 + q2) / 2
    raise ValueError(f"twin rule must be 'min' or 'mean', got {rule!r}")


def soft_q_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """``r + d * (min(Q1', Q2') - alpha * log pi(a'|s'))``, all ``[B]`` (no gradient needed)."""
    return reward + discount * (torch.minimum(next_q1, next_q2) - alpha * next_log_prob)


def expected_soft_q_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_logits: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    alpha: torch.Tensor | float,
    twin: str = "mean",
) -> torch.Tensor:
    """``r + d * sum_a pi(a|s') (Q'(s', a) - alpha log pi(a|s'))`` ``[B]``; logits and Qs
    ``[B, A]``, the twins combined by ``twin``."""
    log_probs = F.log_softmax(next_logits, dim=-1)
    value = (log_probs.exp() * (combine_twins(next_q1, next_q2, twin) - alpha * log_probs)).sum(-1)
    return reward + discount * value


def q_loss(q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``MSE(Q1, y) + MSE(Q2, y)`` (CleanRL: one optimiser for both Q networks)."""
    return F.mse_loss(q1, target) + F.mse_loss(q2, target)


def policy_loss(
    log_prob: torch.Tensor, q1: torch.Tensor, q2: torch.Tensor, alpha: torch.Tensor | float
) -> torch.Tensor:
    """``mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a))`` for reparameterised actions ``a``."""
    return (alpha * log_prob - torch.minimum(q1, q2)).mean()


def expected_policy_loss(
    logits: torch.Tensor,
    q1: torch.Tensor,
    q2: torch.Tensor,
    alpha: torch.Tensor | float,
    twin: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``mean_s sum_a pi(a|s) (alpha log pi(a|s) - Q(s, a))`` and the entropy ``[B]``.

    The Qs (``[B, A]``) get no gradient; the entropy ``-sum_a pi log pi`` (detached) feeds
    :func:`temperature_loss`.
    """
    log_probs = F.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    q = combine_twins(q1, q2, twin).detach()
    loss = (probs * (alpha * log_probs - q)).sum(-1).mean()
    entropy = -(probs * log_probs).sum(-1).detach()
    return loss, entropy


def temperature_loss(
    log_alpha: torch.Tensor, entropy: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """``mean(alpha * (H - H_target))``: alpha falls while the entropy ``H`` is above the
    target and rises below it. ``H`` is ``-log pi(a|s)`` per sample (continuous, Gumbel) or
    the exact entropy per state (expectation)."""
    return (log_alpha.exp() * (entropy.detach() - target_entropy)).mean()


@torch.no_grad()
def polyak_update(online: nn.Module, target: nn.Module, tau: float) -> None:
    """``target <- tau * online + (1 - tau) * target``, parameter by parameter, in place.

    >>> online, target = nn.Linear(1, 1), nn.Linear(1, 1)
    >>> polyak_update(online, target, tau=1.0)   # a copy
    """
    for param, target_param in zip(online.parameters(), target.parameters()):
        target_param.lerp_(param, tau)
