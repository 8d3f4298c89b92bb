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
:func:`_step_kernel` (launched by ``_triton.launch_classic_step``).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ._classic import ClassicControlEnv
from ._triton import fresh_starts, tl, triton

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


# -- the Triton kernel: the same step, one program per BLOCK rows ----------------------------

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


@triton.jit(do_not_specialize=["key_lo", "key_hi"])
def _step_kernel(
    state_ptr,  # [N, 4] float32/float64, in and out: x, x_dot, theta, theta_dot
    elapsed_ptr,  # [N] int32, in and out: steps since the row's last fresh start
    restarts_ptr,  # [N] int64, in and out: fresh starts drawn so far (the row's RNG counter)
    action_ptr,  # [N] int: 1 pushes right, anything else left (read when STEP)
    reset_mask_ptr,  # [N] bool: rows that start afresh in this call (read when RESET)
    observ_ptr,  # [N, 4] float32, out: the observation after the call
    reward_ptr,  # [N] float32, out (when STEP)
    terminated_ptr,  # [N] bool, out (when STEP)
    truncated_ptr,  # [N] bool, out (when STEP)
    key_lo,  # low 32 bits of the Philox key (the env's seed)
    key_hi,  # high 32 bits of the Philox key
    N: tl.constexpr,  # rows
    MAX_STEPS: tl.constexpr,  # time limit: truncated once elapsed >= MAX_STEPS
    STEP: tl.constexpr,  # step the rows; False: only the fresh starts happen (a reset)
    RESET: tl.constexpr,  # reset_mask_ptr is given
    BLOCK: tl.constexpr,  # rows per program, a power of two
):
    """One CartPole step of BLOCK rows, term for term :func:`cartpole_dynamics`; rows in the
    reset mask start afresh instead (reward 0, not done)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = rows < N
    x = tl.load(state_ptr + rows * 4 + 0, mask=valid, other=0.0)
    x_dot = tl.load(state_ptr + rows * 4 + 1, mask=valid, other=0.0)
    theta = tl.load(state_ptr + rows * 4 + 2, mask=valid, other=0.0)
    theta_dot = tl.load(state_ptr + rows * 4 + 3, mask=valid, other=0.0)
    elapsed = tl.load(elapsed_ptr + rows, mask=valid, other=0)
    if STEP:
        action = tl.load(action_ptr + rows, mask=valid, other=0)
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
        elapsed = elapsed + 1
    if RESET:
        fresh, u0, u1, u2, u3 = fresh_starts(
            reset_mask_ptr, restarts_ptr, key_lo, key_hi, rows, valid
        )
        x = tl.where(fresh, (u0 * _INIT_SPAN + _INIT_LOW).to(x.dtype), x)
        x_dot = tl.where(fresh, (u1 * _INIT_SPAN + _INIT_LOW).to(x.dtype), x_dot)
        theta = tl.where(fresh, (u2 * _INIT_SPAN + _INIT_LOW).to(x.dtype), theta)
        theta_dot = tl.where(fresh, (u3 * _INIT_SPAN + _INIT_LOW).to(x.dtype), theta_dot)
        elapsed = tl.where(fresh, 0, elapsed)
        if STEP:
            terminated = terminated & ~fresh
            reward = tl.where(fresh, 0.0, reward)
    tl.store(state_ptr + rows * 4 + 0, x, mask=valid)
    tl.store(state_ptr + rows * 4 + 1, x_dot, mask=valid)
    tl.store(state_ptr + rows * 4 + 2, theta, mask=valid)
    tl.store(state_ptr + rows * 4 + 3, theta_dot, mask=valid)
    tl.store(elapsed_ptr + rows, elapsed, mask=valid)
    tl.store(observ_ptr + rows * 4 + 0, x.to(tl.float32), mask=valid)
    tl.store(observ_ptr + rows * 4 + 1, x_dot.to(tl.float32), mask=valid)
    tl.store(observ_ptr + rows * 4 + 2, theta.to(tl.float32), mask=valid)
    tl.store(observ_ptr + rows * 4 + 3, theta_dot.to(tl.float32), mask=valid)
    if STEP:
        tl.store(reward_ptr + rows, reward, mask=valid)
        tl.store(terminated_ptr + rows, terminated, mask=valid)
        tl.store(truncated_ptr + rows, elapsed >= MAX_STEPS, mask=valid)


class CartPole(ClassicControlEnv):
    """A batch of CartPole-v1 envs following the InGraphEnv protocol.

    Args:
        num_envs: number of rows (>= 1).
        device: where the state lives.
        seed: seeds the initial states (the ``torch.Generator``, or the kernel's Philox key);
            None draws a fresh seed. The two backends draw different states from one seed.
        backend: ``"torch"``, or ``"triton"`` for the fused kernel (CUDA; CPU only under
            ``TRITON_INTERPRET=1``).
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

    @staticmethod
    def _triton_kernel():
        return _step_kernel

    def _observe(self, state):
        return state.to(torch.float32, copy=True)
