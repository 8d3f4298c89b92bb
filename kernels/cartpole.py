"""CartPole-v1 as a batched torch environment (Gymnasium's dynamics, reward and limits).

State layout (shared with the Triton kernel to come)::

    state    [num_envs, 4]  float32 (float64 on request): x, x_dot, theta, theta_dot
    elapsed  [num_envs]     int32: steps since the row's last reset (truncated at 500)

Observation: the state as float32. Action: int64 ``[num_envs]``, 0 pushes left, 1 right.
Reward: 1 per step, including the terminating step; a row stepped again after termination
(no reset) earns 0, like Gymnasium's ``steps_beyond_terminated``. Whether the row had
terminated is read off the state itself (it is still outside the bounds), so no extra column
is needed. Termination: ``|x| > 2.4`` or ``|theta| > 12 degrees``. Integration: explicit
Euler with ``tau = 0.02`` (Gymnasium's default ``kinematics_integrator="euler"``).

Example::

    >>> import torch
    >>> from batchenv.kernels import CartPole
    >>> env = CartPole(num_envs=8, seed=0)
    >>> observ = env.reset(torch.arange(8))
    >>> observ, reward, terminated, truncated = env.step(torch.ones(8, dtype=torch.int64))
    >>> observ.shape, reward.dtype, terminated.dtype
    (torch.Size([8, 4]), torch.float32, torch.bool)
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ._classic import ClassicControlEnv

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


def cartpole_dynamics(
    state: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Euler step of a batch: ``(state [N, 4], action [N]) -> (state, reward, terminated)``.

    The expressions follow Gymnasium's ``CartPoleEnv.step`` term by term, so a float64 state
    agrees with Gymnasium to rounding.
    """
    x, x_dot, theta, theta_dot = state.unbind(1)
    already_terminated = _out_of_bounds(x, theta)
    force = (action == 1).to(state.dtype) * (2 * FORCE_MAG) - FORCE_MAG  # exactly +-10
    costheta = torch.cos(theta)
    sintheta = torch.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot.square() * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta.square() / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    terminated = _out_of_bounds(x, theta)
    reward = (~already_terminated).to(state.dtype)
    return torch.stack((x, x_dot, theta, theta_dot), dim=1), reward, terminated


def _out_of_bounds(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    return (
        (x < -X_THRESHOLD)
        | (x > X_THRESHOLD)
        | (theta < -THETA_THRESHOLD)
        | (theta > THETA_THRESHOLD)
    )


class CartPole(ClassicControlEnv):
    """A batch of CartPole-v1 envs following the InGraphEnv protocol.

    Args:
        num_envs: number of rows (>= 1).
        device: where the state lives.
        seed: seeds the env's ``torch.Generator`` (initial states); None draws a fresh seed.
        backend: ``"torch"``; ``"triton"`` arrives with the GPU-native kernels.
        dtype: ``torch.float32`` (default) or ``torch.float64`` for the internal state.
    """

    gym_id = "CartPole-v1"
    state_dim = 4
    max_episode_steps = 500
    init_low = (-0.05,) * 4
    init_high = (0.05,) * 4

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(2)

    def _dynamics(self, state, action):
        return cartpole_dynamics(state, action)

    def _observe(self, state):
        return state.to(torch.float32, copy=True)
