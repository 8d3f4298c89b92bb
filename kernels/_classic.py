"""The classic-control family (CartPole, Pendulum, ...): one env class and one Triton kernel.

Every env keeps :mod:`._base`'s tensors, with ``state`` ``[num_envs, state_dim]`` float32 (or
float64 when asked). An env module (``cartpole.py``, ...) holds only its game, as
declarations on a :class:`ClassicControlEnv` subclass and two versions of the same step:

- declarations: ``gym_id``, ``state_dim``, ``max_episode_steps``, the initial-state box
  ``(init_low, init_high)`` and ``_make_spaces`` (Gymnasium's spaces);
- the torch backend: ``_act(state, action, elapsed)`` and ``_observe(state, elapsed)``,
  plain tensor functions;
- the triton backend: three ``@triton.jit`` device functions on a row block's state columns
  (a tuple), named in ``triton_functions`` -- ``act(state, action) -> (state, reward,
  terminated)``, ``initial(u0, u1, u2, u3) -> state`` (a fresh start from four float32
  ``U[0, 1)``) and ``observe(state) -> observ`` (float32 columns) -- which the one kernel
  here, :func:`step_kernel`, calls; the module names it ``_step_kernel`` and returns it
  from ``_triton_kernel``.

Everything else -- argument checks, seeding, ``reset``, ``step``, ``get_state``/``set_state``,
the launch -- lives in :class:`._base.KernelEnv`, so finding ``step`` never means crossing
more than the env module, this file and ``_base.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch

from . import _triton
from ._base import KernelEnv
from ._triton import fresh_starts, tl, triton

_DTYPES = (torch.float32, torch.float64)


class ClassicControlEnv(KernelEnv):
    """A batch of ``num_envs`` copies of one classic-control env; see the module docstring.

    Args:
        num_envs: number of rows (>= 1).
        device: where the state lives.
        seed: seeds the initial states (the torch hash's key, or the kernel's Philox key); a
            list of ints seeds equal blocks of rows (block b starts as a lone env seeded
            ``seed[b]``; torch backend); None draws a fresh seed. The two backends draw
            different states from one seed.
        backend: ``"torch"``, or ``"triton"`` for the fused kernel (CUDA; CPU only under
            ``TRITON_INTERPRET=1``).
        dtype: ``torch.float32`` (default) or ``torch.float64`` for the internal state.
    """

    seed_blocks = True
    #: Gymnasium id this env reproduces (for messages and tests).
    gym_id: str
    #: Width of the ``state`` tensor.
    state_dim: int
    #: Per-column bounds of the uniform initial-state distribution (torch backend).
    init_low: Sequence[float]
    init_high: Sequence[float]
    #: The triton backend's ``(act, initial, observe)`` device functions.
    triton_functions: tuple[Any, Any, Any]

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | list[int] | None = None,
        backend: str = "torch",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if dtype not in _DTYPES:
            raise ValueError(
                f"{type(self).__name__}(dtype={dtype!r}): dtype must be torch.float32 or float64"
            )
        self.dtype = dtype
        self.draws = self.state_dim
        # Fresh space objects per env: gymnasium spaces carry their own sampling RNG.
        self.single_observation_space, self.single_action_space = self._make_spaces()
        self._setup(num_envs, device, seed, backend, ((self.state_dim,), dtype))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.gym_id}, num_envs={self.num_envs}, "
            f"device={self.device}, dtype={self.dtype}, backend={self.backend})"
        )

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.Space]:
        """Return ``(single_observation_space, single_action_space)``, Gymnasium's own."""
        raise NotImplementedError

    def _prepare(self) -> None:
        self._init_low = torch.tensor(self.init_low, dtype=torch.float32, device=self.device)
        self._init_high = torch.tensor(self.init_high, dtype=torch.float32, device=self.device)

    def _initial(self, u: torch.Tensor) -> torch.Tensor:
        # Drawn in float32 whatever the dtype, so float32 and float64 envs with the same seed
        # start from the same states.
        return (self._init_low + (self._init_high - self._init_low) * u).to(self.dtype)

    def _check_action(self, action: torch.Tensor) -> None:
        # Shape and dtype only: static under torch.compile, no host sync.
        space = self.single_action_space
        discrete = isinstance(space, gym.spaces.Discrete)
        expected = (self.num_envs,) if discrete else (self.num_envs, *space.shape)
        if tuple(action.shape) != expected or action.dtype.is_floating_point == discrete:
            kind = "int64" if discrete else "float32"
            raise ValueError(
                f"{type(self).__name__}.step: action must be a {kind} tensor of shape "
                f"{expected}, got {action.dtype} {tuple(action.shape)}"
            )

    def _kernel_options(self) -> tuple[tuple[int, ...], dict[str, Any]]:
        block = _triton.env_block(self.num_envs)
        act, initial, observe = self.triton_functions
        return (triton.cdiv(self.num_envs, block),), {
            "N": self.num_envs,
            "MAX_STEPS": self.max_episode_steps,
            "BLOCK": block,
            "STATE_DIM": self.state_dim,
            "OBS_DIM": self.single_observation_space.shape[0],
            "ACT": act,
            "INITIAL": initial,
            "OBSERVE": observe,
            "num_warps": _triton.env_warps(block),
        }


# -- the Triton kernel: one program per BLOCK rows ------------------------------------------


@triton.jit(do_not_specialize=["key_lo", "key_hi"])
def step_kernel(
    state_ptr,  # [N, STATE_DIM] float32/float64, in and out
    elapsed_ptr,  # [N] int32, in and out: steps since the row's last fresh start
    restarts_ptr,  # [N] int64, in and out: fresh starts drawn so far (the row's RNG counter)
    action_ptr,  # [N] or [N, 1]: the action (read when STEP)
    reset_mask_ptr,  # [N] bool: rows that start afresh in this call (read when RESET)
    observ_ptr,  # [N, OBS_DIM] float32, out: the observation after the call
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
    STATE_DIM: tl.constexpr,  # columns of the state
    OBS_DIM: tl.constexpr,  # columns of the observation
    ACT: tl.constexpr,  # the env's step: (state, action) -> (state, reward, terminated)
    INITIAL: tl.constexpr,  # the env's fresh start: (u0, u1, u2, u3) -> state
    OBSERVE: tl.constexpr,  # the env's observation: state -> float32 columns
):
    """One step of BLOCK rows of a classic-control env (its ``ACT``); rows in the reset mask
    start afresh instead (``INITIAL``; reward 0, not done)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = rows < N
    state = load_columns(state_ptr, rows, valid, STATE_DIM)
    elapsed = tl.load(elapsed_ptr + rows, mask=valid, other=0)
    if STEP:
        action = tl.load(action_ptr + rows, mask=valid, other=0)
        state, reward, terminated = ACT(state, action)
        elapsed = elapsed + 1
    if RESET:
        fresh, u0, u1, u2, u3 = fresh_starts(
            reset_mask_ptr, restarts_ptr, key_lo, key_hi, rows, valid
        )
        state = where_columns(fresh, INITIAL(u0, u1, u2, u3), state, STATE_DIM)
        elapsed = tl.where(fresh, 0, elapsed)
        if STEP:
            terminated = terminated & ~fresh
            reward = tl.where(fresh, 0.0, reward)
    store_columns(state_ptr, rows, valid, state, STATE_DIM)
    tl.store(elapsed_ptr + rows, elapsed, mask=valid)
    store_columns(observ_ptr, rows, valid, OBSERVE(state), OBS_DIM)
    if STEP:
        tl.store(reward_ptr + rows, reward, mask=valid)
        tl.store(terminated_ptr + rows, terminated, mask=valid)
        tl.store(truncated_ptr + rows, elapsed >= MAX_STEPS, mask=valid)


@triton.jit
def load_columns(ptr, rows, valid, WIDTH: tl.constexpr):
    """The ``WIDTH`` columns of ``rows`` of a row-major ``[N, WIDTH]`` tensor, as a tuple."""
    columns = ()
    for j in tl.static_range(WIDTH):
        columns = columns + (tl.load(ptr + rows * WIDTH + j, mask=valid, other=0.0),)
    return columns


@triton.jit
def store_columns(ptr, rows, valid, columns, WIDTH: tl.constexpr):
    """Store a tuple of ``WIDTH`` columns into ``rows`` of a row-major ``[N, WIDTH]`` tensor."""
    for j in tl.static_range(WIDTH):
        tl.store(ptr + rows * WIDTH + j, columns[j], mask=valid)


@triton.jit
def where_columns(fresh, new, old, WIDTH: tl.constexpr):
    """Per column: ``new`` (cast to the column's dtype) where ``fresh``, else ``old``."""
    columns = ()
    for j in tl.static_range(WIDTH):
        columns = columns + (tl.where(fresh, new[j].to(old[j].dtype), old[j]),)
    return columns
