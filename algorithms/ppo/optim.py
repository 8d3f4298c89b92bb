"""Adam with global-norm clipping, per agent, over flat ``[K, P]`` parameters (optax's
``chain(clip_by_global_norm(c), adam(lr, eps=eps))``).

    >>> params, grad = torch.zeros(2, 3), torch.ones(2, 3)
    >>> state = adam_init(params)
    >>> params, state = adam_step(params, grad, state, lr=torch.tensor(0.1), max_norm=0.5)
    >>> params[0]
    tensor([-0.1000, -0.1000, -0.1000])
"""

from __future__ import annotations

import torch

BETA1, BETA2 = 0.9, 0.999


def adam_init(params: torch.Tensor) -> dict[str, torch.Tensor]:
    """Zero moments and a step count of 0 (one per run: every agent steps together)."""
    zeros = torch.zeros_like(params)
    count = torch.zeros((), dtype=torch.float32, device=params.device)
    return with_powers({"m": zeros, "v": zeros.clone(), "count": count})


def with_powers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with the running powers ``BETA1 ** count`` and ``BETA2 ** count`` that
    :func:`adam_step` keeps (added to a state saved before it kept them)."""
    if "beta1_power" in state:
        return state
    count = state["count"]
    return {**state, "beta1_power": BETA1**count, "beta2_power": BETA2**count}


def clip_by_global_norm(grad: torch.Tensor, max_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale each agent's gradient (row) to norm <= ``max_norm``; also return the norms [K]."""
    norm = grad.square().sum(-1).sqrt()
    scale = torch.where(norm < max_norm, 1.0, max_norm / norm)
    return grad * scale[:, None], norm


def adam_step(
    params: torch.Tensor,
    grad: torch.Tensor,
    state: dict[str, torch.Tensor],
    lr: torch.Tensor,
    max_norm: float,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One clipped Adam step; returns new parameters and state (nothing in place)."""
    grad, _ = clip_by_global_norm(grad, max_norm)
    count = state["count"] + 1
    # The powers are kept in the state and multiplied once a step (as TF's Adam keeps
    # beta1_power): Inductor inlines a 0-d result into the loop over the parameters, and
    # ``BETA ** count`` there was two scalar powf calls per 8 parameters, 11-18% of a PPO
    # minibatch step on CartPole (1 thread).
    beta1_power = state["beta1_power"] * BETA1
    beta2_power = state["beta2_power"] * BETA2
    m = BETA1 * state["m"] + (1 - BETA1) * grad
    v = BETA2 * state["v"] + (1 - BETA2) * grad.square()
    m_hat = m / (1 - beta1_power)
    v_hat = v / (1 - beta2_power)
    params = params - lr * m_hat / (torch.sqrt(v_hat) + eps)
    return params, {
        "m": m,
        "v": v,
        "count": count,
        "beta1_power": beta1_power,
        "beta2_power": beta2_power,
    }
