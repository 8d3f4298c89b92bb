"""MinAtar's Seaquest as a batched torch env (``minatar/environments/seaquest.py``, rule for rule).

The player's submarine (a front and a back cell) moves below the surface (row 0) and fires
bullets from its front. Enemy fish and enemy subs cross rows 1 to 8 from either edge (all
in one row go the same way), subs fire bullets, and divers cross the screen too. A bullet
that meets an enemy removes it (+1). Moving onto a diver picks it up (6 at most). Oxygen
runs down below the surface; surfacing with divers on board refills it and drops one
diver, or all six for a bonus of one point per 20 oxygen left; surfacing with none, running
out of oxygen or touching an enemy or its bullet ends the episode. Each surfacing ramps the
difficulty (enemies spawn more often, every other time they also move faster).

MinAtar keeps fish, subs, divers and bullets in Python lists whose order matters (a bullet
removes the *first* enemy on its cell; the loops run newest first). Here each list is an
int64 table of fixed slots (``_slots.py``): ``bullet [2, 4]``, ``diver [2, 5]``,
``fish [30, 5]``, ``esub [30, 6]``, a row per entry in list order, its columns ``alive``
then MinAtar's entry (``x, y, right`` and the timers: a diver's move timer, an enemy's move
timer, a sub's shot timer), zeros after the last entry. The slot counts (MinAtar's rules
never exceed them):

- 2 player bullets: one shot per 5 steps, and a bullet leaves the screen within 9 steps;
- 2 divers: one spawns every 30 steps and leaves within 59;
- 30 fish and 30 enemy subs: at most one enemy spawns per step, and once spawns come every
  step (19 ramps), enemies leave within 29 steps (before, spawns are >= 14 steps apart);
- enemy bullets live on two bool grids, ``ebullet_right`` and ``ebullet_left`` (no bound):
  they never interact with each other, so a set holds what MinAtar's list does.

The other fields are MinAtar's scalars (``oxygen``, ``diver_count``, ``sub_x``, ``sub_y``,
``sub_right``, the spawn, move and shot timers and speeds, ``ramp_index``, ``surface``).

Two MinAtar quirks are kept: surfacing with six divers leaves ``diver_count`` at -1 (it is
set to 0, then decremented), so later surfacings never end the game; and a sub that is shot
or leaves the screen still fires if its shot timer is up (the bullet shows when the sub was
shot; off the screen it is gone at once).

Observation channels: sub_front, sub_back, friendly_bullet, trail, enemy_bullet,
enemy_fish, enemy_sub, oxygen_guage, diver_guage, diver. Minimal actions: all six. Draws per
step: ``Env._spawn_enemy`` (whenever its timer is up: ``rand() < 1/2`` enters at the left,
``rand() < 1/3`` a sub, ``randint(1, 9)`` the row) and ``Env._spawn_diver`` (``rand() < 1/2``,
``randint(1, 9)``). A fresh start draws nothing.

    >>> import torch
    >>> env = Seaquest(num_envs=4, seed=0)
    >>> observ, reward, terminated, truncated = env.step(torch.full((4,), 4))
    >>> observ.shape
    torch.Size([4, 10, 10, 10])

``Seaquest(..., backend="triton")`` runs the same step in ``_kernel.step_kernel`` with this
module's device functions (``_act_tl``, ...): bit for bit the torch backend's results. There
the two bullets and two divers are columns of scalars and the enemy lists tiles of 32 slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._triton import maximum_combine, tl, triton
from ._base import DOWN, FIRE, LEFT, RIGHT, SIZE, UP, Draw, MinAtarEnv, at, paint
from ._kernel import (
    cell_at,
    cells,
    flat_index,
    floor_mod,
    fold,
    mark,
    minimum_combine,
    store_plane,
    take,
    total,
    total_3d,
)
from ._slots import append, first, last, pack, set_column, unpack

_INT = torch.int64
MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
#: Slots per list (see the module docstring for why they suffice).
BULLETS, DIVERS, ENEMIES = 2, 2, 30
#: MinAtar's lists: their slots, and the columns of their tables (MinAtar's entry
#: ``[x, y, right, *timers]`` after an ``alive`` flag).
LISTS = {
    "bullet": (BULLETS, ("alive", "x", "y", "right")),
    "diver": (DIVERS, ("alive", "x", "y", "right", "timer")),
    "fish": (ENEMIES, ("alive", "x", "y", "right", "move")),
    "esub": (ENEMIES, ("alive", "x", "y", "right", "move", "shot")),
}
_REFERENCE_LISTS = {"bullet": "f_bullets", "diver": "divers", "fish": "e_fish", "esub": "e_subs"}
_SCALARS = (
    "oxygen",
    "diver_count",
    "sub_x",
    "sub_y",
    "e_spawn_speed",
    "e_spawn_timer",
    "d_spawn_timer",
    "move_speed",
    "ramp_index",
    "shot_timer",
)


# -- the triton step: the same rules on a block of rows (``_kernel.step_kernel`` calls them) --
# State tuple (43 entries): the 10 scalars of _SCALARS, sub_right, surface [BLOCK]; the two
# bullets then the two divers, a slot's columns each [BLOCK] (bullet b at 12 + 4b, diver d
# at 20 + 5d); the fish (30-34) and the enemy subs (35-40), a column each [BLOCK, 32] (slot i
# in column i, 30 used); ebullet_right, ebullet_left [BLOCK, CELLS] (cell y * 10 + x).

_FIRE = tl.constexpr(FIRE)
_LEFT = tl.constexpr(LEFT)
_RIGHT = tl.constexpr(RIGHT)
_UP = tl.constexpr(UP)
_DOWN = tl.constexpr(DOWN)
_LAST = tl.constexpr(SIZE - 1)
_SLOTS = tl.constexpr(ENEMIES)
_PADDED = tl.constexpr(32)  # the enemy slots, padded to a power of two
_LOG2 = tl.constexpr(5)
_FISH = tl.constexpr(30)  # where the fish columns start in the state tuple
_ESUB = tl.constexpr(35)
_GRIDS = tl.constexpr(41)
_MAX_OXYGEN = tl.constexpr(MAX_OXYGEN)
_INIT_SPAWN_SPEED = tl.constexpr(INIT_SPAWN_SPEED)
_DIVER_SPAWN_SPEED = tl.constexpr(DIVER_SPAWN_SPEED)
_INIT_MOVE_INTERVAL = tl.constexpr(INIT_MOVE_INTERVAL)
_SHOT_COOL_DOWN = tl.constexpr(SHOT_COOL_DOWN)
_ENEMY_SHOT_INTERVAL = tl.constexpr(ENEMY_SHOT_INTERVAL)
_DIVER_MOVE_INTERVAL = tl.constexpr(DIVER_MOVE_INTERVAL)
_SUB_CHANCE = tl.constexpr(1 / 3)  # compared in float32, as torch compares it


@triton.jit
def _load_tl(ptrs, rows, valid):
    row = rows.to(tl.int64)
    state = ()
    for j in tl.static_range(12):
        value = tl.load(ptrs[j] + row, mask=valid, other=0)
        if j >= 10:
            value = value != 0
        state = state + (value,)
    for b in tl.static_range(2):  # bullet [2, 4], then diver [2, 5]; columns 0, 3: flags
        for c in tl.static_range(4):
            value = tl.load(ptrs[12] + row * 8 + b * 4 + c, mask=valid, other=0)
            if c == 0 or c == 3:
                value = value != 0
            state = state + (value,)
    for d in tl.static_range(2):
        for c in tl.static_range(5):
            value = tl.load(ptrs[13] + row * 10 + d * 5 + c, mask=valid, other=0)
            if c == 0 or c == 3:
                value = value != 0
            state = state + (value,)
    slot = tl.arange(0, _PADDED)
    inside = valid[:, None] & (slot < _SLOTS)[None, :]
    for table in tl.static_range(2):  # fish [30, 5], esub [30, 6]
        width = 5 + table
        at_slots = row[:, None] * (_SLOTS * width) + slot[None, :] * width
        for c in tl.static_range(width):
            value = tl.load(ptrs[14 + table] + at_slots + c, mask=inside, other=0)
            if c == 0 or c == 3:
                value = value != 0
            state = state + (value,)
    where = cells()
    inside = valid[:, None] & (where < 100)[None, :]
    for g in tl.static_range(2):
        value = tl.load(ptrs[16 + g] + row[:, None] * 100 + where[None, :], mask=inside, other=0)
        state = state + (value != 0,)
    return state


@triton.jit
def _store_tl(ptrs, rows, valid, state):
    row = rows.to(tl.int64)
    for j in tl.static_range(12):
        tl.store(ptrs[j] + row, state[j], mask=valid)
    for b in tl.static_range(2):
        for c in tl.static_range(4):
            value = state[12 + 4 * b + c].to(tl.int64)
            tl.store(ptrs[12] + row * 8 + b * 4 + c, value, mask=valid)
    for d in tl.static_range(2):
        for c in tl.static_range(5):
            value = state[20 + 5 * d + c].to(tl.int64)
            tl.store(ptrs[13] + row * 10 + d * 5 + c, value, mask=valid)
    slot = tl.arange(0, _PADDED)
    inside = valid[:, None] & (slot < _SLOTS)[None, :]
    for table in tl.static_range(2):
        width = 5 + table
        at_slots = row[:, None] * (_SLOTS * width) + slot[None, :] * width
        for c in tl.static_range(width):
            value = state[_FISH + 5 * table + c].to(tl.int64)
            tl.store(ptrs[14 + table] + at_slots + c, value, mask=inside)
    where = cells()
    inside = valid[:, None] & (where < 100)[None, :]
    for g in tl.static_range(2):
        tl.store(ptrs[16 + g] + row[:, None] * 100 + where[None, :], state[_GRIDS + g], mask=inside)


@triton.jit
def _select_tl(mask, a, b):
    state = ()
    for j in tl.static_range(43):
        if j < _FISH:
            state = state + (tl.where(mask, a[j], b[j]),)
        else:
            state = state + (tl.where(mask[:, None], a[j], b[j]),)
    return state


@triton.jit
def _initial_tl(u, valid):  # MinAtar's reset draws nothing
    zero = valid.to(tl.int64) * 0
    no = zero != 0
    table = zero[:, None] + tl.zeros([1, _PADDED], tl.int64)
    grid = (zero[:, None] + cells()[None, :]) < 0
    scalars = (
        zero + _MAX_OXYGEN,  # oxygen
        zero,  # diver_count
        zero + 5,  # sub_x
        zero,  # sub_y
        zero + _INIT_SPAWN_SPEED,  # e_spawn_speed
        zero + _INIT_SPAWN_SPEED,  # e_spawn_timer
        zero + _DIVER_SPAWN_SPEED,  # d_spawn_timer
        zero + _INIT_MOVE_INTERVAL,  # move_speed
        zero,  # ramp_index
        zero,  # shot_timer
        no,  # sub_right
        ~no,  # surface
    )
    bullets = (no, zero, zero, no, no, zero, zero, no)
    divers = (no, zero, zero, no, zero, no, zero, zero, no, zero)
    fish = (table != 0, table, table, table != 0, table)
    esub = (table != 0, table, table, table != 0, table, table)
    return scalars + bullets + divers + fish + esub + (grid, grid)


# Slot helpers on a [BLOCK, 32] enemy table (slot order is MinAtar's list order).


@triton.jit
def _any_slot(mask):
    return total(mask, _LOG2) > 0


@triton.jit
def _first(mask):
    """The lowest-index True of each row (``_slots.first``)."""
    slot = tl.arange(0, _PADDED)[None, :]
    return mask & (slot == fold(tl.where(mask, slot, _PADDED), _LOG2, minimum_combine)[:, None])


@triton.jit
def _last(mask):
    """The highest-index True of each row (``_slots.last``)."""
    slot = tl.arange(0, _PADDED)[None, :]
    return mask & (slot == fold(tl.where(mask, slot, -1), _LOG2, maximum_combine)[:, None])


@triton.jit
def _end_slot(alive, when):
    """``_slots.append``'s slot: the list's end (it is packed), where ``when``; a full list
    takes nothing."""
    slot = tl.arange(0, _PADDED)[None, :]
    end = total(alive, _LOG2)
    return (slot == end[:, None]) & (slot < _SLOTS) & when[:, None]


@triton.jit
def _compact(alive, column):
    """``column`` with the live slots moved to the front in order, zeros after (``pack``)."""
    slot = tl.arange(0, _PADDED)
    before = alive[:, None, :] & (slot[None, :] <= slot[:, None])[None, :, :]
    rank = total_3d(before, _LOG2)  # live slots up to and including each slot
    source = alive[:, None, :] & (rank[:, None, :] == (slot + 1)[None, :, None])
    return total_3d(tl.where(source, column.to(tl.int32)[:, None, :], 0), _LOG2).to(tl.int64)


@triton.jit
def _compact_table(table, WIDTH: tl.constexpr):
    """A list's ``WIDTH`` columns (alive first, right fourth) compacted."""
    alive = table[0]
    slot = tl.arange(0, _PADDED)[None, :]
    packed = (slot < total(alive, _LOG2)[:, None],)
    for c in tl.static_range(1, WIDTH):
        value = _compact(alive, table[c])
        if c == 3:
            value = value != 0
        packed = packed + (value,)
    return packed


@triton.jit
def _compact_pair(a, b, WIDTH: tl.constexpr):
    """Two slots of a list (each ``WIDTH`` columns, alive first, right fourth) packed: ``b``
    moves up into a dead ``a``; a dead slot is all zeros."""
    first = ()
    second = ()
    for c in tl.static_range(WIDTH):
        zero = a[c] ^ a[c]  # False, or 0
        first = first + (tl.where(a[0], a[c], tl.where(b[0], b[c], zero)),)
        second = second + (tl.where(a[0] & b[0], b[c], zero),)
    return first, second


@triton.jit
def _choose_slot(mask, a, b, WIDTH: tl.constexpr):
    """Per row, the slot's ``WIDTH`` columns ``a`` where ``mask`` else ``b``."""
    chosen = ()
    for c in tl.static_range(WIDTH):
        chosen = chosen + (tl.where(mask, a[c], b[c]),)
    return chosen


@triton.jit
def _step_x(x, right):
    return x + tl.where(right, 1, -1)


@triton.jit
def _bullet_tl(b, fish, esub):
    """One player bullet of ``_bullets``: moves; off the screen, gone; else the first fish on
    its cell, or else the first sub, is shot. Returns (bullet, fish alive, esub alive, hit)."""
    alive, x, y, right = b[0], b[1], b[2], b[3]
    x_next = _step_x(x, right)
    on_screen = alive & (x_next >= 0) & (x_next < SIZE)
    there = fish[0] & (fish[1] == x_next[:, None]) & (fish[2] == y[:, None])
    shot = _first(there) & on_screen[:, None]
    fish_alive = fish[0] & ~shot
    hit = _any_slot(shot)
    there = esub[0] & (esub[1] == x_next[:, None]) & (esub[2] == y[:, None])
    shot = _first(there) & (on_screen & ~hit)[:, None]
    esub_alive = esub[0] & ~shot
    hit = hit | _any_slot(shot)
    moved = (on_screen & ~hit, tl.where(alive, x_next, x), y, right)
    return moved, fish_alive, esub_alive, hit


@triton.jit
def _diver_tl(d, count, sub_x, sub_y):
    """One diver of ``_divers``: picked up under the sub (room for it), else moved when its
    timer is up (off the screen: gone; onto the sub: picked up). Returns (diver, count)."""
    alive, x, y, right, timer = d[0], d[1], d[2], d[3], d[4]
    room = count < 6
    picked = alive & room & (x == sub_x) & (y == sub_y)
    moving = alive & ~picked & (timer == 0)
    timer = tl.where(moving, _DIVER_MOVE_INTERVAL, tl.where(alive & ~picked, timer - 1, timer))
    x = tl.where(moving, _step_x(x, right), x)
    gone = moving & ((x < 0) | (x >= SIZE))
    onto = moving & ~gone & room & (x == sub_x) & (y == sub_y)
    count = count + picked.to(tl.int64) + onto.to(tl.int64)
    return (alive & ~picked & ~gone & ~onto, x, y, right, timer), count


@triton.jit
def _enemies_tl(e, move_speed, sub_x, sub_y, b0, b1):
    """``_enemies`` on fish or subs (their first five columns): touch, move, leave, ram, and
    the player's bullets in list order each shoot the newest exposed enemy on their cell.
    Returns (alive, x, move timer, the game ends, shot, bullet 0 alive, bullet 1 alive)."""
    alive, x, y, right, move = e[0], e[1], e[2], e[3], e[4]
    px = sub_x[:, None]
    py = sub_y[:, None]
    hit = _any_slot(alive & (x == px) & (y == py))
    moving = alive & (move == 0)
    move = tl.where(moving, move_speed[:, None], tl.where(alive, move - 1, move))
    x = tl.where(moving, _step_x(x, right), x)
    gone = moving & ((x < 0) | (x >= SIZE))
    onto = moving & ~gone & (x == px) & (y == py)
    hit = hit | _any_slot(onto)
    exposed = moving & ~gone & ~onto
    on_0 = exposed & b0[0][:, None] & (x == b0[1][:, None]) & (y == b0[2][:, None])
    shot = _last(on_0)
    b0_alive = b0[0] & ~_any_slot(shot)
    on_1 = exposed & ~shot & b1[0][:, None] & (x == b1[1][:, None]) & (y == b1[2][:, None])
    taker = _last(on_1)
    shot = shot | taker
    b1_alive = b1[0] & ~_any_slot(taker)
    return alive & ~gone & ~shot, x, move, hit, shot, b0_alive, b1_alive


@triton.jit
def _paint_slots(y, x, present):
    """bool ``[BLOCK, CELLS]``: the cells ``(y, x)`` of the present slots (off the grid:
    nothing)."""
    index = tl.where(present, flat_index(y, x, 0, 1), -1)
    hits = cells()[None, :, None] == index[:, None, :]
    return total_3d(hits, _LOG2) > 0


@triton.jit
def _floor_div(value, by):
    """``value // by`` rounded down, as Python's (and torch's floor division), from
    divisions of non-negative numbers only (C's division truncates)."""
    return tl.where(value >= 0, value // by, -((by - 1 - value) // by))


@triton.jit
def _act_tl(state, action, u, valid, RAMPING: tl.constexpr):
    """:meth:`Seaquest._act` rule for rule, on a block of rows."""
    oxygen, diver_count, sub_x, sub_y = state[0], state[1], state[2], state[3]
    e_spawn_speed, e_spawn_timer, d_spawn_timer = state[4], state[5], state[6]
    move_speed, ramp_index, shot_timer, sub_right, surface = (
        state[7],
        state[8],
        state[9],
        state[10],
        state[11],
    )
    b0 = (state[12], state[13], state[14], state[15])
    b1 = (state[16], state[17], state[18], state[19])
    d0 = (state[20], state[21], state[22], state[23], state[24])
    d1 = (state[25], state[26], state[27], state[28], state[29])
    fish = (state[30], state[31], state[32], state[33], state[34])
    esub = (state[35], state[36], state[37], state[38], state[39], state[40])
    e_right, e_left = state[41], state[42]
    # Spawns: an enemy (unless its row runs the other way), a diver.
    spawn = e_spawn_timer == 0
    right = tl.load(u, mask=valid, other=0.0) < 0.5
    sub = tl.load(u + 1, mask=valid, other=0.0) < _SUB_CHANCE
    row = 1 + (tl.load(u + 2, mask=valid, other=0.0) * 8).to(tl.int64)
    clash = _any_slot(esub[0] & (esub[2] == row[:, None]) & (esub[3] != right[:, None]))
    clash = clash | _any_slot(fish[0] & (fish[2] == row[:, None]) & (fish[3] != right[:, None]))
    # The new enemy's columns (a fish takes the first five; a sub also its shot timer).
    enemy = (
        spawn[:, None],
        tl.where(right, 0, _LAST)[:, None],
        row[:, None],
        right[:, None],
        move_speed[:, None],
        move_speed[:, None] * 0 + _ENEMY_SHOT_INTERVAL,
    )
    esub = _choose_slot(_end_slot(esub[0], spawn & ~clash & sub), enemy, esub, 6)
    fish = _choose_slot(_end_slot(fish[0], spawn & ~clash & ~sub), enemy, fish, 5)
    e_spawn_timer = tl.where(spawn, e_spawn_speed, e_spawn_timer)
    spawn = d_spawn_timer == 0
    right = tl.load(u + 3, mask=valid, other=0.0) < 0.5
    row = 1 + (tl.load(u + 4, mask=valid, other=0.0) * 8).to(tl.int64)
    diver = (spawn, tl.where(right, 0, _LAST), row, right, row * 0 + _DIVER_MOVE_INTERVAL)
    into_0 = spawn & ~d0[0]
    into_1 = spawn & d0[0] & ~d1[0]
    d0 = _choose_slot(into_0, diver, d0, 5)
    d1 = _choose_slot(into_1, diver, d1, 5)
    d_spawn_timer = tl.where(spawn, _DIVER_SPAWN_SPEED, d_spawn_timer)
    # The player: fire (when loaded), or move; moving sideways turns the sub.
    fire = (action == _FIRE) & (shot_timer == 0)
    bullet = (fire, sub_x, sub_y, sub_right)
    b0_new = fire & ~b0[0]
    b1_new = fire & b0[0] & ~b1[0]
    b0 = _choose_slot(b0_new, bullet, b0, 4)
    b1 = _choose_slot(b1_new, bullet, b1, 4)
    shot_timer = tl.where(fire, _SHOT_COOL_DOWN, shot_timer)
    sub_x = tl.where(action == _LEFT, tl.maximum(sub_x - 1, 0), sub_x)
    sub_x = tl.where(action == _RIGHT, tl.minimum(sub_x + 1, _LAST), sub_x)
    sub_right = tl.where(action == _LEFT, False, (action == _RIGHT) | sub_right)
    sub_y = tl.where(action == _UP, tl.maximum(sub_y - 1, 0), sub_y)
    sub_y = tl.where(action == _DOWN, tl.minimum(sub_y + 1, 8), sub_y)
    # The player's bullets, newest first.
    b1, fish_alive, esub_alive, hit = _bullet_tl(b1, fish, esub)
    reward = hit.to(tl.int64)
    fish = (fish_alive, fish[1], fish[2], fish[3], fish[4])
    esub = (esub_alive, esub[1], esub[2], esub[3], esub[4], esub[5])
    b0, fish_alive, esub_alive, hit = _bullet_tl(b0, fish, esub)
    reward = reward + hit.to(tl.int64)
    fish = (fish_alive, fish[1], fish[2], fish[3], fish[4])
    esub = (esub_alive, esub[1], esub[2], esub[3], esub[4], esub[5])
    # The divers, newest first.
    d1, diver_count = _diver_tl(d1, diver_count, sub_x, sub_y)
    d0, diver_count = _diver_tl(d0, diver_count, sub_x, sub_y)
    # The enemy subs; then they fire when their shot timer is up (the bullet goes their way).
    was_alive, shot_clock = esub[0], esub[5]
    alive, x, move, hit, shot, b0_alive, b1_alive = _enemies_tl(
        esub, move_speed, sub_x, sub_y, b0, b1
    )
    reward = reward + total(shot, _LOG2).to(tl.int64)
    b0 = (b0_alive, b0[1], b0[2], b0[3])
    b1 = (b1_alive, b1[1], b1[2], b1[3])
    fires = was_alive & (shot_clock == 0) & (x >= 0) & (x < SIZE)  # off-screen: gone
    shot_clock = tl.where(
        was_alive & (shot_clock == 0),
        _ENEMY_SHOT_INTERVAL,
        tl.where(was_alive, shot_clock - 1, shot_clock),
    )
    e_right = e_right | _paint_slots(esub[2], x, fires & esub[3])
    e_left = e_left | _paint_slots(esub[2], x, fires & ~esub[3])
    esub = (alive, x, esub[2], esub[3], move, shot_clock)
    # Enemy bullets: touching the sub before or after their move ends the game.
    where = cells()
    column = where % 10
    inside = where < 100
    terminal = cell_at(e_right | e_left, sub_y, sub_x)
    e_right = take(e_right, tl.where(inside & (column >= 1), where - 1, -1))
    e_left = take(e_left, tl.where(inside & (column <= 8), where + 1, -1))
    terminal = terminal | cell_at(e_right | e_left, sub_y, sub_x) | hit
    # The fish.
    alive, x, move, hit, shot, b0_alive, b1_alive = _enemies_tl(
        fish, move_speed, sub_x, sub_y, b0, b1
    )
    reward = reward + total(shot, _LOG2).to(tl.int64)
    b0 = (b0_alive, b0[1], b0[2], b0[3])
    b1 = (b1_alive, b1[1], b1[2], b1[3])
    fish = (alive, x, fish[2], fish[3], move)
    terminal = terminal | hit
    # Timers, oxygen and surfacing.
    e_spawn_timer = e_spawn_timer - (e_spawn_timer > 0).to(tl.int64)
    d_spawn_timer = d_spawn_timer - (d_spawn_timer > 0).to(tl.int64)
    shot_timer = shot_timer - (shot_timer > 0).to(tl.int64)
    end = oxygen <= 0
    below = sub_y > 0
    surfacing = ~below & ~surface
    end = end | (surfacing & (diver_count == 0))
    refill = surfacing & (diver_count != 0)
    six = refill & (diver_count == 6)
    reward = reward + tl.where(six, _floor_div(oxygen * 10, _MAX_OXYGEN), 0)
    count = tl.where(six, 0, diver_count)
    diver_count = tl.where(refill, count - 1, count)
    oxygen = tl.where(below, oxygen - 1, tl.where(refill, _MAX_OXYGEN, oxygen))
    surface = ~below & (surface | refill)
    ramp = refill & ((e_spawn_speed > 1) | (move_speed > 2)) & RAMPING
    odd = (ramp_index & 1) == 1  # ramp_index % 2 == 1, negatives as Python's
    move_speed = move_speed - (ramp & (move_speed > 2) & odd).to(tl.int64)
    e_spawn_speed = e_spawn_speed - (ramp & (e_spawn_speed > 1)).to(tl.int64)
    ramp_index = ramp_index + ramp.to(tl.int64)
    # The lists packed again: slot index = MinAtar's list index.
    b0, b1 = _compact_pair(b0, b1, 4)
    d0, d1 = _compact_pair(d0, d1, 5)
    moved = (
        oxygen,
        diver_count,
        sub_x,
        sub_y,
        e_spawn_speed,
        e_spawn_timer,
        d_spawn_timer,
        move_speed,
        ramp_index,
        shot_timer,
        sub_right,
        surface,
    )
    moved = moved + b0 + b1 + d0 + d1 + _compact_table(fish, 5) + _compact_table(esub, 6)
    return moved + (e_right, e_left), reward.to(tl.float32), terminal | end


@triton.jit
def _observe_tl(state, observ_ptr, rows, valid):
    oxygen, diver_count, sub_x, sub_y, sub_right = state[0], state[1], state[2], state[3], state[10]
    b0 = (state[12], state[13], state[14], state[15])
    b1 = (state[16], state[17], state[18], state[19])
    where = cells()
    y = (where // 10)[None, :]
    x = (where % 10)[None, :]
    store_plane(observ_ptr, rows, valid, mark(sub_y, sub_x), 10, 0)
    back_x = floor_mod(tl.where(sub_right, sub_x - 1, sub_x + 1))  # numpy's -1 is column 9
    store_plane(observ_ptr, rows, valid, mark(sub_y, back_x), 10, 1)
    bullets = (mark(b0[2], b0[1]) & b0[0][:, None]) | (mark(b1[2], b1[1]) & b1[0][:, None])
    store_plane(observ_ptr, rows, valid, bullets, 10, 2)
    trail = bullets & ~bullets
    for d in tl.static_range(2):  # the divers: their trails, then the divers (channel 9)
        alive, dx, dy, right = (
            state[20 + 5 * d],
            state[21 + 5 * d],
            state[22 + 5 * d],
            state[23 + 5 * d],
        )
        trail = trail | (mark(dy, dx - tl.where(right, 1, -1)) & alive[:, None])
    divers = (mark(state[22], state[21]) & state[20][:, None]) | (
        mark(state[27], state[26]) & state[25][:, None]
    )
    store_plane(observ_ptr, rows, valid, divers, 10, 9)
    for e in tl.static_range(2):  # fish (channel 5), then subs (6)
        start = _FISH + 5 * e
        alive, ex, ey, right = state[start], state[start + 1], state[start + 2], state[start + 3]
        trail = trail | _paint_slots(ey, ex - tl.where(right, 1, -1), alive)
        store_plane(observ_ptr, rows, valid, _paint_slots(ey, ex, alive), 10, 5 + e)
    store_plane(observ_ptr, rows, valid, trail, 10, 3)
    store_plane(observ_ptr, rows, valid, state[_GRIDS] | state[_GRIDS + 1], 10, 4)
    bottom = (y == _LAST) & (where < 100)[None, :]
    gauge = (tl.maximum(oxygen, 0) * 10) // _MAX_OXYGEN  # >= 0: C's division is the floor
    store_plane(observ_ptr, rows, valid, bottom & (x < gauge[:, None]), 10, 7)
    divers_gauge = bottom & (x >= (9 - diver_count)[:, None]) & (x < 9)
    store_plane(observ_ptr, rows, valid, divers_gauge, 10, 8)


class Seaquest(MinAtarEnv):
    """A batch of MinAtar Seaquest games (see :class:`MinAtarEnv` for the arguments)."""

    game = "seaquest"
    channels = (
        "sub_front",
        "sub_back",
        "friendly_bullet",
        "trail",
        "enemy_bullet",
        "enemy_fish",
        "enemy_sub",
        "oxygen_guage",
        "diver_guage",
        "diver",
    )
    minimal_actions = tuple(range(6))
    fields = {
        **{name: ((), _INT) for name in _SCALARS},
        "sub_right": ((), torch.bool),  # MinAtar's sub_or: facing right
        "surface": ((), torch.bool),  # at the surface since the last surfacing
        **{name: ((slots, len(columns)), _INT) for name, (slots, columns) in LISTS.items()},
        "ebullet_right": ((SIZE, SIZE), torch.bool),
        "ebullet_left": ((SIZE, SIZE), torch.bool),
    }
    step_draws = (
        Draw("enemy_right", 1, "Env._spawn_enemy"),
        Draw("enemy_sub", 1, "Env._spawn_enemy"),
        Draw("enemy_row", 1, "Env._spawn_enemy"),
        Draw("diver_right", 1, "Env._spawn_diver"),
        Draw("diver_row", 1, "Env._spawn_diver"),
    )
    triton_functions = (_load_tl, _store_tl, _initial_tl, _act_tl, _select_tl, _observe_tl)
    triton_block = 16  # a row's tiles: 32 x 32 per list column while packing, 32 x 128 cells

    def _initial(self, rows, draws):  # MinAtar's reset draws nothing
        start = {
            "oxygen": MAX_OXYGEN,
            "sub_x": 5,
            "e_spawn_speed": INIT_SPAWN_SPEED,
            "e_spawn_timer": INIT_SPAWN_SPEED,
            "d_spawn_timer": DIVER_SPAWN_SPEED,
            "move_speed": INIT_MOVE_INTERVAL,
            "surface": 1,
        }
        return {
            key: torch.full((rows, *shape), start.get(key, 0), dtype=dtype, device=self.device)
            for key, (shape, dtype) in self.fields.items()
        }

    def _act(self, state, action, draws):
        s = unpack(state, LISTS)
        _spawn(s, draws)
        _player(s, action)
        reward = _bullets(s)
        _divers(s)
        reward = reward + _enemies(s, "esub")
        terminal = _enemy_bullets(s) | s.pop("hit")
        reward = reward + _enemies(s, "fish")
        terminal = terminal | s.pop("hit")
        reward, end = _timers(s, reward, self.ramping)
        return pack(s, LISTS), reward, terminal | end

    def _observe(self, state):
        s = unpack(state, LISTS)
        rows = s["sub_x"].shape[0]
        device = s["sub_x"].device
        back_x = torch.where(s["sub_right"], s["sub_x"] - 1, s["sub_x"] + 1) % SIZE  # numpy's -1
        everywhere = torch.ones(rows, 1, dtype=torch.bool, device=device)
        pieces = [  # (rows y, columns x, present, channel), each [K, M]
            (s["sub_y"][:, None], s["sub_x"][:, None], everywhere, 0),
            (s["sub_y"][:, None], back_x[:, None], everywhere, 1),
            (s["bullet_y"], s["bullet_x"], s["bullet_alive"], 2),
        ]
        for name, channel in (("fish", 5), ("esub", 6), ("diver", 9)):
            behind = s[f"{name}_x"] - torch.where(s[f"{name}_right"], 1, -1)
            pieces.append((s[f"{name}_y"], behind, s[f"{name}_alive"], 3))  # the trail
            pieces.append((s[f"{name}_y"], s[f"{name}_x"], s[f"{name}_alive"], channel))
        y, x, present, channel = (
            torch.cat(parts, dim=1)
            for parts in zip(*[(y, x, p, torch.full_like(y, c)) for y, x, p, c in pieces])
        )
        observ = paint(len(self.channels), y, x, channel, present)
        row, col = torch.arange(SIZE, device=device)[:, None], torch.arange(SIZE, device=device)
        oxygen = torch.div(s["oxygen"].clamp(min=0) * 10, MAX_OXYGEN, rounding_mode="floor")
        gauge_oxygen = (row == SIZE - 1) & (col < oxygen[:, None, None])
        gauge_divers = (row == SIZE - 1) & (col >= 9 - s["diver_count"][:, None, None]) & (col < 9)
        nothing = torch.zeros_like(gauge_oxygen)
        dense = (nothing,) * 4 + (s["ebullet_right"] | s["ebullet_left"],) + (nothing,) * 2
        dense = torch.stack((*dense, gauge_oxygen, gauge_divers, nothing), dim=-1)
        return observ | dense

    @staticmethod
    def state_from_reference(game: Any) -> dict[str, Any]:
        state: dict[str, Any] = {key: getattr(game, key) for key in _SCALARS}
        state["sub_right"] = bool(game.sub_or)
        state["surface"] = bool(game.surface)
        for name, (slots, columns) in LISTS.items():
            entries = getattr(game, _REFERENCE_LISTS[name])
            if len(entries) > slots:
                raise ValueError(
                    f"Seaquest.state_from_reference: {len(entries)} {_REFERENCE_LISTS[name]}, "
                    f"more than the {slots} slots this port keeps"
                )
            table = np.zeros((slots, len(columns)), dtype=np.int64)
            for i, entry in enumerate(entries):
                table[i] = [1, *entry]
            state[name] = table
        for key, right in (("ebullet_right", True), ("ebullet_left", False)):
            grid = np.zeros((SIZE, SIZE), dtype=bool)
            for x, y, going_right in game.e_bullets:
                if bool(going_right) == right:
                    grid[y, x] = True
            state[key] = grid
        return state


# -- the phases of one step, in MinAtar's order; each updates the state dict ``s`` -----------


def _spawn(s: dict, draws: dict) -> None:
    """An enemy (unless its row runs the other way) and a diver, when their timers are up."""
    spawn = s["e_spawn_timer"] == 0
    right = draws["enemy_right"][:, 0] < 0.5
    row = 1 + (draws["enemy_row"][:, 0] * 8).floor().to(_INT)
    clash = torch.zeros_like(spawn)
    for name in ("esub", "fish"):
        clash = clash | (
            s[f"{name}_alive"]
            & (s[f"{name}_y"] == row[:, None])
            & (s[f"{name}_right"] != right[:, None])
        ).any(dim=1)
    sub = draws["enemy_sub"][:, 0] < 1 / 3
    x = torch.where(right, 0, SIZE - 1)
    new = {"x": x, "y": row, "right": right, "move": s["move_speed"]}
    append(
        s, "esub", spawn & ~clash & sub, {**new, "shot": torch.full_like(x, ENEMY_SHOT_INTERVAL)}
    )
    append(s, "fish", spawn & ~clash & ~sub, new)
    s["e_spawn_timer"] = torch.where(spawn, s["e_spawn_speed"], s["e_spawn_timer"])
    spawn = s["d_spawn_timer"] == 0
    right = draws["diver_right"][:, 0] < 0.5
    row = 1 + (draws["diver_row"][:, 0] * 8).floor().to(_INT)
    timer = torch.full_like(row, DIVER_MOVE_INTERVAL)
    append(
        s,
        "diver",
        spawn,
        {"x": torch.where(right, 0, SIZE - 1), "y": row, "right": right, "timer": timer},
    )
    s["d_spawn_timer"] = torch.where(spawn, DIVER_SPAWN_SPEED, s["d_spawn_timer"])


def _player(s: dict, action: torch.Tensor) -> None:
    """Fire (when loaded) or move; moving sideways turns the sub."""
    fire = (action == FIRE) & (s["shot_timer"] == 0)
    append(s, "bullet", fire, {"x": s["sub_x"], "y": s["sub_y"], "right": s["sub_right"]})
    s["shot_timer"] = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
    x, y = s["sub_x"], s["sub_y"]
    s["sub_x"] = torch.where(
        action == LEFT,
        (x - 1).clamp(min=0),
        torch.where(action == RIGHT, (x + 1).clamp(max=SIZE - 1), x),
    )
    s["sub_right"] = torch.where(action == LEFT, False, (action == RIGHT) | s["sub_right"])
    s["sub_y"] = torch.where(
        action == UP, (y - 1).clamp(min=0), torch.where(action == DOWN, (y + 1).clamp(max=8), y)
    )


def _bullets(s: dict) -> torch.Tensor:
    """The player's bullets, newest first: move; off the screen, gone; else the first fish
    on the cell, or else the first sub, is shot (both removed, +1). Returns the reward."""
    reward = torch.zeros_like(s["sub_x"])
    for b in reversed(range(BULLETS)):
        alive = s["bullet_alive"][:, b]
        x = s["bullet_x"][:, b] + torch.where(s["bullet_right"][:, b], 1, -1)
        on_screen = alive & (x >= 0) & (x < SIZE)
        hit = torch.zeros_like(alive)
        for name in ("fish", "esub"):
            there = s[f"{name}_alive"] & (s[f"{name}_x"] == x[:, None])
            there = there & (s[f"{name}_y"] == s["bullet_y"][:, b, None])
            shot = first(there) & (on_screen & ~hit)[:, None]
            s[f"{name}_alive"] = s[f"{name}_alive"] & ~shot
            hit = hit | shot.any(dim=1)
        reward = reward + hit.to(_INT)
        s["bullet_x"] = set_column(s["bullet_x"], b, torch.where(alive, x, s["bullet_x"][:, b]))
        s["bullet_alive"] = set_column(s["bullet_alive"], b, on_screen & ~hit)
    return reward


def _divers(s: dict) -> None:
    """The divers, newest first: picked up where the sub is (fewer than 6 on board), else
    moved when their timer is up (and picked up if they move onto the sub)."""
    for d in reversed(range(DIVERS)):
        alive, x, y = s["diver_alive"][:, d], s["diver_x"][:, d], s["diver_y"][:, d]
        timer = s["diver_timer"][:, d]
        room = s["diver_count"] < 6
        picked = alive & room & (x == s["sub_x"]) & (y == s["sub_y"])
        moving = alive & ~picked & (timer == 0)
        timer = torch.where(
            moving, DIVER_MOVE_INTERVAL, torch.where(alive & ~picked, timer - 1, timer)
        )
        x = torch.where(moving, x + torch.where(s["diver_right"][:, d], 1, -1), x)
        gone = moving & ((x < 0) | (x >= SIZE))
        onto = moving & ~gone & room & (x == s["sub_x"]) & (y == s["sub_y"])
        s["diver_count"] = s["diver_count"] + picked.to(_INT) + onto.to(_INT)
        s["diver_x"] = set_column(s["diver_x"], d, x)
        s["diver_timer"] = set_column(s["diver_timer"], d, timer)
        s["diver_alive"] = set_column(s["diver_alive"], d, alive & ~picked & ~gone & ~onto)


def _enemies(s: dict, name: str) -> torch.Tensor:
    """The fish or the enemy subs, newest first (each on its own, so all at once): touching
    the sub ends the game; when the move timer is up, move; off the screen, gone; onto the
    sub, the game ends; else the first live player bullet on the cell shoots it. Subs then
    fire when their shot timer is up. Sets ``s["hit"]``; returns the reward."""
    alive, x, y = s[f"{name}_alive"], s[f"{name}_x"], s[f"{name}_y"]
    px, py = s["sub_x"][:, None], s["sub_y"][:, None]
    hit = (alive & (x == px) & (y == py)).any(dim=1)
    moving = alive & (s[f"{name}_move"] == 0)
    s[f"{name}_move"] = torch.where(
        moving,
        s["move_speed"][:, None],
        torch.where(alive, s[f"{name}_move"] - 1, s[f"{name}_move"]),
    )
    x = torch.where(moving, x + torch.where(s[f"{name}_right"], 1, -1), x)
    gone = moving & ((x < 0) | (x >= SIZE))
    onto = moving & ~gone & (x == px) & (y == py)
    s["hit"] = hit | onto.any(dim=1)
    # Bullet b (list order) goes to the newest enemy on its cell that no earlier bullet took:
    # the sequential loop gives each enemy the first live bullet on its cell.
    exposed = moving & ~gone & ~onto
    shot = torch.zeros_like(alive)
    for b in range(BULLETS):
        on_b = exposed & ~shot & s["bullet_alive"][:, b, None]
        on_b = on_b & (x == s["bullet_x"][:, b, None]) & (y == s["bullet_y"][:, b, None])
        taker = last(on_b)
        shot = shot | taker
        s["bullet_alive"] = set_column(
            s["bullet_alive"], b, s["bullet_alive"][:, b] & ~taker.any(dim=1)
        )
    if name == "esub":
        fires = alive & (s["esub_shot"] == 0) & (x >= 0) & (x < SIZE)  # off-screen: gone at once
        s["esub_shot"] = torch.where(
            alive & (s["esub_shot"] == 0),
            ENEMY_SHOT_INTERVAL,
            torch.where(alive, s["esub_shot"] - 1, s["esub_shot"]),
        )
        shots = paint(2, y, x, (~s["esub_right"]).to(_INT), fires)  # [K, 10, 10, (right, left)]
        s["ebullet_right"] = s["ebullet_right"] | shots[..., 0]
        s["ebullet_left"] = s["ebullet_left"] | shots[..., 1]
    s[f"{name}_x"] = x
    s[f"{name}_alive"] = alive & ~gone & ~shot
    return shot.sum(dim=1)


def _enemy_bullets(s: dict) -> torch.Tensor:
    """Enemy bullets: touching the sub before or after their move ends the game."""
    before = at(s["ebullet_right"] | s["ebullet_left"], s["sub_y"], s["sub_x"])
    edge = torch.zeros_like(s["ebullet_right"][:, :, :1])
    s["ebullet_right"] = torch.cat((edge, s["ebullet_right"][:, :, :-1]), dim=2)
    s["ebullet_left"] = torch.cat((s["ebullet_left"][:, :, 1:], edge), dim=2)
    return before | at(s["ebullet_right"] | s["ebullet_left"], s["sub_y"], s["sub_x"])


def _timers(s: dict, reward: torch.Tensor, ramping: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Timers, oxygen and surfacing; returns ``(reward, terminal)`` of this phase."""
    for key in ("e_spawn_timer", "d_spawn_timer", "shot_timer"):
        s[key] = s[key] - (s[key] > 0).to(_INT)
    end = s["oxygen"] <= 0
    below = s["sub_y"] > 0
    surfacing = ~below & ~s["surface"]
    end = end | (surfacing & (s["diver_count"] == 0))
    refill = surfacing & (s["diver_count"] != 0)
    six = refill & (s["diver_count"] == 6)
    bonus = torch.div(s["oxygen"] * 10, MAX_OXYGEN, rounding_mode="floor")
    reward = reward + torch.where(six, bonus, 0)
    count = torch.where(six, 0, s["diver_count"])
    s["diver_count"] = torch.where(refill, count - 1, count)
    s["oxygen"] = torch.where(below, s["oxygen"] - 1, torch.where(refill, MAX_OXYGEN, s["oxygen"]))
    s["surface"] = ~below & (s["surface"] | refill)
    speed, move = s["e_spawn_speed"], s["move_speed"]
    ramp = refill & ((speed > 1) | (move > 2)) & ramping
    s["move_speed"] = move - (ramp & (move > 2) & (s["ramp_index"] % 2 == 1)).to(_INT)
    s["e_spawn_speed"] = speed - (ramp & (speed > 1)).to(_INT)
    s["ramp_index"] = s["ramp_index"] + ramp.to(_INT)
    return reward, end
