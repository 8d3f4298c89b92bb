"""Categorical sampling as one Triton kernel: inverse CDF over a tile of rows, Philox uniforms.

WarpDrive's sampler (Lan et al., 2021) draws ``u ~ U(0, 1)`` per (env, agent), forms the
cumulative sum of the probabilities and takes the first bucket whose CDF exceeds ``u``. This
is that, for any ``[..., A]`` batch of logits or probabilities: each program takes ``ROWS``
rows of ``A`` categories (``BLOCK = next_power_of_2(A)`` lanes per row; see
:func:`sample_rows`), the uniform from Philox keyed by ``seed`` with the counter
``(row, offset, stream)`` — so a draw does not depend on how rows are grouped, a call is a
pure function of ``(input, seed, offset)``, and a training loop passes its step number as
``offset`` to get fresh draws without any generator state on the device.

Where Triton cannot run (no Triton, or CPU without the interpreter; see
``batchenv.kernels._triton``) the same call falls back to ``torch.multinomial`` with a
generator seeded from ``(seed, offset)``: reproducible, but different draws from the kernel's.

Example::

    >>> import torch
    >>> from batchenv.kernels.sampler import sample_categorical
    >>> logits = torch.tensor([[0.0, 0.0, 50.0], [50.0, 0.0, 0.0]])
    >>> sample_categorical(logits=logits, seed=1, offset=0).tolist()
    [2, 0]
"""

from __future__ import annotations

import torch

from ._triton import (
    STREAM_SAMPLER,
    add_combine,
    maximum_combine,
    philox4x32,
    split_key,
    tl,
    triton,
    unavailable_reason,
    uniform_from_bits,
)

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit(do_not_specialize=["num_rows", "key_lo", "key_hi", "offset_lo", "offset_hi"])
def _sample_kernel(
    x_ptr,  # [R, A] float16/bfloat16/float32/float64: logits or probabilities, rows contiguous
    out_ptr,  # [R] int64, out: the sampled category of each row
    num_rows,  # R, a runtime value (batch sizes vary between calls; a constexpr would recompile)
    key_lo,  # low 32 bits of the Philox key (the seed)
    key_hi,  # high 32 bits of the Philox key
    offset_lo,  # low 32 bits of the call's offset (Philox counter word c1; c0 is the row)
    offset_hi,  # high 32 bits of the offset (counter word c2)
    A: tl.constexpr,  # categories per row
    LOGITS: tl.constexpr,  # x holds logits (softmax weights are taken) rather than probabilities
    BLOCK: tl.constexpr,  # lanes per row, next_power_of_2(A)
    ROWS: tl.constexpr,  # rows per program, a power of two
):
    """Sample ROWS rows: ``u * total`` against the running sum of each row's weights."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)  # [ROWS]
    cols = tl.arange(0, BLOCK)[None, :]  # [1, BLOCK]
    row_ok = rows < num_rows
    in_row = (cols < A) & row_ok[:, None]  # [ROWS, BLOCK]
    offsets = rows.to(tl.int64)[:, None] * A + cols
    x = tl.load(x_ptr + offsets, mask=in_row, other=0.0).to(tl.float32)
    if LOGITS:
        x = tl.where(in_row, x, float("-inf"))
        largest = tl.reduce(x, 1, maximum_combine)[:, None]  # the largest weight is 1
        largest = tl.where(largest == float("-inf"), 0.0, largest)  # rows past R: no NaN
        weights = tl.exp(x - largest)
    else:
        weights = tl.where(in_row, x, 0.0)
    cdf = tl.associative_scan(weights, 1, add_combine)
    total = tl.reduce(cdf, 1, maximum_combine)  # the last entry; weights are >= 0
    zeros = (rows * 0).to(tl.uint32)
    bits, _, _, _ = philox4x32(
        rows.to(tl.uint32),
        zeros + offset_lo.to(tl.uint32),
        zeros + offset_hi.to(tl.uint32),
        zeros + STREAM_SAMPLER,
        key_lo.to(tl.uint32),
        key_hi.to(tl.uint32),
    )
    threshold = (uniform_from_bits(bits) * total)[:, None]  # in [0, total)
    # The first bucket whose CDF exceeds the threshold: the number of CDF entries at or below
    # it. A zero-weight bucket never qualifies (its CDF equals its predecessor's); if
    # rounding puts the threshold at the total, fall back to the last bucket with weight.
    below = tl.reduce((in_row & (cdf <= threshold)).to(tl.int32), 1, add_combine)
    last = tl.reduce(tl.where(in_row & (weights > 0), cols, -1), 1, maximum_combine)
    tl.store(out_ptr + rows, tl.minimum(below, last).to(tl.int64), mask=row_ok)


#: Elements (rows x lanes) one sampler program takes: 8 per thread of its 4 warps.
SAMPLE_TILE = 1024


def sample_rows(num_rows: int, block: int) -> int:
    """Rows per sampler program: enough to fill a tile of :data:`SAMPLE_TILE` lanes (at most
    the next power of two of ``num_rows``), at least one.

    One row per program (what the kernel did first) left 24 of a warp's 32 lanes idle for
    5 categories and capped an H100 at 32 one-warp programs per SM (50% occupancy); the
    model in ``benchmarks/gpu_model.py`` then has 2 million rows take ~20x longer than
    reading them. A program of 128 such rows fills its 4 warps.
    """
    return max(1, min(SAMPLE_TILE // block, triton.next_power_of_2(num_rows)))


def launch_sample(
    rows: torch.Tensor, out: torch.Tensor, *, logits: bool, seed: int, offset: int
) -> torch.Tensor:
    """Launch :func:`_sample_kernel` on ``rows`` (``[R, A]``, contiguous) into ``out`` (int64
    ``[R]``, contiguous): ``ROWS`` rows per program (:func:`sample_rows`),
    ``BLOCK = next_power_of_2(A)`` lanes per row."""
    num_rows, num_categories = rows.shape
    block = triton.next_power_of_2(num_categories)
    per_program = sample_rows(num_rows, block)
    tile = per_program * block
    key_lo, key_hi = split_key(seed)
    _sample_kernel[(triton.cdiv(num_rows, per_program),)](
        rows,
        out,
        num_rows,
        key_lo,
        key_hi,
        offset & 0xFFFFFFFF,
        offset >> 32,
        A=num_categories,
        LOGITS=logits,
        BLOCK=block,
        ROWS=per_program,
        num_warps=1 if tile <= 256 else 4 if tile <= 4096 else 8,
    )
    return out


def sample_categorical(
    logits: torch.Tensor | None = None,
    probs: torch.Tensor | None = None,
    seed: int = 0,
    offset: int = 0,
    out: torch.Tensor | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Draw one category per row of ``[..., A]`` logits or probabilities; int64 ``[...]``.

    Args:
        logits: unnormalised log-probabilities; ``-inf`` marks an impossible category.
        probs: non-negative weights (need not sum to 1). Give exactly one of the two.
        seed: the Philox key (any int, taken modulo 2**64).
        offset: the counter, an int in ``[0, 2**64)``; draws for different offsets are
            independent, so pass e.g. the step number.
        out: an int64 tensor of the batch shape on the input's device to write into.
        validate: check the values (finite; ``-inf`` logits allowed but not a whole row of
            them; no negative probabilities, no all-zero row). It costs a host sync; turn it
            off in a hot loop once the inputs are known to be good (an invalid row then
            samples an arbitrary index, or -1).

    Runs the Triton kernel where Triton can run on the input's device, else
    ``torch.multinomial`` (see the module docstring).

        >>> probs = torch.tensor([[0.0, 1.0], [1.0, 0.0]]).expand(3, 2, 2)
        >>> sample_categorical(probs=probs, seed=0, offset=7).tolist()
        [[1, 0], [1, 0], [1, 0]]
    """
    x, is_logits = _check_input(logits, probs)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"sample_categorical(seed={seed!r}): seed must be an int")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 1 << 64:
        raise ValueError(
            f"sample_categorical(offset={offset!r}): offset must be an int in [0, 2**64)"
        )
    batch_shape = x.shape[:-1]
    if out is not None:
        _check_out(out, batch_shape, x.device)
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    if validate:
        _check_values(rows, is_logits)
    result = torch.empty(batch_shape, dtype=torch.int64, device=x.device) if out is None else out
    if rows.shape[0] == 0:
        return result
    flat = result.view(-1) if result.is_contiguous() else torch.empty_like(result).view(-1)
    if unavailable_reason(_sample_kernel, x.device) is None:
        launch_sample(rows, flat, logits=is_logits, seed=seed, offset=offset)
    else:
        flat.copy_(_sample_torch(rows, is_logits, seed, offset))
    if flat.data_ptr() != result.data_ptr():
        result.copy_(flat.view(batch_shape))
    return result


def _sample_torch(rows: torch.Tensor, is_logits: bool, seed: int, offset: int) -> torch.Tensor:
    """The fallback: ``torch.multinomial`` seeded from ``(seed, offset)``."""
    weights = torch.softmax(rows.float(), dim=-1) if is_logits else rows.float()
    generator = torch.Generator(device=rows.device)
    generator.manual_seed(hash((seed % (1 << 64), offset)) % (1 << 63))
    return torch.multinomial(weights, 1, generator=generator)[:, 0]


def _check_input(
    logits: torch.Tensor | None, probs: torch.Tensor | None
) -> tuple[torch.Tensor, bool]:
    if (logits is None) == (probs is None):
        raise ValueError(
            "sample_categorical: give exactly one of logits= and probs= "
            f"(got {'both' if logits is not None else 'neither'})"
        )
    name, x = ("logits", logits) if logits is not None else ("probs", probs)
    if not isinstance(x, torch.Tensor) or x.dtype not in _FLOAT_DTYPES or x.dim() < 1:
        got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(
            f"sample_categorical: {name} must be a floating-point tensor [..., A], got {got}"
        )
    if x.shape[-1] == 0:
        raise ValueError(
            f"sample_categorical: {name} has shape {tuple(x.shape)}; the last axis (the "
            "categories) must not be empty"
        )
    return x, logits is not None


def _check_values(rows: torch.Tensor, is_logits: bool) -> None:
    """One host sync for all checks; the messages name the first offending row."""
    if rows.shape[0] == 0:
        return
    if is_logits:
        bad_value = torch.isnan(rows) | (rows == float("inf"))
        empty_row = (rows == float("-inf")).all(dim=-1)
        what = ("logits must not be NaN or +inf", "a row of logits is all -inf")
    else:
        bad_value = ~torch.isfinite(rows) | (rows < 0)
        empty_row = (rows == 0).all(dim=-1)
        what = ("probs must be finite and >= 0", "a row of probs is all zero")
    bad_rows = bad_value.any(dim=-1)
    flags = torch.stack((bad_rows.any(), empty_row.any())).tolist()
    for flag, rows_flagged, message in zip(flags, (bad_rows, empty_row), what):
        if flag:
            first = int(rows_flagged.nonzero()[0, 0])
            raise ValueError(
                f"sample_categorical: {message} (first at flattened row {first}: "
                f"{rows[first].tolist()[:8]}); pass validate=False to skip this check"
            )


def _check_out(out: torch.Tensor, batch_shape: torch.Size, device: torch.device) -> None:
    if (
        not isinstance(out, torch.Tensor)
        or out.dtype != torch.int64
        or out.shape != batch_shape
        or out.device != device
    ):
        got = (
            f"{out.dtype} {tuple(out.shape)} on {out.device}"
            if isinstance(out, torch.Tensor)
            else type(out).__name__
        )
        raise ValueError(
            f"sample_categorical: out must be an int64 tensor of shape {tuple(batch_shape)} "
            f"on {device}, got {got}"
        )
