"""Shared plumbing of the batched classic-control envs (CartPole, Pendulum, ...).

Every env keeps the same two tensors, the layout the Triton kernels will use:

    state    [num_envs, state_dim]  float32 (or float64 when asked)  -- the physical state
    elapsed  [num_envs]             int32                            -- steps since reset

An env module (``cartpole.py``, ...) subclasses :class:`ClassicControlEnv` once and supplies
four pieces: ``_make_spaces`` (the Gymnasium spaces), ``state_dim``/``max_episode_steps``,
the initial-state box ``(init_low, init_high)`` and the pure tensor functions ``_dynamics``
and ``_observe``.
Everything else -- argument checks, seeding, ``reset``, ``step``, ``get_state``/``set_state``
-- lives here, so finding ``step`` never means crossing more than these two files.

The state tensors are *replaced* on every update, never written in place, so an observation
handed out earlier never changes under the caller, and ``torch.compile`` sees no mutation.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch

_BACKENDS = ("torch", "triton")
_DTYPES = (torch.float32, torch.float64)


class ClassicControlEnv:
    """A batch of ``num_envs`` copies of one classic-control env; see the module docstring."""

    #: Gymnasium id this env reproduces (for messages and tests).
    gym_id: str
    #: Width of the ``state`` tensor.
    state_dim: int
    #: Gymnasium's TimeLimit: ``truncated`` is set once ``elapsed >= max_episode_steps``.
    max_episode_steps: int
    #: Per-column bounds of the uniform initial-state distribution.
    init_low: Sequence[float]
    init_high: Sequence[float]
    single_observation_space: gym.spaces.Box
    single_action_space: gym.Space

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        backend: str = "torch",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        name = type(self).__name__
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"{name}(num_envs={num_envs!r}): num_envs must be an int >= 1")
        if backend not in _BACKENDS:
            raise ValueError(
                f"{name}(backend={backend!r}): unknown backend; choose one of {_BACKENDS}"
            )
        if backend == "triton":
            raise NotImplementedError(
                f"{name}(backend='triton') arrives with the GPU-native kernels; "
                "use backend='torch' for now"
            )
        if dtype not in _DTYPES:
            raise ValueError(f"{name}(dtype={dtype!r}): dtype must be torch.float32 or float64")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"{name}(seed={seed!r}): seed must be an int or None")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dtype = dtype
        self.backend = backend
        # Fresh space objects per env: gymnasium spaces carry their own sampling RNG.
        self.single_observation_space, self.single_action_space = self._make_spaces()
        self._generator = torch.Generator(device=self.device)
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(seed)
        self._init_low = torch.tensor(self.init_low, dtype=torch.float32, device=self.device)
        self._init_high = torch.tensor(self.init_high, dtype=torch.float32, device=self.device)
        self.state = self._sample_initial(num_envs)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int32, device=self.device)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.gym_id}, num_envs={self.num_envs}, "
            f"device={self.device}, dtype={self.dtype})"
        )

    # -- the InGraphEnv protocol ---------------------------------------------------------

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        """Draw fresh initial states for rows ``indices`` (int64 [K]); return their observ [K, ...].

        Other rows are untouched. Initial states come from the env's seeded generator.
        """
        indices = self._check_indices(indices, "reset")
        rows = self._sample_initial(indices.shape[0])
        self.state = self.state.index_copy(0, indices, rows)
        self.elapsed = self.elapsed.index_fill(0, indices, 0)
        return self._observe(rows)

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance every row by one step; return ``(observ, reward, terminated, truncated)``.

        ``observ`` is float32 ``[num_envs, obs_dim]``, ``reward`` float32 ``[num_envs]``, the
        flags bool ``[num_envs]``. Pure tensor ops: no host sync, no data-dependent shapes.
        """
        self._check_action(action)
        state, reward, terminated = self._dynamics(self.state, action)
        self.state = state
        self.elapsed = self.elapsed + 1
        truncated = self.elapsed >= self.max_episode_steps
        return self._observe(state), reward.to(torch.float32), terminated, truncated

    # -- state access (tests, the consistency checker, checkpointing) --------------------

    def get_state(self) -> dict[str, torch.Tensor]:
        """Return clones of ``{"state": [N, state_dim], "elapsed": [N] int32}``."""
        return {"state": self.state.clone(), "elapsed": self.elapsed.clone()}

    def set_state(
        self, state: dict[str, torch.Tensor], indices: torch.Tensor | None = None
    ) -> None:
        """Overwrite rows ``indices`` (all rows when None) with the given tensors.

        ``state`` holds ``"state"`` ``[K, state_dim]`` and/or ``"elapsed"`` ``[K]``; a key that
        is left out keeps its current value. Values are cast to the env's dtype and device.
        """
        name = type(self).__name__
        unknown = set(state) - {"state", "elapsed"}
        if unknown:
            raise ValueError(
                f"{name}.set_state: unknown keys {sorted(unknown)}; expected 'state', 'elapsed'"
            )
        if indices is None:
            indices = torch.arange(self.num_envs, device=self.device)
        else:
            indices = self._check_indices(indices, "set_state")
        k = indices.shape[0]
        if "state" in state:
            rows = torch.as_tensor(state["state"]).to(self.device, self.dtype)
            if tuple(rows.shape) != (k, self.state_dim):
                raise ValueError(
                    f"{name}.set_state: 'state' has shape {tuple(rows.shape)}, "
                    f"expected ({k}, {self.state_dim})"
                )
            self.state = self.state.index_copy(0, indices, rows)
        if "elapsed" in state:
            steps = torch.as_tensor(state["elapsed"]).to(self.device, torch.int32)
            if tuple(steps.shape) != (k,):
                raise ValueError(
                    f"{name}.set_state: 'elapsed' has shape {tuple(steps.shape)}, expected ({k},)"
                )
            self.elapsed = self.elapsed.index_copy(0, indices, steps)

    # -- hooks for the env modules ----------------------------------------------------------

    @staticmethod
    def _make_spaces() -> tuple[gym.spaces.Box, gym.Space]:
        """Return ``(single_observation_space, single_action_space)``, Gymnasium's own."""
        raise NotImplementedError

    def _dynamics(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(next_state, reward, terminated)`` for a batch of rows."""
        raise NotImplementedError

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """Return the float32 observation of a batch of states (a new tensor)."""
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------

    def _sample_initial(self, k: int) -> torch.Tensor:
        # Drawn in float32 whatever the dtype, so float32 and float64 envs with the same seed
        # start from the same states.
        u = torch.rand(
            k, self.state_dim, generator=self._generator, device=self.device, dtype=torch.float32
        )
        return (self._init_low + (self._init_high - self._init_low) * u).to(self.dtype)

    def _check_indices(self, indices: torch.Tensor, method: str) -> torch.Tensor:
        if (
            not isinstance(indices, torch.Tensor)
            or indices.dtype != torch.int64
            or (indices.dim() != 1)
        ):
            got = (
                f"{indices.dtype} {tuple(indices.shape)}"
                if isinstance(indices, torch.Tensor)
                else type(indices).__name__
            )
            raise ValueError(
                f"{type(self).__name__}.{method}: indices must be a 1-D int64 tensor, got {got}"
            )
        return indices.to(self.device)

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
