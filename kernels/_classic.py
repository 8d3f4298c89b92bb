"""Shared plumbing of the batched classic-control envs (CartPole, Pendulum, ...).

Every env keeps the same two tensors, on both backends:

    state    [num_envs, state_dim]  float32 (or float64 when asked)  -- the physical state
    elapsed  [num_envs]             int32                            -- steps since reset

An env module (``cartpole.py``, ...) subclasses :class:`ClassicControlEnv` once and supplies
five pieces: ``_make_spaces`` (the Gymnasium spaces), ``state_dim``/``max_episode_steps``,
the initial-state box ``(init_low, init_high)``, the pure tensor functions ``_dynamics``
and ``_observe`` (the torch backend), and ``_triton_kernel``, the module's fused Triton
``_step_kernel`` (the triton backend), which ``_triton.launch_classic_step`` launches.
Everything else -- argument checks, seeding, ``reset``, ``step``, ``get_state``/``set_state``
-- lives here, so finding ``step`` never means crossing more than these two files.

Backends:

- ``"torch"``: ``step`` writes the new ``state``/``elapsed`` (and the restart counts) into
  the existing tensors, as the Triton kernel does. A compiled step then allocates no state
  tensors and has no attribute assignments to replay after its graph (~10% of a call at
  N=256 on CPU); Dynamo turns the writes into stores of the fused kernel. ``reset``,
  ``set_state`` and ``seed`` write in place too, so the tensors live as long as the env.
  Initial states come from a counter-based hash of
  (seed, row, number of fresh starts of that row) in plain tensor ops
  (``batchenv.in_graph.counter_rng``): no generator state, so a compiled step that starts
  finished rows afresh has no graph break.
- ``"triton"``: one kernel launch per ``step`` (dynamics, reward, termination, truncation and
  the optional fresh starts of ``reset_mask`` rows) writes ``state``/``elapsed`` in place.
  Initial states come from Philox inside the kernel, keyed by the seed and counted per row,
  so no two fresh starts of a run repeat. It runs on CUDA devices, and on CPU under Triton's
  interpreter (``TRITON_INTERPRET=1`` set before ``batchenv.kernels`` is imported; slow).

On both, observations are new tensors: one handed out earlier never changes under the
caller, and writing into it never touches the env.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import gymnasium as gym
import torch

from batchenv.in_graph.counter_rng import counter_uniform, make_key

from . import _triton
from ._checks import check_indices, check_reset_mask

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
        seed: int | list[int] | None = None,
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
        if dtype not in _DTYPES:
            raise ValueError(f"{name}(dtype={dtype!r}): dtype must be torch.float32 or float64")
        self._block: int | None = None  # rows per seed when seeded per block
        if isinstance(seed, (list, tuple)):
            if (
                not seed
                or any(isinstance(s, bool) or not isinstance(s, int) for s in seed)
                or num_envs % len(seed)
                or backend != "torch"
            ):
                raise ValueError(
                    f"{name}(seed={seed!r}): a list of seeds needs ints, num_envs divisible "
                    f"by their number and backend='torch'"
                )
            self._block = num_envs // len(seed)
            seed = list(seed)
        elif seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"{name}(seed={seed!r}): seed must be an int, a list of ints or None")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dtype = dtype
        self.backend = backend
        if backend == "triton":
            reason = _triton.unavailable_reason(self._triton_kernel(), self.device)
            if reason is not None:
                raise NotImplementedError(
                    f"{name}(backend='triton', device='{self.device}'): the GPU-native kernels "
                    f"cannot run here: {reason}; use backend='torch'"
                )
        # Fresh space objects per env: gymnasium spaces carry their own sampling RNG.
        self.single_observation_space, self.single_action_space = self._make_spaces()
        # Normal tensors even when built under torch.inference_mode(): they are updated in
        # place, which an inference tensor refuses outside inference mode.
        with torch.inference_mode(False):
            self._make_state(seed)

    def _make_state(self, seed: int | None) -> None:
        """Build ``state``, ``elapsed``, the restart counts and the RNG key; draw row starts."""
        num_envs, dtype = self.num_envs, self.dtype
        self.elapsed = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        # The RNG key, and per row the number of fresh starts drawn so far (its counter): a
        # fresh start is a pure function of (seed, row, count) on both backends.
        self._seed = secrets.randbits(64) if seed is None else seed
        self._restarts = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        if self.backend == "triton":
            self.state = torch.zeros(num_envs, self.state_dim, dtype=dtype, device=self.device)
            self._launch(None, torch.ones(num_envs, dtype=torch.bool, device=self.device))
            return
        self._key = self._make_key(self._seed)
        self._init_low = torch.tensor(self.init_low, dtype=torch.float32, device=self.device)
        self._init_high = torch.tensor(self.init_high, dtype=torch.float32, device=self.device)
        everyone = torch.arange(num_envs, device=self.device)
        self.state = self._sample_initial(everyone)
        self._restarts += 1

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.gym_id}, num_envs={self.num_envs}, "
            f"device={self.device}, dtype={self.dtype}, backend={self.backend})"
        )

    # -- the InGraphEnv protocol ---------------------------------------------------------

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        """Draw fresh initial states for rows ``indices`` (int64 [K]); return their observ [K, ...].

        Other rows are untouched. Initial states come from the env's seeded generator (torch
        backend) or from Philox in the kernel (triton backend), fresh for every reset.
        """
        indices = check_indices(self, indices, "reset")
        if self.backend == "triton":
            mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
            observ = self._launch(None, mask.index_fill_(0, indices, True))[0]
            return observ[indices]
        rows = self._sample_initial(indices)
        self._restarts.index_add_(0, indices, torch.ones_like(indices))
        self.state.index_copy_(0, indices, rows)
        self.elapsed.index_fill_(0, indices, 0)
        return self._observe(rows)

    def reset_where(self, mask: torch.Tensor) -> torch.Tensor:
        """Draw fresh initial states for the rows where ``mask`` (bool [N]) is set; return
        the observation of every row ``[N, obs_dim]``.

        The traceable form of :meth:`reset` (no index set): ``rollout()`` calls it on every
        step. A row's fresh start is the same as :meth:`reset` would draw for it.
        """
        mask = check_reset_mask(self, mask)
        if self.backend == "triton":
            return self._launch(None, mask)[0]
        everyone = torch.arange(self.num_envs, device=self.device)
        fresh = self._sample_initial(everyone)
        self._restarts.add_(mask.to(torch.int64))
        state = torch.where(mask[:, None], fresh, self.state)
        self.state.copy_(state)
        self.elapsed.copy_(torch.where(mask, 0, self.elapsed))
        return self._observe(state)

    def step(
        self, action: torch.Tensor, reset_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance every row by one step; return ``(observ, reward, terminated, truncated)``.

        ``observ`` is float32 ``[num_envs, obs_dim]``, ``reward`` float32 ``[num_envs]``, the
        flags bool ``[num_envs]``. No host sync, no data-dependent shapes.

        ``reset_mask`` (bool ``[num_envs]``, optional) starts the marked rows afresh *instead*
        of stepping them: their action is ignored, and they return their initial
        observation, reward 0 and both flags False (Gymnasium's next-step autoreset). Pass
        the rows that finished at the previous step: their terminal observation was
        returned then, and a rollout loop never has to leave the device. On the triton
        backend this is still one kernel launch.
        """
        self._check_action(action)
        action = action.to(self.device)
        if reset_mask is not None:
            reset_mask = check_reset_mask(self, reset_mask)
        if self.backend == "triton":
            return self._launch(action, reset_mask)
        state, reward, terminated = self._dynamics(self.state, action)
        elapsed = self.elapsed + 1
        if reset_mask is not None:
            fresh = self._sample_initial(torch.arange(self.num_envs, device=self.device))
            self._restarts.add_(reset_mask.to(torch.int64))
            state = torch.where(reset_mask[:, None], fresh, state)
            reward = torch.where(reset_mask, 0.0, reward)
            terminated = terminated & ~reset_mask
            elapsed = torch.where(reset_mask, 0, elapsed)
        # In place (see the module docstring): observations are made from the local tensors,
        # so none handed out aliases the state.
        self.state.copy_(state)
        self.elapsed.copy_(elapsed)
        truncated = elapsed >= self.max_episode_steps
        return self._observe(state), reward.to(torch.float32), terminated, truncated

    def seed(self, seed: int) -> None:
        """Re-key the fresh starts: from now on they are those of a new env built with
        ``seed`` (row i's next fresh start is its first one under that seed).

        The current states are kept; reset the rows to start them afresh.
        """
        if self._block is not None:
            raise TypeError(
                f"{type(self).__name__}.seed: this env is seeded per block of rows; build a "
                f"new one with seed=[...] instead"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"{type(self).__name__}.seed: seed must be an int, got {seed!r}")
        self._seed = seed
        self._restarts.zero_()
        if self.backend == "torch":
            self._key = self._make_key(seed)

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
            indices = check_indices(self, indices, "set_state")
        k = indices.shape[0]
        if "state" in state:
            rows = torch.as_tensor(state["state"]).to(self.device, self.dtype)
            if tuple(rows.shape) != (k, self.state_dim):
                raise ValueError(
                    f"{name}.set_state: 'state' has shape {tuple(rows.shape)}, "
                    f"expected ({k}, {self.state_dim})"
                )
            self.state.index_copy_(0, indices, rows)
        if "elapsed" in state:
            steps = torch.as_tensor(state["elapsed"]).to(self.device, torch.int32)
            if tuple(steps.shape) != (k,):
                raise ValueError(
                    f"{name}.set_state: 'elapsed' has shape {tuple(steps.shape)}, expected ({k},)"
                )
            self.elapsed.index_copy_(0, indices, steps)

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

    @staticmethod
    def _triton_kernel():
        """The module's ``_step_kernel`` (to tell where it can run)."""
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------

    def _launch(
        self, action: torch.Tensor | None, reset_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """One launch of the triton backend's kernel (a step, or a reset when no action)."""
        return _triton.launch_classic_step(
            self._triton_kernel(),
            state=self.state,
            elapsed=self.elapsed,
            restarts=self._restarts,
            action=action,
            reset_mask=reset_mask,
            seed=self._seed,
            obs_dim=self.single_observation_space.shape[0],
            max_episode_steps=self.max_episode_steps,
        )

    def _sample_initial(self, rows: torch.Tensor) -> torch.Tensor:
        """Fresh initial states for ``rows`` (int64 [K]) at their current restart counts.

        Counter-based (no generator state), so ``torch.compile`` traces it without a graph
        break. Drawn in float32 whatever the dtype, so float32 and float64 envs with the same
        seed start from the same states. The caller advances ``_restarts`` of the rows used.
        """
        if self._block is None:
            u = counter_uniform(self._key, rows, self._restarts[rows], self.state_dim)
        else:  # row r of block b draws what row r of a lone env seeded seed[b] draws
            u = counter_uniform(
                self._key[rows], rows % self._block, self._restarts[rows], self.state_dim
            )
        return (self._init_low + (self._init_high - self._init_low) * u).to(self.dtype)

    def _make_key(self, seed: int | list[int]) -> torch.Tensor:
        """The RNG key: a scalar, or one per row when seeded per block (K seeds in one env)."""
        if self._block is None:
            return make_key(seed, self.device)
        keys = torch.stack([make_key(s, self.device) for s in seed])
        return keys.repeat_interleave(self._block)

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
