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
:func:`_step_kernel` (launched by ``_triton.launch_classic_step``).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ._classic import ClassicControlEnv
from ._triton import fresh_starts, tl, triton

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


# -- the Triton kernel: the same step, one program per BLOCK rows ----------------------------

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


@triton.jit(do_not_specialize=["key_lo", "key_hi"])
def _step_kernel(
    state_ptr,  # [N, 2] float32/float64, in and out: theta, theta_dot
    elapsed_ptr,  # [N] int32, in and out: steps since the row's last fresh start
    restarts_ptr,  # [N] int64, in and out: fresh starts drawn so far (the row's RNG counter)
    action_ptr,  # [N, 1] float: the torque, clipped to [-2, 2] (read when STEP)
    reset_mask_ptr,  # [N] bool: rows that start afresh in this call (read when RESET)
    observ_ptr,  # [N, 3] float32, out: cos theta, sin theta, theta_dot after the call
    reward_ptr,  # [N] float32, out (when STEP)
    terminated_ptr,  # [N] bool, out (when STEP): always False
    truncated_ptr,  # [N] bool, out (when STEP)
    key_lo,  # low 32 bits of the Philox key (the env's seed)
    key_hi,  # high 32 bits of the Philox key
    N: tl.constexpr,  # rows
    MAX_STEPS: tl.constexpr,  # time limit: truncated once elapsed >= MAX_STEPS
    STEP: tl.constexpr,  # step the rows; False: only the fresh starts happen (a reset)
    RESET: tl.constexpr,  # reset_mask_ptr is given
    BLOCK: tl.constexpr,  # rows per program, a power of two
):
    """One Pendulum step of BLOCK rows, term for term :func:`pendulum_dynamics`; rows in the
    reset mask start afresh instead (reward 0)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = rows < N
    th = tl.load(state_ptr + rows * 2 + 0, mask=valid, other=0.0)
    thdot = tl.load(state_ptr + rows * 2 + 1, mask=valid, other=0.0)
    elapsed = tl.load(elapsed_ptr + rows, mask=valid, other=0)
    if STEP:
        # u stays in the action's dtype until it meets the state, as in the torch step.
        u = tl.load(action_ptr + rows, mask=valid, other=0.0)
        u = tl.minimum(tl.maximum(u, -_MAX_TORQUE), _MAX_TORQUE)
        normalized = _angle_normalize_tl(th)
        costs = normalized * normalized + 0.1 * (thdot * thdot) + 0.001 * (u * u)
        newthdot = thdot + (3 * _G / (2 * _L) * tl.sin(th) + 3.0 / (_M * _L * _L) * u) * _DT
        newthdot = tl.minimum(tl.maximum(newthdot, -_MAX_SPEED), _MAX_SPEED)
        th = th + newthdot * _DT
        thdot = newthdot
        reward = -costs
        elapsed = elapsed + 1
    if RESET:
        fresh, u0, u1, _, _ = fresh_starts(
            reset_mask_ptr, restarts_ptr, key_lo, key_hi, rows, valid
        )
        th = tl.where(fresh, (u0 * _TWO_PI - _PI).to(th.dtype), th)  # U(-pi, pi)
        thdot = tl.where(fresh, (u1 * 2.0 - 1.0).to(th.dtype), thdot)  # U(-1, 1)
        elapsed = tl.where(fresh, 0, elapsed)
        if STEP:
            reward = tl.where(fresh, 0.0, reward)
    tl.store(state_ptr + rows * 2 + 0, th, mask=valid)
    tl.store(state_ptr + rows * 2 + 1, thdot, mask=valid)
    tl.store(elapsed_ptr + rows, elapsed, mask=valid)
    tl.store(observ_ptr + rows * 3 + 0, tl.cos(th).to(tl.float32), mask=valid)
    tl.store(observ_ptr + rows * 3 + 1, tl.sin(th).to(tl.float32), mask=valid)
    tl.store(observ_ptr + rows * 3 + 2, thdot.to(tl.float32), mask=valid)
    if STEP:
        tl.store(reward_ptr + rows, reward, mask=valid)
        tl.store(terminated_ptr + rows, rows < 0, mask=valid)
        tl.store(truncated_ptr + rows, elapsed >= MAX_STEPS, mask=valid)


class Pendulum(ClassicControlEnv):
    """A batch of Pendulum-v1 envs (g = 10) following the InGraphEnv protocol.

    Args:
        num_envs: number of rows (>= 1).
        device: where the state lives.
        seed: seeds the initial states (the ``torch.Generator``, or the kernel's Philox key);
            None draws a fresh seed. The two backends draw different states from one seed.
        backend: ``"torch"``, or ``"triton"`` for the fused kernel (CUDA; CPU only under
            ``TRITON_INTERPRET=1``).
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

    @staticmethod
    def _triton_kernel():
        return _step_kernel

    def _observe(self, state):
        th, thdot = state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=1).to(torch.float32)
