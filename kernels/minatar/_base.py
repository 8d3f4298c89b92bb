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

A game with a triton backend also names its Triton device functions in ``triton_functions``
(``_kernel.py`` runs them: the same rules, fed the torch backend's own uniforms, so both
backends give bit-identical results for one seed).

The base does what ``minatar.Environment`` does around ``Env.act``: the sticky action
(``rand() < sticky_action_prob`` keeps the previous action, drawn before the game's step and
also on terminal rows), the frozen terminal rows (reward 0, state kept) and the action sets.
``last_action`` (a full-set id) is kept across resets, as the reference keeps it. The rest
(argument checks, seeding, ``reset``/``reset_where``/``step(reset_mask=...)``,
``get_state``/``set_state``) is ``KernelEnv``'s (``kernels/_base.py``), the scaffold of every
kernel env: here its ``state`` is a dict of the game's ``fields``, ``terminal`` and
``last_action``, and its ``elapsed`` is int64.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from .. import _triton
from .._base import KernelEnv, rows_where
from .._checks import check_indices, describe, is_integer_tensor
from ._kernel import step_kernel

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
}


class MinAtarEnv(KernelEnv):
    """A batch of ``num_envs`` copies of one MinAtar game; see the module docstring.

    Args:
        num_envs: rows (>= 1).
        device: where the state lives (any torch device).
        seed: an int, a list of ints (one per equal block of rows: block b draws what a lone
            env seeded ``seed[b]`` draws), or None for a fresh random seed.
        backend: ``"torch"``, or ``"triton"`` for the games that have a Triton step
            (``triton_functions``; CUDA, or CPU under ``TRITON_INTERPRET=1``): one kernel
            launch per step, bit for bit the torch backend's results for the same seed.
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
    #: The triton backend's ``(load, store, initial, act, select, observe)`` device
    #: functions (``_kernel.py`` says what each does); None: no triton backend.
    triton_functions: tuple[Any, ...] | None = None
    #: Most rows per Triton program (a power of two; games with big tiles take fewer).
    triton_block = 64
    seed_blocks = True
    triton_seed_blocks = True  # the kernel hashes each row under its block's key
    random_steps = True  # the sticky action, and the games' own events
    elapsed_dtype = torch.int64
    observation_dtype = torch.bool
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
        self.minimal_action_set = bool(minimal_action_set)
        self.sticky_action_prob = float(sticky_action_prob)
        self.ramping = bool(difficulty_ramping)
        self.max_episode_steps = max_episode_steps
        self.single_observation_space = gym.spaces.Box(
            0.0, 1.0, shape=(SIZE, SIZE, len(self.channels)), dtype=bool
        )
        self.single_action_space = gym.spaces.Discrete(len(self._actions()))
        self._draws = (*self.reset_draws, STICKY, *self.step_draws)  # one event's columns
        self.draws = sum(d.count for d in self._draws)
        self._setup(num_envs, device, seed, backend, {**self.fields, **_BASE_FIELDS})

    def __repr__(self) -> str:
        actions = "minimal" if self.minimal_action_set else "full"
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device}, "
            f"actions={actions}, sticky_action_prob={self.sticky_action_prob}, "
            f"difficulty_ramping={self.ramping})"
        )

    # -- reset and step with the caller's draws (the consistency checker's way in) ---------

    def reset(
        self, indices: torch.Tensor, draws: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Start rows ``indices`` (int64 ``[K]``) afresh; return their observations ``[K, ...]``.

        ``draws`` (``{name: [K, count]}`` for each of ``reset_draws``) replaces the rows'
        own random draws. ``last_action`` is kept, as MinAtar keeps it.
        """
        if draws is None:
            return super().reset(indices)
        self._refuse_draws_on_triton("reset")
        indices = check_indices(self, indices, "reset")
        draws = self._check_draws(draws, self.reset_draws, len(indices), "reset")
        return self._reset_rows(indices, draws)

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
        them (reward 0, flags False), as ``KernelEnv.step`` does. ``draws``
        (``{"sticky": [N, 1], name: [N, count] for each of step_draws}``) replaces the
        step's own random draws (the consistency checker's way in).
        """
        action, reset_mask = self._step_arguments(action, reset_mask)
        if draws is not None:
            self._refuse_draws_on_triton("step")
            draws = self._check_draws(draws, (STICKY, *self.step_draws), self.num_envs, "step")
        if self.backend == "triton":
            return self._launch(action, reset_mask)
        return self._torch_step(action, reset_mask, draws)

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

    # -- KernelEnv's callers of the hooks, for the games' hooks ----------------------------

    def _prepare(self) -> None:
        self._action_table = torch.tensor(self._actions(), dtype=torch.int64, device=self.device)
        if self.backend == "triton":  # the kernel's draws, rewritten by every launch
            self._scratch = torch.empty(
                self.num_envs, self.draws, dtype=torch.float32, device=self.device
            )

    def _fresh_state(
        self, rows: torch.Tensor, u: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        # A fresh start's full state: the game's, the row's last action kept, not terminal.
        fresh = dict(self._initial(len(rows), u))
        last_action = self.state["last_action"][rows]
        fresh["terminal"] = torch.zeros_like(last_action, dtype=torch.bool)
        fresh["last_action"] = last_action
        return fresh

    def _advance(
        self,
        state: dict[str, torch.Tensor],
        action: torch.Tensor,
        elapsed: torch.Tensor,
        u: dict[str, torch.Tensor],
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        # MinAtar's Environment.act around the game's: the sticky action (drawn on terminal
        # rows too), then the game's step of the rows that are not terminal yet.
        action = self._action_table[action]
        action = torch.where(
            u["sticky"][:, 0] < self.sticky_action_prob, state["last_action"], action
        )
        game = {key: state[key] for key in self.fields}
        moved, reward, terminal = self._act(game, action, u)
        frozen = state["terminal"]  # MinAtar's act returns (0, True) at once for these rows
        new = rows_where(frozen, game, moved)
        new["terminal"] = frozen | terminal
        new["last_action"] = action
        return new, torch.where(frozen, 0.0, reward.to(torch.float32)), new["terminal"]

    def _observation(self, state: dict[str, torch.Tensor], elapsed: torch.Tensor) -> torch.Tensor:
        return self._observe(state)

    # -- the triton backend ----------------------------------------------------------------

    def _triton_kernel(self) -> Any:
        return None if self.triton_functions is None else step_kernel

    def _kernel_options(self) -> tuple[tuple[int, ...], dict[str, Any]]:
        # Rows per program: at most triton_block (a Breakout row holds a 128-cell tile per
        # grid; not tuned on a GPU). The kernel draws the torch backend's uniforms itself, at
        # the rows' counts, into a scratch buffer kept between calls.
        block = min(_triton.env_block(self.num_envs), self.triton_block)
        load, store, initial, act, select, observe = self.triton_functions
        return (_triton.triton.cdiv(self.num_envs, block),), {
            "key_ptr": self._key.reshape(-1),
            "u_ptr": self._scratch,
            "action_table_ptr": self._action_table,
            "sticky_prob": self.sticky_action_prob,
            "N": self.num_envs,
            "MAX_STEPS": self.max_episode_steps or 0,
            "BLOCK": block,
            "DRAWS": self.draws,
            "DRAWS_P2": _triton.triton.next_power_of_2(self.draws),
            "SEED_BLOCK": self._block or 0,
            "STICKY": sum(draw.count for draw in self.reset_draws),
            "RESET_AT": self._reset_column(),
            "FIELDS": len(self.fields),
            "RAMPING": self.ramping,
            "LOAD": load,
            "STORE": store,
            "INITIAL": initial,
            "ACT": act,
            "SELECT": select,
            "OBSERVE": observe,
        }

    def _reset_column(self) -> int:
        """The uniform column where a fresh start's draws begin in the torch backend.

        ``_uniforms`` hands the draws on by name, so a name a fresh start and a step share
        (Freeway's) reads the step's columns; the kernel reads the same ones.
        """
        columns, start = {}, 0
        for draw in self._draws:
            columns[draw.name] = start
            start += draw.count
        starts = [columns[draw.name] for draw in self.reset_draws]
        for draw, here, after in zip(self.reset_draws, starts, starts[1:]):
            if after != here + draw.count:
                raise ValueError(
                    f"{type(self).__name__}: the kernel needs the reset draws in consecutive "
                    f"columns; declare the shared ones in the same order in step_draws"
                )
        return starts[0] if starts else 0

    def _refuse_draws_on_triton(self, method: str) -> None:
        if self.backend == "triton":
            raise ValueError(
                f"{type(self).__name__}.{method}: draws=... needs backend='torch' (the triton "
                "kernel takes the env's own draws)"
            )

    # -- helpers ---------------------------------------------------------------------------

    def _actions(self) -> tuple[int, ...]:
        """The full-set ids of the env's actions, in order."""
        return self.minimal_actions if self.minimal_action_set else tuple(range(6))

    def _uniforms(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The next draw event of ``rows`` by name: ``{name: [K, count]}``."""
        u = super()._uniforms(rows)
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

    def _check_action(self, action: Any) -> None:
        # Shape and dtype only: static under torch.compile, no host sync.
        if not is_integer_tensor(action, (self.num_envs,)):
            raise ValueError(
                f"{type(self).__name__}.step: action must be an int64 tensor of shape "
                f"({self.num_envs},) with values in [0, {self.single_action_space.n}), "
                f"got {describe(action)}"
            )


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


def bit(masks: torch.Tensor, index: torch.Tensor | int) -> torch.Tensor:
    """bool: bit ``index`` of each int64 mask (``index`` broadcasts; 0 to 63), for the games
    that keep a grid as bit masks (Breakout's bricks, Space Invaders' rows)."""
    return ((masks >> index) & 1) == 1
