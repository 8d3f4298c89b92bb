"""The Tag family (``DiscreteTag``, ``ContinuousTag``): what the two games share.

Both keep :mod:`._base`'s tensors, with an agent axis after the batch axis::

    state    [num_envs, num_agents, state_dim]  -- per-agent state (int32 or float32)
    elapsed  [num_envs]                          int32, steps since the env's last reset

A game module declares ``state_dtype``, ``state_dim`` and ``draws_per_agent``, and supplies
``_starts`` (torch-backend initial states from uniforms), ``_act`` and ``_observe`` (the
torch backend), its ``_step_kernel`` (one program per env, all its agents on the lanes;
``_triton_kernel`` returns it) and ``_game_arguments`` (that kernel's own arguments).
:class:`TagEnvBase` adds the argument checks, the launch options and :func:`agent_starts`,
the kernels' fresh-start draws; :class:`._base.KernelEnv` everything else.

Fresh starts are a pure function of ``(seed, env, restart count, agent)`` -- Philox in the
kernel, a 32-bit integer hash in plain tensor ops on the torch backend (so a compiled step
with ``reset_mask`` has no graph break).
"""

from __future__ import annotations

from typing import Any

import torch

from ._base import KernelEnv
from ._checks import describe, is_integer_tensor
from ._triton import STREAM_RESET, philox4x32, tl, triton, uniform_from_bits


def check_int(owner: str, name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (bools refused), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}({name}={value!r}): {name} must be an int >= {minimum}")
    return value


def check_float(owner: str, name: str, value: object, minimum: float | None = None) -> float:
    """``value`` as a finite float (>= ``minimum`` when given), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}({name}={value!r}): {name} must be a number")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{owner}({name}={value!r}): {name} must be finite")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}({name}={value!r}): {name} must be >= {minimum}")
    return value


class TagEnvBase(KernelEnv):
    """Common body of :class:`DiscreteTag` and :class:`ContinuousTag` (see module docstring)."""

    num_agents: int
    episode_length: int
    obs_dim: int
    #: ``state`` dtype and width per agent.
    state_dtype: torch.dtype
    state_dim: int
    #: Uniforms one agent's start takes.
    draws_per_agent: int
    #: Elements of one tile of the kernel's observation stores (observers x agents).
    observ_tile: int

    def _setup_tag(self, num_envs: int, device, seed: int | None, backend: str) -> None:
        """:meth:`KernelEnv._setup` for a game whose parameters are set."""
        self.agent_shape = (self.num_agents,)
        self.max_episode_steps = self.episode_length
        self.draws = self.num_agents * self.draws_per_agent
        layout = ((self.num_agents, self.state_dim), self.state_dtype)
        self._setup(num_envs, device, seed, backend, layout)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, num_agents={self.num_agents}, "
            f"device={self.device}, backend={self.backend})"
        )

    def _initial(self, u: torch.Tensor) -> torch.Tensor:
        return self._starts(u.reshape(u.shape[0], self.num_agents, self.draws_per_agent))

    def _starts(self, u: torch.Tensor) -> torch.Tensor:
        """Initial states from uniforms ``[K, agents, draws_per_agent]`` (torch backend)."""
        raise NotImplementedError

    def _check_action(self, action: torch.Tensor) -> None:
        # Shape and dtype only: static under torch.compile, no host sync.
        expected = (self.num_envs, self.num_agents, *self.single_action_space.shape)
        if not is_integer_tensor(action, expected):
            raise ValueError(
                f"{type(self).__name__}.step: action must be an integer tensor of shape "
                f"{expected} (envs, agents{', 2' if len(expected) == 3 else ''}), "
                f"got {describe(action)}"
            )

    def _kernel_options(self) -> tuple[tuple[int, ...], dict[str, Any]]:
        # One program per env; its agents on the lanes, observers in tiles of BLOCK_I.
        block_a = triton.next_power_of_2(self.num_agents)
        block_i = max(1, min(block_a, self.observ_tile // block_a))
        return (self.num_envs,), {
            "E": self.num_envs,
            "N": self.num_agents,
            "T": self.episode_length,
            "BLOCK_A": block_a,
            "BLOCK_I": block_i,
            "num_warps": 1 if block_a <= 64 else 4,
            **self._game_arguments(),
        }

    def _game_arguments(self) -> dict[str, Any]:
        """The game kernel's own arguments (keywords)."""
        raise NotImplementedError


@triton.jit
def agent_starts(reset_mask_ptr, restarts_ptr, key_lo, key_hi, env, env_ok, agents, valid):
    """A Tag kernel's fresh-start draws for one env: ``(fresh, fresh_lanes, u0, u1, u2)`` --
    whether the env starts afresh (a scalar, and on every agent lane) and three ``U[0, 1)``
    per agent. Counts the fresh start in the env's restart counter.

    Philox counter ``(env, count lo, count hi, stream + 4 * agent)``: one draw per agent.

    The count is read by every warp of the program and written once. Past 64 agents a
    program has 4 warps, which Triton does not keep in step: without the barrier, a warp
    could store the new count before a slower one had read the old, and that warp's agents
    would start from the next fresh start's draws.
    """
    fresh = tl.load(reset_mask_ptr + env, mask=env_ok, other=0) != 0  # scalar
    fresh_lanes = tl.load(reset_mask_ptr + env + agents * 0, mask=valid, other=0) != 0
    count = tl.load(restarts_ptr + env, mask=env_ok, other=0)
    lanes_count = agents.to(tl.int64) * 0 + count
    r0, r1, r2, _ = philox4x32(
        (agents * 0 + env).to(tl.uint32),
        (lanes_count & 0xFFFFFFFF).to(tl.uint32),
        (lanes_count >> 32).to(tl.uint32),
        (agents * 4 + STREAM_RESET).to(tl.uint32),
        key_lo.to(tl.uint32),
        key_hi.to(tl.uint32),
    )
    tl.debug_barrier()  # every warp has read the count
    tl.store(restarts_ptr + env, count + fresh.to(tl.int64), mask=env_ok)
    return fresh, fresh_lanes, uniform_from_bits(r0), uniform_from_bits(r1), uniform_from_bits(r2)
