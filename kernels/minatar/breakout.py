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
    brick           int64   the bricks as bits: bit ``y * 10 + x`` is set where one stands
                            (only rows 1 to 3 ever hold bricks, bits 10 to 39);
                            :func:`brick_grid` and :func:`brick_bits` convert

The bricks are a bit mask rather than a 10x10 grid: a step then tests, clears and refills
them with a few integer operations a row instead of three passes over 100 cells, which made
a compiled step ~1.5x faster on a CPU (benchmarks/RESULTS.md).

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
from ._base import LEFT, NOOP, RIGHT, SIZE, Draw, MinAtarEnv, bit, paint
from ._kernel import cells, mark, store_plane

_INT = torch.int64
#: The full wall: bits 10 to 39 (rows 1 to 3), MinAtar's fresh bricks and their refill.
WALL = sum(1 << cell for cell in range(SIZE, 4 * SIZE))
_TOP_BIT = 63  # shifts are clamped to it: no brick beyond bit 39, and no shift past the word


# -- the triton step: the same rules on a block of rows (``_kernel.step_kernel`` calls them) --
# State tuple: ball_x, ball_y, ball_dir, last_x, last_y, pos, strike, brick ([BLOCK] each).

_LEFT = tl.constexpr(LEFT)
_RIGHT = tl.constexpr(RIGHT)
_LAST = tl.constexpr(SIZE - 1)
_FIELDS = tl.constexpr(8)
_WALL = tl.constexpr(WALL)
_TOP = tl.constexpr(_TOP_BIT)


@triton.jit
def _load_tl(ptrs, rows, valid):
    state = ()
    for j in tl.static_range(6):
        state = state + (tl.load(ptrs[j] + rows, mask=valid, other=0),)
    strike = tl.load(ptrs[6] + rows, mask=valid, other=0) != 0
    return state + (strike, tl.load(ptrs[7] + rows, mask=valid, other=0))


@triton.jit
def _store_tl(ptrs, rows, valid, state):
    for j in tl.static_range(_FIELDS):
        tl.store(ptrs[j] + rows, state[j], mask=valid)


@triton.jit
def _initial_tl(u, valid):
    right = tl.load(u, mask=valid, other=0.0) >= 0.5  # randint(2) == 1
    zero = right.to(tl.int64) * 0
    ball_x = tl.where(right, 9, 0) + zero
    ball_y = zero + 3
    ball_dir = tl.where(right, 3, 2) + zero
    return ball_x, ball_y, ball_dir, ball_x, ball_y, zero + 4, zero != 0, zero + _WALL


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
    landing = tl.minimum(tl.minimum(tl.maximum(new_y, 0), _LAST) * 10 + new_x, _TOP)
    on_brick = ~top & (((brick >> landing) & 1) != 0)
    breaks = on_brick & ~strike
    bottom = ~top & ~on_brick & (new_y == _LAST)
    over_paddle = bottom & (ball_x == pos)
    into_paddle = bottom & ~over_paddle & (new_x == pos)
    flip = top | breaks | over_paddle
    ball_dir = tl.where(flip, 3 - ball_dir, ball_dir)
    ball_dir = tl.where(into_paddle, ball_dir ^ 2, ball_dir)
    brick = brick & ~(breaks.to(tl.int64) << landing)
    new_y = tl.where(top, 0, new_y)
    new_y = tl.where(breaks | over_paddle | into_paddle, ball_y, new_y)
    brick = tl.where(bottom & (brick == 0), _WALL, brick)  # the refill
    terminal = bottom & ~over_paddle & ~into_paddle
    moved = (new_x, new_y, ball_dir, ball_x, ball_y, pos, on_brick, brick)
    return moved, breaks.to(tl.float32), terminal


@triton.jit
def _select_tl(mask, a, b):
    state = ()
    for j in tl.static_range(_FIELDS):
        state = state + (tl.where(mask, a[j], b[j]),)
    return state


@triton.jit
def _observe_tl(state, observ_ptr, rows, valid):
    ball_x, ball_y, _, last_x, last_y, pos, _, brick = state
    store_plane(observ_ptr, rows, valid, mark(pos * 0 + _LAST, pos), 4, 0)
    store_plane(observ_ptr, rows, valid, mark(ball_y, ball_x), 4, 1)
    store_plane(observ_ptr, rows, valid, mark(last_y, last_x), 4, 2)
    bricks = ((brick[:, None] >> tl.minimum(cells(), _TOP)[None, :]) & 1) != 0
    store_plane(observ_ptr, rows, valid, bricks, 4, 3)


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
        "brick": ((), _INT),
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
            "brick": torch.full((rows,), WALL, dtype=_INT, device=right.device),
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
        landing = (new_y.clamp(0, SIZE - 1) * SIZE + new_x).clamp(max=_TOP_BIT)  # its bit
        on_brick = ~top & bit(brick, landing)
        breaks = on_brick & ~strike
        bottom = ~top & ~on_brick & (new_y == SIZE - 1)
        over_paddle = bottom & (ball_x == pos)  # the ball's column before this move
        into_paddle = bottom & ~over_paddle & (new_x == pos)
        flip = top | breaks | over_paddle  # [3, 2, 1, 0][dir]
        ball_dir = torch.where(flip, 3 - ball_dir, ball_dir)
        ball_dir = torch.where(into_paddle, ball_dir ^ 2, ball_dir)  # [2, 3, 0, 1][dir]
        brick = brick & ~(breaks.to(_INT) << landing)
        new_y = torch.where(top, 0, new_y)
        new_y = torch.where(breaks | over_paddle | into_paddle, ball_y, new_y)
        brick = torch.where(bottom & (brick == 0), WALL, brick)  # the refill
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
        return torch.cat((paint(3, y, x, channel), brick_grid(state["brick"])[..., None]), dim=-1)

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
            "brick": brick_bits(np.asarray(game.brick_map) != 0),
        }


def brick_grid(bits: torch.Tensor) -> torch.Tensor:
    """bool ``[..., 10, 10]``: the bricks of the int64 masks ``bits`` (``[...]``) as a grid."""
    index = torch.arange(SIZE * SIZE, device=bits.device).clamp(max=_TOP_BIT)
    return bit(bits[..., None], index).reshape(*bits.shape, SIZE, SIZE)


def brick_bits(grid: Any) -> int:
    """The int64 mask of one 10x10 grid of bricks (anything ``np.asarray`` reads).

    Raises:
        ValueError: a brick outside rows 1 to 3, where MinAtar never puts one.
    """
    cells = np.flatnonzero(np.asarray(grid, dtype=bool).reshape(SIZE * SIZE))
    outside = [int(cell) for cell in cells if not SIZE <= cell < 4 * SIZE]
    if outside:
        raise ValueError(
            f"Breakout: bricks stand in rows 1 to 3 only, got one at (y, x) = "
            f"{divmod(outside[0], SIZE)}"
        )
    return sum(1 << int(cell) for cell in cells)
