"""Compile reports: each kernel compiled for an H100 (sm_90) exactly as Triton's runtime
would specialise it on the GPU, read with the CUDA tools in the triton wheel (ptxas,
nvdisasm, cuobjdump): registers, spills, stack, shared memory, the theoretical occupancy
(:func:`occupancy`) and the SASS (:mod:`.sass`)."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import torch

from batchenv.kernels import _triton

from .launches import Launch
from .machine import H100, Gpu
from .sass import SassSummary, loop_trip_counts, parse_sass


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM for one kernel configuration, and what limits them."""

    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  #: of the SM's 64 warp slots
    limiter: str


def occupancy(
    regs_per_thread: int, threads_per_block: int, smem_per_block: int = 0, gpu: Gpu = H100
) -> Occupancy:
    """Theoretical occupancy, the way the CUDA occupancy calculator computes it for sm_90:
    registers are allocated per warp in units of 256 and each of the 4 SM sub-partitions has
    a quarter of the register file; the driver adds 1 KB of shared memory per block."""
    warps = -(-threads_per_block // 32)
    limits = {
        "warps": gpu.max_warps_per_sm // warps,
        "blocks": gpu.max_blocks_per_sm,
    }
    if regs_per_thread > 0:
        per_warp = -(-regs_per_thread * 32 // gpu.reg_alloc_unit) * gpu.reg_alloc_unit
        per_partition = gpu.regs_per_sm // gpu.schedulers_per_sm // per_warp
        limits["registers"] = per_partition * gpu.schedulers_per_sm // warps
    smem = smem_per_block + gpu.smem_reserved_per_block
    smem = -(-smem // gpu.smem_alloc_unit) * gpu.smem_alloc_unit
    limits["shared memory"] = gpu.smem_per_sm // smem
    blocks = min(limits.values())
    limiter = " & ".join(k for k, v in limits.items() if v == blocks)
    return Occupancy(blocks, blocks * warps, blocks * warps / gpu.max_warps_per_sm, limiter)


@dataclass
class CompileReport:
    """What ptxas and the SASS say about one kernel configuration on sm_90."""

    kernel: str
    config: str
    num_warps: int
    regs: int
    spill_stores: int  #: bytes
    spill_loads: int  #: bytes
    stack: int  #: bytes of stack frame per thread
    smem: int  #: bytes of shared memory Triton asks for (the driver adds 1 KB)
    occupancy: Occupancy
    sass: SassSummary

    @property
    def threads(self) -> int:
        return self.num_warps * 32

    @property
    def findings(self) -> list[str]:
        """Spills, and occupancy below 50%: what issue 23 counts as findings."""
        notes = []
        if self.spill_stores or self.spill_loads:
            notes.append("spills")
        if self.occupancy.fraction < 0.5:
            notes.append(f"occupancy {self.occupancy.fraction:.0%} < 50%")
        return notes


def _nvidia_tools() -> dict[str, str]:
    from triton import knobs
    from triton.backends.nvidia.compiler import get_ptxas

    return {
        "ptxas": get_ptxas(90).path,
        "nvdisasm": knobs.nvidia.nvdisasm.path,
        "cuobjdump": knobs.nvidia.cuobjdump.path,
    }


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_CUOBJDUMP_REG = re.compile(r"REG:(\d+)")


def compile_sm90(launch: Launch):
    """Compile ``launch``'s kernel for sm_90 exactly as Triton's runtime would specialise it
    for these arguments on a GPU (Triton's own binder and packing; tensors become
    ``MockTensor``s, which report 16-byte aligned pointers like torch's allocations).
    Needs the kernel in compiled mode (``TRITON_INTERPRET`` unset when it was imported)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import MockTensor, create_function_from_signature

    kernel = launch.kernel
    if _triton.kernel_mode(kernel) != "compiled":
        raise RuntimeError(
            f"{launch.name} was defined in Triton's interpreter mode: run this with "
            "TRITON_INTERPRET unset"
        )
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    args = [MockTensor(a.dtype) if isinstance(a, torch.Tensor) else a for a in launch.call_args]
    bound, specialization, options = binder(*args, **launch.call_kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, launch.call_kwargs, bound, specialization, options
    )
    source = ASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(source, target=target, options=options.__dict__)


def compile_report(launch: Launch) -> CompileReport:
    """Compile ``launch`` for sm_90 (:func:`compile_sm90`) and read the result: registers
    from the cubin Triton built (cuobjdump), spills and stack from ptxas ``-v`` run on the
    same PTX with Triton's flags, the shared memory Triton requests, the SASS (nvdisasm)."""
    compiled = compile_sm90(launch)
    tools = _nvidia_tools()
    with tempfile.TemporaryDirectory() as folder:
        ptx, cubin = os.path.join(folder, "k.ptx"), os.path.join(folder, "k.cubin")
        with open(ptx, "w") as f:
            f.write(compiled.asm["ptx"])
        with open(cubin, "wb") as f:
            f.write(compiled.asm["cubin"])
        fmad = [] if compiled.metadata.enable_fp_fusion else ["--fmad=false"]
        log = subprocess.run(
            [tools["ptxas"], "-lineinfo", *fmad, "-v", "--regAllocOptLevel=2",
             "--gpu-name=sm_90a", ptx, "-o", os.path.join(folder, "check.cubin")],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        usage = subprocess.run(
            [tools["cuobjdump"], "--dump-resource-usage", cubin],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        sass = subprocess.run(
            [tools["nvdisasm"], "-c", "-g", cubin], capture_output=True, text=True, check=True
        ).stdout
    frame = _PTXAS_FRAME.search(log)
    regs = int(_CUOBJDUMP_REG.search(usage).group(1))
    if (m := _PTXAS_REGS.search(log)) and int(m.group(1)) != regs:
        raise RuntimeError(f"{launch.name}: ptxas reports {m.group(1)} registers, cubin {regs}")
    num_warps = compiled.metadata.num_warps
    smem = compiled.metadata.shared
    return CompileReport(
        kernel=launch.name,
        config=launch.describe(),
        num_warps=num_warps,
        regs=regs,
        spill_stores=int(frame.group(2)),
        spill_loads=int(frame.group(3)),
        stack=int(frame.group(1)),
        smem=smem,
        occupancy=occupancy(regs, num_warps * 32, smem),
        sass=parse_sass(sass, loop_trip_counts(launch.kernel.fn, compiled.asm["ttir"])),
    )


@functools.cache
def _cached_report(key: tuple) -> CompileReport:
    return compile_report(_REPORT_LAUNCHES[key])


_REPORT_LAUNCHES: dict[tuple, Launch] = {}


def report_for(launch: Launch) -> CompileReport | None:
    """:func:`compile_report`, cached per kernel specialisation; None where it cannot be made
    (no NVIDIA backend in this Triton build, kernels in interpreter mode, ...)."""
    key = (
        launch.name,
        launch.grid,
        tuple(
            (k, str(v.dtype) if isinstance(v, torch.Tensor) else v)
            for k, v in sorted(launch.args.items())
            if not (isinstance(v, (int, float)) and k.islower())  # runtime scalars
        ),
        tuple(sorted(launch.call_kwargs.items())),
    )
    _REPORT_LAUNCHES[key] = launch
    try:
        return _cached_report(key)
    except Exception:  # noqa: BLE001 -- a prediction without the compile terms still holds
        return None


def grid_occupancy(report: CompileReport, programs: int, gpu: Gpu = H100) -> float:
    """The occupancy the launch can reach with its grid: programs spread over every SM, at
    most the theoretical blocks per SM (a grid of 2,000 one-warp programs fills at most 16 of an
    SM's 64 warp slots, whatever the registers allow)."""
    per_sm = min(report.occupancy.blocks_per_sm, -(-programs // gpu.sms))
    return per_sm * report.num_warps / gpu.max_warps_per_sm
