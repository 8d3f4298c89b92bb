"""Acrobot-v1 as a batched torch or Triton environment (Gymnasium's dynamics, reward, limits).

State layout (shared by the torch step and the Triton kernel)::

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

``Acrobot(8, device="cuda", backend="triton")`` runs the same step as one fused kernel,
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


# -- the triton step: the same step on a row block (``_classic.step_kernel`` calls it) -------

# The constants again as constexpr globals, the only globals a Triton kernel may read.
_DT = tl.constexpr(DT)
# Folded here, not in a kernel local: a local assigned a Python float becomes a float32
# scalar, which would round the float64 steps.
_DT2 = tl.constexpr(DT / 2.0)
_DT6 = tl.constexpr(DT / 6.0)
_L1 = tl.constexpr(LINK_LENGTH_1)
_M1 = tl.constexpr(LINK_MASS_1)
_M2 = tl.constexpr(LINK_MASS_2)
_LC1 = tl.constexpr(LINK_COM_POS_1)
_LC2 = tl.constexpr(LINK_COM_POS_2)
_I1 = tl.constexpr(LINK_MOI)
_I2 = tl.constexpr(LINK_MOI)
_G = tl.constexpr(GRAVITY)
_PI = tl.constexpr(math.pi)
_TWO_PI = tl.constexpr(2 * math.pi)
_MAX_VEL_1 = tl.constexpr(MAX_VEL_1)
_MAX_VEL_2 = tl.constexpr(MAX_VEL_2)


@triton.jit
def _dsdt_tl(theta1, theta2, dtheta1, dtheta2, a):
    """:func:`_dsdt` term for term (the constant factors fold in the same order)."""
    cos2 = tl.cos(theta2)
    sin2 = tl.sin(theta2)
    d1 = _M1 * _LC1 * _LC1 + _M2 * (_L1 * _L1 + _LC2 * _LC2 + 2 * _L1 * _LC2 * cos2) + _I1 + _I2
    d2 = _M2 * (_LC2 * _LC2 + _L1 * _LC2 * cos2) + _I2
    phi2 = _M2 * _LC2 * _G * tl.cos(theta1 + theta2 - _PI / 2.0)
    phi1 = (
        -_M2 * _L1 * _LC2 * (dtheta2 * dtheta2) * sin2
        - 2 * _M2 * _L1 * _LC2 * dtheta2 * dtheta1 * sin2
        + (_M1 * _LC1 + _M2 * _L1) * _G * tl.cos(theta1 - _PI / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - _M2 * _L1 * _LC2 * (dtheta1 * dtheta1) * sin2 - phi2) / (
        _M2 * _LC2 * _LC2 + _I2 - d2 * d2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@triton.jit
def _wrap_angle_tl(x):
    """:func:`_wrap` to ``[-pi, pi]``. (``-x - pi`` is ``low - x`` to the bit, with the tensor
    first: the interpreter wraps ``constexpr - tensor`` in a constexpr builtins reject.)"""
    above = tl.maximum(tl.math.ceil((x - _PI) / _TWO_PI), 0.0)
    below = tl.maximum(tl.math.ceil((-x - _PI) / _TWO_PI), 0.0)
    return x - above * _TWO_PI + below * _TWO_PI


@triton.jit
def _act_tl(state, action):
    """:func:`acrobot_dynamics` term for term, on a row block's columns (the triton step)."""
    theta1, theta2, dtheta1, dtheta2 = state
    torque = action.to(theta1.dtype) - 1.0
    k1a, k1b, k1c, k1d = _dsdt_tl(theta1, theta2, dtheta1, dtheta2, torque)
    k2a, k2b, k2c, k2d = _dsdt_tl(
        theta1 + _DT2 * k1a,
        theta2 + _DT2 * k1b,
        dtheta1 + _DT2 * k1c,
        dtheta2 + _DT2 * k1d,
        torque,
    )
    k3a, k3b, k3c, k3d = _dsdt_tl(
        theta1 + _DT2 * k2a,
        theta2 + _DT2 * k2b,
        dtheta1 + _DT2 * k2c,
        dtheta2 + _DT2 * k2d,
        torque,
    )
    k4a, k4b, k4c, k4d = _dsdt_tl(
        theta1 + _DT * k3a,
        theta2 + _DT * k3b,
        dtheta1 + _DT * k3c,
        dtheta2 + _DT * k3d,
        torque,
    )
    theta1 = theta1 + _DT6 * (k1a + 2 * k2a + 2 * k3a + k4a)
    theta2 = theta2 + _DT6 * (k1b + 2 * k2b + 2 * k3b + k4b)
    dtheta1 = dtheta1 + _DT6 * (k1c + 2 * k2c + 2 * k3c + k4c)
    dtheta2 = dtheta2 + _DT6 * (k1d + 2 * k2d + 2 * k3d + k4d)
    theta1 = _wrap_angle_tl(theta1)
    theta2 = _wrap_angle_tl(theta2)
    dtheta1 = tl.minimum(tl.maximum(dtheta1, -_MAX_VEL_1), _MAX_VEL_1)
    dtheta2 = tl.minimum(tl.maximum(dtheta2, -_MAX_VEL_2), _MAX_VEL_2)
    terminated = -tl.cos(theta1) - tl.cos(theta2 + theta1) > 1.0
    reward = tl.where(terminated, 0.0, -1.0)
    return (theta1, theta2, dtheta1, dtheta2), reward, terminated


@triton.jit
def _initial_tl(u0, u1, u2, u3):
    """A fresh start: every column in U(-0.1, 0.1)."""
    return u0 * 0.2 - 0.1, u1 * 0.2 - 0.1, u2 * 0.2 - 0.1, u3 * 0.2 - 0.1


@triton.jit
def _observe_tl(state):
    """``(cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2)`` as float32."""
    theta1, theta2, dtheta1, dtheta2 = state
    return (
        tl.cos(theta1).to(tl.float32),
        tl.sin(theta1).to(tl.float32),
        tl.cos(theta2).to(tl.float32),
        tl.sin(theta2).to(tl.float32),
        dtheta1.to(tl.float32),
        dtheta2.to(tl.float32),
    )


class Acrobot(ClassicControlEnv):
    """A batch of Acrobot-v1 envs following the InGraphEnv protocol (arguments:
    :class:`ClassicControlEnv`)."""

    gym_id = "Acrobot-v1"
    state_dim = 4
    max_episode_steps = 500
    init_low = (-0.1,) * 4
    init_high = (0.1,) * 4
    triton_functions = (_act_tl, _initial_tl, _observe_tl)

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(3)

    def _act(self, state, action, elapsed):
        return acrobot_dynamics(state, action)

    def _observe(self, state, elapsed):
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

    @staticmethod
    def _triton_kernel():
        return _step_kernel
