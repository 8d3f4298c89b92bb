"""MinAtar's Asterix as a batched torch env (``minatar/environments/asterix.py``, rule for rule).

The player moves in four directions between rows 1 and 8. Each of those eight rows is a
slot that holds at most one entity, an enemy or gold, which enters at the left or right
edge and crosses the screen; a trail cell behind it shows its direction. Every
``spawn_speed`` steps an entity spawns in a random free slot (left or right with equal
chance, gold with chance 1/3), and all entities move one cell every ``move_speed`` + 1
steps. Reward +1 per gold picked up; touching an enemy ends the episode. With difficulty
ramping, every 102nd step lowers ``spawn_speed`` (10 down to 1) and, every other time,
``move_speed`` (5 down to 1).

State (per row)::

    player_x, player_y             int64       the player's cell
    entity_alive                   bool  [8]   slot i is row i + 1
    entity_x                       int64 [8]   column (0 when the slot is empty)
    entity_right, entity_gold      bool  [8]   moving right; gold, not an enemy
    spawn_speed, spawn_timer       int64
    move_speed, move_timer         int64
    ramp_timer, ramp_index         int64       steps to the next ramp; ramps so far

Observation channels: player, enemy, trail, gold. Minimal actions: noop, left, up, right,
down. Draws per step (MinAtar's ``Env._spawn_entity``, made whenever the spawn timer is up):
``rand() < 1/2`` (enters at the left, moving right), ``rand() < 1/3`` (gold) and
``randint(number of free slots)`` (which free slot, in slot order; not drawn when none is
free). A fresh start draws nothing.

    >>> import torch
    >>> env = Asterix(num_envs=4, seed=0)
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(4, dtype=torch.int64))
    >>> observ.shape
    torch.Size([4, 10, 10, 4])

``Asterix(..., backend="triton")`` runs the same step in ``_kernel.step_kernel`` with this
module's device functions (``_act_tl``, ...): bit for bit the torch backend's results.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._triton import tl, triton
from ._base import DOWN, LEFT, NOOP, RIGHT, SIZE, UP, Draw, MinAtarEnv, cell
from ._kernel import flat_index, mark_flat, store_flat, total, total_3d

_INT = torch.int64
SLOTS = 8  # rows 1 to 8, one entity each
RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5


# -- the triton step: the same rules on a block of rows (``_kernel.step_kernel`` calls them) --
# State tuple in ``fields`` order: the scalars [BLOCK], the entity_* fields [BLOCK, 8]
# (slot i in column i).

_SLOTS = tl.constexpr(SLOTS)
_LEFT = tl.constexpr(LEFT)
_RIGHT = tl.constexpr(RIGHT)
_UP = tl.constexpr(UP)
_DOWN = tl.constexpr(DOWN)
_LAST = tl.constexpr(SIZE - 1)
_RAMP_INTERVAL = tl.constexpr(RAMP_INTERVAL)
_INIT_SPAWN_SPEED = tl.constexpr(INIT_SPAWN_SPEED)
_INIT_MOVE_INTERVAL = tl.constexpr(INIT_MOVE_INTERVAL)
_GOLD_CHANCE = tl.constexpr(1 / 3)  # compared in float32, as torch compares it
_FLAT = tl.constexpr(512)  # 10 * 10 * 4 observation values per row, padded


@triton.jit
def _load_tl(ptrs, rows, valid):
    slots = rows[:, None] * _SLOTS + tl.arange(0, _SLOTS)[None, :]
    state = ()
    for j in tl.static_range(12):
        if j == 2 or j == 4 or j == 5:  # bool slots
            state = state + (tl.load(ptrs[j] + slots, mask=valid[:, None], other=0) != 0,)
        elif j == 3:
            state = state + (tl.load(ptrs[j] + slots, mask=valid[:, None], other=0),)
        else:
            state = state + (tl.load(ptrs[j] + rows, mask=valid, other=0),)
    return state


@triton.jit
def _store_tl(ptrs, rows, valid, state):
    slots = rows[:, None] * _SLOTS + tl.arange(0, _SLOTS)[None, :]
    for j in tl.static_range(12):
        if j >= 2 and j <= 5:
            tl.store(ptrs[j] + slots, state[j], mask=valid[:, None])
        else:
            tl.store(ptrs[j] + rows, state[j], mask=valid)


@triton.jit
def _select_tl(mask, a, b):
    state = ()
    for j in tl.static_range(12):
        if j >= 2 and j <= 5:
            state = state + (tl.where(mask[:, None], a[j], b[j]),)
        else:
            state = state + (tl.where(mask, a[j], b[j]),)
    return state


@triton.jit
def _initial_tl(u, valid):  # MinAtar's reset draws nothing
    zero = valid.to(tl.int64) * 0
    empty = zero[:, None] + tl.zeros([1, _SLOTS], tl.int64)
    return (
        zero + 5,
        zero + 5,
        empty != 0,
        empty,
        empty != 0,
        empty != 0,
        zero + _INIT_SPAWN_SPEED,
        zero + _INIT_SPAWN_SPEED,
        zero + _INIT_MOVE_INTERVAL,
        zero + _INIT_MOVE_INTERVAL,
        zero + _RAMP_INTERVAL,
        zero,
    )


@triton.jit
def _act_tl(state, action, u, valid, RAMPING: tl.constexpr):
    """:meth:`Asterix._act` rule for rule, on a block of rows."""
    px, py, alive, x, right, gold = state[0], state[1], state[2], state[3], state[4], state[5]
    spawn_speed, spawn_timer, move_speed, move_timer = state[6], state[7], state[8], state[9]
    ramp_timer, ramp_index = state[10], state[11]
    slot = tl.arange(0, _SLOTS)
    # Spawn into the k-th free slot (slot order), k = randint(number free).
    spawn = spawn_timer == 0
    free = ~alive
    u_right = tl.load(u, mask=valid, other=0.0)
    u_gold = tl.load(u + 1, mask=valid, other=0.0)
    u_slot = tl.load(u + 2, mask=valid, other=0.0)
    k = (u_slot * total(free, 3).to(tl.float32)).to(tl.int64)  # the product is >= 0
    before = free[:, None, :] & (slot[None, :] <= slot[:, None])[None, :, :]
    rank = total_3d(before, 3) - 1  # free.cumsum(dim=1) - 1
    chosen = free & (rank == k[:, None]) & spawn[:, None]
    new_right = (u_right < 0.5)[:, None]
    alive = alive | chosen
    x = tl.where(chosen, tl.where(new_right, 0, _LAST), x)
    right = tl.where(chosen, new_right, right)
    gold = tl.where(chosen, (u_gold < _GOLD_CHANCE)[:, None], gold)
    spawn_timer = tl.where(spawn, spawn_speed, spawn_timer)
    # The player moves.
    px = tl.where(action == _LEFT, tl.maximum(px - 1, 0), px)
    px = tl.where(action == _RIGHT, tl.minimum(px + 1, _LAST), px)
    py = tl.where(action == _UP, tl.maximum(py - 1, 1), py)
    py = tl.where(action == _DOWN, tl.minimum(py + 1, _SLOTS), py)
    on_player_row = (slot + 1)[None, :] == py[:, None]
    # Contact before the entities move: gold is picked up, an enemy ends the game.
    touch = alive & on_player_row & (x == px[:, None])
    picked = touch & gold
    terminal = total(touch & ~gold, 3) > 0
    alive = alive & ~picked
    # The entities move when the move timer is up; off the screen they are gone.
    move = move_timer == 0
    move_timer = tl.where(move, move_speed, move_timer)
    moving = alive & move[:, None]
    x = tl.where(moving, x + tl.where(right, 1, -1), x)
    gone = moving & ((x < 0) | (x > _LAST))
    touch = moving & ~gone & on_player_row & (x == px[:, None])
    terminal = terminal | (total(touch & ~gold, 3) > 0)
    reward = total(picked, 3) + total(touch & gold, 3)
    alive = alive & ~gone & ~(touch & gold)
    # Timers, then the difficulty ramp: a ramp step every RAMP_INTERVAL + 2 steps.
    ramping = ((spawn_speed > 1) | (move_speed > 1)) & RAMPING
    ramp = ramping & (ramp_timer < 0)
    ramp_timer = tl.where(ramp, _RAMP_INTERVAL, ramp_timer - ramping.to(tl.int64))
    odd = (ramp_index & 1) == 1  # ramp_index % 2 == 1, negatives as Python's
    move_speed = move_speed - (ramp & (move_speed > 1) & odd).to(tl.int64)
    spawn_speed = spawn_speed - (ramp & (spawn_speed > 1)).to(tl.int64)
    moved = (
        px,
        py,
        alive,
        tl.where(alive, x, 0),
        right & alive,
        gold & alive,
        spawn_speed,
        spawn_timer - 1,
        move_speed,
        move_timer - 1,
        ramp_timer,
        ramp_index + ramp.to(tl.int64),
    )
    return moved, reward.to(tl.float32), terminal


@triton.jit
def _observe_tl(state, observ_ptr, rows, valid):
    # _observe's marks: the player; slot i's entity on row i + 1 (enemy or gold channel)
    # and its trail behind it (off the grid: nothing)
    px, py, alive, x, right, gold = state[0], state[1], state[2], state[3], state[4], state[5]
    lane = (tl.arange(0, _SLOTS) + 1)[None, :] + x * 0
    here = tl.where(alive, flat_index(lane, x, tl.where(gold, 3, 1), 4), -1)
    trail = tl.where(alive, flat_index(lane, x - tl.where(right, 1, -1), 2, 4), -1)
    flat = tl.arange(0, _FLAT)[None, :, None]
    marks = (flat == here[:, None, :]) | (flat == trail[:, None, :])
    plane = total_3d(marks, 3) > 0
    plane = mark_flat(plane, flat_index(py, px, 0, 4))
    store_flat(observ_ptr, rows, valid, plane, 4)


class Asterix(MinAtarEnv):
    """A batch of MinAtar Asterix games (see :class:`MinAtarEnv` for the arguments)."""

    game = "asterix"
    channels = ("player", "enemy", "trail", "gold")
    minimal_actions = (NOOP, LEFT, UP, RIGHT, DOWN)
    fields = {
        "player_x": ((), _INT),
        "player_y": ((), _INT),
        "entity_alive": ((SLOTS,), torch.bool),
        "entity_x": ((SLOTS,), _INT),
        "entity_right": ((SLOTS,), torch.bool),
        "entity_gold": ((SLOTS,), torch.bool),
        "spawn_speed": ((), _INT),
        "spawn_timer": ((), _INT),
        "move_speed": ((), _INT),
        "move_timer": ((), _INT),
        "ramp_timer": ((), _INT),
        "ramp_index": ((), _INT),
    }
    step_draws = (
        Draw("spawn_right", 1, "Env._spawn_entity"),
        Draw("spawn_gold", 1, "Env._spawn_entity"),
        Draw("spawn_slot", 1, "Env._spawn_entity"),
    )
    triton_functions = (_load_tl, _store_tl, _initial_tl, _act_tl, _select_tl, _observe_tl)

    def _initial(self, rows, draws):  # MinAtar's reset draws nothing
        def full(value: int) -> torch.Tensor:
            return torch.full((rows,), value, dtype=_INT, device=self.device)

        empty = torch.zeros(rows, SLOTS, dtype=torch.bool, device=self.device)
        return {
            "player_x": full(5),
            "player_y": full(5),
            "entity_alive": empty,
            "entity_x": torch.zeros(rows, SLOTS, dtype=_INT, device=self.device),
            "entity_right": empty.clone(),
            "entity_gold": empty.clone(),
            "spawn_speed": full(INIT_SPAWN_SPEED),
            "spawn_timer": full(INIT_SPAWN_SPEED),
            "move_speed": full(INIT_MOVE_INTERVAL),
            "move_timer": full(INIT_MOVE_INTERVAL),
            "ramp_timer": full(RAMP_INTERVAL),
            "ramp_index": full(0),
        }

    def _act(self, state, action, draws):
        alive, x = state["entity_alive"], state["entity_x"]
        right, gold = state["entity_right"], state["entity_gold"]
        # Spawn into the k-th free slot (slot order), k = randint(number free).
        spawn = state["spawn_timer"] == 0
        free = ~alive
        k = (draws["spawn_slot"][:, 0] * free.sum(dim=1)).floor().to(_INT)
        chosen = free & (free.cumsum(dim=1) - 1 == k[:, None]) & spawn[:, None]
        new_right = (draws["spawn_right"][:, 0] < 0.5)[:, None]
        alive = alive | chosen
        x = torch.where(chosen, torch.where(new_right, 0, SIZE - 1), x)
        right = torch.where(chosen, new_right, right)
        gold = torch.where(chosen, (draws["spawn_gold"][:, 0] < 1 / 3)[:, None], gold)
        spawn_timer = torch.where(spawn, state["spawn_speed"], state["spawn_timer"])
        # The player moves.
        px, py = state["player_x"], state["player_y"]
        px = torch.where(action == LEFT, (px - 1).clamp(min=0), px)
        px = torch.where(action == RIGHT, (px + 1).clamp(max=SIZE - 1), px)
        py = torch.where(action == UP, (py - 1).clamp(min=1), py)
        py = torch.where(action == DOWN, (py + 1).clamp(max=SLOTS), py)
        on_player_row = torch.arange(1, SLOTS + 1, device=px.device) == py[:, None]
        # Contact before the entities move: gold is picked up, an enemy ends the game.
        touch = alive & on_player_row & (x == px[:, None])
        picked = touch & gold
        terminal = (touch & ~gold).any(dim=1)
        alive = alive & ~picked
        # The entities move when the move timer is up; off the screen they are gone.
        move = state["move_timer"] == 0
        move_timer = torch.where(move, state["move_speed"], state["move_timer"])
        moving = alive & move[:, None]
        x = torch.where(moving, x + torch.where(right, 1, -1), x)
        gone = moving & ((x < 0) | (x > SIZE - 1))
        touch = moving & ~gone & on_player_row & (x == px[:, None])
        terminal = terminal | (touch & ~gold).any(dim=1)
        reward = picked.sum(dim=1) + (touch & gold).sum(dim=1)
        alive = alive & ~gone & ~(touch & gold)
        # Timers, then the difficulty ramp: a ramp step every RAMP_INTERVAL + 2 steps.
        spawn_speed, move_speed = state["spawn_speed"], state["move_speed"]
        ramp_timer, ramp_index = state["ramp_timer"], state["ramp_index"]
        ramping = ((spawn_speed > 1) | (move_speed > 1)) & self.ramping
        ramp = ramping & (ramp_timer < 0)
        ramp_timer = torch.where(ramp, RAMP_INTERVAL, ramp_timer - ramping.to(_INT))
        move_speed = move_speed - (ramp & (move_speed > 1) & (ramp_index % 2 == 1)).to(_INT)
        spawn_speed = spawn_speed - (ramp & (spawn_speed > 1)).to(_INT)
        moved = {
            "player_x": px,
            "player_y": py,
            "entity_alive": alive,
            "entity_x": torch.where(alive, x, 0),
            "entity_right": right & alive,
            "entity_gold": gold & alive,
            "spawn_speed": spawn_speed,
            "spawn_timer": spawn_timer - 1,
            "move_speed": move_speed,
            "move_timer": move_timer - 1,
            "ramp_timer": ramp_timer,
            "ramp_index": ramp_index + ramp.to(_INT),
        }
        return moved, reward, terminal

    def _observe(self, state):
        alive, x = state["entity_alive"], state["entity_x"]
        right, gold = state["entity_right"], state["entity_gold"]
        col = torch.arange(SIZE, device=x.device)
        here = alive[:, :, None] & (col == x[:, :, None])  # [K, 8, 10], slot i on row i + 1
        behind = x - torch.where(right, 1, -1)  # off the grid: marks nothing
        trail = alive[:, :, None] & (col == behind[:, :, None])
        edge = torch.zeros_like(here[:, :1])  # rows 0 and 9 hold no entity

        def rows(slots: torch.Tensor) -> torch.Tensor:
            return torch.cat((edge, slots, edge), dim=1)

        return torch.stack(
            (
                cell(state["player_y"], state["player_x"]),
                rows(here & ~gold[:, :, None]),
                rows(trail),
                rows(here & gold[:, :, None]),
            ),
            dim=-1,
        )

    @staticmethod
    def state_from_reference(game: Any) -> dict[str, Any]:
        entities = [e if e is not None else [0, 0, False, False] for e in game.entities]
        return {
            "player_x": game.player_x,
            "player_y": game.player_y,
            "entity_alive": np.array([e is not None for e in game.entities]),
            "entity_x": np.array([e[0] for e in entities]),
            "entity_right": np.array([bool(e[2]) for e in entities]),
            "entity_gold": np.array([bool(e[3]) for e in entities]),
            "spawn_speed": game.spawn_speed,
            "spawn_timer": game.spawn_timer,
            "move_speed": game.move_speed,
            "move_timer": game.move_timer,
            "ramp_timer": game.ramp_timer,
            "ramp_index": game.ramp_index,
        }
