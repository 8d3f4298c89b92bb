"""The roofline model: the device time of a launch (:func:`kernel_time`), and the env
steps per second of a step loop (:func:`predict_env_rate`) or of sampler calls
(:func:`predict_sampler_rate`), host and device overlapping."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .launches import capture_env_launch, capture_sampler_launch, kernel_family, launch_bytes
from .machine import H100, HOST, Gpu, Host
from .sm90 import CompileReport, report_for

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


def host_step(family: str, host: Host, mode: str = "eager") -> float:
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
    family = kernel_family(env)
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
        "eager": host_step(family, host) + host.torch_op_s,
        "direct": host_step(family, host, "direct") + host.torch_op_s,
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
        "eager": host_step("sampler", host),
        "direct": host_step("sampler", host, "direct"),
        "graph": host.graph_replay_s,
        "device": 0.0,
    }
    return StepPrediction("sampler", rows, 1, mode, host_s[mode], time_.seconds, (time_,))


def launch_bound_until(
    make_env: Callable[[int], Any],
    mode: str = "eager",
    low: int = 1,
    high: int = 1 << 30,
    host: Host | None = None,
) -> int:
    """The smallest N at which ``predict_env_rate(make_env(N), mode=mode, compile=False,
    host=host)`` is no longer host-bound (bisection on powers of two, then on integers)."""

    def device_bound(n: int) -> bool:
        prediction = predict_env_rate(make_env(n), mode=mode, compile=False, host=host)
        return prediction.bound != "host"

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
