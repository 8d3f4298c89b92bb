"""StackedEnv: several InGraphEnvs side by side as one batch (one block of rows each).

K seeds of an experiment run as one program when their envs are one batch: block k holds
the rows of ``envs[k]``, built with seed k's own seed, so its random stream is exactly that
of a lone run. Steps and masked resets split the batch by block and concatenate the results
(plain tensor code: ``rollout()`` traces through it).

    >>> from batchenv.kernels import CartPole
    >>> env = StackedEnv([CartPole(num_envs=4, seed=s) for s in (0, 1, 2)])
    >>> env.num_envs
    12
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class StackedEnv:
    """The InGraphEnv of ``envs`` (same spaces, devices and agent counts) concatenated."""

    def __init__(self, envs: Sequence[Any]):
        envs = list(envs)
        if not envs:
            raise ValueError("StackedEnv needs at least one env")
        first = envs[0]
        for i, env in enumerate(envs[1:], 1):
            for attribute in ("single_observation_space", "single_action_space", "device"):
                if getattr(env, attribute) != getattr(first, attribute):
                    raise ValueError(
                        f"StackedEnv: env {i} has {attribute} {getattr(env, attribute)}, env 0 "
                        f"has {getattr(first, attribute)}; stack copies of one env"
                    )
            if getattr(env, "num_agents", None) != getattr(first, "num_agents", None):
                raise ValueError(f"StackedEnv: env {i} has another num_agents than env 0")
        self.envs = envs
        self.sizes = [int(env.num_envs) for env in envs]
        self.num_envs = sum(self.sizes)
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.device = torch.device(first.device)
        if getattr(first, "num_agents", None) is not None:
            self.num_agents = first.num_agents

    def __repr__(self) -> str:
        return f"StackedEnv({len(self.envs)} x {self.envs[0]!r})"

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        """Reset rows ``indices`` (int64 [K], any order); their observations in that order."""
        parts, owners = [], []
        start = 0
        for block, size in enumerate(self.sizes):
            inside = (indices >= start) & (indices < start + size)
            local = indices[inside] - start
            if local.numel():
                parts.append(self.envs[block].reset(local))
                owners.append(torch.nonzero(inside).squeeze(-1))
            start += size
        observ = torch.cat(parts)
        order = torch.argsort(torch.cat(owners))
        return observ[order]

    def reset_where(self, mask: torch.Tensor) -> torch.Tensor:
        """Masked reset of every block (traceable); the observation of every row."""
        return torch.cat(
            [env.reset_where(part) for env, part in zip(self.envs, mask.split(self.sizes))]
        )

    def step(self, action: torch.Tensor):
        """Step every block; ``(observ, reward, terminated, truncated)`` concatenated."""
        results = [env.step(part) for env, part in zip(self.envs, action.split(self.sizes))]
        return tuple(torch.cat(parts) for parts in zip(*results))
