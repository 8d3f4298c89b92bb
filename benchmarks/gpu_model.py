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
  real launcher passes (``bytes_per_step``), the launches of a step and of a
  ``simulate()`` step (``count_simulate_ops``), and H100 figures give the device time of
  a step; the host time of a step call is the larger term for small batches.
* **Measured here:** the host time of a step call -- the launcher's Python and Triton's
  dispatch (``JITFunction.run``), run against a stand-in CUDA driver that compiles for sm_90
  and launches nothing (``measure_host``). Only the driver's own launch call is assumed.

Every assumption is a field of ``Gpu`` or ``Host`` (``gpu_roofline/machine.py``), with its
source. docs/gpu.md holds the tables this script prints and what they predict.

    python benchmarks/gpu_model.py                  # reports + predictions (~3 min cold, 2 cores)
    python benchmarks/gpu_model.py --no-compile     # predictions without the compile reports
    python benchmarks/gpu_model.py --measure-host   # re-measure the host costs on this machine

``benchmarks/gpu_envs.py`` imports :func:`predict_env_rate` and :func:`predict_sampler_rate`
from here for its "predicted" column, so the first GPU run checks the model in one command.
The model itself is the package ``benchmarks/gpu_roofline/`` (one module per concern); this
file is its command line.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from types import MappingProxyType

from batchenv.kernels import CartPole

try:
    from benchmarks import gpu_roofline as model
    from benchmarks.gpu_roofline import tables
except ModuleNotFoundError as error:  # run as a script: this folder is on sys.path
    if error.name != "benchmarks":
        raise
    import gpu_roofline as model
    from gpu_roofline import tables

# What benchmarks/gpu_envs.py takes from here for its "predicted" column.
gpu_for = model.gpu_for
predict_env_rate = model.predict_env_rate
predict_sampler_rate = model.predict_sampler_rate


def measured_host(host: model.Host) -> model.Host:
    """``host`` with its measured fields re-measured on this machine (and printed)."""
    measured = model.measure_host()
    for name, seconds in measured.items():
        print(f"host: {name:<28} {seconds * 1e6:6.1f} us per call (this machine)")
    families = ("classic", "tag_discrete", "tag_continuous", "sampler")
    return replace(
        host,
        step_s=MappingProxyType({k: measured[k] for k in families}),
        launcher_s=MappingProxyType({k: measured[f"{k} launcher only"] for k in families}),
        compiled_launch_s=measured["compiled_launch"],
    )


def print_compile_reports() -> None:
    """Compile every configuration of :func:`tables.report_launches` for sm_90 and print the
    compile, SASS-mix and loop tables."""
    reports = []
    for launch in tables.report_launches():
        begin = time.perf_counter()
        reports.append((launch, model.compile_report(launch)))
        print(f"  compiled {launch.name} {launch.describe()} "
              f"({time.perf_counter() - begin:.1f} s)", flush=True)  # fmt: skip
    print("\n## Compile reports (sm_90)\n")
    print(tables.compile_table(reports))
    print("\n## SASS instruction mix (static counts)\n")
    print(tables.mix_table(reports))
    print("\n## Loops (source line: trips x body instructions)\n")
    for _, r in reports:
        if r.sass.loops:
            loops = ", ".join(f"line {ln}: {t} x {b}" for ln, t, b in r.sass.loops)
            print(f"- `{r.kernel}` {r.config}: {loops}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-compile", action="store_true", help="skip the compile reports")
    parser.add_argument(
        "--measure-host", action="store_true", help="re-measure the host costs on this machine"
    )
    args = parser.parse_args(argv)
    host = measured_host(model.HOST) if args.measure_host else model.HOST
    gpu = model.H100
    host_s = ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in host.step_s.items())
    print(
        f"model: {gpu.name}, HBM {gpu.hbm_bytes_per_s / 1e12:.2f} TB/s x "
        f"{gpu.hbm_efficiency:.0%}; host per step call: {host_s}"
    )
    if not args.no_compile:
        print_compile_reports()
    sim_envs = 4096
    sim = model.count_simulate_ops(CartPole(sim_envs, seed=0))
    print(
        f"\n## simulate() over CartPole, per step: {sim.torch_launches} torch launches, "
        f"{sim.triton_launches} Triton launches, {sim.syncs} host syncs\n"
    )
    print(", ".join(f"{k} {v}" for k, v in sorted(sim.ops.items())))
    print("\n## CartPole on an H100: predicted env steps/s\n")
    print(tables.cartpole_table([1 << k for k in range(10, 25, 2)], sim, sim_envs, host))
    for mode in ("eager", "direct", "graph"):
        n = model.launch_bound_until(
            lambda n: CartPole(n, device="meta", seed=0), mode=mode, host=host
        )
        print(f"\nCartPole {mode} step stops being launch-bound at N = {n:,}")
    print("\n## Tag on an H100: predicted env steps/s over the number of envs\n")
    print(tables.tag_table([100, 500, 2000, 10_000, 100_000], host))
    print("\n## Against the anchors (env steps/s; sampler: actions/s)\n")
    print(tables.anchor_table(host))


if __name__ == "__main__":
    main()
