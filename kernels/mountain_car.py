"""MountainCarContinuous-v0 as a batched torch or Triton environment (Gymnasium's dynamics).

State layout (shared by the torch step and the Triton kernel)::

    state    [num_envs, 2]  float32 (float64 on request): position, velocity
    elapsed  [num_envs]     int32: steps since the row's last reset (truncated at 999)

Observation: the state as float32. Action: float32 ``[num_envs, 1]``, the force, clipped to
``[-1, 1]`` for the dynamics. Dynamics: ``velocity += force * 0.0015 - 0.0025 cos(3 position)``
clipped to ``[-0.07, 0.07]``; ``position += velocity`` clipped to ``[-1.2, 0.6]``; at the
left wall a negative velocity is zeroed. Terminates when ``position >= 0.45`` and
``velocity >= 0``. Reward: ``100 * terminated - 0.1 * action^2`` with the *unclipped* action,
as Gymnasium computes it. Initial position ``U(-0.6, -0.4)``, velocity 0.

Gymnasium keeps this env's state in float32 after the first step, so a float64 state here
agrees with Gymnasium to float32 rounding only (float64 is still exact to the equations).

Example::

    >>> import torch
    >>> from batchenv.kernels import MountainCarContinuous
    >>> env = MountainCarContinuous(num_envs=8, seed=0)
    >>> observ = env.reset(torch.arange(8))
    >>> observ, reward, terminated, truncated = env.step(torch.ones(8, 1))
    >>> observ.shape, reward.shape
    (torch.Size([8, 2]), torch.Size([8]))

``MountainCarContinuous(8, device="cuda", backend="triton")`` runs the same step as one fused
kernel, :func:`_classic.step_kernel` calling this module's :func:`_act_tl`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from ._classic import ClassicControlEnv
from ._classic import step_kernel as _step_kernel
from ._triton import tl, triton

MIN_ACTION = -1.0
MAX_ACTION = 1.0
MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.45
GOAL_VELOCITY = 0.0
POWER = 0.0015


def mountain_car_dynamics(
    state: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of a batch: ``(state [N, 2], action [N, 1]) -> (state, reward, terminated)``."""
    position, velocity = state.unbind(1)
    a = action[:, 0].to(state.dtype)
    force = a.clamp(MIN_ACTION, MAX_ACTION)
    velocity = velocity + (force * POWER - 0.0025 * torch.cos(3 * position))
    velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED)
    position = position + velocity
    at_left_wall = position <= MIN_POSITION  # Gymnasium: clipped position == min_position
    position = position.clamp(MIN_POSITION, MAX_POSITION)
    velocity = torch.where(at_left_wall & (velocity < 0), torch.zeros_like(velocity), velocity)
    terminated = (position >= GOAL_POSITION) & (velocity >= GOAL_VELOCITY)
    reward = terminated.to(state.dtype) * 100.0 - a.square() * 0.1
    return torch.stack((position, velocity), dim=1), reward, terminated


# -- the triton step: the same step on a row block (``_classic.step_kernel`` calls it) -------

# The constants again as constexpr globals, the only globals a Triton kernel may read.
_MIN_ACTION = tl.constexpr(MIN_ACTION)
_MAX_ACTION = tl.constexpr(MAX_ACTION)
_MIN_POSITION = tl.constexpr(MIN_POSITION)
_MAX_POSITION = tl.constexpr(MAX_POSITION)
_MAX_SPEED = tl.constexpr(MAX_SPEED)
_GOAL_POSITION = tl.constexpr(GOAL_POSITION)
_GOAL_VELOCITY = tl.constexpr(GOAL_VELOCITY)
_POWER = tl.constexpr(POWER)


@triton.jit
def _act_tl(state, action):
    """:func:`mountain_car_dynamics` term for term, on a row block's columns (the triton
    step)."""
    position, velocity = state
    a = action.to(position.dtype)
    force = tl.minimum(tl.maximum(a, _MIN_ACTION), _MAX_ACTION)
    velocity = velocity + (force * _POWER - 0.0025 * tl.cos(3 * position))
    velocity = tl.minimum(tl.maximum(velocity, -_MAX_SPEED), _MAX_SPEED)
    position = position + velocity
    at_left_wall = position <= _MIN_POSITION
    position = tl.minimum(tl.maximum(position, _MIN_POSITION), _MAX_POSITION)
    velocity = tl.where(at_left_wall & (velocity < 0), 0.0, velocity)
    terminated = (position >= _GOAL_POSITION) & (velocity >= _GOAL_VELOCITY)
    reward = tl.where(terminated, 100.0, 0.0) - a * a * 0.1
    return (position, velocity), reward, terminated


@triton.jit
def _initial_tl(u0, u1, u2, u3):
    """A fresh start: position in U(-0.6, -0.4), velocity 0."""
    return u0 * 0.2 - 0.6, tl.zeros_like(u0)


@triton.jit
def _observe_tl(state):
    """The state as float32."""
    position, velocity = state
    return position.to(tl.float32), velocity.to(tl.float32)


class MountainCarContinuous(ClassicControlEnv):
    """A batch of MountainCarContinuous-v0 envs following the InGraphEnv protocol (arguments:
    :class:`ClassicControlEnv`)."""

    gym_id = "MountainCarContinuous-v0"
    state_dim = 2
    max_episode_steps = 999
    init_low = (-0.6, 0.0)
    init_high = (-0.4, 0.0)
    triton_functions = (_act_tl, _initial_tl, _observe_tl)

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
        low = np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32)
        high = np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32)
        observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        action_space = gym.spaces.Box(MIN_ACTION, MAX_ACTION, shape=(1,), dtype=np.float32)
        return observation_space, action_space

    def _act(self, state, action, elapsed):
        return mountain_car_dynamics(state, action)

    def _observe(self, state, elapsed):
        return state.to(torch.float32, copy=True)

    @staticmethod
    def _triton_kernel():
        return _step_kernel
