"""The GPU row on paper: sm_90 compile reports and a roofline model of batchenv's Triton
kernels, made on a machine without a GPU (issue 23).

Two things are computed here, and one is measured:

* **Compile reports.** Every kernel is compiled for an H100 (sm_90) as its launcher would have
  Triton specialise it on the GPU -- the launcher itself runs, on ``meta`` tensors, with the
  kernel swapped for a recorder, so the constexprs, ``num_warps`` and 16-byte alignment hints
  are the real ones -- using the CUDA tools that ship inside the triton wheel (ptxas,
  nvdisasm, cuobjdump): registers per thread, spills, stack, shared memory, the theoretical
  occupancy on an H100 and the SASS instruction mix.
* **A roofline model.** The bytes each launch reads and writes, counted from the tensors the
  real launcher passes (:func:`bytes_per_step`), the launches of a step and of a
  ``simulate()`` step (:func:`count_simulate_ops`), and H100 figures give the device time of
  a step; the host time of a step call is the larger term for small batches.
* **Measured here:** the host time of a step call -- the launcher's Python and Triton's
  dispatch (``JITFunction.run``), run against a stand-in CUDA driver that compiles for sm_90
  and launches nothing (:func:`measure_host`). Only the driver's own launch call is assumed.

Every assumption is a field of :class:`Gpu` or :class:`Host`, with its source. docs/gpu.md
holds the tables this script prints and what they predict.

    python benchmarks/gpu_model.py                  # reports + predictions (~3 min cold, 2 cores)
    python benchmarks/gpu_model.py --no-compile     # predictions without the compile reports
    python benchmarks/gpu_model.py --measure-host   # re-measure the host costs on this machine

``benchmarks/gpu_envs.py`` imports :func:`predict_env_rate` and :func:`predict_sampler_rate`
for its "predicted" column, so the first GPU run checks the model in one command.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any
from unittest import mock

import torch

from batchenv.kernels import (
    Acrobot,
    CartPole,
    ContinuousTag,
    DiscreteTag,
    MountainCarContinuous,
    Pendulum,
    _triton,
    sampler,
)
from batchenv.kernels._classic import ClassicControlEnv

# -- the machine the model is for -------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    """An NVIDIA H100 SXM5 80 GB. The hardware limits are NVIDIA's published sm_90 figures
    (H100 whitepaper; CUDA C Programming Guide, compute capability 9.0); the fields below
    ``schedulers_per_sm`` are this model's assumptions."""

    name: str = "H100 SXM5 (sm_90)"
    sms: int = 132
    clock_hz: float = 1.98e9  #: max boost clock of the SMs
    hbm_bytes_per_s: float = 3.35e12  #: HBM3 peak
    regs_per_sm: int = 65536
    reg_alloc_unit: int = 256  #: registers are allocated per warp, in units of 256
    max_regs_per_thread: int = 255
    max_warps_per_sm: int = 64  #: 2048 threads
    max_blocks_per_sm: int = 32
    smem_per_sm: int = 228 * 1024
    smem_reserved_per_block: int = 1024  #: the driver reserves 1 KB of shared memory per block
    smem_alloc_unit: int = 128
    schedulers_per_sm: int = 4  #: each issues one warp-instruction per cycle at most
    #: Assumed: the fraction of HBM peak a streaming kernel reaches (~85-90% is typical).
    hbm_efficiency: float = 0.85
    #: Assumed: one dependent trip to DRAM (a load whose result the program waits for).
    dram_latency_s: float = 0.6e-6
    #: Assumed: cycles per instruction of one warp's dependent chain (ALU latency ~4 cycles).
    cycles_per_dependent_instruction: float = 4.0
    #: Assumed: the device time of a tiny kernel launched on a stream (ramp-up and drain).
    kernel_floor_s: float = 2.0e-6
    #: Assumed: the same for a kernel node inside a CUDA graph.
    graph_node_s: float = 1.0e-6


H100 = Gpu()
#: The same SMs with HBM3e (4.8 TB/s): what ``benchmarks/gpu_envs.py`` uses on an H200.
H200 = replace(H100, name="H200 (sm_90)", hbm_bytes_per_s=4.8e12)


def gpu_for(device_name: str) -> Gpu:
    """The model's GPU for a CUDA device name (H200 when the name says so, else H100)."""
    return H200 if "H200" in device_name.upper() else H100


@dataclass(frozen=True)
class Host:
    """Host-side costs of one call, in seconds.

    ``step_s`` was measured on the project's 2-core AMD EPYC VM on 2026-11-25 with
    :func:`measure_host` (best of 7 rounds of 1,000 calls): an env's ``step(action,
    reset_mask)`` or one ``sample_categorical`` call, Python, checks, output allocation and
    Triton's dispatch (``JITFunction.run``: argument binding, specialisation, cache lookup)
    included, the driver's launch call excluded (the stand-in driver launches nothing). CPU
    tensors were allocated instead of CUDA ones (torch's caching allocator costs about the
    same). A GPU host's CPU is likely faster than this VM, so these are on the slow side. The
    other fields are assumptions.
    """

    #: Measured (see the class docstring): per env family, and the sampler.
    step_s: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType(
            {
                "classic": 33e-6,
                "tag_discrete": 28e-6,
                "tag_continuous": 32e-6,
                "sampler": 23e-6,
            }
        )
    )
    #: Measured the same way with the kernel a no-op: batchenv's own Python in the call
    #: (checks, output allocation); the rest of ``step_s`` is Triton's dispatch.
    launcher_s: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType(
            {
                "classic": 12e-6,
                "tag_discrete": 12e-6,
                "tag_continuous": 12e-6,
                "sampler": 12e-6,
            }
        )
    )
    #: Measured the same way: launching an already compiled kernel directly
    #: (``CompiledKernel[grid](*args)``) instead of through ``JITFunction.run``.
    compiled_launch_s: float = 1.4e-6
    #: Assumed (the issue's 3-5 us): the driver's launch call (cuLaunchKernel) itself.
    cuda_launch_s: float = 4e-6
    #: Assumed: one eager torch op on CUDA tensors (dispatch and launch), e.g. ``a | b``.
    torch_op_s: float = 5e-6
    #: Assumed: a read back to the host (``nonzero``, ``int(tensor)``) waits for the stream.
    sync_s: float = 15e-6
    #: Assumed: replaying a captured CUDA graph (cudaGraphLaunch).
    graph_replay_s: float = 5e-6


HOST = Host()

#: Published figures the model is put next to (env steps/s; actions/s for the sampler).
#: WarpDrive (Lan et al., "WarpDrive: Extremely Fast End-to-End Deep Multi-Agent
#: Reinforcement Learning on a GPU", 2021): one V100, 2,000 envs. gymnax (Lange, 2022):
#: CartPole-v1 on an A100, 2k envs.
ANCHORS = {
    ("discrete", 2000, 5): 9.8e6,
    ("discrete", 2000, 1000): 2.9e6,
    ("continuous", 2000, 5): 8.3e6,
    ("continuous", 2000, 105): 0.15e6,
    ("sampler", 2000, 5): 18e6,
    ("cartpole", 2048, 1): 20e6,
}
#: batchenv's goal: at least this many times WarpDrive's figures.
TARGET = 5.0


# -- capturing a launch ---------------------------------------------------------------------


class _Recorder:
    """Stands in for a ``@triton.jit`` kernel: records ``kernel[grid](*args, **kwargs)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple, dict]] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((tuple(grid), args, kwargs))

        return launch


class _NoLaunch:
    """Stands in for a ``@triton.jit`` kernel and does nothing (keeps no arguments alive)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@dataclass
class Launch:
    """One kernel launch as a batchenv launcher makes it."""

    kernel: Any  #: the ``@triton.jit`` function (compiled or interpreted mode)
    family: str  #: "classic", "tag_discrete", "tag_continuous" or "sampler"
    grid: tuple[int, ...]
    call_args: tuple  #: positional arguments, as passed
    call_kwargs: dict  #: keyword arguments (constexprs and launch options), as passed

    @property
    def name(self) -> str:
        module = self.kernel.fn.__module__.rsplit(".", 1)[-1]
        return f"{module}.{self.kernel.fn.__name__}"

    @functools.cached_property
    def args(self) -> dict[str, Any]:
        """Every kernel parameter by name (positional and constexpr), in signature order."""
        names = list(inspect.signature(self.kernel.fn).parameters)
        given = dict(zip(names, self.call_args))
        given.update({k: v for k, v in self.call_kwargs.items() if k in names})
        return {name: given[name] for name in names if name in given}

    @property
    def programs(self) -> int:
        return math.prod(self.grid)

    @property
    def num_warps(self) -> int:
        return int(self.call_kwargs.get("num_warps", 4))  # Triton's default

    def describe(self) -> str:
        """The launch's configuration in a few words (for the report tables)."""
        shown = ("E", "N", "NT", "K", "A", "OBS_DIM", "BLOCK", "BLOCK_A", "BLOCK_I", "ROWS")
        flags = ("FULL_OBS", "ALL_OBSERVED", "LOGITS", "STEP", "RESET")
        parts = [f"{k}={self.args[k]}" for k in shown if k in self.args]
        parts += [k.lower().replace("_", " ") for k in flags if self.args.get(k) is True]
        state = next((v for k, v in self.args.items() if k in ("state_ptr", "x_ptr")), None)
        if isinstance(state, torch.Tensor) and state.dtype == torch.float64:
            parts.append("fp64")
        return " ".join(parts)


def _family(env: Any) -> str:
    if isinstance(env, ClassicControlEnv):
        return "classic"
    if isinstance(env, DiscreteTag):
        return "tag_discrete"
    if isinstance(env, ContinuousTag):
        return "tag_continuous"
    raise TypeError(f"no Triton kernel model for {type(env).__name__}")


def zero_action(env: Any) -> torch.Tensor:
    """An all-zero action batch of the env's shape and dtype (int64 for discrete spaces)."""
    space = env.single_action_space
    discrete = not hasattr(space, "low")
    agents = (env.num_agents,) if hasattr(env, "num_agents") else ()
    shape = (env.num_envs, *agents, *space.shape)
    dtype = torch.int64 if discrete else torch.float32
    return torch.zeros(shape, dtype=dtype, device=env.device)


def capture_env_launch(env: Any, step: bool = True, reset: bool = True) -> Launch:
    """The launch ``env.step(action, reset_mask)`` makes (``step=False``: ``env.reset``),
    recorded instead of run. Works for any env built with ``backend="torch"`` as well (the
    triton launcher only reads the env's tensors), on any device, ``meta`` included."""
    if not step and not reset:
        raise ValueError("capture_env_launch: a launch steps, resets, or both")
    module = sys.modules[type(env).__module__]
    recorder = _Recorder()
    action = zero_action(env) if step else None
    mask = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device) if reset else None
    with mock.patch.object(module, "_step_kernel", recorder):
        env._launch(action, mask)
    (grid, args, kwargs), *_ = recorder.calls
    return Launch(module._step_kernel, _family(env), grid, args, kwargs)


def capture_sampler_launch(
    rows: int, categories: int, logits: bool = True, dtype: torch.dtype = torch.float32
) -> Launch:
    """The launch ``sample_categorical`` makes for ``[rows, categories]`` inputs."""
    x = torch.empty(rows, categories, dtype=dtype, device="meta")
    out = torch.empty(rows, dtype=torch.int64, device="meta")
    recorder = _Recorder()
    with mock.patch.object(sampler, "_sample_kernel", recorder):
        sampler.launch_sample(x, out, logits=logits, seed=0, offset=0)
    (grid, args, kwargs), *_ = recorder.calls
    return Launch(sampler._sample_kernel, "sampler", grid, args, kwargs)


# -- bytes ------------------------------------------------------------------------------------

#: What each pointer parameter is to its kernel: (read, written, when). ``read``/``written``
#: are how many times the whole tensor crosses HBM (``"fresh"``: only the rows that start
#: afresh, a fraction of them); ``when`` is the constexpr that must be True for the kernel to
#: touch it at all (None: always). Sizes and dtypes come from the tensors themselves.
ROLES: dict[str, dict[str, tuple[Any, Any, str | None]]] = {
    "classic": {
        "state_ptr": (1, 1, None),
        "elapsed_ptr": (1, 1, None),
        # Read by every row (the Philox counter); written by the rows that start afresh.
        "restarts_ptr": (1, "fresh", "RESET"),
        "action_ptr": (1, 0, "STEP"),
        "reset_mask_ptr": (1, 0, "RESET"),
        "observ_ptr": (0, 1, None),
        "reward_ptr": (0, 1, "STEP"),
        "terminated_ptr": (0, 1, "STEP"),
        "truncated_ptr": (0, 1, "STEP"),
    },
    "tag": {
        "pos_ptr": (1, 1, None),
        # Read back for the observations after the stores: L1/L2 hits, counted once.
        "state_ptr": (1, 1, None),
        "elapsed_ptr": (1, 1, None),
        "restarts_ptr": (1, 1, "RESET"),  # written for every env (+0 or +1)
        "action_ptr": (1, 0, "STEP"),
        "accel_ptr": (1, 0, "STEP"),  # the action grids: a few floats, cached
        "turn_ptr": (1, 0, "STEP"),
        "reset_mask_ptr": (1, 0, "RESET"),
        "observ_ptr": (0, 1, None),
        "reward_ptr": (0, 1, "STEP"),
        "terminated_ptr": (0, 1, "STEP"),
        "truncated_ptr": (0, 1, "STEP"),
    },
    "sampler": {"x_ptr": (1, 0, None), "out_ptr": (0, 1, None)},
}


@dataclass(frozen=True)
class Traffic:
    """HBM bytes one launch moves for one pointer parameter."""

    param: str
    dtype: torch.dtype
    read: float
    written: float


def traffic(launch: Launch, reset_fraction: float = 0.0) -> list[Traffic]:
    """Per pointer parameter, the bytes ``launch`` reads and writes (see :data:`ROLES`)."""
    roles = ROLES["tag" if launch.family.startswith("tag") else launch.family]
    rows = []
    for name, value in launch.args.items():
        if not isinstance(value, torch.Tensor):
            continue
        if name not in roles:
            raise KeyError(f"{launch.name}: no role for pointer {name!r}; add it to ROLES")
        read, written, when = roles[name]
        if when is not None and not launch.args.get(when, False):
            continue
        size = value.numel() * value.element_size()

        def times(count):
            return reset_fraction if count == "fresh" else count

        rows.append(Traffic(name, value.dtype, size * times(read), size * times(written)))
    return rows


def launch_bytes(launch: Launch, reset_fraction: float = 0.0) -> float:
    """Total HBM bytes ``launch`` reads and writes."""
    return sum(t.read + t.written for t in traffic(launch, reset_fraction))


def bytes_per_step(
    env: Any, reset_fraction: float = 0.0, step: bool = True, reset: bool = True
) -> float:
    """HBM bytes of one ``env.step(action, reset_mask)`` launch (all envs), counted from the
    tensors the env's launcher passes. ``reset_fraction``: the share of rows that start
    afresh in the call (only the classic envs' restart counters depend on it)."""
    return launch_bytes(capture_env_launch(env, step=step, reset=reset), reset_fraction)


# -- occupancy -------------------------------------------------------------------------------


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


# -- SASS -------------------------------------------------------------------------------------

#: SASS opcode (the part before the first dot) -> the class the report counts it in.
SASS_CLASSES = {
    "global memory": "LDG STG ATOMG ATOM RED LD ST",
    "local memory (spills)": "LDL STL",
    "shared memory": "LDS STS LDSM ATOMS",
    "constant loads": "LDC ULDC",
    "fp32": "FADD FMUL FFMA FSETP FMNMX FSEL FSET FCHK FADD32I FMUL32I FFMA32I FSWZADD",
    "fp64": "DADD DMUL DFMA DSETP DMNMX",
    "special functions (MUFU)": "MUFU",
    "integer": (
        "IMAD IADD3 IADD IABS IMNMX ISETP LOP3 LOP SHF SHL SHR LEA IDP POPC FLO BREV VIADD "
        "VIMNMX VIADDMNMX IMUL PRMT SGXT BMSK IMAD32I IADD32I ISCADD"
    ),
    "conversions": "F2I I2F F2F I2FP F2FP I2I FRND",
    "moves and selects": "MOV SEL CS2R S2R S2UR P2R R2P PLOP3 HFMA2 MOV32I",
    "warp shuffles": "SHFL VOTE REDUX MATCH",
    "barriers and convergence": (
        "BAR WARPSYNC BSSY BSYNC BREAK BMOV MEMBAR DEPBAR ERRBAR CCTL NANOSLEEP"
    ),
    "control flow": "BRA EXIT RET CALL JMP BRX YIELD BPT",
}
_SASS_CLASS = {op: cls for cls, ops in SASS_CLASSES.items() for op in ops.split()}
_SASS_INSTRUCTION = re.compile(
    r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);"
)
_SASS_LABEL = re.compile(r"^(\.L_x_\d+):")
_SASS_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_SASS_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def sass_class(opcode: str) -> str:
    """The instruction class of a SASS opcode (``IMAD.MOV.U32`` -> ``integer``); ``U``-prefixed
    uniform-datapath ops that are not listed count as ``uniform datapath``."""
    base = opcode.split(".", 1)[0]
    if base in _SASS_CLASS:
        return _SASS_CLASS[base]
    if base.startswith("U") and base[1:] in _SASS_CLASS:
        return "uniform datapath"
    return "other"


@dataclass(frozen=True)
class SassSummary:
    """What the report takes from a kernel's SASS."""

    static: int  #: instructions in the kernel (NOPs left out)
    mix: dict[str, int]  #: static count per :data:`SASS_CLASSES` class
    dynamic: int | None  #: instructions one warp executes (loops weighted by trip counts)
    loops: tuple[tuple[int, int, int], ...]  #: (source line, trips, body instructions)
    unattributed_back_edges: int  #: backward branches not traced to a source loop


def parse_sass(text: str, loop_trips: Callable[[str, int], int | None]) -> SassSummary:
    """Summarise ``nvdisasm -c -g`` output of one kernel.

    The dynamic count follows the main body up to its last ``EXIT`` (cold paths laid out after
    it are left out) and counts every instruction once, except inside loops: a backward branch
    whose line annotation ``loop_trips(file, line)`` recognises as a source loop weights the
    instructions from its target to itself by the trip count (nested loops multiply). Both
    sides of a data-dependent branch are counted, so it is an upper bound for one warp.
    """
    instructions: list[tuple[str, str | None, str | None, int]] = []
    labels: dict[str, int] = {}
    where: tuple[str | None, int] = (None, 0)
    for line in text.splitlines():
        if m := _SASS_LINE.search(line):
            where = (m.group(1), int(m.group(2)))
            continue
        if m := _SASS_LABEL.match(line):
            labels[m.group(1)] = len(instructions)
            continue
        if m := _SASS_INSTRUCTION.match(line):
            opcode, rest = m.group(2), m.group(3)
            if opcode == "NOP":
                continue
            target = _SASS_TARGET.search(rest)
            instructions.append((opcode, target and target.group(1), where[0], where[1]))
    exits = [i for i, ins in enumerate(instructions) if ins[0] == "EXIT"]
    end = exits[-1] if exits else len(instructions) - 1
    mix = Counter(sass_class(ins[0]) for ins in instructions)
    loops, stray = [], 0
    for i, (opcode, target, file, line) in enumerate(instructions[: end + 1]):
        if not opcode.startswith("BRA") or target not in labels or labels[target] > i:
            continue
        trips = loop_trips(file or "", line)
        if trips is None:
            stray += 1
            continue
        loops.append((labels[target], i, trips, line))
    dynamic = 0
    for i in range(end + 1):
        weight = 1
        for first, last, trips, _ in loops:
            if first <= i <= last:
                weight *= trips
        dynamic += weight
    return SassSummary(
        static=len(instructions),
        mix=dict(mix.most_common()),
        dynamic=dynamic,
        loops=tuple((line, trips, last - first + 1) for first, last, trips, line in loops),
        unattributed_back_edges=stray,
    )


_TTIR_CONSTANT = re.compile(r"%(\w+) = arith\.constant (-?\d+) : i(?:32|64)")
_TTIR_FOR = re.compile(r"scf\.for %(\w+) = %(\w+) to %(\w+) step %(\w+)")
_SOURCE_FOR = re.compile(r"^\s*for\s+(\w+)\s+in\s+(?:tl\.)?(?:static_)?range\(")


def loop_trip_counts(kernel_fn: Callable, ttir: str) -> Callable[[str, int], int | None]:
    """A ``loop_trips(file, line)`` for :func:`parse_sass`: the trip count of the ``for``
    statement of ``kernel_fn`` at that line, read off the constant bounds of the matching
    ``scf.for`` in the Triton IR (the n-th loop over a variable in the source is the n-th
    ``scf.for`` over it in the IR). None for any other line, or a loop with runtime bounds."""
    source_file = os.path.realpath(inspect.getsourcefile(kernel_fn))
    lines, first_line = inspect.getsourcelines(kernel_fn)
    constants = {name: int(value) for name, value in _TTIR_CONSTANT.findall(ttir)}
    ir_loops: dict[str, list[int | None]] = {}
    for var, low, high, step in _TTIR_FOR.findall(ttir):
        var = re.sub(r"_\d+$", "", var)
        bounds = [constants.get(x) for x in (low, high, step)]
        trips = None
        if None not in bounds and bounds[2] > 0:
            trips = max(0, -(-(bounds[1] - bounds[0]) // bounds[2]))
        ir_loops.setdefault(var, []).append(trips)

    def loop_trips(file: str, line: int) -> int | None:
        if not file or os.path.realpath(file) != source_file:
            return None
        index = line - first_line
        if not 0 <= index < len(lines) or not (m := _SOURCE_FOR.match(lines[index])):
            return None
        var = m.group(1)
        ordinal = sum(
            1 for text in lines[:index] if (n := _SOURCE_FOR.match(text)) and n.group(1) == var
        )
        found = ir_loops.get(var, [])
        return found[ordinal] if ordinal < len(found) else None

    return loop_trips


# -- compile reports --------------------------------------------------------------------------


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


# -- device and host time ---------------------------------------------------------------------

#: Dependent DRAM round trips of one program, per kernel family: the loads, then the stores.
#: Continuous Tag reads its just-written state back for the observations (an L2 trip).
ROUND_TRIPS = {"classic": 1, "tag_discrete": 1, "tag_continuous": 2, "sampler": 1, "torch": 1}


@dataclass(frozen=True)
class KernelTime:
    """The device time of one launch and the term that sets it."""

    name: str
    bytes: float
    seconds: float
    bound: str  #: "memory", "issue", "latency" or "floor"
    terms: Mapping[str, float]


def kernel_time(
    name: str,
    nbytes: float,
    *,
    programs: int = 1,
    warps_per_program: int = 1,
    report: CompileReport | None = None,
    round_trips: int = 1,
    in_graph: bool = False,
    gpu: Gpu = H100,
) -> KernelTime:
    """Device time of a launch: the largest of

    * ``floor``: a tiny kernel's time (``graph_node_s`` inside a CUDA graph);
    * ``memory``: its bytes over HBM bandwidth x efficiency;
    * ``issue``: every warp's instructions (the SASS estimate) over the SMs' 4 schedulers;
    * ``latency``: waves of resident blocks x one program's time (its dependent DRAM trips
      plus its instructions at ``cycles_per_dependent_instruction``).

    The last two need a compile report (registers decide the blocks per SM)."""
    terms = {
        "floor": gpu.graph_node_s if in_graph else gpu.kernel_floor_s,
        "memory": nbytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency),
    }
    if report is not None and report.occupancy.blocks_per_sm > 0:
        instructions = report.sass.dynamic or report.sass.static
        warp_instructions = programs * warps_per_program * instructions
        terms["issue"] = warp_instructions / (gpu.sms * gpu.schedulers_per_sm * gpu.clock_hz)
        waves = -(-programs // (gpu.sms * report.occupancy.blocks_per_sm))
        program = (
            round_trips * gpu.dram_latency_s
            + instructions * gpu.cycles_per_dependent_instruction / gpu.clock_hz
        )
        terms["latency"] = waves * program
    bound = max(terms, key=terms.get)
    return KernelTime(name, nbytes, terms[bound], bound, MappingProxyType(terms))


@dataclass(frozen=True)
class StepPrediction:
    """A predicted step of a loop (host and device overlap: launches are asynchronous)."""

    label: str
    num_envs: int
    agents: int
    mode: str  #: "eager", "graph" or "device"
    host_s: float
    device_s: float
    kernels: tuple[KernelTime, ...]
    sync_s: float = 0.0  #: host reads: time the host and the device do not overlap

    @property
    def step_s(self) -> float:
        return max(self.host_s, self.device_s) + self.sync_s

    @property
    def steps_per_s(self) -> float:
        """Env steps per second: envs stepped per second (WarpDrive's unit)."""
        return self.num_envs / self.step_s

    @property
    def bound(self) -> str:
        if self.host_s >= self.device_s:
            return "host"
        return max(self.kernels, key=lambda k: k.seconds).bound


#: How a step's launches are issued (see :func:`predict_env_rate`).
MODES = ("eager", "direct", "graph", "device")


def _host_step(family: str, host: Host, mode: str = "eager") -> float:
    """Host seconds of one launcher call: its Python, the dispatch, the driver's launch."""
    if mode == "direct":
        return host.launcher_s[family] + host.compiled_launch_s + host.cuda_launch_s
    return host.step_s[family] + host.cuda_launch_s


def predict_env_rate(
    env: Any,
    *,
    mode: str = "eager",
    reset_fraction: float = 0.05,
    compile: bool = True,
    gpu: Gpu = H100,
    host: Host | None = None,
) -> StepPrediction:
    """Predicted env steps/s of the loop ``benchmarks/gpu_envs.py`` times on an H100::

        observ, reward, terminated, truncated = env.step(action, done)
        done = terminated | truncated

    one Triton launch and one torch op per step. ``mode``:

    * ``"eager"``: as the code is -- Python issues both launches every step, the kernel
      through Triton's ``JITFunction.run``;
    * ``"direct"``: the same with the kernel's ``CompiledKernel`` launched directly (a
      launcher change this model prices: Triton's dispatch replaced by the measured direct
      launch);
    * ``"graph"``: the step captured in a CUDA graph and replayed, one graph launch per step,
      kernels at the graph-node floor;
    * ``"device"``: no host cost at all -- the ceiling a fused, graph-captured rollout
      approaches.

    ``env`` may live on ``meta``. With ``compile``, the kernel is compiled for sm_90 for its
    issue and latency terms (cached); without, only bytes, floor and host count.
    """
    if mode not in MODES:
        raise ValueError(f"predict_env_rate(mode={mode!r}): one of {MODES}")
    host = host or HOST
    launch = capture_env_launch(env)
    report = report_for(launch) if compile else None
    family = _family(env)
    in_graph = mode in ("graph", "device")
    step = kernel_time(
        launch.name,
        launch_bytes(launch, reset_fraction),
        programs=launch.programs,
        warps_per_program=launch.num_warps,
        report=report,
        round_trips=ROUND_TRIPS[family],
        in_graph=in_graph,
        gpu=gpu,
    )
    flags = kernel_time("terminated | truncated", 3 * env.num_envs, in_graph=in_graph, gpu=gpu)
    host_s = {
        "eager": _host_step(family, host) + host.torch_op_s,
        "direct": _host_step(family, host, "direct") + host.torch_op_s,
        "graph": host.graph_replay_s,
        "device": 0.0,
    }[mode]
    return StepPrediction(
        label=type(env).__name__,
        num_envs=env.num_envs,
        agents=getattr(env, "num_agents", 1),
        mode=mode,
        host_s=host_s,
        device_s=step.seconds + flags.seconds,
        kernels=(step, flags),
    )


def predict_sampler_rate(
    rows: int,
    categories: int = 5,
    *,
    mode: str = "eager",
    compile: bool = True,
    gpu: Gpu = H100,
    host: Host | None = None,
) -> StepPrediction:
    """Predicted ``sample_categorical`` calls on ``[rows, categories]`` float32 logits
    (``num_envs`` of the result = ``rows``, so ``steps_per_s`` is actions/s)."""
    host = host or HOST
    launch = capture_sampler_launch(rows, categories)
    report = report_for(launch) if compile else None
    time_ = kernel_time(
        launch.name,
        launch_bytes(launch),
        programs=launch.programs,
        warps_per_program=launch.num_warps,
        report=report,
        round_trips=ROUND_TRIPS["sampler"],
        in_graph=mode in ("graph", "device"),
        gpu=gpu,
    )
    host_s = {
        "eager": _host_step("sampler", host),
        "direct": _host_step("sampler", host, "direct"),
        "graph": host.graph_replay_s,
        "device": 0.0,
    }
    return StepPrediction("sampler", rows, 1, mode, host_s[mode], time_.seconds, (time_,))


def launch_bound_until(
    make_env: Callable[[int], Any], mode: str = "eager", low: int = 1, high: int = 1 << 30
) -> int:
    """The smallest N at which ``predict_env_rate(make_env(N), mode=mode, compile=False)`` is
    no longer host-bound (bisection on powers of two, then on integers)."""

    def device_bound(n: int) -> bool:
        return predict_env_rate(make_env(n), mode=mode, compile=False).bound != "host"

    if device_bound(low):
        return low
    while not device_bound(high):
        if high >= 1 << 40:
            raise ValueError("launch_bound_until: host-bound at every size tried")
        high *= 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if device_bound(middle) else (middle, high)
    return high


# -- simulate() -------------------------------------------------------------------------------

#: aten ops that launch no kernel on a CUDA device (allocations, views, metadata).
_NO_KERNEL = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "view",
    "_unsafe_view", "reshape", "expand", "squeeze", "unsqueeze", "select", "slice", "t",
    "transpose", "permute", "as_strided", "alias", "detach", "lift_fresh", "unbind", "split",
    "split_with_sizes", "view_as", "_reshape_alias", "sym_size", "sym_stride", "sym_numel",
    "result_type", "is_same_size", "resize_", "set_",
    "scalar_tensor",  # a Python number wrapped as a 0-dim CPU tensor (torch.where(m, 0.0, x))
}  # fmt: skip
#: aten ops that read a result back to the host (the stream drains first).
_SYNC = {"nonzero", "_local_scalar_dense", "is_nonzero", "item", "masked_select", "unique"}


@dataclass(frozen=True)
class OpCount:
    """The work of one call, as a CUDA device would get it."""

    torch_launches: int  #: aten ops that launch at least one kernel
    triton_launches: int
    syncs: int
    torch_bytes: float  #: inputs + outputs of those ops
    triton_bytes: float
    ops: Mapping[str, int]  #: per op name


def count_simulate_ops(env: Any, reset_share: int = 20) -> OpCount:
    """The launches, host reads and bytes of one steady-state ``simulate()`` step (random
    actions, ``InGraphBatchEnv`` with its default finite checks) over ``env`` on the triton
    backend -- counted on the CPU: ``env`` (built with ``backend="torch"``) is switched to
    the triton code path with its kernel replaced by a stand-in that writes plausible outputs
    (every ``reset_share``-th row terminates, so the step after it has resets to do), and
    every aten op dispatched in the step is classified.

    Counts are per step, after two warm-up steps. A custom op that reads a tensor back
    (``batchenv::raise_if_nonfinite``) counts as one sync.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from batchenv.in_graph.algorithm import RandomAlgorithm
    from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
    from batchenv.in_graph.simulate import simulate

    module = sys.modules[type(env).__module__]
    kernel = module._step_kernel
    counts: Counter = Counter()
    state = {"counting": False, "torch_bytes": 0.0, "triton_bytes": 0.0}

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not state["counting"]:
                return out
            namespace = func.namespace
            name = func.__name__.split(".")[0]
            if namespace != "aten":
                counts[f"{namespace}::{name}"] += 1
                return out
            if name in _NO_KERNEL:
                return out
            counts[name] += 1
            tensors = [
                t
                for t in torch.utils._pytree.tree_leaves((args, kwargs, out))
                if isinstance(t, torch.Tensor)
            ]
            state["torch_bytes"] += sum(t.numel() * t.element_size() for t in tensors)
            return out

    class Stand_in:  # noqa: N801 -- a kernel stand-in
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                was, state["counting"] = state["counting"], False
                launch_ = Launch(kernel, _family(env), tuple(grid), args, kwargs)
                named = launch_.args
                named["observ_ptr"].zero_()
                if named.get("STEP"):
                    named["reward_ptr"].fill_(1.0)
                    done = named["terminated_ptr"]
                    done.zero_()
                    done.view(-1)[::reset_share] = True
                    named["truncated_ptr"].zero_()
                if was:
                    counts["triton kernel"] += 1
                    state["triton_bytes"] += launch_bytes(launch_, 1 / reset_share)
                state["counting"] = was

            return launch

    previous = env.backend
    env.backend = "triton"
    try:
        with mock.patch.object(module, "_step_kernel", Stand_in()), Counting():
            batch = InGraphBatchEnv(env)
            observation_space = env.single_observation_space if hasattr(env, "num_agents") else None
            algo = RandomAlgorithm(
                env.single_action_space, seed=0, observation_space=observation_space
            )
            simulate(batch, algo)
            simulate(batch, algo)
            state["counting"] = True
            simulate(batch, algo)
            state["counting"] = False
    finally:
        env.backend = previous
    triton = counts.pop("triton kernel", 0)
    customs = {k: v for k, v in counts.items() if "::" in k}
    syncs = sum(v for k, v in counts.items() if k in _SYNC) + customs.get(
        "batchenv::raise_if_nonfinite", 0
    )
    torch_launches = sum(v for k, v in counts.items() if "::" not in k)
    return OpCount(
        torch_launches=torch_launches,
        triton_launches=triton,
        syncs=syncs,
        torch_bytes=state["torch_bytes"],
        triton_bytes=state["triton_bytes"],
        ops=MappingProxyType(dict(counts)),
    )


def predict_simulate_rate(
    ops: OpCount, num_envs: int, count_envs: int, *, gpu: Gpu = H100, host: Host | None = None
) -> StepPrediction:
    """Predicted eager ``simulate()`` steps over ``num_envs`` rows from an :class:`OpCount`
    made at ``count_envs`` rows (bytes scale with the rows; launches and syncs do not). A
    host read drains the stream, so each sync adds ``Host.sync_s`` to the overlapped time."""
    host = host or HOST
    scale = num_envs / count_envs
    kernels = [
        kernel_time("torch ops", ops.torch_bytes * scale, gpu=gpu),
        kernel_time("triton kernels", ops.triton_bytes * scale, gpu=gpu),
    ]
    floors = (ops.torch_launches + ops.triton_launches) * gpu.kernel_floor_s
    device = max(floors, sum(k.seconds for k in kernels))
    triton_host = ops.triton_launches * _host_step("classic", host)
    host_s = ops.torch_launches * host.torch_op_s + triton_host
    return StepPrediction(
        "simulate()", num_envs, 1, "eager", host_s, device, tuple(kernels), ops.syncs * host.sync_s
    )


# -- host measurement -------------------------------------------------------------------------


class _StandInDriver:
    """Enough of Triton's CUDA driver for ``JITFunction.run`` to bind, specialise, compile
    for sm_90 and 'launch' (a no-op) on a machine without a GPU."""

    class utils:  # noqa: N801
        @staticmethod
        def load_binary(name, kernel, shared, device):
            return 1, 1, 64, 0, 1024  # module, function, n_regs, n_spills, max threads

        @staticmethod
        def get_device_properties(device):
            return {"max_shared_mem": 232448, "multiprocessor_count": 132, "warpSize": 32}

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")

    def launcher_cls(self, src, metadata):
        return lambda *args: None


def _call_s(fn: Callable[[], object], calls: int = 1000, rounds: int = 7) -> float:
    """Seconds per call of ``fn``: the best of ``rounds`` averages over ``calls`` calls (on
    a shared machine the least disturbed round is the closest to the call's own cost)."""
    fn()
    times = []
    for _ in range(rounds):
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - begin) / calls)
    return min(times)


def measure_host(calls: int = 1000, rounds: int = 7) -> dict[str, float]:
    """Seconds of one step call per env family (and one sampler call, and a direct
    ``CompiledKernel`` launch) on this CPU (:func:`_call_s`), through the real launchers and
    Triton's real dispatch, against :class:`_StandInDriver`; and each step call again with
    the kernel replaced by a no-op (``"<family> launcher only"``: batchenv's Python alone).
    Needs the kernels in compiled mode."""
    from triton.runtime import driver as driver_config

    if _triton.kernel_mode(sampler._sample_kernel) != "compiled":
        raise RuntimeError("measure_host: run with TRITON_INTERPRET unset")
    previous = driver_config._active
    driver_config.set_active(_StandInDriver())
    try:
        results = {}
        envs = {
            "classic": CartPole(2000, seed=0),
            "tag_discrete": DiscreteTag(2000, num_taggers=4, seed=0),
            "tag_continuous": ContinuousTag(2000, num_taggers=1, num_runners=4, seed=0),
        }
        for family, env in envs.items():
            env.backend = "triton"  # the launcher's code path; the kernels go to the stand-in
            step = functools.partial(
                env.step, zero_action(env), torch.zeros(env.num_envs, dtype=torch.bool)
            )
            results[family] = _call_s(step, calls, rounds)
            # The same call with the kernel a no-op stand-in: batchenv's own Python only.
            module = sys.modules[type(env).__module__]
            with mock.patch.object(module, "_step_kernel", _NoLaunch()):
                results[f"{family} launcher only"] = _call_s(step, calls, rounds)
        logits = torch.zeros(2000, 5, 5)
        out = torch.empty(2000, 5, dtype=torch.int64)
        rows = logits.reshape(-1, 5)
        flat = out.view(-1)
        sample = functools.partial(
            sampler.sample_categorical, logits=logits, seed=0, offset=1, out=out, validate=False
        )
        with mock.patch.object(sampler, "unavailable_reason", lambda kernel, device: None):
            results["sampler"] = _call_s(sample, calls, rounds)
            with mock.patch.object(sampler, "_sample_kernel", _NoLaunch()):
                results["sampler launcher only"] = _call_s(sample, calls, rounds)
        sampler.launch_sample(rows, flat, logits=True, seed=0, offset=0)
        compiled = next(iter(sampler._sample_kernel.device_caches[0][0].values()))
        recorder = _Recorder()
        with mock.patch.object(sampler, "_sample_kernel", recorder):
            sampler.launch_sample(rows, flat, logits=True, seed=0, offset=0)
        (grid, args, kwargs), *_ = recorder.calls
        launch = Launch(sampler._sample_kernel, "sampler", grid, args, kwargs)
        runner = compiled[(*grid, 1, 1)[:3]]
        bound = tuple(launch.args.values())
        results["compiled_launch"] = _call_s(lambda: runner(*bound), calls * 5, rounds)
        return results
    finally:
        driver_config._active = previous


# -- the report -------------------------------------------------------------------------------


def report_launches() -> list[Launch]:
    """The kernel configurations the compile report covers: every kernel, at the block sizes
    its launcher picks for small and large batches, for a step with resets (the common call)
    and for a reset alone."""
    launches = []
    for cls in (CartPole, Pendulum, MountainCarContinuous, Acrobot):
        for n in (16, 256, 1 << 20):
            launches.append(capture_env_launch(cls(n, device="meta", seed=0)))
        launches.append(capture_env_launch(cls(1 << 20, device="meta", seed=0), step=False))
        env64 = cls(1 << 20, device="meta", seed=0, dtype=torch.float64)
        launches.append(capture_env_launch(env64))
    for agents, full in ((5, True), (50, True), (200, False), (1000, False), (1000, True)):
        env = DiscreteTag(
            2000, num_taggers=agents - 1, full_observation=full, device="meta", seed=0
        )
        launches.append(capture_env_launch(env))
    launches.append(
        capture_env_launch(DiscreteTag(2000, num_taggers=4, device="meta", seed=0), step=False)
    )
    for taggers, runners, observed in ((1, 4, None), (5, 100, 10), (5, 100, None), (1, 49, 10)):
        env = ContinuousTag(
            2000,
            num_taggers=taggers,
            num_runners=runners,
            num_other_agents_observed=observed,
            device="meta",
            seed=0,
        )
        launches.append(capture_env_launch(env))
    for rows, categories in ((10_000, 5), (2_000_000, 5), (10_000, 11), (10_000, 1000)):
        launches.append(capture_sampler_launch(rows, categories))
    return launches


def _fmt_rate(rate: float) -> str:
    if rate >= 1e9:
        return f"{rate / 1e9:.2f}G"
    if rate >= 1e6:
        return f"{rate / 1e6:.2f}M"
    return f"{rate / 1e3:.0f}k"


def _fmt_s(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}" if seconds < 1e-3 else f"{seconds * 1e6:.0f}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def grid_occupancy(report: CompileReport, programs: int, gpu: Gpu = H100) -> float:
    """The occupancy the launch can reach with its grid: programs spread over every SM, at
    most the theoretical blocks per SM (a grid of 2,000 one-warp programs fills at most 16 of an
    SM's 64 warp slots, whatever the registers allow)."""
    per_sm = min(report.occupancy.blocks_per_sm, -(-programs // gpu.sms))
    return per_sm * report.num_warps / gpu.max_warps_per_sm


def compile_table(reports: list[tuple[Launch, CompileReport]]) -> str:
    rows = []
    for launch, r in reports:
        rows.append(
            [
                f"`{r.kernel}`",
                r.config,
                f"{launch.programs:,}",
                str(r.threads),
                str(r.regs),
                f"{r.spill_stores}/{r.spill_loads}",
                str(r.stack),
                str(r.smem),
                f"{r.occupancy.blocks_per_sm} ({r.occupancy.limiter})",
                f"{r.occupancy.fraction:.0%}",
                f"{grid_occupancy(r, launch.programs):.0%}",
                f"{r.sass.static:,}",
                f"{r.sass.dynamic:,}",
                ", ".join(r.findings) or "-",
            ]
        )
    return _table(
        [
            "kernel",
            "configuration",
            "programs",
            "threads",
            "regs",
            "spill st/ld B",
            "stack B",
            "smem B",
            "blocks/SM (limit)",
            "occupancy",
            "with this grid",
            "SASS",
            "executed/warp",
            "finding",
        ],
        rows,
    )


def mix_table(reports: list[tuple[Launch, CompileReport]]) -> str:
    classes = [
        "global memory",
        "shared memory",
        "local memory (spills)",
        "fp32",
        "fp64",
        "special functions (MUFU)",
        "integer",
        "conversions",
        "moves and selects",
        "warp shuffles",
        "barriers and convergence",
        "control flow",
        "constant loads",
        "uniform datapath",
    ]
    short = ["global", "shared", "local", "fp32", "fp64", "MUFU", "int", "cvt", "mov/sel",
             "shfl", "bar/conv", "branch", "const", "uniform"]  # fmt: skip
    rows, seen = [], set()
    for launch, r in reports:
        # A classic kernel's code does not depend on N once BLOCK is 256: one row for those.
        config = re.sub(r"^N=\d+ ", "", r.config) if launch.family == "classic" else r.config
        if (r.kernel, config) in seen:
            continue
        seen.add((r.kernel, config))
        other = r.sass.static - sum(r.sass.mix.get(c, 0) for c in classes)
        rows.append(
            [f"`{r.kernel}`", config] + [str(r.sass.mix.get(c, 0)) for c in classes] + [str(other)]
        )
    return _table(["kernel", "configuration", *short, "other"], rows)


def cartpole_table(sizes: list[int], sim: OpCount | None, sim_envs: int) -> str:
    """Predicted CartPole env steps/s over N, per launch mode (and eager ``simulate()``)."""
    rows = []
    for n in sizes:
        env = CartPole(n, device="meta", seed=0)
        preds = {mode: predict_env_rate(env, mode=mode) for mode in MODES}
        kernel = preds["eager"].kernels[0]
        row = [
            f"{n:,}",
            f"{kernel.bytes / n:.1f}",
            f"{_fmt_s(kernel.seconds)} ({kernel.bound})",
            *[f"{_fmt_rate(p.steps_per_s)} ({p.bound})" for p in preds.values()],
        ]
        if sim is not None:
            pred = predict_simulate_rate(sim, n, sim_envs)
            row.append(f"{_fmt_rate(pred.steps_per_s)} ({pred.bound})")
        rows.append(row)
    headers = ["N", "B/row", "step kernel us (bound)", "eager step", "direct launch"]
    headers += ["CUDA graph", "device only"]
    if sim is not None:
        headers.append("eager simulate()")
    return _table(headers, rows)


def tag_table(sizes: list[int]) -> str:
    """Predicted env steps/s of the Tag configurations of the anchors over the number of
    envs: eager launches, the compiled kernel launched directly, a CUDA-graph replay."""
    games = {
        "discrete x 5": lambda e: DiscreteTag(e, num_taggers=4, device="meta", seed=0),
        "discrete x 1,000 (partial obs)": lambda e: DiscreteTag(
            e, num_taggers=999, full_observation=False, device="meta", seed=0
        ),
        "continuous x 5": lambda e: ContinuousTag(
            e, num_taggers=1, num_runners=4, device="meta", seed=0
        ),
        "continuous x 105 (10 nearest)": lambda e: ContinuousTag(
            e,
            num_taggers=5,
            num_runners=100,
            num_other_agents_observed=10,
            device="meta",
            seed=0,
        ),
    }
    rows = []
    for label, make in games.items():
        for e in sizes:
            env = make(e)
            eager = predict_env_rate(env, mode="eager")
            direct = predict_env_rate(env, mode="direct")
            graph = predict_env_rate(env, mode="graph")
            kernel = eager.kernels[0]
            rows.append(
                [
                    label,
                    f"{e:,}",
                    f"{kernel.bytes / e / 1e3:.2f}",
                    f"{_fmt_s(kernel.seconds)} ({kernel.bound})",
                    f"{_fmt_rate(eager.steps_per_s)} ({eager.bound})",
                    f"{_fmt_rate(direct.steps_per_s)} ({direct.bound})",
                    f"{_fmt_rate(graph.steps_per_s)} ({graph.bound})",
                ]
            )
    return _table(
        [
            "game",
            "envs",
            "KB/env",
            "step kernel us (bound)",
            "eager",
            "direct launch",
            "CUDA graph",
        ],
        rows,
    )


def anchor_table() -> str:
    configs = [
        ("discrete", 2000, 5, DiscreteTag(2000, num_taggers=4, device="meta", seed=0)),
        (
            "discrete",
            2000,
            1000,
            DiscreteTag(2000, num_taggers=999, full_observation=False, device="meta", seed=0),
        ),
        (
            "continuous",
            2000,
            5,
            ContinuousTag(2000, num_taggers=1, num_runners=4, device="meta", seed=0),
        ),
        (
            "continuous",
            2000,
            105,
            ContinuousTag(
                2000,
                num_taggers=5,
                num_runners=100,
                num_other_agents_observed=10,
                device="meta",
                seed=0,
            ),
        ),  # fmt: skip
        ("cartpole", 2048, 1, CartPole(2048, device="meta", seed=0)),
    ]
    rows = []
    for game, e, a, env in configs:
        anchor = ANCHORS[(game, e, a)]
        preds = [predict_env_rate(env, mode=m) for m in MODES]
        kernel = preds[0].kernels[0]
        rows.append(
            [
                f"{game} {e:,} x {a:,}",
                f"{kernel.bytes / 1e6:.2f}",
                f"{_fmt_s(kernel.seconds)} ({kernel.bound})",
                _fmt_s(preds[0].host_s),
                *[f"{_fmt_rate(p.steps_per_s)} ({p.steps_per_s / anchor:.1f}x)" for p in preds],
                _fmt_rate(anchor),
            ]
        )
    for count, label in ((10_000, "sampler 2,000 x 5"), (2_000_000, "sampler 2,000 x 1,000")):
        preds = [predict_sampler_rate(count, 5, mode=m) for m in MODES]
        kernel = preds[0].kernels[0]
        anchor = ANCHORS[("sampler", 2000, 5)]
        ratio = count == 10_000
        rows.append(
            [
                label,
                f"{kernel.bytes / 1e6:.2f}",
                f"{_fmt_s(kernel.seconds)} ({kernel.bound})",
                _fmt_s(preds[0].host_s),
                *[
                    _fmt_rate(p.steps_per_s)
                    + (f" ({p.steps_per_s / anchor:.1f}x)" if ratio else "")
                    for p in preds
                ],
                _fmt_rate(anchor) if ratio else "-",
            ]
        )
    headers = ["config", "MB/step", "kernel us (bound)", "host us (eager)", "eager (x anchor)"]
    headers += ["direct launch", "CUDA graph", "device only", "anchor"]
    return _table(headers, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-compile", action="store_true", help="skip the compile reports")
    parser.add_argument(
        "--measure-host", action="store_true", help="re-measure the host costs on this machine"
    )
    args = parser.parse_args(argv)
    global HOST
    if args.measure_host:
        measured = measure_host()
        for name, seconds in measured.items():
            print(f"host: {name:<28} {seconds * 1e6:6.1f} us per call (this machine)")
        families = ("classic", "tag_discrete", "tag_continuous", "sampler")
        HOST = replace(
            HOST,
            step_s=MappingProxyType({k: measured[k] for k in families}),
            launcher_s=MappingProxyType({k: measured[f"{k} launcher only"] for k in families}),
            compiled_launch_s=measured["compiled_launch"],
        )
    host_s = ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in HOST.step_s.items())
    print(
        f"model: {H100.name}, HBM {H100.hbm_bytes_per_s / 1e12:.2f} TB/s x "
        f"{H100.hbm_efficiency:.0%}; host per step call: {host_s}"
    )
    if not args.no_compile:
        reports = []
        for launch in report_launches():
            begin = time.perf_counter()
            reports.append((launch, compile_report(launch)))
            print(f"  compiled {launch.name} {launch.describe()} "
                  f"({time.perf_counter() - begin:.1f} s)", flush=True)  # fmt: skip
        print("\n## Compile reports (sm_90)\n")
        print(compile_table(reports))
        print("\n## SASS instruction mix (static counts)\n")
        print(mix_table(reports))
        print("\n## Loops (source line: trips x body instructions)\n")
        for _, r in reports:
            if r.sass.loops:
                loops = ", ".join(f"line {ln}: {t} x {b}" for ln, t, b in r.sass.loops)
                print(f"- `{r.kernel}` {r.config}: {loops}")
    sim_envs = 4096
    sim = count_simulate_ops(CartPole(sim_envs, seed=0))
    print(
        f"\n## simulate() over CartPole, per step: {sim.torch_launches} torch launches, "
        f"{sim.triton_launches} Triton launches, {sim.syncs} host syncs\n"
    )
    print(", ".join(f"{k} {v}" for k, v in sorted(sim.ops.items())))
    print("\n## CartPole on an H100: predicted env steps/s\n")
    print(cartpole_table([1 << k for k in range(10, 25, 2)], sim, sim_envs))
    for mode in ("eager", "direct", "graph"):
        n = launch_bound_until(lambda n: CartPole(n, device="meta", seed=0), mode=mode)
        print(f"\nCartPole {mode} step stops being launch-bound at N = {n:,}")
    print("\n## Tag on an H100: predicted env steps/s over the number of envs\n")
    print(tag_table([100, 500, 2000, 10_000, 100_000]))
    print("\n## Against the anchors (env steps/s; sampler: actions/s)\n")
    print(anchor_table())


if __name__ == "__main__":
    main()
