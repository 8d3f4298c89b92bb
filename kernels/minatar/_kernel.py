"""The MinAtar games' Triton step: one kernel, the game's rules as device functions.

:func:`step_kernel` does on a block of rows what ``MinAtarEnv._advance`` and
``KernelEnv._torch_step`` do with tensors: the action set, the sticky action, the game's step
of the rows that are not terminal yet (frozen rows keep their state and earn 0), the fresh
starts of the reset mask (which keep the row's previous ``last_action``), ``elapsed``, the
rows' draw counters, and the observation. A game module names six ``@triton.jit``
functions in ``triton_functions`` (see :class:`~._base.MinAtarEnv`), each on the game's
state as a tuple of blocks in ``fields`` order (``[BLOCK]`` per scalar field, ``[BLOCK, 8]``
for Freeway's cars and Asterix's slots, ``[BLOCK, CELLS]`` for a grid, cell ``y * 10 + x``):

- ``load(ptrs, rows, valid)`` / ``store(ptrs, rows, valid, state)``: the game's fields
  (``ptrs`` is the state's tensors in ``fields`` order);
- ``initial(u, valid)``: fresh states from the rows' reset draws (``u``: pointers to the
  rows' first reset draw);
- ``act(state, action, u, valid, RAMPING)``: ``(state, reward, terminal)`` of one step
  (``action`` full-set ids, ``u`` pointers to the rows' first step draw);
- ``select(mask, a, b)``: per row, ``a`` where ``mask`` else ``b``;
- ``observe(state, observ_ptr, rows, valid)``: store the bool observation.

The uniforms are the torch backend's own: the kernel computes
``batchenv.in_graph.counter_rng.counter_uniform`` at the rows' counts (``[N, draws]``, columns
in ``MinAtarEnv._draws`` order) with the same 32-bit hash in int64, writes them to a scratch
buffer that the game functions read, and makes every comparison and product in float32 as
torch makes it: both backends take the same draws and give bit-identical results for one
seed. (Drawing them with torch ops instead cost ~75 small launches a step, which made a GPU
step launch-bound.)
"""

from __future__ import annotations

from .._triton import add_combine, tl, triton

SIZE = tl.constexpr(10)
# counter_rng's constants: the low 32 bits, the hash's multiplier, the counter separator.
MASK = tl.constexpr(0xFFFFFFFF)
MULTIPLIER = tl.constexpr(0x45D9F3B)
GOLDEN = tl.constexpr(0x9E3779B)
#: Cells of a grid tile (the 100 cells, padded to a power of two).
CELLS = tl.constexpr(128)


@triton.jit(do_not_specialize=["key_lo", "key_hi", "sticky_prob"])
def step_kernel(
    state_ptrs,  # tuple: the game's fields, then terminal [N] bool, last_action [N] int64
    elapsed_ptr,  # [N] int64, in and out
    restarts_ptr,  # [N] int64, in and out: the rows' draw events so far
    action_ptr,  # [N] int64: the action (read when STEP)
    reset_mask_ptr,  # [N] bool: rows that start afresh in this call (read when RESET)
    observ_ptr,  # [N, 10, 10, CHANNELS] bool, out
    reward_ptr,  # [N] float32, out (when STEP)
    terminated_ptr,  # [N] bool, out (when STEP)
    truncated_ptr,  # [N] bool, out (when STEP)
    key_lo,  # the Philox key (unused: the draws use counter_rng's key, key_ptr)
    key_hi,
    key_ptr,  # int64 counter_rng key: [1], or [N] when seeded per block
    u_ptr,  # [N, DRAWS] float32 scratch: the rows' uniforms of this draw event
    action_table_ptr,  # [actions] int64: the full-set id of each action
    sticky_prob,  # float32: chance of repeating the previous action
    N: tl.constexpr,  # rows
    MAX_STEPS: tl.constexpr,  # truncated once elapsed >= MAX_STEPS; 0: never
    STEP: tl.constexpr,  # step the rows; False: only the fresh starts happen (a reset)
    RESET: tl.constexpr,  # reset_mask_ptr is given
    BLOCK: tl.constexpr,  # rows per program, a power of two
    DRAWS: tl.constexpr,  # uniforms per row
    DRAWS_P2: tl.constexpr,  # DRAWS rounded up to a power of two
    SEED_BLOCK: tl.constexpr,  # rows per seed block (a key per row); 0: one key
    STICKY: tl.constexpr,  # the sticky draw's column (the step's draws follow it)
    RESET_AT: tl.constexpr,  # the column of a fresh start's first draw
    FIELDS: tl.constexpr,  # the game's fields (terminal and last_action follow them)
    RAMPING: tl.constexpr,  # difficulty ramping
    LOAD: tl.constexpr,
    STORE: tl.constexpr,
    INITIAL: tl.constexpr,
    ACT: tl.constexpr,
    SELECT: tl.constexpr,
    OBSERVE: tl.constexpr,
):
    """One step of BLOCK rows of a MinAtar game; rows in the reset mask start afresh instead
    (reward 0, not done)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = rows < N
    u = u_ptr + rows.to(tl.int64) * DRAWS
    state = LOAD(state_ptrs, rows, valid)
    terminal = tl.load(state_ptrs[FIELDS] + rows, mask=valid, other=0) != 0
    last = tl.load(state_ptrs[FIELDS + 1] + rows, mask=valid, other=0)
    kept_last = last  # a fresh start keeps the action taken before this call
    elapsed = tl.load(elapsed_ptr + rows, mask=valid, other=0)
    count = tl.load(restarts_ptr + rows, mask=valid, other=0)
    draw_uniforms(u_ptr, key_ptr, rows, valid, count, DRAWS, DRAWS_P2, SEED_BLOCK)
    if STEP:
        action = tl.load(action_ptr + rows, mask=valid, other=0)
        action = tl.load(action_table_ptr + action, mask=valid, other=0)
        sticky = tl.load(u + STICKY, mask=valid, other=1.0)
        action = tl.where(sticky < sticky_prob, last, action)
        moved, reward, done = ACT(state, action, u + STICKY + 1, valid, RAMPING)
        state = SELECT(terminal, state, moved)  # MinAtar's act returns at once on these
        reward = tl.where(terminal, 0.0, reward.to(tl.float32))
        terminal = terminal | done
        last = action
        elapsed = elapsed + 1
        count = count + 1
    if RESET:
        fresh = tl.load(reset_mask_ptr + rows, mask=valid, other=0) != 0
        state = SELECT(fresh, INITIAL(u + RESET_AT, valid), state)
        terminal = terminal & ~fresh
        last = tl.where(fresh, kept_last, last)
        elapsed = tl.where(fresh, 0, elapsed)
        if STEP:
            reward = tl.where(fresh, 0.0, reward)
        else:
            count = count + fresh.to(tl.int64)
    STORE(state_ptrs, rows, valid, state)
    tl.store(state_ptrs[FIELDS] + rows, terminal, mask=valid)
    tl.store(state_ptrs[FIELDS + 1] + rows, last, mask=valid)
    tl.store(elapsed_ptr + rows, elapsed, mask=valid)
    tl.store(restarts_ptr + rows, count, mask=valid)
    OBSERVE(state, observ_ptr, rows, valid)
    if STEP:
        tl.store(reward_ptr + rows, reward, mask=valid)
        tl.store(terminated_ptr + rows, terminal, mask=valid)
        if MAX_STEPS > 0:
            tl.store(truncated_ptr + rows, elapsed >= MAX_STEPS, mask=valid)
        else:
            tl.store(truncated_ptr + rows, terminal & False, mask=valid)


# -- the draws ---------------------------------------------------------------------------------


@triton.jit
def mix32(x):
    """counter_rng.mix32: a 32-bit hash of int64 ``x`` in [0, 2**32) (no product overflows)."""
    x = (((x >> 16) ^ x) * MULTIPLIER) & MASK
    x = (((x >> 16) ^ x) * MULTIPLIER) & MASK
    return (x >> 16) ^ x


@triton.jit
def draw_uniforms(u_ptr, key_ptr, rows, valid, count, DRAWS, DRAWS_P2, SEED_BLOCK):
    """Store ``counter_uniform(key, row, count, DRAWS)`` of each row at ``u_ptr`` (row-major
    ``[N, DRAWS]``): hash(key, row, count, j) as float32 ``(bits >> 8) * 2**-24``. With seed
    blocks, row r of block b draws as row ``r % SEED_BLOCK`` under block b's key."""
    row = rows.to(tl.int64)
    if SEED_BLOCK > 0:
        key = tl.load(key_ptr + row, mask=valid, other=0)
        row = row % SEED_BLOCK
    else:
        key = tl.load(key_ptr + row * 0)
    h = mix32(key ^ mix32(row & MASK))
    h = mix32(h ^ mix32((count * GOLDEN + 1) & MASK))
    j = tl.arange(0, DRAWS_P2).to(tl.int64)
    bits = mix32(h[:, None] ^ mix32(j * 2 + 1)[None, :])
    u = (bits >> 8).to(tl.float32) * (1.0 / 16777216.0)
    offsets = rows.to(tl.int64)[:, None] * DRAWS + j[None, :]
    tl.store(u_ptr + offsets, u, mask=valid[:, None] & (j < DRAWS)[None, :])
    tl.debug_barrier()  # the game functions read them back, in other threads


# -- helpers for the games' device functions ------------------------------------------------


@triton.jit
def cells():
    """The cell index ``y * 10 + x`` of each column of a grid tile, ``[CELLS]``."""
    return tl.arange(0, CELLS)


@triton.jit
def mark(y, x):
    """bool ``[BLOCK, CELLS]``: True at cell ``(y, x)`` of each row (nothing off the grid)."""
    inside = (y >= 0) & (y < SIZE) & (x >= 0) & (x < SIZE)
    return (cells()[None, :] == (y * SIZE + x)[:, None]) & inside[:, None]


# Folds over a tile's last axis, halved LOG2 times with ``reshape``/``split`` rather than
# ``tl.reduce``: Triton's interpreter runs a reduction with a user combine function one
# element at a time in Python (that took 90% of an interpreted Breakout step).


@triton.jit
def fold(tile, LOG2: tl.constexpr, COMBINE: tl.constexpr):
    """``[A]``: ``COMBINE`` folded over the last axis (``2**LOG2`` wide) of an ``[A, B]``."""
    x = tile
    for _ in tl.static_range(LOG2):
        left, right = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))
        x = COMBINE(left, right)
    return tl.reshape(x, (x.shape[0],))


@triton.jit
def total(tile, LOG2: tl.constexpr):
    """int32 ``[A]``: the sum over the last axis (``2**LOG2`` wide) of an ``[A, B]`` tile."""
    return fold(tile.to(tl.int32), LOG2, add_combine)


@triton.jit
def minimum_combine(a, b):
    """Combine function for minima (:func:`fold`)."""
    return tl.minimum(a, b)


@triton.jit
def any_cell(tile):
    """bool ``[BLOCK]``: whether a ``[BLOCK, CELLS]`` tile has a True cell."""
    return total(tile, 7) > 0


@triton.jit
def cell_at(tile, y, x):
    """``_base.at(tile, y, x)``: the tile's cell at the clamped ``(y, x)`` of each row."""
    index = tl.minimum(tl.maximum(y, 0), SIZE - 1) * SIZE + tl.minimum(tl.maximum(x, 0), SIZE - 1)
    return any_cell(tile & (cells()[None, :] == index[:, None]))


@triton.jit
def total_3d(tile, LOG2: tl.constexpr):
    """int32 ``[A, B]``: the sum over the last axis (``2**LOG2`` wide) of ``[A, B, C]``."""
    x = tile.to(tl.int32)
    for _ in tl.static_range(LOG2):
        left, right = tl.split(tl.reshape(x, (x.shape[0], x.shape[1], x.shape[2] // 2, 2)))
        x = left + right
    return tl.reshape(x, (x.shape[0], x.shape[1]))


@triton.jit
def store_plane(observ_ptr, rows, valid, plane, CHANNELS: tl.constexpr, CHANNEL: tl.constexpr):
    """Store a ``[BLOCK, CELLS]`` bool tile as channel ``CHANNEL`` of the observation."""
    where = cells()
    offsets = rows.to(tl.int64)[:, None] * (SIZE * SIZE * CHANNELS) + where[None, :] * CHANNELS
    inside = valid[:, None] & (where < SIZE * SIZE)[None, :]
    tl.store(observ_ptr + offsets + CHANNEL, plane, mask=inside)


@triton.jit
def flat_index(y, x, channel, CHANNELS: tl.constexpr):
    """The flat observation index ``(y * 10 + x) * CHANNELS + channel`` of a mark per row,
    or -1 off the grid (it marks nothing, as ``_base.paint``'s)."""
    inside = (y >= 0) & (y < SIZE) & (x >= 0) & (x < SIZE)
    return tl.where(inside, (y * SIZE + x) * CHANNELS + channel, -1)


@triton.jit
def mark_flat(plane, index):
    """``plane`` (bool ``[BLOCK, FLAT]``, a row's observation flattened) with the mark at
    ``index`` (``[BLOCK]``, from :func:`flat_index`) set."""
    flat = tl.arange(0, plane.shape[1])
    return plane | (flat[None, :] == index[:, None])


@triton.jit
def store_flat(observ_ptr, rows, valid, plane, CHANNELS: tl.constexpr):
    """Store a painted ``[BLOCK, FLAT]`` tile as the rows' whole observation."""
    flat = tl.arange(0, plane.shape[1])
    offsets = rows.to(tl.int64)[:, None] * (SIZE * SIZE * CHANNELS) + flat[None, :]
    inside = valid[:, None] & (flat < SIZE * SIZE * CHANNELS)[None, :]
    tl.store(observ_ptr + offsets, plane, mask=inside)


@triton.jit
def take(tile, source):
    """A ``[BLOCK, CELLS]`` tile whose cell ``c`` is ``tile``'s cell ``source[c]`` (``[CELLS]``;
    -1: False), for moving a grid by whole rows or columns."""
    index = tl.maximum(source, 0)[None, :] + tile.to(tl.int32) * 0
    return tl.gather(tile, index, 1) & (source >= 0)[None, :]


@triton.jit
def floor_mod(value):
    """``value % 10`` rounded as Python's (and torch's): in ``[0, 10)`` for negatives too."""
    return ((value % SIZE) + SIZE) % SIZE
