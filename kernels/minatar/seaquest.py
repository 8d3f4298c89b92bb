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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._base import DOWN, FIRE, LEFT, RIGHT, SIZE, UP, Draw, MinAtarEnv, at, paint
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
