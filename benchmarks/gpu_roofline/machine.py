"""The machine the model is for: the GPU's published limits and this model's assumptions
(:class:`Gpu`), the host's cost of a call (:class:`Host`), and the published figures the
predictions are put next to (:data:`ANCHORS`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType


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
