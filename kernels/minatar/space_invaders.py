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
    alien                bool [10, 10]
    f_bullet, e_bullet   bool [10, 10] the cannon's and the aliens' bullets
    alien_dir            int64         -1 left, +1 right
    enemy_move_interval  int64         the wave's move interval (ramps 12 -> 6)
    alien_move_timer     int64         steps to the block's next move
    alien_shot_timer     int64         steps to the aliens' next shot
    shot_timer           int64         steps until the cannon may fire again
    ramp_index           int64         waves cleared with ramping

Bullets and aliens live on grids, as in MinAtar, so nothing has to be counted. MinAtar's
``np.roll`` is kept where it shows: a block that moves down from the bottom row wraps to the
top row (the episode has ended by then, but the terminal observation shows it).

Observation channels: cannon, alien, alien_left, alien_right, friendly_bullet,
enemy_bullet. Minimal actions: noop, left, right, fire. No random draws besides the sticky
action.

    >>> import torch
    >>> env = SpaceInvaders(num_envs=4, seed=0)
    >>> observ, reward, terminated, truncated = env.step(torch.full((4,), 3))
    >>> observ.shape
    torch.Size([4, 10, 10, 6])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._base import FIRE, LEFT, NOOP, RIGHT, SIZE, MinAtarEnv, at, cell, grid

_INT = torch.int64
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12  # the first wave's; a ramped wave's never drops below 6
MIN_MOVE_INTERVAL = 6
ENEMY_SHOT_INTERVAL = 10


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
        "alien": ((SIZE, SIZE), torch.bool),
        "f_bullet": ((SIZE, SIZE), torch.bool),
        "e_bullet": ((SIZE, SIZE), torch.bool),
        "alien_dir": ((), _INT),
        "enemy_move_interval": ((), _INT),
        "alien_move_timer": ((), _INT),
        "alien_shot_timer": ((), _INT),
        "shot_timer": ((), _INT),
        "ramp_index": ((), _INT),
    }

    def _initial(self, rows, draws):  # MinAtar's reset draws nothing
        return _initial_state(rows, self.device)

    def _act(self, state, action, draws):
        pos, shot_timer = state["pos"], state["shot_timer"]
        alien, alien_dir = state["alien"], state["alien_dir"]
        rows = pos.shape[0]
        bottom = torch.full_like(pos, SIZE - 1)
        # The cannon: fire (when loaded), or move.
        fire = (action == FIRE) & (shot_timer == 0)
        f_bullet = state["f_bullet"] | (cell(bottom, pos) & fire[:, None, None])
        shot_timer = torch.where(fire, SHOT_COOL_DOWN, shot_timer)
        pos = torch.where(action == LEFT, (pos - 1).clamp(min=0), pos)
        pos = torch.where(action == RIGHT, (pos + 1).clamp(max=SIZE - 1), pos)
        # Bullets move one row: the cannon's up (off the top: gone), the aliens' down.
        empty_row = torch.zeros(rows, 1, SIZE, dtype=torch.bool, device=pos.device)
        f_bullet = torch.cat((f_bullet[:, 1:], empty_row), dim=1)
        e_bullet = torch.cat((empty_row, state["e_bullet"][:, :-1]), dim=1)
        terminal = at(e_bullet, bottom, pos) | at(alien, bottom, pos)
        # The block moves when its timer is up: sideways, or down and turn at an edge.
        move = state["alien_move_timer"] == 0
        count = alien.flatten(1).sum(dim=1)
        move_timer = torch.where(
            move, torch.minimum(count, state["enemy_move_interval"]), state["alien_move_timer"]
        )
        turn = (alien[:, :, 0].any(dim=1) & (alien_dir < 0)) | (
            alien[:, :, SIZE - 1].any(dim=1) & (alien_dir > 0)
        )
        down = move & turn
        terminal = terminal | (down & alien[:, SIZE - 1].any(dim=1))
        sideways = torch.where(
            (alien_dir < 0)[:, None, None], alien.roll(-1, dims=2), alien.roll(1, dims=2)
        )
        moved = torch.where(turn[:, None, None], alien.roll(1, dims=1), sideways)
        alien = torch.where(move[:, None, None], moved, alien)
        alien_dir = torch.where(down, -alien_dir, alien_dir)
        terminal = terminal | (move & at(alien, bottom, pos))
        # The aliens fire from the lowest alien of the column nearest the cannon.
        shoot = state["alien_shot_timer"] == 0
        shot_y, shot_x = _nearest_alien(alien, pos)
        e_bullet = e_bullet | (cell(shot_y, shot_x) & shoot[:, None, None])
        shot_timer_alien = torch.where(shoot, ENEMY_SHOT_INTERVAL, state["alien_shot_timer"])
        # Hits: an alien and a cannon bullet on one cell remove each other.
        kill = alien & f_bullet
        reward = kill.flatten(1).sum(dim=1)
        alien = alien & ~kill
        f_bullet = f_bullet & ~kill
        # Timers, then a new wave if this one is gone.
        shot_timer = shot_timer - (shot_timer > 0).to(_INT)
        cleared = ~alien.flatten(1).any(dim=1)
        ramp = cleared & (state["enemy_move_interval"] > MIN_MOVE_INTERVAL) & self.ramping
        alien = alien | (_wave(rows, pos.device) & cleared[:, None, None])
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
        alien = state["alien"]
        left = (state["alien_dir"] < 0)[:, None, None]
        return torch.stack(
            (
                cell(torch.full_like(state["pos"], SIZE - 1), state["pos"]),
                alien,
                alien & left,
                alien & ~left,
                state["f_bullet"],
                state["e_bullet"],
            ),
            dim=-1,
        )

    @staticmethod
    def state_from_reference(game: Any) -> dict[str, Any]:
        return {
            "pos": game.pos,
            "alien": np.asarray(game.alien_map) != 0,
            "f_bullet": np.asarray(game.f_bullet_map) != 0,
            "e_bullet": np.asarray(game.e_bullet_map) != 0,
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

    nothing = torch.zeros(rows, SIZE, SIZE, dtype=torch.bool, device=device)
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
    """bool ``[rows, 10, 10]``: a new wave, rows 0 to 3 by columns 2 to 7."""
    row, col = grid(device)
    return ((row <= 3) & (col >= 2) & (col <= 7)).expand(rows, SIZE, SIZE)


def _nearest_alien(alien: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MinAtar's ``_nearest_alien``: ``(row, column)`` of the lowest alien in the occupied
    column closest to ``pos`` (a tie goes to the lower column). Row -1 when there is none."""
    _, col = grid(alien.device)
    occupied = alien.any(dim=1)  # [K, 10]
    distance = (col - pos[:, None]).abs() * SIZE + col  # unique keys, in search order
    column = torch.where(occupied, distance, SIZE * SIZE).argmin(dim=1)
    in_column = alien.gather(2, column[:, None, None].expand(-1, SIZE, 1))[:, :, 0]
    depth = torch.arange(1, SIZE + 1, device=alien.device)
    return (in_column * depth).amax(dim=1) - 1, column
