"""Triton plumbing shared by the kernel envs and the sampler.

Three pieces live here: where a kernel can run (:func:`unavailable_reason`), the env kernels'
block and warp sizes (:func:`env_block`, :func:`env_warps`), and the counter-based RNG the
kernels draw from (:func:`philox4x32`, :func:`uniform4`). The launch itself is
``_base.KernelEnv._launch``, the one every kernel env uses.

Where Triton kernels run
    On a CUDA device they are compiled. On CPU they run only in Triton's interpreter (slow;
    meant for tests), which is on while ``TRITON_INTERPRET=1``. Triton reads the variable
    when a ``@triton.jit`` function is *defined*, so it has to be set before
    ``batchenv.kernels`` is imported; it is checked again before every CPU launch, so a
    process (a test run) can switch the interpreter off again without leaving CPU envs that
    run kernels anyway.

Why the kernels only call Triton builtins
    Triton's own library kernels (``tl.philox``, ``tl.sum``, ``tl.cumsum``, ...) are built in
    the mode that was on when ``triton`` itself was imported. In a process that imported
    triton before ``TRITON_INTERPRET=1`` was set (``torch._dynamo`` imports it), calling them
    from an interpreted kernel fails. So Philox is written out below and reductions use
    ``tl.reduce`` / ``tl.associative_scan`` with the combine functions defined here: all of
    it is built in the same mode as the kernels that call it, whatever the import order.

The RNG
    Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
    the generator behind ``tl.rand`` and cuRAND. A draw is a pure function of a 64-bit key
    (the seed) and a 128-bit counter, so every (row, draw number) pair gets its own numbers
    without any generator state on the device: the envs keep one int64 counter per row,
    incremented on every fresh start, and put ``(row, count, stream)`` in the counter words.
"""

from __future__ import annotations

import types

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton wheel for this platform: the torch backends still work

    class _MissingKernel:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            raise RuntimeError(f"{self.fn.__name__}: Triton is not installed")

    triton = types.SimpleNamespace(
        jit=lambda fn=None, **_: _MissingKernel(fn) if fn else _MissingKernel,
        next_power_of_2=lambda n: 1 << max(int(n) - 1, 0).bit_length(),
        cdiv=lambda a, b: -(-a // b),
    )
    tl = types.SimpleNamespace(constexpr=lambda value: value)
    HAS_TRITON = False
else:
    HAS_TRITON = True

#: Philox4x32 round multipliers and key increments (Random123's PHILOX_M4x32_0/1, W32_0/1).
PHILOX_M0 = tl.constexpr(0xD2511F53)
PHILOX_M1 = tl.constexpr(0xCD9E8D57)
PHILOX_W0 = tl.constexpr(0x9E3779B9)
PHILOX_W1 = tl.constexpr(0xBB67AE85)

#: Counter word ``c3``: keeps the envs' fresh starts and the sampler's draws apart even when
#: a caller gives both the same seed.
STREAM_SAMPLER = tl.constexpr(0)
STREAM_RESET = tl.constexpr(1)

#: Rows per program of the env kernels (a power of two); one row is a handful of scalars.
MAX_ENV_BLOCK = 256
#: Threads per warp: the classic kernels run one row per thread (see :func:`env_warps`).
WARP_SIZE = 32


def split_key(seed: int) -> tuple[int, int]:
    """The two 32-bit Philox key words of a seed (reduced modulo 2**64)."""
    seed %= 1 << 64
    return seed & 0xFFFFFFFF, seed >> 32


def kernel_mode(kernel) -> str:
    """``"compiled"`` for a ``@triton.jit`` kernel built for the GPU, ``"interpreted"`` for
    one built under ``TRITON_INTERPRET=1``, ``"missing"`` without Triton."""
    if not HAS_TRITON:
        return "missing"
    return "compiled" if isinstance(kernel, triton.runtime.JITFunction) else "interpreted"


def interpreter_on() -> bool:
    """Whether Triton's interpreter is switched on now (``TRITON_INTERPRET=1``)."""
    return HAS_TRITON and bool(triton.knobs.runtime.interpret)


def unavailable_reason(kernel, device: torch.device) -> str | None:
    """Why ``kernel`` cannot run on tensors on ``device`` now, or None when it can.

    >>> from batchenv.kernels.sampler import _sample_kernel
    >>> reason = unavailable_reason(_sample_kernel, torch.device("cpu"))
    """
    mode = kernel_mode(kernel)
    if mode == "missing":
        return "Triton is not installed"
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "CUDA is not available"
        return None  # compiled, or interpreted (the interpreter copies through the host)
    if device.type != "cpu":
        return f"Triton does not run on {device.type} devices"
    if mode == "compiled":
        return (
            "Triton compiles for GPUs; on CPU its kernels run only in Triton's interpreter: "
            "set TRITON_INTERPRET=1 before batchenv.kernels is imported"
        )
    if not interpreter_on():
        return (
            "batchenv.kernels was built for Triton's interpreter, but TRITON_INTERPRET=1 is no "
            "longer set"
        )
    return None


def env_block(num_rows: int) -> int:
    """Rows per program for an env kernel: the next power of two, between 16 and 256."""
    return min(max(triton.next_power_of_2(num_rows), 16), MAX_ENV_BLOCK)


def env_warps(block: int) -> int:
    """Warps per program for a classic-control kernel of ``block`` rows: one row per thread.

    With Triton's default 4 warps a 256-row program put two rows in each thread: compiled for
    sm_90, Acrobot's step then needed 64 registers and spilled (8 bytes stored, 12 loaded),
    CartPole's 48, and every kernel staged its state stores through shared memory behind
    barriers (a layout change from two rows per thread to one). One row per thread: Acrobot
    39 registers and no spills, CartPole 34, no shared memory (``benchmarks/gpu_model.py``).
    """
    return max(1, block // WARP_SIZE)


# -- device functions ---------------------------------------------------------------------


@triton.jit
def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of the counter ``(c0, c1, c2, c3)`` under the key ``(k0, k1)``.

    All arguments are uint32 (blocks or scalars); returns four uint32 blocks, Random123's
    output word order. Wrapping integer arithmetic is asked for explicitly
    (``sanitize_overflow=False``), so debug builds and the interpreter do not flag it.
    """
    for _ in tl.static_range(10):
        hi0 = tl.math.umulhi(c0, PHILOX_M0)
        lo0 = tl.mul(c0, PHILOX_M0, sanitize_overflow=False)
        hi1 = tl.math.umulhi(c2, PHILOX_M1)
        lo1 = tl.mul(c2, PHILOX_M1, sanitize_overflow=False)
        c0 = hi1 ^ c1 ^ k0
        c1 = lo1
        c2 = hi0 ^ c3 ^ k1
        c3 = lo0
        k0 = tl.add(k0, PHILOX_W0, sanitize_overflow=False)
        k1 = tl.add(k1, PHILOX_W1, sanitize_overflow=False)
    return c0, c1, c2, c3


@triton.jit
def uniform_from_bits(bits):
    """A uint32 block to float32 in ``[0, 1)``: the top 24 bits times 2**-24 (exact)."""
    return (bits >> 8).to(tl.float32) * 5.9604644775390625e-08


@triton.jit
def uniform4(key_lo, key_hi, rows, counts, stream: tl.constexpr):
    """Four float32 ``U[0, 1)`` blocks for ``rows`` (int block) at draw number ``counts``
    (int64 block, one per row): Philox counter ``(row, count lo, count hi, stream)``."""
    c0 = rows.to(tl.uint32)
    c1 = (counts & 0xFFFFFFFF).to(tl.uint32)
    c2 = (counts >> 32).to(tl.uint32)
    c3 = c0 * 0 + stream
    r0, r1, r2, r3 = philox4x32(c0, c1, c2, c3, key_lo.to(tl.uint32), key_hi.to(tl.uint32))
    return (
        uniform_from_bits(r0),
        uniform_from_bits(r1),
        uniform_from_bits(r2),
        uniform_from_bits(r3),
    )


@triton.jit(do_not_specialize=["key_lo", "key_hi"])
def fresh_starts(reset_mask_ptr, restarts_ptr, key_lo, key_hi, rows, valid):
    """The rows of the reset mask and four ``U[0, 1)`` blocks for their fresh states; counts
    the fresh start in the rows' restart counters (their next draw differs)."""
    fresh = tl.load(reset_mask_ptr + rows, mask=valid, other=0) != 0
    count = tl.load(restarts_ptr + rows, mask=valid, other=0)
    u0, u1, u2, u3 = uniform4(key_lo, key_hi, rows, count, STREAM_RESET)
    tl.store(restarts_ptr + rows, count + 1, mask=valid & fresh)
    return fresh, u0, u1, u2, u3


@triton.jit
def add_combine(a, b):
    """Combine function for sums and prefix sums (``tl.reduce`` / ``tl.associative_scan``)."""
    return a + b


@triton.jit
def maximum_combine(a, b):
    """Combine function for maxima."""
    return tl.maximum(a, b)
