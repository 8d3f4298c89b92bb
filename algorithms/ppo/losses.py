"""GAE and PPO's clipped loss, per agent (docs/ppo.md has the formulas).

GAE is written without a loop over time: within one episode the advantage is a discounted
sum of TD errors, ``A[t] = sum_{s >= t} (gamma lambda)^(s - t) delta[s]`` over the steps
``s`` of the same episode as ``t``. Steps share an episode when no ``done`` lies in
``[t, s)``, i.e. when their counts of earlier dones are equal. So ``A = M @ delta`` with
``M[t, s] = (s >= t) (gamma lambda)^(s - t) [count[s] == count[t]]``: a fixed-shape program
that torch.compile fuses, where the usual reverse loop would be T sequential steps.

    >>> delta = torch.ones(1, 3)                       # [rows, T]
    >>> done = torch.tensor([[False, False, False]])
    >>> discounted_sums(delta, done, 0.5)
    tensor([[1.7500, 1.5000, 1.0000]])
"""

from __future__ import annotations

import torch


def discounted_sums(x: torch.Tensor, done: torch.Tensor, factor: float) -> torch.Tensor:
    """``y[t] = x[t] + factor * (1 - done[t]) * y[t + 1]`` for ``x``, ``done`` of shape ``[R, T]``
    (``y[T] = 0``), computed as one masked matrix product."""
    steps = x.shape[-1]
    t = torch.arange(steps, device=x.device)
    gap = (t[None, :] - t[:, None]).to(x.dtype)  # [T(t), T(s)]: s - t
    upper = gap >= 0
    powers = torch.where(
        upper, torch.pow(torch.as_tensor(factor, dtype=x.dtype), gap.clamp_min(0)), 0.0
    )
    # Dones strictly before each step: equal counts mean the same episode.
    before = torch.cumsum(done.to(torch.int64), dim=-1) - done.to(torch.int64)  # [R, T]
    same = before[:, :, None] == before[:, None, :]  # [R, t, s]
    weights = torch.where(same, powers, 0.0)
    return torch.einsum("rts,rs->rt", weights, x)


def gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns ``[R, T]``.

    ``value[r, t]`` is V(observ at t) and ``next_value[r, t]`` V of the observation step t
    produced (a finished episode's final observation); ``terminated`` drops that bootstrap,
    ``done`` (terminated or truncated) ends the sum. A time-limit end thus bootstraps from
    its final observation, and a rollout's last step from the observation it produced.
    """
    alive = (~terminated).to(reward.dtype)
    delta = reward + gamma * next_value * alive - value
    advantage = discounted_sums(delta, done, gamma * lam)
    return advantage, advantage + value


def ppo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    value: torch.Tensor,
    old_value: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_eps: float,
    vf_coef: float,
    ent_coef: float,
    clip_value: bool = True,
    norm_adv: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PureJaxRL's loss for a minibatch ``[K, M]``; returns ``(sum over agents, terms [K])``.

    Each agent's loss is a mean over its own minibatch; summing over agents keeps their
    gradients independent.
    """
    if norm_adv:
        mean = advantage.mean(-1, keepdim=True)
        std = advantage.std(-1, keepdim=True)
        advantage = (advantage - mean) / (std + 1e-8)
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantage
    actor = -torch.minimum(unclipped, clipped).mean(-1)
    if clip_value:
        value_clipped = old_value + (value - old_value).clamp(-clip_eps, clip_eps)
        value_loss = 0.5 * torch.maximum(
            (value - returns).square(), (value_clipped - returns).square()
        ).mean(-1)
    else:
        value_loss = 0.5 * (value - returns).square().mean(-1)
    entropy_mean = entropy.mean(-1)
    total = actor + vf_coef * value_loss - ent_coef * entropy_mean
    approx_kl = ((ratio - 1.0) - (log_prob - old_log_prob)).mean(-1)
    terms = {
        "loss": total,
        "actor_loss": actor,
        "value_loss": value_loss,
        "entropy": entropy_mean,
        "approx_kl": approx_kl,
    }
    return total.sum(), terms
