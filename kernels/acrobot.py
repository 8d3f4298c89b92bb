"""Acrobot-v1 as a batched torch environment (Gymnasium's dynamics, reward and limits).

State layout (shared with the Triton kernel to come)::

    state    [num_envs, 4]  float32 (float64 on request): theta1, theta2, dtheta1, dtheta2
    elapsed  [num_envs]     int32: steps since the row's last reset (truncated at 500)

Observation: ``(cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2)`` as
float32. Action: int64 ``[num_envs]`` in ``{0, 1, 2}``, torque ``action - 1`` (no torque
noise, Gymnasium's default). Dynamics: one classic RK4 step of ``dt = 0.2`` on the "book"
equations of motion (Gymnasium's ``book_or_nips = "book"``), then the angles are wrapped to
``[-pi, pi]`` and the velocities bounded to ``[-4 pi, 4 pi]`` and ``[-9 pi, 9 pi]``.
Terminates when ``-cos(theta1) - cos(theta1 + theta2) > 1``. Reward: -1, 0 at termination.

Example::

    >>> import torch
    >>> from batchenv.kernels import Acrobot
    >>> env = Acrobot(num_envs=8, seed=0)
    >>> observ = env.reset(torch.arange(8))
    >>> observ, reward, terminated, truncated = env.step(torch.full((8,), 2))
    >>> observ.shape, reward[0].item()
    (torch.Size([8, 6]), -1.0)
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ._classic import ClassicControlEnv

DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi
GRAVITY = 9.8


def _dsdt(
    theta1: torch.Tensor,
    theta2: torch.Tensor,
    dtheta1: torch.Tensor,
    dtheta2: torch.Tensor,
    a: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Time derivative of the state under torque ``a`` ("book" equations, Gymnasium's order)."""
    m1, m2, l1 = LINK_MASS_1, LINK_MASS_2, LINK_LENGTH_1
    lc1, lc2, i1, i2, g = LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, LINK_MOI, GRAVITY
    pi = math.pi
    cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + i2
    phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * sin2
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
        + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - pi / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2) / (
        m2 * lc2**2 + i2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def _wrap(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Gymnasium's ``wrap``: add or subtract ``high - low`` until ``x`` is in ``[low, high]``."""
    diff = high - low
    above = torch.ceil((x - high) / diff).clamp(min=0)  # times to subtract (0 when in range)
    below = torch.ceil((low - x) / diff).clamp(min=0)  # times to add
    return x - above * diff + below * diff


def acrobot_dynamics(
    state: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One RK4 step of a batch: ``(state [N, 4], action [N]) -> (state, reward, terminated)``."""
    y0 = state.unbind(1)
    torque = action.to(state.dtype) - 1.0  # AVAIL_TORQUE = [-1, 0, +1]
    dt2 = DT / 2.0
    k1 = _dsdt(*y0, torque)
    k2 = _dsdt(*(y + dt2 * k for y, k in zip(y0, k1)), torque)
    k3 = _dsdt(*(y + dt2 * k for y, k in zip(y0, k2)), torque)
    k4 = _dsdt(*(y + DT * k for y, k in zip(y0, k3)), torque)
    ns = [y + DT / 6.0 * (a + 2 * b + 2 * c + d) for y, a, b, c, d in zip(y0, k1, k2, k3, k4)]
    theta1 = _wrap(ns[0], -math.pi, math.pi)
    theta2 = _wrap(ns[1], -math.pi, math.pi)
    dtheta1 = ns[2].clamp(-MAX_VEL_1, MAX_VEL_1)
    dtheta2 = ns[3].clamp(-MAX_VEL_2, MAX_VEL_2)
    terminated = -torch.cos(theta1) - torch.cos(theta2 + theta1) > 1.0
    reward = terminated.to(state.dtype) - 1.0
    return torch.stack((theta1, theta2, dtheta1, dtheta2), dim=1), reward, terminated


class Acrobot(ClassicControlEnv):
    """A batch of Acrobot-v1 envs following the InGraphEnv protocol.

    Args:
        num_envs: number of rows (>= 1).
        device: where the state lives.
        seed: seeds the env's ``torch.Generator`` (initial states); None draws a fresh seed.
        backend: ``"torch"``; ``"triton"`` arrives with the GPU-native kernels.
        dtype: ``torch.float32`` (default) or ``torch.float64`` for the internal state.
    """

    gym_id = "Acrobot-v1"
    state_dim = 4
    max_episode_steps = 500
    init_low = (-0.1,) * 4
    init_high = (0.1,) * 4

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(3)

    def _dynamics(self, state, action):
        return acrobot_dynamics(state, action)

    def _observe(self, state):
        theta1, theta2, dtheta1, dtheta2 = state.unbind(1)
        return torch.stack(
            (
                torch.cos(theta1),
                torch.sin(theta1),
                torch.cos(theta2),
                torch.sin(theta2),
                dtheta1,
                dtheta2,
            ),
            dim=1,
        ).to(torch.float32)
