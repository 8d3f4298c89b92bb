"""CartPole-v1 as a batched torch or Triton environment (Gymnasium's dynamics, reward, limits).

State layout (shared by the torch step and the Triton kernel)::

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

``CartPole(8, device="cuda", backend="triton")`` runs the same step as one fused kernel,
:func:`_classic.step_kernel` calling this module's :func:`_act_tl`.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ._classic import ClassicControlEnv
from ._classic import step_kernel as _step_kernel
from ._triton import tl, triton

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


# -- the triton step: the same step on a row block (``_classic.step_kernel`` calls it) -------

# The constants again as constexpr globals, the only globals a Triton kernel may read.
_GRAVITY = tl.constexpr(GRAVITY)
_MASSPOLE = tl.constexpr(MASSPOLE)
_TOTAL_MASS = tl.constexpr(TOTAL_MASS)
_LENGTH = tl.constexpr(LENGTH)
_POLEMASS_LENGTH = tl.constexpr(POLEMASS_LENGTH)
_FORCE_MAG = tl.constexpr(FORCE_MAG)
_TAU = tl.constexpr(TAU)
_THETA_THRESHOLD = tl.constexpr(THETA_THRESHOLD)
_X_THRESHOLD = tl.constexpr(X_THRESHOLD)
_INIT_LOW = tl.constexpr(-0.05)  # every column starts in U(-0.05, 0.05)
_INIT_SPAN = tl.constexpr(0.1)


@triton.jit
def _out_of_bounds_tl(x, theta):
    return (
        (x < -_X_THRESHOLD)
        | (x > _X_THRESHOLD)
        | (theta < -_THETA_THRESHOLD)
        | (theta > _THETA_THRESHOLD)
    )


@triton.jit
def _act_tl(state, action):
    """:func:`cartpole_dynamics` term for term, on a row block's columns (the triton step)."""
    x, x_dot, theta, theta_dot = state
    already_terminated = _out_of_bounds_tl(x, theta)
    force = tl.where(action == 1, _FORCE_MAG, -_FORCE_MAG).to(x.dtype)
    costheta = tl.cos(theta)
    sintheta = tl.sin(theta)
    temp = (force + _POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / _TOTAL_MASS
    thetaacc = (_GRAVITY * sintheta - costheta * temp) / (
        _LENGTH * (4.0 / 3.0 - _MASSPOLE * (costheta * costheta) / _TOTAL_MASS)
    )
    xacc = temp - _POLEMASS_LENGTH * thetaacc * costheta / _TOTAL_MASS
    x = x + _TAU * x_dot
    x_dot = x_dot + _TAU * xacc
    theta = theta + _TAU * theta_dot
    theta_dot = theta_dot + _TAU * thetaacc
    terminated = _out_of_bounds_tl(x, theta)
    reward = tl.where(already_terminated, 0.0, 1.0)
    return (x, x_dot, theta, theta_dot), reward, terminated


@triton.jit
def _initial_tl(u0, u1, u2, u3):
    """A fresh start: every column in U(-0.05, 0.05)."""
    return (
        u0 * _INIT_SPAN + _INIT_LOW,
        u1 * _INIT_SPAN + _INIT_LOW,
        u2 * _INIT_SPAN + _INIT_LOW,
        u3 * _INIT_SPAN + _INIT_LOW,
    )


@triton.jit
def _observe_tl(state):
    """The state as float32."""
    x, x_dot, theta, theta_dot = state
    return x.to(tl.float32), x_dot.to(tl.float32), theta.to(tl.float32), theta_dot.to(tl.float32)


class CartPole(ClassicControlEnv):
    """A batch of CartPole-v1 envs following the InGraphEnv protocol (arguments:
    :class:`ClassicControlEnv`)."""

    gym_id = "CartPole-v1"
    state_dim = 4
    max_episode_steps = 500
    init_low = (-0.05,) * 4
    init_high = (0.05,) * 4
    triton_functions = (_act_tl, _initial_tl, _observe_tl)

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(2)

    def _act(self, state, action, elapsed):
        return cartpole_dynamics(state, action)

    def _observe(self, state, elapsed):
        return state.to(torch.float32, copy=True)

    @staticmethod
    def _triton_kernel():
        return _step_kernel
