"""MinAtar's Breakout as a batched torch env (``minatar/environments/breakout.py``, rule for rule).

The paddle moves on the bottom row; the ball travels along diagonals, is reflected by the
walls, the ceiling and the bricks (three rows, refilled once all are gone and the ball
reaches the bottom row) and by the paddle, and the episode ends when the ball passes the
paddle. Reward +1 per brick. No difficulty ramping.

State (per row)::

    ball_x, ball_y  int64   the ball's cell
    ball_dir        int64   0 up-left, 1 up-right, 2 down-right, 3 down-left
    last_x, last_y  int64   the ball's previous cell (the trail channel)
    pos             int64   the paddle's column (row 9)
    strike          bool    the ball hit a brick on the previous step (it then passes
                            through the next brick without breaking it, as in MinAtar)
    brick           bool [10, 10]

Observation channels: paddle, ball, trail, brick. Minimal actions: noop, left, right.
Draws: one uniform per fresh start (MinAtar's ``randint(2)``: the ball starts at the left
wall moving down-right, or at the right wall moving down-left); none per step.

    >>> import torch
    >>> env = Breakout(num_envs=4, seed=0)
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(4, dtype=torch.int64))
    >>> observ.shape, observ.dtype
    (torch.Size([4, 10, 10, 4]), torch.bool)

``Breakout(..., backend="triton")`` runs the same step in ``_kernel.step_kernel`` with this
module's device functions (``_act_tl``, ...): bit for bit the torch backend's results.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._triton import tl, triton
from ._base import LEFT, NOOP, RIGHT, SIZE, Draw, MinAtarEnv, at, cell, grid, paint
from ._kernel import cells, mark, store_plane, total

_INT = torch.int64


# -- the triton step: the same rules on a block of rows (``_kernel.step_kernel`` calls them) --
# State tuple: ball_x, ball_y, ball_dir, last_x, last_y, pos, strike ([BLOCK] each) and
# brick ([BLOCK, CELLS], cell y * 10 + x).

_LEFT = tl.constexpr(LEFT)
_RIGHT = tl.constexpr(RIGHT)
_LAST = tl.constexpr(SIZE - 1)
_SCALARS = tl.constexpr(7)


@triton.jit
def _wall_tl():
    """bool ``[CELLS]``: the three rows of bricks (rows 1 to 3)."""
    where = cells()
    return (where >= 10) & (where < 40)


@triton.jit
def _load_tl(ptrs, rows, valid):
    state = ()
    for j in tl.static_range(6):
        state = state + (tl.load(ptrs[j] + rows, mask=valid, other=0),)
    strike = tl.load(ptrs[6] + rows, mask=valid, other=0) != 0
    where = cells()
    inside = valid[:, None] & (where < 100)[None, :]
    brick = tl.load(ptrs[7] + rows[:, None] * 100 + where[None, :], mask=inside, other=0)
    return state + (strike, brick != 0)


@triton.jit
def _store_tl(ptrs, rows, valid, state):
    for j in tl.static_range(_SCALARS):
        tl.store(ptrs[j] + rows, state[j], mask=valid)
    where = cells()
    inside = valid[:, None] & (where < 100)[None, :]
    tl.store(ptrs[7] + rows[:, None] * 100 + where[None, :], state[7], mask=inside)


@triton.jit
def _initial_tl(u, valid):
    right = tl.load(u, mask=valid, other=0.0) >= 0.5  # randint(2) == 1
    zero = right.to(tl.int64) * 0
    ball_x = tl.where(right, 9, 0) + zero
    ball_y = zero + 3
    brick = _wall_tl()[None, :] & (zero == 0)[:, None]
    return ball_x, ball_y, tl.where(right, 3, 2) + zero, ball_x, ball_y, zero + 4, zero != 0, brick


@triton.jit
def _act_tl(state, action, u, valid, RAMPING: tl.constexpr):
    """:meth:`Breakout._act` rule for rule, on a block of rows."""
    ball_x, ball_y, ball_dir, last_x, last_y, pos, strike, brick = state
    pos = tl.where(action == _LEFT, tl.maximum(pos - 1, 0), pos)
    pos = tl.where(action == _RIGHT, tl.minimum(pos + 1, _LAST), pos)
    new_x = ball_x + tl.where((ball_dir == 1) | (ball_dir == 2), 1, -1)
    new_y = ball_y + tl.where(ball_dir >= 2, 1, -1)
    side = (new_x < 0) | (new_x > _LAST)
    new_x = tl.minimum(tl.maximum(new_x, 0), _LAST)
    ball_dir = tl.where(side, ball_dir ^ 1, ball_dir)
    top = new_y < 0
    landing = tl.minimum(tl.maximum(new_y, 0), _LAST) * 10 + new_x
    on_brick = ~top & (total(brick & (cells()[None, :] == landing[:, None]), 7) > 0)
    breaks = on_brick & ~strike
    bottom = ~top & ~on_brick & (new_y == _LAST)
    over_paddle = bottom & (ball_x == pos)
    into_paddle = bottom & ~over_paddle & (new_x == pos)
    flip = top | breaks | over_paddle
    ball_dir = tl.where(flip, 3 - ball_dir, ball_dir)
    ball_dir = tl.where(into_paddle, ball_dir ^ 2, ball_dir)
    brick = brick & ~(mark(tl.maximum(new_y, 0), new_x) & breaks[:, None])
    new_y = tl.where(top, 0, new_y)
    new_y = tl.where(breaks | over_paddle | into_paddle, ball_y, new_y)
    refill = bottom & (total(brick, 7) == 0)
    brick = brick | (_wall_tl()[None, :] & refill[:, None])
    terminal = bottom & ~over_paddle & ~into_paddle
    moved = (new_x, new_y, ball_dir, ball_x, ball_y, pos, on_brick, brick)
    return moved, breaks.to(tl.float32), terminal


@triton.jit
def _select_tl(mask, a, b):
    state = ()
    for j in tl.static_range(_SCALARS):
        state = state + (tl.where(mask, a[j], b[j]),)
    return state + (tl.where(mask[:, None], a[7], b[7]),)


@triton.jit
def _observe_tl(state, observ_ptr, rows, valid):
    ball_x, ball_y, _, last_x, last_y, pos, _, brick = state
    store_plane(observ_ptr, rows, valid, mark(pos * 0 + _LAST, pos), 4, 0)
    store_plane(observ_ptr, rows, valid, mark(ball_y, ball_x), 4, 1)
    store_plane(observ_ptr, rows, valid, mark(last_y, last_x), 4, 2)
    store_plane(observ_ptr, rows, valid, brick, 4, 3)


class Breakout(MinAtarEnv):
    """A batch of MinAtar Breakout games (see :class:`MinAtarEnv` for the arguments)."""

    game = "breakout"
    channels = ("paddle", "ball", "trail", "brick")
    minimal_actions = (NOOP, LEFT, RIGHT)
    fields = {
        "ball_x": ((), _INT),
        "ball_y": ((), _INT),
        "ball_dir": ((), _INT),
        "last_x": ((), _INT),
        "last_y": ((), _INT),
        "pos": ((), _INT),
        "strike": ((), torch.bool),
        "brick": ((SIZE, SIZE), torch.bool),
    }
    reset_draws = (Draw("ball_start", 1, "Env.reset"),)
    triton_functions = (_load_tl, _store_tl, _initial_tl, _act_tl, _select_tl, _observe_tl)

    def _initial(self, rows, draws):
        right = draws["ball_start"][:, 0] >= 0.5  # randint(2) == 1
        ball_x = torch.where(right, 9, 0)
        ball_y = torch.full((rows,), 3, dtype=_INT, device=right.device)
        return {
            "ball_x": ball_x,
            "ball_y": ball_y,
            "ball_dir": torch.where(right, 3, 2),
            "last_x": ball_x,
            "last_y": ball_y,
            "pos": torch.full((rows,), 4, dtype=_INT, device=right.device),
            "strike": torch.zeros(rows, dtype=torch.bool, device=right.device),
            "brick": _full_wall(rows, right.device),
        }

    def _act(self, state, action, draws):
        ball_x, ball_y, ball_dir = state["ball_x"], state["ball_y"], state["ball_dir"]
        brick, strike = state["brick"], state["strike"]
        pos = state["pos"]
        pos = torch.where(action == LEFT, (pos - 1).clamp(min=0), pos)
        pos = torch.where(action == RIGHT, (pos + 1).clamp(max=SIZE - 1), pos)
        # Move along the diagonal: dir 1 and 2 go right, 2 and 3 go down.
        new_x = ball_x + torch.where((ball_dir == 1) | (ball_dir == 2), 1, -1)
        new_y = ball_y + torch.where(ball_dir >= 2, 1, -1)
        side = (new_x < 0) | (new_x > SIZE - 1)
        new_x = new_x.clamp(0, SIZE - 1)
        ball_dir = torch.where(side, ball_dir ^ 1, ball_dir)  # [1, 0, 3, 2][dir]
        # Then exactly one of: the ceiling, a brick, the bottom row.
        top = new_y < 0
        on_brick = ~top & at(brick, new_y, new_x)
        breaks = on_brick & ~strike
        bottom = ~top & ~on_brick & (new_y == SIZE - 1)
        over_paddle = bottom & (ball_x == pos)  # the ball's column before this move
        into_paddle = bottom & ~over_paddle & (new_x == pos)
        flip = top | breaks | over_paddle  # [3, 2, 1, 0][dir]
        ball_dir = torch.where(flip, 3 - ball_dir, ball_dir)
        ball_dir = torch.where(into_paddle, ball_dir ^ 2, ball_dir)  # [2, 3, 0, 1][dir]
        struck = cell(new_y.clamp(min=0), new_x) & breaks[:, None, None]
        brick = brick & ~struck
        new_y = torch.where(top, 0, new_y)
        new_y = torch.where(breaks | over_paddle | into_paddle, ball_y, new_y)
        refill = bottom & ~brick.flatten(1).any(dim=1)
        brick = brick | (_full_wall(brick.shape[0], brick.device) & refill[:, None, None])
        terminal = bottom & ~over_paddle & ~into_paddle
        moved = {
            "ball_x": new_x,
            "ball_y": new_y,
            "ball_dir": ball_dir,
            "last_x": ball_x,
            "last_y": ball_y,
            "pos": pos,
            "strike": on_brick,
            "brick": brick,
        }
        return moved, breaks.to(torch.float32), terminal

    def _observe(self, state):
        pos = state["pos"]
        y = torch.stack((torch.full_like(pos, SIZE - 1), state["ball_y"], state["last_y"]), 1)
        x = torch.stack((pos, state["ball_x"], state["last_x"]), 1)
        channel = torch.arange(3, device=pos.device).expand_as(x)  # paddle, ball, trail
        return torch.cat((paint(3, y, x, channel), state["brick"][..., None]), dim=-1)

    @staticmethod
    def state_from_reference(game: Any) -> dict[str, Any]:
        return {
            "ball_x": game.ball_x,
            "ball_y": game.ball_y,
            "ball_dir": game.ball_dir,
            "last_x": game.last_x,
            "last_y": game.last_y,
            "pos": game.pos,
            "strike": game.strike,
            "brick": np.asarray(game.brick_map) != 0,
        }


def _full_wall(rows: int, device: torch.device) -> torch.Tensor:
    """bool ``[rows, 10, 10]``: MinAtar's three rows of bricks (rows 1 to 3)."""
    row, _ = grid(device)
    return ((row >= 1) & (row <= 3)).expand(rows, SIZE, SIZE)
