"""Sampling, log-probabilities and entropies of the policy heads, with counter-based noise.

Noise is a pure function of (agent key, draw counter, element), so a K-agent program draws
for agent k exactly what a lone run with that seed draws, eagerly or compiled
(batchenv.in_graph.counter_rng).

    >>> keys = agent_keys([0, 1])
    >>> u = uniform(keys, torch.tensor(0), (2, 3, 4), stream=0)
    >>> u.shape
    torch.Size([2, 3, 4])
"""

from __future__ import annotations

import math

import torch

from batchenv.in_graph.counter_rng import MASK, make_key, mix32

_LOG_2PI = math.log(2 * math.pi)


def agent_keys(seeds: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """int64 ``[K]``: the key of each agent's noise."""
    return torch.stack([make_key(int(seed), device) for seed in seeds])


def uniform(keys: torch.Tensor, counter: torch.Tensor, shape: tuple, stream: int) -> torch.Tensor:
    """float32 in [0, 1) of ``shape = (K, ...)``: element i of agent k is
    hash(keys[k], counter, stream, i)."""
    per_agent = math.prod(shape[1:])
    index = torch.arange(per_agent, dtype=torch.int64, device=keys.device) * 4 + stream
    h = mix32(keys ^ mix32((counter * 0x9E3779B1 + 7) & MASK))  # [K]
    bits = mix32(h[:, None] ^ mix32(index & MASK))
    return ((bits >> 8).to(torch.float32) * (1.0 / (1 << 24))).reshape(shape)


def sample_categorical(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Gumbel-max sample of ``logits [K, M, A]`` with uniforms ``u`` of the same shape."""
    gumbel = -torch.log(-torch.log(u.clamp(1e-7, 1.0 - 1e-7)))
    return torch.argmax(logits + gumbel, dim=-1)


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(logits, dim=-1)
    return log_p.gather(-1, action[..., None])[..., 0]


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def sample_normal(mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor, v: torch.Tensor):
    """Box-Muller Gaussian sample around ``mean`` with uniforms ``u``, ``v``."""
    z = torch.sqrt(-2.0 * torch.log1p(-u)) * torch.cos(2.0 * math.pi * v)
    return mean + log_std.exp() * z


def normal_log_prob(mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor):
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum(-1)


def normal_entropy(log_std: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1).expand(like.shape[:-1])
