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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._base import DOWN, LEFT, NOOP, RIGHT, SIZE, UP, Draw, MinAtarEnv, cell

_INT = torch.int64
SLOTS = 8  # rows 1 to 8, one entity each
RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5


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
