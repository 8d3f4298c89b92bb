"""MinAtar's Freeway as a batched torch env (``minatar/environments/freeway.py``, rule for rule).

The chicken walks up column 4 from the bottom row, one cell at most every 3 frames. Eight
cars, one per row 1..8, drive left or right, each moving one cell every 1 to 5 frames and
wrapping around at the edges. A car on the chicken's cell sends it back to the bottom row;
reaching the top row gives +1, sends it back and draws new car speeds and directions (the
cars keep their places). The episode ends after 2500 frames (the 2501st step is terminal).
No difficulty ramping.

State (per row)::

    pos              int64      the chicken's row (column 4)
    move_timer       int64      frames until the chicken may move again
    terminate_timer  int64      frames left; the episode ends when it drops below 0
    car_x            int64 [8]  car i's column (its row is i + 1)
    car_timer        int64 [8]  frames until car i moves again
    car_speed        int64 [8]  car i's signed speed: frames per move, sign = direction

Observation channels: chicken, car, then speed1..speed5: a car's trail cell (behind it)
in the channel of its speed. Minimal actions: noop, up, down.
Draws (MinAtar's ``_randomize_cars``, at a fresh start and on reaching the top): speeds
``randint(1, 6, 8)`` and directions ``sign(rand(8) - 0.5)``. A direction draw of exactly 0.5
(sign 0, a speed-0 car that MinAtar itself cannot draw a trail for) is taken as +1.

    >>> import torch
    >>> env = Freeway(num_envs=4, seed=0)
    >>> observ, reward, terminated, truncated = env.step(torch.ones(4, dtype=torch.int64))
    >>> observ.shape
    torch.Size([4, 10, 10, 7])

``Freeway(..., backend="triton")`` runs the same step in ``_kernel.step_kernel`` with this
module's device functions (``_act_tl``, ...): bit for bit the torch backend's results.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._triton import tl, triton
from ._base import DOWN, NOOP, SIZE, UP, Draw, MinAtarEnv, paint
from ._kernel import flat_index, floor_mod, mark_flat, store_flat, total, total_3d

PLAYER_SPEED = 3  # frames between the chicken's moves
TIME_LIMIT = 2500  # frames per episode
CARS = 8
CHICKEN_X = 4
_INT = torch.int64


# -- the triton step: the same rules on a block of rows (``_kernel.step_kernel`` calls them) --
# State tuple: pos, move_timer, terminate_timer ([BLOCK] each), car_x, car_timer, car_speed
# ([BLOCK, 8] each, car i in column i).

_CARS = tl.constexpr(CARS)
_UP = tl.constexpr(UP)
_DOWN = tl.constexpr(DOWN)
_LAST = tl.constexpr(SIZE - 1)
_PLAYER_SPEED = tl.constexpr(PLAYER_SPEED)
_TIME_LIMIT = tl.constexpr(TIME_LIMIT)
_CHICKEN_X = tl.constexpr(CHICKEN_X)
_FLAT = tl.constexpr(1024)  # 10 * 10 * 7 observation values per row, padded


@triton.jit
def _load_tl(ptrs, rows, valid):
    state = ()
    for j in tl.static_range(3):
        state = state + (tl.load(ptrs[j] + rows, mask=valid, other=0),)
    cars = rows[:, None] * _CARS + tl.arange(0, _CARS)[None, :]
    for j in tl.static_range(3, 6):
        state = state + (tl.load(ptrs[j] + cars, mask=valid[:, None], other=0),)
    return state


@triton.jit
def _store_tl(ptrs, rows, valid, state):
    for j in tl.static_range(3):
        tl.store(ptrs[j] + rows, state[j], mask=valid)
    cars = rows[:, None] * _CARS + tl.arange(0, _CARS)[None, :]
    for j in tl.static_range(3, 6):
        tl.store(ptrs[j] + cars, state[j], mask=valid[:, None])


@triton.jit
def _select_tl(mask, a, b):
    state = ()
    for j in tl.static_range(3):
        state = state + (tl.where(mask, a[j], b[j]),)
    for j in tl.static_range(3, 6):
        state = state + (tl.where(mask[:, None], a[j], b[j]),)
    return state


@triton.jit
def _random_cars_tl(u, valid):
    """``(timer, signed speed)`` ``[BLOCK, 8]`` from ``_randomize_cars``'s 16 draws."""
    at = u[:, None] + tl.arange(0, _CARS)[None, :]
    speeds = tl.load(at, mask=valid[:, None], other=0.0)
    directions = tl.load(at + _CARS, mask=valid[:, None], other=0.0)
    speed = 1 + (speeds * 5).to(tl.int64)  # randint(1, 6): the product is >= 0
    speed = tl.where(directions < 0.5, -speed, speed)  # sign(rand() - 0.5)
    return tl.abs(speed), speed


@triton.jit
def _initial_tl(u, valid):
    timer, speed = _random_cars_tl(u, valid)
    zero = valid.to(tl.int64) * 0
    return zero + _LAST, zero + _PLAYER_SPEED, zero + _TIME_LIMIT, timer * 0, timer, speed


@triton.jit
def _act_tl(state, action, u, valid, RAMPING: tl.constexpr):
    """:meth:`Freeway._act` rule for rule, on a block of rows."""
    pos, move_timer, terminate_timer, car_x, car_timer, car_speed = state
    may_move = move_timer == 0
    up = may_move & (action == _UP)
    down = may_move & (action == _DOWN)
    pos = tl.where(up, tl.maximum(pos - 1, 0), pos)
    pos = tl.where(down, tl.minimum(pos + 1, _LAST), pos)
    move_timer = tl.where(up | down, _PLAYER_SPEED, move_timer)
    win = pos == 0
    new_timer, new_speed = _random_cars_tl(u, valid)
    car_timer = tl.where(win[:, None], new_timer, car_timer)
    car_speed = tl.where(win[:, None], new_speed, car_speed)
    pos = tl.where(win, _LAST, pos)
    in_lane = (tl.arange(0, _CARS) + 1)[None, :] == pos[:, None]
    hit = in_lane & (car_x == _CHICKEN_X)
    moves = car_timer == 0
    car_x = tl.where(moves, floor_mod(car_x + tl.where(car_speed > 0, 1, -1)), car_x)
    car_timer = tl.where(moves, tl.abs(car_speed), car_timer - 1)
    hit = hit | (in_lane & moves & (car_x == _CHICKEN_X))
    pos = tl.where(total(hit, 3) > 0, _LAST, pos)
    move_timer = move_timer - (move_timer > 0).to(tl.int64)
    terminate_timer = terminate_timer - 1
    moved = (pos, move_timer, terminate_timer, car_x, car_timer, car_speed)
    return moved, win.to(tl.float32), terminate_timer < 0


@triton.jit
def _observe_tl(state, observ_ptr, rows, valid):
    # _observe's marks: the chicken; car i on row i + 1 and its trail behind it, in
    # channel 1 + |speed| (speed1 is channel 2)
    pos, _, _, car_x, _, speed = state
    lane = (tl.arange(0, _CARS) + 1)[None, :] + car_x * 0
    back_x = floor_mod(car_x - tl.where(speed > 0, 1, -1))
    flat = tl.arange(0, _FLAT)[None, :, None]
    cars = (flat == flat_index(lane, car_x, 1, 7)[:, None, :]) | (
        flat == flat_index(lane, back_x, 1 + tl.abs(speed), 7)[:, None, :]
    )
    plane = total_3d(cars, 3) > 0
    plane = mark_flat(plane, flat_index(pos, pos * 0 + _CHICKEN_X, 0, 7))
    store_flat(observ_ptr, rows, valid, plane, 7)


class Freeway(MinAtarEnv):
    """A batch of MinAtar Freeway games (see :class:`MinAtarEnv` for the arguments)."""

    game = "freeway"
    channels = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    minimal_actions = (NOOP, UP, DOWN)
    fields = {
        "pos": ((), _INT),
        "move_timer": ((), _INT),
        "terminate_timer": ((), _INT),
        "car_x": ((CARS,), _INT),
        "car_timer": ((CARS,), _INT),
        "car_speed": ((CARS,), _INT),
    }
    reset_draws = (
        Draw("speeds", CARS, "Env._randomize_cars"),
        Draw("directions", CARS, "Env._randomize_cars"),
    )
    step_draws = reset_draws
    triton_functions = (_load_tl, _store_tl, _initial_tl, _act_tl, _select_tl, _observe_tl)

    def _initial(self, rows, draws):
        timer, speed = _random_cars(draws)
        full = torch.ones(rows, dtype=_INT, device=speed.device)
        return {
            "pos": full * (SIZE - 1),
            "move_timer": full * PLAYER_SPEED,
            "terminate_timer": full * TIME_LIMIT,
            "car_x": torch.zeros_like(speed),
            "car_timer": timer,
            "car_speed": speed,
        }

    def _act(self, state, action, draws):
        pos, move_timer = state["pos"], state["move_timer"]
        car_x, car_timer, car_speed = state["car_x"], state["car_timer"], state["car_speed"]
        may_move = move_timer == 0
        up = may_move & (action == UP)
        down = may_move & (action == DOWN)
        pos = torch.where(up, (pos - 1).clamp(min=0), pos)
        pos = torch.where(down, (pos + 1).clamp(max=SIZE - 1), pos)
        move_timer = torch.where(up | down, PLAYER_SPEED, move_timer)
        # Reaching the top: +1, new speeds and directions, back to the bottom.
        win = pos == 0
        new_timer, new_speed = _random_cars(draws)
        car_timer = torch.where(win[:, None], new_timer, car_timer)
        car_speed = torch.where(win[:, None], new_speed, car_speed)
        pos = torch.where(win, SIZE - 1, pos)
        # The cars, in MinAtar's loop: only the car in the chicken's row (row pos = car
        # pos - 1) can hit it, before or after its move, so the loop's order does not matter.
        lane = torch.arange(1, CARS + 1, device=pos.device)
        in_lane = lane == pos[:, None]  # [N, 8]
        hit = in_lane & (car_x == CHICKEN_X)
        moves = car_timer == 0
        step = torch.where(car_speed > 0, 1, -1)
        car_x = torch.where(moves, (car_x + step) % SIZE, car_x)
        car_timer = torch.where(moves, car_speed.abs(), car_timer - 1)
        hit = hit | (in_lane & moves & (car_x == CHICKEN_X))
        pos = torch.where(hit.any(dim=1), SIZE - 1, pos)
        moved = {
            "pos": pos,
            "move_timer": move_timer - (move_timer > 0).to(_INT),
            "terminate_timer": state["terminate_timer"] - 1,
            "car_x": car_x,
            "car_timer": car_timer,
            "car_speed": car_speed,
        }
        return moved, win.to(torch.float32), moved["terminate_timer"] < 0

    def _observe(self, state):
        pos, car_x, speed = state["pos"], state["car_x"], state["car_speed"]
        lanes = torch.arange(1, CARS + 1, device=pos.device).expand_as(car_x)
        back_x = (car_x - torch.where(speed > 0, 1, -1)) % SIZE
        y = torch.cat((pos[:, None], lanes, lanes), dim=1)
        x = torch.cat((torch.full_like(pos[:, None], CHICKEN_X), car_x, back_x), dim=1)
        # chicken 0, car 1, a trail in speed channel 1 + |speed| (speed1 is channel 2)
        channel = torch.cat((torch.zeros_like(pos[:, None]), torch.ones_like(car_x),
                             1 + speed.abs()), dim=1)  # fmt: skip
        return paint(len(self.channels), y, x, channel)

    @staticmethod
    def state_from_reference(game: Any) -> dict[str, Any]:
        cars = np.asarray(game.cars, dtype=np.int64)  # [8, (x, y, timer, speed)]
        return {
            "pos": game.pos,
            "move_timer": game.move_timer,
            "terminate_timer": game.terminate_timer,
            "car_x": cars[:, 0],
            "car_timer": cars[:, 2],
            "car_speed": cars[:, 3],
        }


def _random_cars(draws: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(timer, signed speed)`` ``[K, 8]`` from MinAtar's ``_randomize_cars`` draws."""
    speed = 1 + (draws["speeds"] * 5).floor().to(_INT)  # randint(1, 6)
    speed = torch.where(draws["directions"] < 0.5, -speed, speed)  # sign(rand() - 0.5)
    return speed.abs(), speed
