"""Pendulum-v1 as a batched torch or Triton environment (Gymnasium's dynamics, reward, limits).

State layout (shared by the torch step and the Triton kernel)::

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

``Pendulum(8, device="cuda", backend="triton")`` runs the same step as one fused kernel,
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


# -- the triton step: the same step on a row block (``_classic.step_kernel`` calls it) -------

# The constants again as constexpr globals, the only globals a Triton kernel may read.
_MAX_SPEED = tl.constexpr(MAX_SPEED)
_MAX_TORQUE = tl.constexpr(MAX_TORQUE)
_DT = tl.constexpr(DT)
_G = tl.constexpr(G)
_M = tl.constexpr(M)
_L = tl.constexpr(L)
_PI = tl.constexpr(math.pi)
_TWO_PI = tl.constexpr(2 * math.pi)


@triton.jit
def _angle_normalize_tl(x):
    """``angle_normalize`` with floor in place of Python's ``%`` (a float ``%`` in Triton is
    C's fmod on a GPU but Python's modulo in the interpreter); equal up to rounding."""
    y = x + _PI
    return y - tl.math.floor(y / _TWO_PI) * _TWO_PI - _PI


@triton.jit
def _act_tl(state, u):
    """:func:`pendulum_dynamics` term for term, on a row block's columns (the triton step)."""
    th, thdot = state
    # u stays in the action's dtype until it meets the state, as in the torch step.
    u = tl.minimum(tl.maximum(u, -_MAX_TORQUE), _MAX_TORQUE)
    normalized = _angle_normalize_tl(th)
    costs = normalized * normalized + 0.1 * (thdot * thdot) + 0.001 * (u * u)
    newthdot = thdot + (3 * _G / (2 * _L) * tl.sin(th) + 3.0 / (_M * _L * _L) * u) * _DT
    newthdot = tl.minimum(tl.maximum(newthdot, -_MAX_SPEED), _MAX_SPEED)
    th = th + newthdot * _DT
    never = tl.zeros(th.shape, dtype=tl.int1)
    return (th, newthdot), -costs, never


@triton.jit
def _initial_tl(u0, u1, u2, u3):
    """A fresh start: theta in U(-pi, pi), theta_dot in U(-1, 1)."""
    return u0 * _TWO_PI - _PI, u1 * 2.0 - 1.0


@triton.jit
def _observe_tl(state):
    """``(cos theta, sin theta, theta_dot)`` as float32."""
    th, thdot = state
    return tl.cos(th).to(tl.float32), tl.sin(th).to(tl.float32), thdot.to(tl.float32)


class Pendulum(ClassicControlEnv):
    """A batch of Pendulum-v1 envs (g = 10) following the InGraphEnv protocol (arguments:
    :class:`ClassicControlEnv`)."""

    gym_id = "Pendulum-v1"
    state_dim = 2
    max_episode_steps = 200
    init_low = (-math.pi, -1.0)
    init_high = (math.pi, 1.0)
    triton_functions = (_act_tl, _initial_tl, _observe_tl)

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
        high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
        observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        action_space = gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, shape=(1,), dtype=np.float32)
        return observation_space, action_space

    def _act(self, state, action, elapsed):
        return pendulum_dynamics(state, action)

    def _observe(self, state, elapsed):
        th, thdot = state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=1).to(torch.float32)

    @staticmethod
    def _triton_kernel():
        return _step_kernel
