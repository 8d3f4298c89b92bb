"""The one scaffold of batchenv's kernel envs (classic control, Tag, MinAtar): everything
but the game.

Every env keeps the same tensors, on both backends::

    state     [num_envs, *state_shape]  -- the env's own state (float or int), or a dict of
                                           such tensors by name (MinAtar's fields)
    elapsed   [num_envs]  int32         -- steps since the row's fresh start
    _restarts [num_envs]  int64         -- draw events so far (the row's RNG counter): its
                                           fresh starts, and also its steps if random_steps

A family base (``_classic.ClassicControlEnv``, ``_tag.TagEnvBase``,
``minatar._base.MinAtarEnv``) subclasses :class:`KernelEnv`, calls :meth:`KernelEnv._setup`
from its ``__init__`` and, with its env modules, supplies the hooks:

- ``_prepare()``: the env's constant tensors, built once the arguments are checked;
- ``_initial(u) -> state``: fresh states of K rows from uniforms ``[K, draws]``;
- ``_act(state, action, elapsed) -> (state, reward, terminated)``: one step of every row;
- ``_observe(state, elapsed) -> observ``: float32 observations (new tensors);
- ``_check_action(action)``: shape and dtype only;
- ``_triton_kernel()``: the env module's ``_step_kernel`` (where it can run, and what
  :meth:`KernelEnv._launch` launches), or None for an env with no triton backend;
- ``_kernel_options() -> (grid, kwargs)``: the launch's grid and the kernel's own arguments
  besides the ones every kernel env takes (see :meth:`KernelEnv._launch`).

A family whose games write ``_initial``, ``_act`` and ``_observe`` with other arguments
(MinAtar's take named random draws, and their base adds sticky actions and frozen terminal
rows) overrides the three methods that call them instead: ``_fresh_state(rows, u)``,
``_advance(state, action, elapsed, u)`` and ``_observation(state, elapsed)``.

Everything else lives here: argument checks, seeding, ``reset``, ``reset_where``,
``step(reset_mask=...)``, ``seed``, ``get_state``/``set_state`` and the kernel launch.

Backends:

- ``"torch"``: plain tensor ops on any device. ``step`` writes the new ``state``/``elapsed``
  (and the restart counts) into the existing tensors, as the kernels do: a compiled step then
  allocates no state tensors and has no attribute assignments to replay after its graph.
  Fresh starts are a counter-based hash of (seed, row, number of fresh starts of that row)
  (``batchenv.in_graph.counter_rng``): no generator state, so a compiled step that starts
  finished rows afresh has no graph break.
- ``"triton"``: one kernel launch per ``step`` (the step, and the fresh starts of
  ``reset_mask`` rows) writes ``state``/``elapsed`` in place. Fresh starts come from Philox
  inside the kernel, keyed by the seed and counted per row; a family may hand its kernel
  the torch backend's uniforms instead (MinAtar does: its two backends are bit for bit the
  same). It runs on CUDA devices, and on
  CPU under Triton's interpreter (``TRITON_INTERPRET=1`` set before ``batchenv.kernels`` is
  imported; slow).

No two fresh starts of a run repeat; with Philox in the kernel, the two backends draw
different starts from one seed.
On both, observations are new tensors: one handed out earlier never changes under the
caller, and writing into it never touches the env.
"""

from __future__ import annotations

import secrets
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from batchenv.in_graph.counter_rng import counter_uniform, make_key

from . import _triton
from ._checks import check_indices, check_reset_mask

BACKENDS = ("torch", "triton")

#: A state: one tensor ``[N, ...]``, or a dict of them by name.
State = torch.Tensor | dict[str, torch.Tensor]
#: A state's per-row ``(shape, dtype)``, or a dict of them by name.
Layout = tuple[tuple[int, ...], torch.dtype] | dict[str, tuple[tuple[int, ...], torch.dtype]]


class KernelEnv:
    """A batch of ``num_envs`` copies of one env with a torch and a triton backend; see the
    module docstring for the tensors, the hooks and the backends."""

    #: Whether ``seed`` may be a list of ints, one per equal block of rows (torch backend,
    #: and the triton backend where ``triton_seed_blocks``).
    seed_blocks: bool = False
    triton_seed_blocks: bool = False
    #: Truncated once ``elapsed >= max_episode_steps`` (Gymnasium's TimeLimit); None: never.
    max_episode_steps: int | None
    #: Uniforms one draw event of a row takes (the width of ``_uniforms``).
    draws: int
    #: Whether every step is a draw event of every row (torch backend): its uniforms go to
    #: ``_advance``, and a row that ``reset_mask`` starts afresh in that step takes its fresh
    #: start from them. False: only fresh starts draw.
    random_steps: bool = False
    #: ``elapsed``'s dtype (the triton kernels take int32).
    elapsed_dtype: torch.dtype = torch.int32
    #: ``observ``'s dtype on both backends (MinAtar's observations are bool).
    observation_dtype: torch.dtype = torch.float32
    #: Axes between the row and the features of ``observ`` and ``reward`` (agents).
    agent_shape: tuple[int, ...] = ()
    single_observation_space: gym.spaces.Box
    single_action_space: gym.Space

    def _setup(
        self,
        num_envs: int,
        device: str | torch.device,
        seed: int | list[int] | None,
        backend: str,
        layout: Layout,
    ) -> None:
        """Check the arguments every kernel env takes, then draw every row's first state.

        ``layout`` is the state's per-row ``(shape, dtype)``, or ``{name: (shape, dtype)}``
        for a state of named tensors.
        """
        name = type(self).__name__
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"{name}(num_envs={num_envs!r}): num_envs must be an int >= 1")
        if backend not in BACKENDS:
            raise ValueError(
                f"{name}(backend={backend!r}): unknown backend; choose one of {BACKENDS}"
            )
        self._block: int | None = None  # rows per seed when seeded per block
        if self.seed_blocks and isinstance(seed, (list, tuple)):
            if (
                not seed
                or any(isinstance(s, bool) or not isinstance(s, int) for s in seed)
                or num_envs % len(seed)
                or (backend != "torch" and not self.triton_seed_blocks)
            ):
                backends = "" if self.triton_seed_blocks else " and backend='torch'"
                raise ValueError(
                    f"{name}(seed={seed!r}): a list of seeds needs ints, num_envs divisible "
                    f"by their number{backends}"
                )
            self._block = num_envs // len(seed)
            seed = list(seed)
        elif seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            kinds = "an int, a list of ints or None" if self.seed_blocks else "an int or None"
            raise ValueError(f"{name}(seed={seed!r}): seed must be {kinds}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.backend = backend
        if backend == "triton":
            kernel = self._triton_kernel()
            if kernel is None:
                raise NotImplementedError(
                    f"{name}(backend='triton'): {name} has no Triton backend yet; use "
                    "backend='torch' (it runs on any device)"
                )
            reason = _triton.unavailable_reason(kernel, self.device)
            if reason is not None:
                raise NotImplementedError(
                    f"{name}(backend='triton', device='{self.device}'): the GPU-native kernels "
                    f"cannot run here: {reason}; use backend='torch'"
                )
        # Normal tensors even when built under torch.inference_mode(): they are updated in
        # place, which an inference tensor refuses outside inference mode.
        with torch.inference_mode(False):
            self._prepare()
            self.elapsed = torch.zeros(num_envs, dtype=self.elapsed_dtype, device=self.device)
            self.state = _each(
                lambda field: torch.zeros(
                    (num_envs, *field[0]), dtype=field[1], device=self.device
                ),
                layout,
            )
            if seed is None:
                seed = secrets.randbits(64)
            self._seed = seed if self._block is not None else seed % (1 << 64)
            self._restarts = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
            # The torch hash's key; a triton kernel may take its uniforms too (MinAtar's).
            self._key = self._make_key(self._seed)
            if backend == "triton":
                self._launch(None, torch.ones(num_envs, dtype=torch.bool, device=self.device))
                return
            everyone = self._everyone()
            _each(
                torch.Tensor.copy_,
                self.state,
                self._fresh_state(everyone, self._uniforms(everyone)),
            )
            self._restarts += 1

    # -- the InGraphEnv protocol ---------------------------------------------------------

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        """Start rows ``indices`` (int64 ``[K]``) afresh; return their observations ``[K, ...]``.

        Other rows are untouched. Every fresh start is new: the rows' restart counts move on.
        """
        indices = check_indices(self, indices, "reset")
        if self.backend == "triton":
            mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
            observ = self._launch(None, mask.index_fill_(0, indices, True))[0]
            return observ[indices]
        return self._reset_rows(indices, self._uniforms(indices))

    def reset_where(self, mask: torch.Tensor) -> torch.Tensor:
        """Start the rows where ``mask`` (bool ``[N]``) is set afresh; return every row's
        observation.

        The traceable form of :meth:`reset` (no index set) that ``rollout()`` calls on every
        step; a row's fresh start is the one :meth:`reset` would draw for it.
        """
        mask = check_reset_mask(self, mask)
        if self.backend == "triton":
            return self._launch(None, mask)[0]
        everyone = self._everyone()
        fresh = self._fresh_state(everyone, self._uniforms(everyone))
        self._restarts.add_(mask.to(torch.int64))
        state = rows_where(mask, fresh, self.state)
        elapsed = torch.where(mask, 0, self.elapsed)
        _each(torch.Tensor.copy_, self.state, state)
        self.elapsed.copy_(elapsed)
        return self._observation(state, elapsed)

    def step(
        self, action: torch.Tensor, reset_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance every row by one step; return ``(observ, reward, terminated, truncated)``.

        ``observ`` and ``reward`` are float32 (``[N, ...]``), the flags bool ``[N]``. No host
        sync, no data-dependent shapes.

        ``reset_mask`` (bool ``[N]``, optional) starts the marked rows afresh *instead* of
        stepping them: their action is ignored, and they return their initial observation,
        reward 0 and both flags False (Gymnasium's next-step autoreset). Pass the rows that
        finished at the previous step: their terminal observation was returned then, and a
        rollout loop never has to leave the device. On the triton backend this is still one
        kernel launch.
        """
        action, reset_mask = self._step_arguments(action, reset_mask)
        if self.backend == "triton":
            return self._launch(action, reset_mask)
        return self._torch_step(action, reset_mask)

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
        self._seed = seed % (1 << 64)
        self._restarts.zero_()
        self._key = self._make_key(self._seed)

    # -- state access (tests, the consistency checker, checkpointing) --------------------

    def get_state(self) -> dict[str, torch.Tensor]:
        """Return clones of the state's tensors by name: ``"state"`` ``[N, *state_shape]``
        (or each named tensor of a dict state) and ``"elapsed"`` ``[N]``."""
        return {key: value.clone() for key, value in self._named().items()}

    def set_state(self, state: dict[str, Any], indices: torch.Tensor | None = None) -> None:
        """Overwrite rows ``indices`` (all rows when None) with the given tensors.

        ``state`` holds some of :meth:`get_state`'s keys, each ``[K, ...]``; a key that is
        left out keeps its current value. Values are cast to the env's dtypes and device
        (floats rounded first for an integer or bool tensor).
        """
        name = type(self).__name__
        targets = self._named()
        unknown = set(state) - set(targets)
        if unknown:
            expected = ", ".join(repr(key) for key in targets)
            raise ValueError(
                f"{name}.set_state: unknown keys {sorted(unknown)}; expected some of {expected}"
            )
        if indices is None:
            indices = self._everyone()
        else:
            indices = check_indices(self, indices, "set_state")
        for key, value in state.items():
            target = targets[key]
            rows = torch.as_tensor(value if torch.is_tensor(value) else np.asarray(value))
            rows = rows.to(self.device)
            expected = (indices.shape[0], *target.shape[1:])
            if tuple(rows.shape) != expected:
                raise ValueError(
                    f"{name}.set_state: {key!r} has shape {tuple(rows.shape)}, expected {expected}"
                )
            if not target.dtype.is_floating_point and rows.dtype.is_floating_point:
                rows = rows.round()
            target.index_copy_(0, indices, rows.to(target.dtype))

    # -- hooks (see the module docstring) ------------------------------------------------------

    def _prepare(self) -> None:
        """Build the env's constant tensors on ``self.device`` (the arguments are checked)."""

    def _initial(self, u: torch.Tensor) -> torch.Tensor:
        """Fresh states ``[K, *state_shape]`` from uniforms ``[K, draws]`` (torch backend)."""
        raise NotImplementedError

    def _act(
        self, state: torch.Tensor, action: torch.Tensor, elapsed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(next_state, reward, terminated)`` of every row (torch backend)."""
        raise NotImplementedError

    def _observe(self, state: torch.Tensor, elapsed: torch.Tensor) -> torch.Tensor:
        """float32 observations of K rows' states (a new tensor; torch backend)."""
        raise NotImplementedError

    def _check_action(self, action: torch.Tensor) -> None:
        raise NotImplementedError

    @staticmethod
    def _triton_kernel():
        """The env module's ``_step_kernel``; None: the env has no triton backend."""
        return None

    def _kernel_options(self) -> tuple[tuple[int, ...], dict[str, Any]]:
        """The launch grid and the kernel's own arguments (keywords) besides the common ones."""
        raise NotImplementedError

    # -- what calls the torch hooks (a family overrides these; see the module docstring) --

    def _fresh_state(self, rows: torch.Tensor, u: Any) -> State:
        """Fresh states of ``rows`` (int64 [K]) from their draw event's uniforms ``u``."""
        return self._initial(u)

    def _advance(
        self, state: State, action: torch.Tensor, elapsed: torch.Tensor, u: Any
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        """``(next_state, reward, terminated)`` of every row; ``u`` is the step's uniforms
        when ``random_steps`` (else None, or the fresh starts' uniforms)."""
        return self._act(state, action, elapsed)

    def _observation(self, state: State, elapsed: torch.Tensor) -> torch.Tensor:
        """The observations of K rows' states (a new tensor)."""
        return self._observe(state, elapsed)

    # -- helpers ---------------------------------------------------------------------------

    def _step_arguments(
        self, action: torch.Tensor, reset_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``step``'s arguments checked, the action on the env's device."""
        self._check_action(action)
        action = action.to(self.device)
        if reset_mask is not None:
            reset_mask = check_reset_mask(self, reset_mask)
        return action, reset_mask

    def _torch_step(
        self, action: torch.Tensor, reset_mask: torch.Tensor | None, given: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The torch backend's :meth:`step` of checked arguments; ``given`` (when not None)
        replaces the uniforms ``_advance`` takes (fresh starts still draw their own)."""
        everyone = self._everyone()
        u = None
        if self.random_steps or reset_mask is not None:
            u = self._uniforms(everyone)
        state, reward, terminated = self._advance(
            self.state, action, self.elapsed, u if given is None else given
        )
        elapsed = self.elapsed + 1
        if reset_mask is not None:
            fresh = self._fresh_state(everyone, u)
            state = rows_where(reset_mask, fresh, state)
            reward = torch.where(_per_row(reset_mask, reward), 0.0, reward)
            terminated = terminated & ~reset_mask
            elapsed = torch.where(reset_mask, 0, elapsed)
        if self.random_steps:
            self._restarts.add_(1)
        elif reset_mask is not None:
            self._restarts.add_(reset_mask.to(torch.int64))
        # In place (see the module docstring): observations are made from the local tensors,
        # so none handed out aliases the state.
        _each(torch.Tensor.copy_, self.state, state)
        self.elapsed.copy_(elapsed)
        if self.max_episode_steps is None:
            truncated = torch.zeros_like(terminated)
        else:
            truncated = elapsed >= self.max_episode_steps
        return self._observation(state, elapsed), reward.to(torch.float32), terminated, truncated

    def _reset_rows(self, indices: torch.Tensor, u: Any) -> torch.Tensor:
        """The torch backend's :meth:`reset` of checked ``indices``, from uniforms ``u``."""
        rows = self._fresh_state(indices, u)
        self._restarts.index_add_(0, indices, torch.ones_like(indices))
        _each(lambda field, fresh: field.index_copy_(0, indices, fresh), self.state, rows)
        self.elapsed.index_fill_(0, indices, 0)
        return self._observation(rows, self.elapsed[indices])

    def _named(self) -> dict[str, torch.Tensor]:
        """The env's tensors by their :meth:`get_state` names."""
        named = dict(self.state) if isinstance(self.state, dict) else {"state": self.state}
        named["elapsed"] = self.elapsed
        return named

    def _launch(
        self, action: torch.Tensor | None, reset_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """One launch of the triton backend's kernel: a step, or a reset when ``action`` is
        None (only the rows in ``reset_mask`` start afresh). Owns the output buffers.

        Every kernel env's ``_step_kernel`` takes these arguments first, in this order:
        ``state`` (a dict state as the tuple of its tensors, in the dict's order),
        ``elapsed, restarts`` (in and out), ``action``, ``reset_mask``, ``observ``,
        ``reward``, ``terminated``, ``truncated`` (out), the Philox key's two words, and the
        constexprs ``STEP`` (step the rows) and ``RESET`` (``reset_mask`` is given).

        Returns ``(observ, reward, terminated, truncated)``, the last three None for a reset.
        ``observ`` is a new tensor: it never aliases the state.
        """
        n, device = self.num_envs, self.device
        step = action is not None
        observ_shape = (n, *self.agent_shape, *self.single_observation_space.shape)
        observ = torch.empty(observ_shape, dtype=self.observation_dtype, device=device)
        if step:
            reward = torch.empty((n, *self.agent_shape), dtype=torch.float32, device=device)
            terminated = torch.empty(n, dtype=torch.bool, device=device)
            truncated = torch.empty(n, dtype=torch.bool, device=device)
            action = action.contiguous()
        else:  # never read or written (STEP is False); any pointer of the right kind will do
            reward, terminated, truncated, action = observ, self.elapsed, self.elapsed, self.elapsed
        # Philox's key (per-block seeds: the kernel keys its draws itself, MinAtar's way)
        key_lo, key_hi = _triton.split_key(self._seed) if self._block is None else (0, 0)
        grid, options = self._kernel_options()
        self._triton_kernel()[grid](
            tuple(self.state.values()) if isinstance(self.state, dict) else self.state,
            self.elapsed,
            self._restarts,
            action,
            reset_mask if reset_mask is not None else self.elapsed,
            observ,
            reward,
            terminated,
            truncated,
            key_lo,
            key_hi,
            STEP=step,
            RESET=reset_mask is not None,
            # Round op by op, like torch's eager kernels and NumPy, instead of contracting
            # a * b + c into FMAs (Triton 3.9 still defaults to fusing and warns that the
            # default changes).
            enable_fp_fusion=False,
            **options,
        )
        if not step:
            return observ, None, None, None
        return observ, reward, terminated, truncated

    def _uniforms(self, rows: torch.Tensor) -> Any:
        """The next draw event of ``rows`` (int64 [K]): uniforms ``[K, draws]`` at their
        current counts (a family may hand them on in another form: MinAtar's by name).

        Counter-based (no generator state), so ``torch.compile`` traces it without a graph
        break. The caller advances ``_restarts`` of the rows whose event it used.
        """
        if self._block is None:
            return counter_uniform(self._key, rows, self._restarts[rows], self.draws)
        # row r of block b draws what row r of a lone env seeded seed[b] draws
        return counter_uniform(
            self._key[rows], rows % self._block, self._restarts[rows], self.draws
        )

    def _make_key(self, seed: int | list[int]) -> torch.Tensor:
        """The RNG key: a scalar, or one per row when seeded per block (K seeds in one env)."""
        if self._block is None:
            return make_key(seed, self.device)
        keys = torch.stack([make_key(s, self.device) for s in seed])
        return keys.repeat_interleave(self._block)

    def _everyone(self) -> torch.Tensor:
        return torch.arange(self.num_envs, device=self.device)


def _per_row(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` (``[N]``) shaped to broadcast over the rows of ``like`` (``[N, ...]``)."""
    return mask.reshape(mask.shape[0], *([1] * (like.dim() - 1)))


def rows_where(mask: torch.Tensor, a: State, b: State) -> State:
    """Per row: ``a`` where ``mask`` (bool ``[N]``) is set, else ``b`` (tensors or dicts of
    them; a dict result has ``b``'s keys)."""
    return _each(lambda no, yes: torch.where(_per_row(mask, no), yes, no), b, a)


def _each(function: Any, tree: Any, *others: Any) -> Any:
    """``function`` of a state's tensor (and the matching ones of ``others``), or of each
    tensor of a dict state (a dict of the results, by ``tree``'s keys)."""
    if isinstance(tree, dict):
        return {key: function(value, *(o[key] for o in others)) for key, value in tree.items()}
    return function(tree, *others)
