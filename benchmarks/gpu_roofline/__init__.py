"""The GPU row on paper: sm_90 compile reports and a roofline model of batchenv's Triton
kernels, made on a machine without a GPU (``benchmarks/gpu_model.py`` prints them;
docs/gpu.md holds the tables and what they predict).

One concern per module: :mod:`.machine` (the GPU and host figures, every assumption with
its source), :mod:`.launches` (capturing a launcher's kernel launch, its HBM bytes),
:mod:`.sass` and :mod:`.sm90` (compile reports and occupancy), :mod:`.predict` (kernel and
step times), :mod:`.simulate_ops` (the launches and host reads of a ``simulate()`` step),
:mod:`.host_timing` (the host time of a step call, measured) and :mod:`.tables`.
"""

from .host_timing import measure_host
from .launches import (
    ROLES,
    Launch,
    Traffic,
    bytes_per_step,
    capture_env_launch,
    capture_sampler_launch,
    kernel_family,
    launch_bytes,
    traffic,
    zero_action,
)
from .machine import ANCHORS, H100, H200, HOST, TARGET, Gpu, Host, gpu_for
from .predict import (
    MODES,
    ROUND_TRIPS,
    KernelTime,
    StepPrediction,
    kernel_time,
    launch_bound_until,
    predict_env_rate,
    predict_sampler_rate,
)
from .sass import SASS_CLASSES, SassSummary, loop_trip_counts, parse_sass, sass_class
from .simulate_ops import OpCount, count_simulate_ops, predict_simulate_rate
from .sm90 import (
    CompileReport,
    Occupancy,
    compile_report,
    compile_sm90,
    grid_occupancy,
    occupancy,
    report_for,
)

__all__ = [
    "ANCHORS",
    "H100",
    "H200",
    "HOST",
    "MODES",
    "ROLES",
    "ROUND_TRIPS",
    "SASS_CLASSES",
    "TARGET",
    "CompileReport",
    "Gpu",
    "Host",
    "KernelTime",
    "Launch",
    "Occupancy",
    "OpCount",
    "SassSummary",
    "StepPrediction",
    "Traffic",
    "bytes_per_step",
    "capture_env_launch",
    "capture_sampler_launch",
    "compile_report",
    "compile_sm90",
    "count_simulate_ops",
    "gpu_for",
    "grid_occupancy",
    "kernel_family",
    "kernel_time",
    "launch_bound_until",
    "launch_bytes",
    "loop_trip_counts",
    "measure_host",
    "occupancy",
    "parse_sass",
    "predict_env_rate",
    "predict_sampler_rate",
    "predict_simulate_rate",
    "report_for",
    "sass_class",
    "traffic",
    "zero_action",
]
