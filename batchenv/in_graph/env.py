"""The InGraphEnv protocol: a batch of environments as a torch tensor program.

Everything is a torch tensor with a leading batch axis ``[num_envs, ...]`` on ``device``.
Observations and rewards are float32. Multi-agent envs put an agent axis right after the
batch axis in observ, action and reward (``[num_envs, num_agents, ...]``); the done flags
(terminated, truncated) stay per env, ``[num_envs]`` bool.

There is no autoreset: ``simulate()`` resets finished rows at the start of its next call, so
the terminal observation is always what ``experience()`` sees.

    >>> from batchenv.kernels import CartPole
    >>> env = CartPole(num_envs=4, seed=0)
    >>> observ = env.reset(torch.arange(4))
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(4, dtype=torch.int64))
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import gymnasium as gym
import torch


@runtime_checkable
class InGraphEnv(Protocol):
    """What ``simulate()`` drives."""

    num_envs: int
    single_observation_space: gym.Space
    single_action_space: gym.Space
    device: torch.device

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        """Start new episodes in rows ``indices`` (int64 [K]); return ``observ[indices]``."""
        ...

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every row; return ``(observ, reward, terminated, truncated)``."""
        ...
