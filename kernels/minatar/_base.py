"""The batched MinAtar base: everything the five games share (docs/minatar.md).

A game module (``breakout.py``, ...) subclasses :class:`MinAtarEnv` once and declares:

- ``game``: the ``minatar.environments`` module it reproduces (``"breakout"``);
- ``channels``: the observation channels in MinAtar's order;
- ``minimal_actions``: the full-set ids of the game's minimal action set (MinAtar's order);
- ``fields``: ``{name: (per-row shape, dtype)}`` of its state tensors;
- ``reset_draws`` / ``step_draws``: the :class:`Draw` groups a fresh start / a step consumes
  (either may be empty: Asterix's fresh start draws nothing);

and implements four functions of plain tensor code (no ``.item()``, no Python ``if`` on a
value, so a compiled rollout has no graph break):

- ``_initial(rows, draws) -> state``: fresh states of ``rows`` (an int, K) rows from their
  reset draws (``draws[name]`` is ``[K, count]`` for each of ``reset_draws``);
- ``_act(state, action, draws) -> (state, reward, terminal)``: one step of MinAtar's
  ``Env.act`` for rows that are not terminal yet (``action`` holds full-set ids 0..5);
- ``_observe(state) -> observ``: bool ``[K, 10, 10, C]``, MinAtar's ``Env.state()``;
- ``state_from_reference(game) -> {name: value}`` (static): a ``minatar`` game object's state
  as one row of ``fields`` (the consistency checker loads it with ``set_state``).

The base does the rest, as ``minatar.Environment`` does around ``Env.act``: the sticky action
(``rand() < sticky_action_prob`` keeps the previous action, drawn before the game's step and
also on terminal rows), the frozen terminal rows (reward 0, state kept), the action sets,
seeding, ``reset``/``reset_where``/``step(reset_mask=...)``, ``get_state``/``set_state``.
``last_action`` (a full-set id) is kept across resets, as the reference keeps it.

Random draws. Every draw is a float uniform in [0, 1) that the game turns into its event
(``u < p`` for ``rand() < p``, ``lo + floor(u * (hi - lo))`` for ``randint(lo, hi)``). By
default they come from ``counter_uniform(key, row, count)``: ``count`` is the row's number of
draw events so far (a step or a fresh start each), so no graph break and no two events of a
run repeat. ``step(action, draws=...)`` and ``reset(indices, draws=...)`` take them from the
caller instead: ``{name: [rows, count]}``, any float dtype, the step's including
``"sticky"``. The checker feeds the reference's ``RandomState`` values this way; each
:class:`Draw` names the reference method (``site``) whose calls it stands for.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from batchenv.in_graph.counter_rng import counter_uniform, make_key

from .._checks import check_indices, check_reset_mask, describe

#: MinAtar's full action set, in its order (``Env.action_map``).
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)
SIZE = 10  # the grid is SIZE x SIZE


@dataclass(frozen=True)
class Draw:
    """A group of ``count`` uniforms a game consumes per row (a fresh start or a step).

    ``site`` is the reference method whose ``RandomState`` calls they stand for, as
    ``"Class.method"`` (``"Env._randomize_cars"``): the checker hands the k-th call a step
    makes from that method to the k-th :class:`Draw` with that site, in declaration order.
    """

    name: str
    count: int
    site: str


STICKY = Draw("sticky", 1, "Environment.act")  # the wrapper's rand() < sticky_action_prob

# Base fields every game has besides its own (written by the base, read by nobody else).
_BASE_FIELDS = {
    "terminal": ((), torch.bool),
    "last_action": ((), torch.int64),  # full-set id of the action taken last (sticky actions)
    "elapsed": ((), torch.int64),  # steps since the row's fresh start (for max_episode_steps)
}


class MinAtarEnv:
    """A batch of ``num_envs`` copies of one MinAtar game; see the module docstring.

    Args:
        num_envs: rows (>= 1).
        device: where the state lives (any torch device).
        seed: an int, a list of ints (one per equal block of rows: block b draws what a lone
            env seeded ``seed[b]`` draws), or None for a fresh random seed.
        backend: ``"torch"`` only (a Triton backend is not written yet).
        minimal_action_set: ``Discrete(len(minimal_actions))`` actions as MinAtar's ``-v1``
            gym ids (default); False: all six, as ``-v0``.
        sticky_action_prob: chance that a step repeats the previous action (MinAtar's 0.1).
        difficulty_ramping: MinAtar's ramping (games without one ignore it).
        max_episode_steps: truncate after this many steps; None (default) as MinAtar: no limit.
    """

    game: str
    channels: tuple[str, ...]
    minimal_actions: tuple[int, ...]
    fields: dict[str, tuple[tuple[int, ...], torch.dtype]]
    reset_draws: tuple[Draw, ...] = ()
    step_draws: tuple[Draw, ...] = ()
    #: Inductor options for a compiled rollout of this env (batchenv.in_graph.rollout reads
    #: them). No CPU vectorisation: the games' 10-wide rows became masked 16-lane vector
    #: loads and stores, which made a compiled Breakout step 4x slower than eager (34 ms at
    #: 4,096 rows); scalar code runs it in 3.7 ms and compiles in 25 s instead of 38 s.
    compile_options = {"cpp.simdlen": 1}

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | Sequence[int] | None = None,
        backend: str = "torch",
        *,
        minimal_action_set: bool = True,
        sticky_action_prob: float = 0.1,
        difficulty_ramping: bool = True,
        max_episode_steps: int | None = None,
    ) -> None:
        name = type(self).__name__
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"{name}(num_envs={num_envs!r}): num_envs must be an int >= 1")
        if backend != "torch":
            raise NotImplementedError(
                f"{name}(backend={backend!r}): MinAtar has no Triton backend yet; use "
                "backend='torch' (it runs on any device)"
            )
        if not 0.0 <= float(sticky_action_prob) <= 1.0:
            raise ValueError(
                f"{name}(sticky_action_prob={sticky_action_prob!r}): must be in [0, 1]"
            )
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool)
            or not isinstance(max_episode_steps, int)
            or max_episode_steps < 1
        ):
            raise ValueError(
                f"{name}(max_episode_steps={max_episode_steps!r}): must be None or an int >= 1"
            )
        self._block: int | None = None  # rows per seed when seeded per block
        if isinstance(seed, (list, tuple)):
            if (
                not seed
                or any(isinstance(s, bool) or not isinstance(s, int) for s in seed)
                or num_envs % len(seed)
            ):
                raise ValueError(
                    f"{name}(seed={seed!r}): a list of seeds needs ints and num_envs "
                    "divisible by their number"
                )
            self._block = num_envs // len(seed)
            seed = list(seed)
        elif seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"{name}(seed={seed!r}): seed must be an int, a list of ints or None")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.backend = backend
        self.minimal_action_set = bool(minimal_action_set)
        self.sticky_action_prob = float(sticky_action_prob)
        self.ramping = bool(difficulty_ramping)
        self.max_episode_steps = max_episode_steps
        actions = self.minimal_actions if self.minimal_action_set else tuple(range(6))
        self._action_table = torch.tensor(actions, dtype=torch.int64, device=self.device)
        self.single_observation_space = gym.spaces.Box(
            0.0, 1.0, shape=(SIZE, SIZE, len(self.channels)), dtype=bool
        )
        self.single_action_space = gym.spaces.Discrete(len(actions))
        self._all_fields = {**self.fields, **_BASE_FIELDS}
        self._draws = (*self.reset_draws, STICKY, *self.step_draws)  # one event's columns
        self._width = sum(d.count for d in self._draws)
        # Normal tensors even under torch.inference_mode(): they are written in place.
        with torch.inference_mode(False):
            self._seed = secrets.randbits(64) if seed is None else seed
            self._key = self._make_key(self._seed)
            self._events = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
            self.state = {
                key: torch.zeros((num_envs, *shape), dtype=dtype, device=self.device)
                for key, (shape, dtype) in self._all_fields.items()
            }
            self.reset_where(torch.ones(num_envs, dtype=torch.bool, device=self.device))

    def __repr__(self) -> str:
        actions = "minimal" if self.minimal_action_set else "full"
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device}, "
            f"actions={actions}, sticky_action_prob={self.sticky_action_prob}, "
            f"difficulty_ramping={self.ramping})"
        )

    # -- the InGraphEnv protocol ---------------------------------------------------------

    def reset(
        self, indices: torch.Tensor, draws: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Start rows ``indices`` (int64 ``[K]``) afresh; return their observations ``[K, ...]``.

        ``draws`` (``{name: [K, count]}`` for each of ``reset_draws``) replaces the rows'
        own random draws. ``last_action`` is kept, as MinAtar keeps it.
        """
        indices = check_indices(self, indices, "reset")
        if draws is None:
            draws = self._uniforms(indices)
        else:
            draws = self._check_draws(draws, self.reset_draws, len(indices), "reset")
        self._events.index_add_(0, indices, torch.ones_like(indices))
        fresh = self._fresh(self._initial(len(indices), draws), self.state["last_action"][indices])
        for key, value in fresh.items():
            self.state[key].index_copy_(0, indices, value)
        return self._observe(fresh)

    def reset_where(self, mask: torch.Tensor) -> torch.Tensor:
        """Start the rows where ``mask`` (bool ``[N]``) is set afresh; return every row's
        observation. The traceable :meth:`reset` that ``rollout()`` calls every step."""
        mask = check_reset_mask(self, mask)
        fresh = self._fresh(
            self._initial(self.num_envs, self._uniforms(None)), self.state["last_action"]
        )
        self._events.add_(mask.to(torch.int64))
        state = _where(mask, fresh, self.state)
        self._write(state)
        return self._observe(state)

    def step(
        self,
        action: torch.Tensor,
        reset_mask: torch.Tensor | None = None,
        draws: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every row; return ``(observ, reward, terminated, truncated)``.

        ``observ`` is bool ``[N, 10, 10, C]``, ``reward`` float32 ``[N]``, the flags bool
        ``[N]``. A terminal row stays as it is (reward 0, terminated) until it is reset.
        ``reset_mask`` (bool ``[N]``) starts the marked rows afresh *instead* of stepping
        them (reward 0, flags False), as ``ClassicControlEnv.step`` does. ``draws``
        (``{"sticky": [N, 1], name: [N, count] for each of step_draws}``) replaces the
        step's own random draws (the consistency checker's way in).
        """
        self._check_action(action)
        if reset_mask is not None:
            reset_mask = check_reset_mask(self, reset_mask)
        own = self._uniforms(None)
        if draws is not None:
            draws = self._check_draws(draws, (STICKY, *self.step_draws), self.num_envs, "step")
        else:
            draws = own
        state = self.state
        action = self._action_table[action.to(self.device)]
        action = torch.where(
            draws["sticky"][:, 0] < self.sticky_action_prob, state["last_action"], action
        )
        game = {key: state[key] for key in self.fields}
        moved, reward, terminal = self._act(game, action, draws)
        frozen = state["terminal"]  # MinAtar's act returns (0, True) at once for these rows
        new = _where(frozen, game, moved)
        new["terminal"] = frozen | terminal
        new["last_action"] = action
        new["elapsed"] = state["elapsed"] + 1
        reward = torch.where(frozen, 0.0, reward.to(torch.float32))
        self._events.add_(1)
        if reset_mask is not None:
            fresh = self._fresh(self._initial(self.num_envs, own), state["last_action"])
            new = _where(reset_mask, fresh, new)
            reward = torch.where(reset_mask, 0.0, reward)
        self._write(new)
        if self.max_episode_steps is None:
            truncated = torch.zeros_like(new["terminal"])
        else:
            truncated = new["elapsed"] >= self.max_episode_steps
        return self._observe(new), reward, new["terminal"], truncated

    def seed(self, seed: int) -> None:
        """Re-key the draws: from now on they are those of a new env built with ``seed``
        (the current states are kept; reset rows to start them afresh)."""
        if self._block is not None:
            raise TypeError(
                f"{type(self).__name__}.seed: this env is seeded per block of rows; build a "
                "new one with seed=[...] instead"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"{type(self).__name__}.seed: seed must be an int, got {seed!r}")
        self._seed = seed
        self._key = self._make_key(seed)
        self._events.zero_()

    # -- state access (tests, the consistency checker, checkpointing) --------------------

    def get_state(self) -> dict[str, torch.Tensor]:
        """Clones of every state tensor: the game's ``fields`` and ``terminal``,
        ``last_action``, ``elapsed``, each ``[N, ...]``."""
        return {key: value.clone() for key, value in self.state.items()}

    def set_state(self, state: dict[str, Any], indices: torch.Tensor | None = None) -> None:
        """Overwrite rows ``indices`` (all when None) with ``state`` (``{name: [K, ...]}``,
        any subset of :meth:`get_state`'s keys; values cast to the field's dtype)."""
        name = type(self).__name__
        unknown = set(state) - set(self.state)
        if unknown:
            raise ValueError(
                f"{name}.set_state: unknown keys {sorted(unknown)}; expected some of "
                f"{sorted(self.state)}"
            )
        if indices is None:
            indices = torch.arange(self.num_envs, device=self.device)
        else:
            indices = check_indices(self, indices, "set_state")
        for key, value in state.items():
            shape, dtype = self._all_fields[key]
            rows = torch.as_tensor(np.asarray(value) if not torch.is_tensor(value) else value)
            rows = rows.to(self.device, dtype)
            if tuple(rows.shape) != (len(indices), *shape):
                raise ValueError(
                    f"{name}.set_state: {key!r} has shape {tuple(rows.shape)}, expected "
                    f"{(len(indices), *shape)}"
                )
            self.state[key].index_copy_(0, indices, rows)

    # -- hooks for the game modules --------------------------------------------------------

    def _initial(self, rows: int, draws: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Fresh states (the game's ``fields``, each ``[rows, ...]``) from the rows' reset
        draws (``draws[name]`` is ``[rows, count]`` for each of ``reset_draws``)."""
        raise NotImplementedError

    def _act(
        self, state: dict[str, torch.Tensor], action: torch.Tensor, draws: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """``(state, reward, terminal)`` after one step of rows that are not terminal."""
        raise NotImplementedError

    def _observe(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """bool ``[K, 10, 10, C]``: MinAtar's ``Env.state()`` of each row (a new tensor)."""
        raise NotImplementedError

    @staticmethod
    def state_from_reference(game: Any) -> dict[str, Any]:
        """A ``minatar.environments.<game>.Env`` object's state as one row of ``fields``."""
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------

    def _fresh(
        self, game: dict[str, torch.Tensor], last_action: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """A fresh start's full state (the base fields added)."""
        fresh = dict(game)
        fresh["terminal"] = torch.zeros_like(last_action, dtype=torch.bool)
        fresh["last_action"] = last_action
        fresh["elapsed"] = torch.zeros_like(last_action)
        return fresh

    def _write(self, state: dict[str, torch.Tensor]) -> None:
        # In place, as in _classic.py: a compiled step allocates no state tensors.
        for key, value in state.items():
            self.state[key].copy_(value)

    def _uniforms(self, rows: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The next draw event of ``rows`` (every row when None): ``{name: [K, count]}``.

        The caller advances ``_events`` of the rows whose event it used.
        """
        if rows is None:
            rows = torch.arange(self.num_envs, device=self.device)
        if self._block is None:
            u = counter_uniform(self._key, rows, self._events[rows], self._width)
        else:  # row r of block b draws what row r of a lone env seeded seed[b] draws
            u = counter_uniform(
                self._key[rows], rows % self._block, self._events[rows], self._width
            )
        draws, start = {}, 0
        for draw in self._draws:
            draws[draw.name] = u[:, start : start + draw.count]
            start += draw.count
        return draws

    def _check_draws(
        self, draws: dict[str, Any], expected: tuple[Draw, ...], rows: int, method: str
    ) -> dict[str, torch.Tensor]:
        names = sorted(d.name for d in expected)
        if sorted(draws) != names:
            raise ValueError(
                f"{type(self).__name__}.{method}: draws must have the keys {names}, got "
                f"{sorted(draws)}"
            )
        checked = {}
        for draw in expected:
            value = torch.as_tensor(draws[draw.name], device=self.device)
            if tuple(value.shape) != (rows, draw.count) or not value.dtype.is_floating_point:
                raise ValueError(
                    f"{type(self).__name__}.{method}: draws[{draw.name!r}] must be a float "
                    f"tensor of shape {(rows, draw.count)}, got {describe(value)}"
                )
            checked[draw.name] = value
        return checked

    def _make_key(self, seed: int | list[int]) -> torch.Tensor:
        if self._block is None:
            return make_key(seed, self.device)
        keys = torch.stack([make_key(s, self.device) for s in seed])
        return keys.repeat_interleave(self._block)

    def _check_action(self, action: Any) -> None:
        # Shape and dtype only: static under torch.compile, no host sync.
        if (
            not isinstance(action, torch.Tensor)
            or tuple(action.shape) != (self.num_envs,)
            or action.dtype.is_floating_point
            or action.dtype == torch.bool
        ):
            raise ValueError(
                f"{type(self).__name__}.step: action must be an int64 tensor of shape "
                f"({self.num_envs},) with values in [0, {self.single_action_space.n}), "
                f"got {describe(action)}"
            )


def _where(
    mask: torch.Tensor, a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Per row: ``a`` where ``mask`` (bool ``[K]``) is set, else ``b``; keys of ``b``."""
    out = {}
    for key, value in b.items():
        m = mask.reshape(mask.shape[0], *([1] * (value.dim() - 1)))
        out[key] = torch.where(m, a[key], value)
    return out


# -- grid helpers for the games' tensor code ---------------------------------------------------


def grid(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows [10, 1], cols [1, 10])`` int64 index grids to compare positions against."""
    index = torch.arange(SIZE, device=device)
    return index[:, None], index[None, :]


def cell(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """bool ``[..., 10, 10]``: True at ``(y, x)`` per element of the int tensors ``y``, ``x``."""
    rows, cols = grid(y.device)
    return (rows == y[..., None, None]) & (cols == x[..., None, None])


def cells(y: torch.Tensor, x: torch.Tensor, present: torch.Tensor | None = None) -> torch.Tensor:
    """bool ``[K, 10, 10]``: the union of the cells ``(y[k, m], x[k, m])`` over ``m`` (only
    where ``present[k, m]``, when given); positions off the grid mark nothing."""
    hit = cell(y, x)
    if present is not None:
        hit = hit & present[..., None, None]
    return hit.any(dim=1)


def paint(
    channels: int,
    y: torch.Tensor,
    x: torch.Tensor,
    channel: torch.Tensor,
    present: torch.Tensor | None = None,
) -> torch.Tensor:
    """bool ``[K, 10, 10, channels]``, True at ``(y, x, channel)`` for each element ``[K, M]``
    (where ``present``, when given). One scatter: much cheaper than one-hot planes.

    Elements that are absent, or off the grid, mark nothing (they go to a spare column).
    """
    k = y.shape[0]
    size = SIZE * SIZE * channels
    index = (y * SIZE + x) * channels + channel
    valid = (y >= 0) & (y < SIZE) & (x >= 0) & (x < SIZE)
    if present is not None:
        valid = valid & present
    index = torch.where(valid, index, size).reshape(k, -1)
    canvas = torch.zeros(k, size + 1, dtype=torch.bool, device=y.device)
    canvas = canvas.scatter(1, index, True)
    return canvas[:, :size].reshape(k, SIZE, SIZE, channels)


def at(plane: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``plane[k, y[k], x[k]]`` for a ``[K, 10, 10]`` plane (positions clamped to the grid)."""
    index = (y.clamp(0, SIZE - 1) * SIZE + x.clamp(0, SIZE - 1)).reshape(-1, 1)
    return plane.reshape(plane.shape[0], SIZE * SIZE).gather(1, index)[:, 0]
