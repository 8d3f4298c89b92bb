"""MinAtar's Space Invaders as a batched torch env (``minatar/environments/space_invaders.py``).

The cannon moves along the bottom row and fires upward (one shot per 5 steps). A block of
4 x 6 aliens marches sideways; when one reaches the edge it is heading to, the whole block
moves down a row and turns. The block moves every ``min(aliens left, move interval)`` + 1
steps, so it speeds up as it thins out. Every 11 steps the alien nearest the cannon's column
(ties to the lower column) fires from the lowest alien of that column. Reward +1 per alien
shot; a cleared wave is replaced by a new one at the top, and with difficulty ramping the
move interval drops by one (12 down to 6). The episode ends when an alien or an alien's
bullet reaches the cannon, or the block moves down while it occupies the bottom row.

State (per row)::

    pos                  int64         the cannon's column (row 9)
    alien                int64 [10]    the aliens, a bit mask per grid row: bit x of
                                       ``alien[y]`` is set where one stands at (y, x)
    f_bullet, e_bullet   int64 [10]    the cannon's and the aliens' bullets, likewise
    alien_dir            int64         -1 left, +1 right
    enemy_move_interval  int64         the wave's move interval (ramps 12 -> 6)
    alien_move_timer     int64         steps to the block's next move
    alien_shot_timer     int64         steps to the aliens' next shot
    shot_timer           int64         steps until the cannon may fire again
    ramp_index           int64         waves cleared with ramping

Bullets and aliens live on grids, as in MinAtar, kept as one 10-bit mask per row
(:func:`grid_rows` and :func:`rows_grid` convert): a row shift moves 10 masks, a sideways
roll rotates each mask, and a count is a popcount, instead of passes over 100 cells (which
made a compiled step 2-2.7x slower on a CPU, benchmarks/RESULTS.md). MinAtar's ``np.roll`` is
kept where it shows: a block that moves down from the bottom row wraps to the top row (the
episode has ended by then, but the terminal observation shows it).

Observation channels: cannon, alien, alien_left, alien_right, friendly_bullet,
enemy_bullet. Minimal actions: noop, left, right, fire. No random draws besides the sticky
action.

    >>> import torch
    >>> env = SpaceInvaders(num_envs=4, seed=0)
    >>> observ, reward, terminated, truncated = env.step(torch.full((4,), 3))
    >>> observ.shape
    torch.Size([4, 10, 10, 6])

``SpaceInvaders(..., backend="triton")`` runs the same step in ``_kernel.step_kernel`` with
this module's device functions (``_act_tl``, ...): bit for bit the torch backend's results.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._triton import maximum_combine, tl, triton
from ._base import FIRE, LEFT, NOOP, RIGHT, SIZE, MinAtarEnv, bit, cell, grid
from ._kernel import any_cell, cell_at, cells, fold, mark, minimum_combine, store_plane, take, total

_INT = torch.int64
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12  # the first wave's; a ramped wave's never drops below 6
MIN_MOVE_INTERVAL = 6
ENEMY_SHOT_INTERVAL = 10
_ROW = (1 << SIZE) - 1  # a grid row's ten bits
_WAVE_ROW = sum(1 << x for x in range(2, 8))  # a new wave's rows 0 to 3: columns 2 to 7


# -- the triton step: the same rules on a block of rows (``_kernel.step_kernel`` calls them) --
# State tuple in ``fields`` order: the scalars [BLOCK], the grids alien, f_bullet, e_bullet
# [BLOCK, CELLS] (cell y * 10 + x). Rolls and row shifts are gathers along the cells.

_FIRE = tl.constexpr(FIRE)
_LEFT = tl.constexpr(LEFT)
_RIGHT = tl.constexpr(RIGHT)
_LAST = tl.constexpr(SIZE - 1)
_SHOT_COOL_DOWN = tl.constexpr(SHOT_COOL_DOWN)
_ENEMY_MOVE_INTERVAL = tl.constexpr(ENEMY_MOVE_INTERVAL)
_MIN_MOVE_INTERVAL = tl.constexpr(MIN_MOVE_INTERVAL)
_ENEMY_SHOT_INTERVAL = tl.constexpr(ENEMY_SHOT_INTERVAL)


@triton.jit
def _wave_tl():
    """bool ``[CELLS]``: a new wave, rows 0 to 3 by columns 2 to 7."""
    where = cells()
    x = where % 10
    return (where < 40) & (x >= 2) & (x <= 7)


@triton.jit
def _load_tl(ptrs, rows, valid):
    # The grids' row masks, expanded to [BLOCK, CELLS] tiles (cell y * 10 + x: bit x of row y).
    where = cells()
    inside = valid[:, None] & (where < 100)[None, :]
    row_of_cell = rows.to(tl.int64)[:, None] * 10 + (where // 10)[None, :]
    state = ()
    for j in tl.static_range(10):
        if j >= 1 and j <= 3:
            masks = tl.load(ptrs[j] + row_of_cell, mask=inside, other=0)
            state = state + (((masks >> (where % 10)[None, :]) & 1) != 0,)
        else:
            state = state + (tl.load(ptrs[j] + rows, mask=valid, other=0),)
    return state


@triton.jit
def _store_tl(ptrs, rows, valid, state):
    # Each grid tile folded back to its ten row masks.
    where = cells()
    bits = (1 << (where % 10)).to(tl.int32)
    first_row = rows.to(tl.int64) * 10
    for j in tl.static_range(10):
        if j >= 1 and j <= 3:
            weighted = tl.where(state[j], bits[None, :], 0)
            for y in tl.static_range(10):
                in_row = ((where // 10) == y) & (where < 100)
                mask = total(tl.where(in_row[None, :], weighted, 0), 7).to(tl.int64)
                tl.store(ptrs[j] + first_row + y, mask, mask=valid)
        else:
            tl.store(ptrs[j] + rows, state[j], mask=valid)


@triton.jit
def _select_tl(mask, a, b):
    state = ()
    for j in tl.static_range(10):
        if j >= 1 and j <= 3:
            state = state + (tl.where(mask[:, None], a[j], b[j]),)
        else:
            state = state + (tl.where(mask, a[j], b[j]),)
    return state


@triton.jit
def _initial_tl(u, valid):  # MinAtar's reset draws nothing
    zero = valid.to(tl.int64) * 0
    nothing = (zero[:, None] + cells()[None, :]) < 0
    return (
        zero + 5,
        _wave_tl()[None, :] | nothing,
        nothing,
        nothing,
        zero - 1,
        zero + _ENEMY_MOVE_INTERVAL,
        zero + _ENEMY_MOVE_INTERVAL,
        zero + _ENEMY_SHOT_INTERVAL,
        zero,
        zero,
    )


@triton.jit
def _act_tl(state, action, u, valid, RAMPING: tl.constexpr):
    """:meth:`SpaceInvaders._act` rule for rule, on a block of rows."""
    pos, alien, f_bullet, e_bullet, alien_dir = state[0], state[1], state[2], state[3], state[4]
    interval, move_timer, alien_shot_timer = state[5], state[6], state[7]
    shot_timer, ramp_index = state[8], state[9]
    where = cells()
    y = where // 10
    x = where % 10
    grid = where < 100
    bottom = pos * 0 + _LAST
    # The cannon: fire (when loaded), or move.
    fire = (action == _FIRE) & (shot_timer == 0)
    f_bullet = f_bullet | (mark(bottom, pos) & fire[:, None])
    shot_timer = tl.where(fire, _SHOT_COOL_DOWN, shot_timer)
    pos = tl.where(action == _LEFT, tl.maximum(pos - 1, 0), pos)
    pos = tl.where(action == _RIGHT, tl.minimum(pos + 1, _LAST), pos)
    # Bullets move one row: the cannon's up (off the top: gone), the aliens' down.
    f_bullet = take(f_bullet, tl.where(where < 90, where + 10, -1))
    e_bullet = take(e_bullet, tl.where((where >= 10) & grid, where - 10, -1))
    terminal = cell_at(e_bullet, bottom, pos) | cell_at(alien, bottom, pos)
    # The block moves when its timer is up: sideways, or down and turn at an edge.
    move = move_timer == 0
    count = total(alien, 7).to(tl.int64)
    move_timer = tl.where(move, tl.minimum(count, interval), move_timer)
    turn = (any_cell(alien & (x == 0)[None, :]) & (alien_dir < 0)) | (
        any_cell(alien & (x == _LAST)[None, :]) & (alien_dir > 0)
    )
    down = move & turn
    terminal = terminal | (down & any_cell(alien & ((y == _LAST) & grid)[None, :]))
    left = take(alien, tl.where(grid, y * 10 + (x + 1) % 10, -1))  # roll(-1, dims=2)
    right = take(alien, tl.where(grid, y * 10 + (x + 9) % 10, -1))  # roll(1, dims=2)
    sideways = tl.where((alien_dir < 0)[:, None], left, right)
    lower = take(alien, tl.where(grid, ((y + 9) % 10) * 10 + x, -1))  # roll(1, dims=1)
    moved = tl.where(turn[:, None], lower, sideways)
    alien = tl.where(move[:, None], moved, alien)
    alien_dir = tl.where(down, -alien_dir, alien_dir)
    terminal = terminal | (move & cell_at(alien, bottom, pos))
    # The aliens fire from the lowest alien of the column nearest the cannon (the nearest
    # occupied column's key |x - pos| * 10 + x is the smallest; none: column 0, no alien).
    shoot = alien_shot_timer == 0
    key = tl.where(alien, tl.abs(x[None, :] - pos[:, None]) * 10 + x[None, :], 100)
    column = fold(key, 7, minimum_combine) % 10
    in_column = alien & (x[None, :] == column[:, None])
    shot_y = fold(tl.where(in_column, y[None, :] + 1, 0), 7, maximum_combine) - 1
    e_bullet = e_bullet | (mark(shot_y, column) & shoot[:, None])
    alien_shot_timer = tl.where(shoot, _ENEMY_SHOT_INTERVAL, alien_shot_timer)
    # Hits: an alien and a cannon bullet on one cell remove each other.
    kill = alien & f_bullet
    reward = total(kill, 7)
    alien = alien & ~kill
    f_bullet = f_bullet & ~kill
    # Timers, then a new wave if this one is gone.
    shot_timer = shot_timer - (shot_timer > 0).to(tl.int64)
    cleared = ~any_cell(alien)
    ramp = cleared & (interval > _MIN_MOVE_INTERVAL) & RAMPING
    alien = alien | (_wave_tl()[None, :] & cleared[:, None])
    moved_state = (
        pos,
        alien,
        f_bullet,
        e_bullet,
        alien_dir,
        interval - ramp.to(tl.int64),
        move_timer - 1,
        alien_shot_timer - 1,
        shot_timer,
        ramp_index + ramp.to(tl.int64),
    )
    return moved_state, reward.to(tl.float32), terminal


@triton.jit
def _observe_tl(state, observ_ptr, rows, valid):
    pos, alien, f_bullet, e_bullet, alien_dir = state[0], state[1], state[2], state[3], state[4]
    left = (alien_dir < 0)[:, None]
    store_plane(observ_ptr, rows, valid, mark(pos * 0 + _LAST, pos), 6, 0)
    store_plane(observ_ptr, rows, valid, alien, 6, 1)
    store_plane(observ_ptr, rows, valid, alien & left, 6, 2)
    store_plane(observ_ptr, rows, valid, alien & ~left, 6, 3)
    store_plane(observ_ptr, rows, valid, f_bullet, 6, 4)
    store_plane(observ_ptr, rows, valid, e_bullet, 6, 5)


class SpaceInvaders(MinAtarEnv):
    """A batch of MinAtar Space Invaders games (see :class:`MinAtarEnv` for the arguments)."""

    game = "space_invaders"
    channels = (
        "cannon",
        "alien",
        "alien_left",
        "alien_right",
        "friendly_bullet",
        "enemy_bullet",
    )
    minimal_actions = (NOOP, LEFT, RIGHT, FIRE)
    fields = {
        "pos": ((), _INT),
        "alien": ((SIZE,), _INT),
        "f_bullet": ((SIZE,), _INT),
        "e_bullet": ((SIZE,), _INT),
        "alien_dir": ((), _INT),
        "enemy_move_interval": ((), _INT),
        "alien_move_timer": ((), _INT),
        "alien_shot_timer": ((), _INT),
        "shot_timer": ((), _INT),
        "ramp_index": ((), _INT),
    }
    triton_functions = (_load_tl, _store_tl, _initial_tl, _act_tl, _select_tl, _observe_tl)

    def _initial(self, rows, draws):  # MinAtar's reset draws nothing
        return _initial_state(rows, self.device)

    def _act(self, state, action, draws):
        pos, shot_timer = state["pos"], state["shot_timer"]
        alien, alien_dir = state["alien"], state["alien_dir"]
        rows = pos.shape[0]
        # The cannon: fire (when loaded), or move.
        fire = (action == FIRE) & (shot_timer == 0)
        shot_timer = torch.where(fire, SHOT_COOL_DOWN, shot_timer)
        shot = fire.to(_INT) << pos  # the new bullet in row 9, before it moves
        pos = torch.where(action == LEFT, (pos - 1).clamp(min=0), pos)
        pos = torch.where(action == RIGHT, (pos + 1).clamp(max=SIZE - 1), pos)
        # Bullets move one row: the cannon's up (off the top: gone), the aliens' down.
        empty = torch.zeros(rows, 1, dtype=_INT, device=pos.device)
        f_bullet = state["f_bullet"]
        f_bullet = torch.cat((f_bullet[:, 1:9], (f_bullet[:, 9] | shot)[:, None], empty), 1)
        e_bullet = torch.cat((empty, state["e_bullet"][:, :-1]), dim=1)
        terminal = bit(e_bullet[:, -1], pos) | bit(alien[:, -1], pos)
        # The block moves when its timer is up: sideways, or down and turn at an edge.
        move = state["alien_move_timer"] == 0
        count = _popcount(alien).sum(dim=1)
        move_timer = torch.where(
            move, torch.minimum(count, state["enemy_move_interval"]), state["alien_move_timer"]
        )
        columns = _columns(alien)
        turn = (bit(columns, 0) & (alien_dir < 0)) | (bit(columns, SIZE - 1) & (alien_dir > 0))
        down = move & turn
        terminal = terminal | (down & (alien[:, -1] != 0))
        left = (alien >> 1) | ((alien & 1) << (SIZE - 1))  # np.roll(-1, axis=1)
        right = ((alien << 1) & _ROW) | (alien >> (SIZE - 1))  # np.roll(1, axis=1)
        sideways = torch.where((alien_dir < 0)[:, None], left, right)
        moved = torch.where(turn[:, None], alien.roll(1, dims=1), sideways)
        alien = torch.where(move[:, None], moved, alien)
        alien_dir = torch.where(down, -alien_dir, alien_dir)
        terminal = terminal | (move & bit(alien[:, -1], pos))
        # The aliens fire from the lowest alien of the column nearest the cannon.
        shoot = state["alien_shot_timer"] == 0
        shot_y, shot_x = _nearest_alien(alien, pos)
        row, _ = grid(pos.device)
        fired = (row[:, 0] == shot_y[:, None]) & shoot[:, None]  # [K, 10]: nothing when -1
        e_bullet = e_bullet | (fired.to(_INT) << shot_x[:, None])
        shot_timer_alien = torch.where(shoot, ENEMY_SHOT_INTERVAL, state["alien_shot_timer"])
        # Hits: an alien and a cannon bullet on one cell remove each other.
        kill = alien & f_bullet
        reward = _popcount(kill).sum(dim=1)
        alien = alien & ~kill
        f_bullet = f_bullet & ~kill
        # Timers, then a new wave if this one is gone.
        shot_timer = shot_timer - (shot_timer > 0).to(_INT)
        cleared = (alien == 0).all(dim=1)
        ramp = cleared & (state["enemy_move_interval"] > MIN_MOVE_INTERVAL) & self.ramping
        alien = alien | (_wave(rows, pos.device) * cleared[:, None])
        moved_state = {
            "pos": pos,
            "alien": alien,
            "f_bullet": f_bullet,
            "e_bullet": e_bullet,
            "alien_dir": alien_dir,
            "enemy_move_interval": state["enemy_move_interval"] - ramp.to(_INT),
            "alien_move_timer": move_timer - 1,
            "alien_shot_timer": shot_timer_alien - 1,
            "shot_timer": shot_timer,
            "ramp_index": state["ramp_index"] + ramp.to(_INT),
        }
        return moved_state, reward, terminal

    def _observe(self, state):
        alien = rows_grid(state["alien"])
        left = (state["alien_dir"] < 0)[:, None, None]
        return torch.stack(
            (
                cell(torch.full_like(state["pos"], SIZE - 1), state["pos"]),
                alien,
                alien & left,
                alien & ~left,
                rows_grid(state["f_bullet"]),
                rows_grid(state["e_bullet"]),
            ),
            dim=-1,
        )

    @staticmethod
    def state_from_reference(game: Any) -> dict[str, Any]:
        return {
            "pos": game.pos,
            "alien": grid_rows(game.alien_map),
            "f_bullet": grid_rows(game.f_bullet_map),
            "e_bullet": grid_rows(game.e_bullet_map),
            "alien_dir": game.alien_dir,
            "enemy_move_interval": game.enemy_move_interval,
            "alien_move_timer": game.alien_move_timer,
            "alien_shot_timer": game.alien_shot_timer,
            "shot_timer": game.shot_timer,
            "ramp_index": game.ramp_index,
        }


def _initial_state(rows: int, device: torch.device) -> dict[str, torch.Tensor]:
    """MinAtar's ``Env.reset``: the cannon at column 5, a fresh wave heading left."""

    def full(value: int) -> torch.Tensor:
        return torch.full((rows,), value, dtype=_INT, device=device)

    nothing = torch.zeros(rows, SIZE, dtype=_INT, device=device)
    return {
        "pos": full(5),
        "alien": _wave(rows, device).clone(),
        "f_bullet": nothing,
        "e_bullet": nothing.clone(),
        "alien_dir": full(-1),
        "enemy_move_interval": full(ENEMY_MOVE_INTERVAL),
        "alien_move_timer": full(ENEMY_MOVE_INTERVAL),
        "alien_shot_timer": full(ENEMY_SHOT_INTERVAL),
        "shot_timer": full(0),
        "ramp_index": full(0),
    }


def _wave(rows: int, device: torch.device) -> torch.Tensor:
    """int64 ``[rows, 10]``: a new wave's row masks, rows 0 to 3 by columns 2 to 7."""
    row, _ = grid(device)
    return torch.where(row[:, 0] <= 3, _WAVE_ROW, 0).expand(rows, SIZE)


def _popcount(masks: torch.Tensor) -> torch.Tensor:
    """The number of set bits of each 10-bit mask (a SWAR count: no table, no loop)."""
    x = masks - ((masks >> 1) & 0x155)
    x = (x & 0x333) + ((x >> 2) & 0x333)
    x = (x + (x >> 4)) & 0xF0F
    return (x & 0xFF) + (x >> 8)


def _columns(alien: torch.Tensor) -> torch.Tensor:
    """``[K]``: the columns holding an alien, as a mask (the row masks or-ed together)."""
    columns = alien[:, 0]
    for y in range(1, SIZE):
        columns = columns | alien[:, y]
    return columns


def _nearest_alien(alien: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MinAtar's ``_nearest_alien``: ``(row, column)`` of the lowest alien in the occupied
    column closest to ``pos`` (a tie goes to the lower column). Row -1 when there is none."""
    _, col = grid(alien.device)
    occupied = bit(_columns(alien)[:, None], col)  # [K, 10]
    distance = (col - pos[:, None]).abs() * SIZE + col  # unique keys, in search order
    column = torch.where(occupied, distance, SIZE * SIZE).argmin(dim=1)
    in_column = bit(alien, column[:, None]).to(_INT)  # [K, 10] over the rows
    depth = torch.arange(1, SIZE + 1, device=alien.device)
    return (in_column * depth).amax(dim=1) - 1, column


def grid_rows(grid: Any) -> list[int]:
    """The ten row masks of one 10x10 grid (anything ``np.asarray`` reads; nonzero is set):
    bit x of mask y is cell (y, x)."""
    cells = np.asarray(grid).reshape(SIZE, SIZE) != 0
    return [sum(1 << x for x in range(SIZE) if cells[y, x]) for y in range(SIZE)]


def rows_grid(masks: torch.Tensor) -> torch.Tensor:
    """bool ``[..., 10, 10]``: the grids of row masks ``[..., 10]``."""
    col = torch.arange(SIZE, device=masks.device)
    return bit(masks[..., None], col)
