"""What the two Tag envs share: argument checks, seeding, and the InGraphEnv plumbing.

Both envs keep two tensors, on both backends::

    state    [num_envs, num_agents, state_dim]  -- per-agent state (int32 or float32)
    elapsed  [num_envs]                          int32, steps since the env's last reset

and supply four hooks: ``_starts`` (torch-backend initial states from uniforms),
``_torch_step``, ``_observe`` (the torch backend) and ``_launch`` (the triton backend's
launcher). The torch backend *replaces* the tensors on every update, so ``torch.compile``
sees no mutation; the triton backend writes them in place from one kernel launch.

Fresh starts are counter-based on both backends: every env counts the fresh starts it has
drawn, and a start is a pure function of ``(seed, env, count, agent)`` -- Philox in the
kernel, a 32-bit integer hash in plain tensor ops on the torch backend (so a compiled step
with ``reset_mask`` has no graph break). No two restarts of a run repeat; the two backends
draw different starts from one seed.
"""

from __future__ import annotations

import secrets

import gymnasium as gym
import torch

from batchenv.in_graph.counter_rng import counter_uniform, make_key

from . import _triton
from ._checks import check_indices, check_reset_mask, describe

BACKENDS = ("torch", "triton")


def launch_buffers(
    env: TagEnvBase, action: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The output buffers of a Tag kernel launch and the action it reads:
    ``(observ, reward, terminated, truncated, action)``.

    For a reset (``action`` None) only ``observ`` is real; the kernel neither reads nor
    writes the others (``STEP`` is False), so any pointer of the right kind stands in.
    """
    e, n, device = env.num_envs, env.num_agents, env.device
    observ = torch.empty(e, n, env.obs_dim, dtype=torch.float32, device=device)
    if action is None:
        return observ, observ, env.elapsed, env.elapsed, env.elapsed
    return (
        observ,
        torch.empty(e, n, dtype=torch.float32, device=device),
        torch.empty(e, dtype=torch.bool, device=device),
        torch.empty(e, dtype=torch.bool, device=device),
        action.to(torch.int64).contiguous(),
    )


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


class TagEnvBase:
    """Common body of :class:`DiscreteTag` and :class:`ContinuousTag` (see module docstring)."""

    num_envs: int
    num_agents: int
    device: torch.device
    backend: str
    single_observation_space: gym.spaces.Box
    single_action_space: gym.Space
    #: ``state`` dtype and width per agent.
    state_dtype: torch.dtype
    state_dim: int

    def _setup(self, num_envs: int, device, seed: int | None, backend: str, kernel) -> None:
        """Validate the shared arguments, then draw every env's first state."""
        name = type(self).__name__
        self.num_envs = check_int(name, "num_envs", num_envs, 1)
        if backend not in BACKENDS:
            raise ValueError(
                f"{name}(backend={backend!r}): unknown backend; choose one of {BACKENDS}"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"{name}(seed={seed!r}): seed must be an int or None")
        self.device = torch.device(device)
        self.backend = backend
        if backend == "triton":
            reason = _triton.unavailable_reason(kernel, self.device)
            if reason is not None:
                raise NotImplementedError(
                    f"{name}(backend='triton', device='{self.device}'): the GPU-native kernels "
                    f"cannot run here: {reason}; use backend='torch'"
                )
        self.elapsed = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        shape = (num_envs, self.num_agents, self.state_dim)
        self.state = torch.zeros(shape, dtype=self.state_dtype, device=self.device)
        # The RNG key, and per env the number of fresh starts drawn so far (its counter).
        self._seed = (secrets.randbits(64) if seed is None else seed) % (1 << 64)
        self._restarts = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        everyone = torch.ones(num_envs, dtype=torch.bool, device=self.device)
        if backend == "triton":
            self._launch(None, everyone)
            return
        self._key = make_key(self._seed, self.device)
        rows = torch.arange(num_envs, device=self.device)
        self.state = self._fresh_state(rows, self._restarts)
        self._restarts = self._restarts + 1

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, num_agents={self.num_agents}, "
            f"device={self.device}, backend={self.backend})"
        )

    def seed(self, seed: int) -> None:
        """Re-key the fresh starts: from now on they are those of a new env built with
        ``seed`` (env i's next fresh start is its first one under that seed).

        The current states are kept; reset the envs to start them afresh.
        """
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"{type(self).__name__}.seed: seed must be an int, got {seed!r}")
        self._seed = seed % (1 << 64)
        self._restarts = torch.zeros_like(self._restarts)
        if self.backend == "torch":
            self._key = make_key(self._seed, self.device)

    # -- the InGraphEnv protocol ---------------------------------------------------------

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        """Start new episodes in envs ``indices`` (int64 ``[K]``); return their observ
        ``[K, num_agents, obs_dim]``. Other envs are untouched."""
        indices = check_indices(self, indices, "reset")
        if self.backend == "triton":
            mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
            observ = self._launch(None, mask.index_fill_(0, indices, True))[0]
            return observ[indices]
        rows = self._fresh_state(indices, self._restarts[indices])
        self._restarts = self._restarts.index_add(0, indices, torch.ones_like(indices))
        self.state = self.state.index_copy(0, indices, rows)
        self.elapsed = self.elapsed.index_fill(0, indices, 0)
        return self._observe(rows, self.elapsed[indices])

    def reset_where(self, mask: torch.Tensor) -> torch.Tensor:
        """Start new episodes in the envs where ``mask`` (bool ``[E]``) is set; return the
        observation of every env ``[E, num_agents, obs_dim]``.

        The traceable form of :meth:`reset` (no index set) that ``rollout()`` calls on
        every step; an env's fresh start is the one :meth:`reset` would draw for it.
        """
        mask = check_reset_mask(self, mask)
        if self.backend == "triton":
            return self._launch(None, mask)[0]
        rows = torch.arange(self.num_envs, device=self.device)
        fresh = self._fresh_state(rows, self._restarts)
        self._restarts = self._restarts + mask.to(torch.int64)
        self.state = torch.where(mask[:, None, None], fresh, self.state)
        self.elapsed = torch.where(mask, 0, self.elapsed)
        return self._observe(self.state, self.elapsed)

    def step(
        self, action: torch.Tensor, reset_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every env; return ``(observ, reward, terminated, truncated)``.

        ``observ`` float32 ``[E, agents, obs_dim]``, ``reward`` float32 ``[E, agents]``,
        the flags bool ``[E]``. ``reset_mask`` (bool ``[E]``, optional) starts the marked
        envs afresh *instead* of stepping them: actions ignored, initial observation,
        reward 0, both flags False (next-step autoreset; the terminal observation was
        returned by the previous step). One kernel launch on the triton backend.
        """
        self._check_action(action)
        action = action.to(self.device)
        if reset_mask is not None:
            reset_mask = check_reset_mask(self, reset_mask)
        if self.backend == "triton":
            return self._launch(action, reset_mask)
        state, reward, terminated = self._torch_step(self.state, self.elapsed, action)
        elapsed = self.elapsed + 1
        if reset_mask is not None:
            rows = torch.arange(self.num_envs, device=self.device)
            fresh = self._fresh_state(rows, self._restarts)
            self._restarts = self._restarts + reset_mask.to(torch.int64)
            state = torch.where(reset_mask[:, None, None], fresh, state)
            reward = torch.where(reset_mask[:, None], 0.0, reward)
            terminated = terminated & ~reset_mask
            elapsed = torch.where(reset_mask, 0, elapsed)
        self.state, self.elapsed = state, elapsed
        truncated = elapsed >= self.episode_length
        return self._observe(state, elapsed), reward, terminated, truncated

    # -- state access (tests, the consistency checker, checkpointing) --------------------

    def get_state(self) -> dict[str, torch.Tensor]:
        """Clones of ``{"state": [E, agents, state_dim], "elapsed": [E] int32}``."""
        return {"state": self.state.clone(), "elapsed": self.elapsed.clone()}

    def set_state(
        self, state: dict[str, torch.Tensor], indices: torch.Tensor | None = None
    ) -> None:
        """Overwrite envs ``indices`` (all when None) with ``"state"`` ``[K, agents,
        state_dim]`` and/or ``"elapsed"`` ``[K]``; values are cast to the env's dtypes."""
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
            rows = torch.as_tensor(state["state"]).to(self.device)
            expected = (k, self.num_agents, self.state_dim)
            if tuple(rows.shape) != expected:
                raise ValueError(
                    f"{name}.set_state: 'state' has shape {tuple(rows.shape)}, expected {expected}"
                )
            if not self.state_dtype.is_floating_point and rows.dtype.is_floating_point:
                rows = rows.round()
            self.state = self.state.index_copy(0, indices, rows.to(self.state_dtype))
        if "elapsed" in state:
            steps = torch.as_tensor(state["elapsed"]).to(self.device, torch.int32)
            if tuple(steps.shape) != (k,):
                raise ValueError(
                    f"{name}.set_state: 'elapsed' has shape {tuple(steps.shape)}, expected ({k},)"
                )
            self.elapsed = self.elapsed.index_copy(0, indices, steps)

    # -- checks ----------------------------------------------------------------------------

    def _check_action(self, action: torch.Tensor) -> None:
        # Shape and dtype only: static under torch.compile, no host sync.
        expected = (self.num_envs, self.num_agents, *self.single_action_space.shape)
        if (
            not isinstance(action, torch.Tensor)
            or tuple(action.shape) != expected
            or action.dtype.is_floating_point
            or action.dtype == torch.bool
        ):
            raise ValueError(
                f"{type(self).__name__}.step: action must be an integer tensor of shape "
                f"{expected} (envs, agents{', 2' if len(expected) == 3 else ''}), "
                f"got {describe(action)}"
            )

    # -- hooks -----------------------------------------------------------------------------

    episode_length: int

    def _fresh_state(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Initial states ``[K, agents, state_dim]`` of envs ``rows`` at restart number
        ``counts`` (torch backend)."""
        width = self.num_agents * self.draws_per_agent
        u = counter_uniform(self._key, rows, counts, width)
        return self._starts(u.reshape(rows.shape[0], self.num_agents, self.draws_per_agent))

    #: Uniforms one agent's start takes.
    draws_per_agent: int

    def _starts(self, u: torch.Tensor) -> torch.Tensor:
        """Initial states from uniforms ``[K, agents, draws_per_agent]`` (torch backend)."""
        raise NotImplementedError

    def _torch_step(
        self, state: torch.Tensor, elapsed: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(next_state, reward [E, agents], terminated [E])`` (torch backend)."""
        raise NotImplementedError

    def _observe(self, state: torch.Tensor, elapsed: torch.Tensor) -> torch.Tensor:
        """float32 observations ``[K, agents, obs_dim]`` of states (torch backend)."""
        raise NotImplementedError

    def _launch(
        self, action: torch.Tensor | None, reset_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """One launch of the triton kernel (a reset of the masked envs when no action)."""
        raise NotImplementedError
