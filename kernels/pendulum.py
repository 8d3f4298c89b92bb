"""Pendulum-v1 as a batched torch environment (Gymnasium's dynamics, reward and limits).

State layout (shared with the Triton kernel to come)::

    state    [num_envs, 2]  float32 (float64 on request): theta, theta_dot
    elapsed  [num_envs]     int32: steps since the row's last reset (truncated at 200)

``theta`` is stored unnormalised, as in Gymnasium; only the cost uses
``angle_normalize(theta) = (theta + pi) mod 2 pi - pi``.
Observation: ``(cos theta, sin theta, theta_dot)`` as float32. Action: float32
``[num_envs, 1]``, the torque, clipped to ``[-2, 2]``. Reward:
``-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2)`` on the state before the step.
``theta_dot`` is clipped to ``[-8, 8]`` before it moves ``theta``. Never terminates.

Example::

    >>> import torch
    >>> from batchenv.kernels import Pendulum
    >>> env = Pendulum(num_envs=8, seed=0)
    >>> observ = env.reset(torch.arange(8))
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(8, 1))
    >>> observ.shape, bool(terminated.any())
    (torch.Size([8, 3]), False)
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ._classic import ClassicControlEnv

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
G = 10.0
M = 1.0
L = 1.0


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Map angles to ``[-pi, pi)`` like Gymnasium's ``angle_normalize`` (Python's ``%``)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


def pendulum_dynamics(
    state: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of a batch: ``(state [N, 2], action [N, 1]) -> (state, reward, terminated)``."""
    th, thdot = state.unbind(1)
    # u stays in the action's dtype (float32) and is promoted where it meets the state, the
    # same mixed precision as Gymnasium's NumPy code; a float64 state then matches it exactly.
    u = action[:, 0].clamp(-MAX_TORQUE, MAX_TORQUE)
    costs = angle_normalize(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
    newthdot = thdot + (3 * G / (2 * L) * torch.sin(th) + 3.0 / (M * L**2) * u) * DT
    newthdot = newthdot.clamp(-MAX_SPEED, MAX_SPEED)
    newth = th + newthdot * DT
    terminated = torch.zeros_like(th, dtype=torch.bool)
    return torch.stack((newth, newthdot), dim=1), -costs, terminated


class Pendulum(ClassicControlEnv):
    """A batch of Pendulum-v1 envs (g = 10) following the InGraphEnv protocol.

    Args:
        num_envs: number of rows (>= 1).
        device: where the state lives.
        seed: seeds the env's ``torch.Generator`` (initial states); None draws a fresh seed.
        backend: ``"torch"``; ``"triton"`` arrives with the GPU-native kernels.
        dtype: ``torch.float32`` (default) or ``torch.float64`` for the internal state.
    """

    gym_id = "Pendulum-v1"
    state_dim = 2
    max_episode_steps = 200
    init_low = (-math.pi, -1.0)
    init_high = (math.pi, 1.0)

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
        high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
        observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        action_space = gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, shape=(1,), dtype=np.float32)
        return observation_space, action_space

    def _dynamics(self, state, action):
        return pendulum_dynamics(state, action)

    def _observe(self, state):
        th, thdot = state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=1).to(torch.float32)
