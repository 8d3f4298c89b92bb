"""The tables ``benchmarks/gpu_model.py`` prints (docs/gpu.md holds them): the kernel
configurations the compile report covers, and the compile, SASS-mix, CartPole, Tag and
anchor tables."""

from __future__ import annotations

import re

import torch

from batchenv.kernels import (
    Acrobot,
    CartPole,
    ContinuousTag,
    DiscreteTag,
    MountainCarContinuous,
    Pendulum,
)

from .launches import Launch, capture_env_launch, capture_sampler_launch
from .machine import ANCHORS, HOST, Host
from .predict import MODES, predict_env_rate, predict_sampler_rate
from .simulate_ops import OpCount, predict_simulate_rate
from .sm90 import CompileReport, grid_occupancy


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


def compile_table(reports: list[tuple[Launch, CompileReport]]) -> str:
    """One row per kernel configuration: registers, spills, occupancy, SASS size, findings."""
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
    """The static SASS instruction count per class, one row per distinct kernel code."""
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


def cartpole_table(sizes: list[int], sim: OpCount | None, sim_envs: int, host: Host = HOST) -> str:
    """Predicted CartPole env steps/s over N, per launch mode (and eager ``simulate()``)."""
    rows = []
    for n in sizes:
        env = CartPole(n, device="meta", seed=0)
        preds = {mode: predict_env_rate(env, mode=mode, host=host) for mode in MODES}
        kernel = preds["eager"].kernels[0]
        row = [
            f"{n:,}",
            f"{kernel.bytes / n:.1f}",
            f"{_fmt_s(kernel.seconds)} ({kernel.bound})",
            *[f"{_fmt_rate(p.steps_per_s)} ({p.bound})" for p in preds.values()],
        ]
        if sim is not None:
            pred = predict_simulate_rate(sim, n, sim_envs, host=host)
            row.append(f"{_fmt_rate(pred.steps_per_s)} ({pred.bound})")
        rows.append(row)
    headers = ["N", "B/row", "step kernel us (bound)", "eager step", "direct launch"]
    headers += ["CUDA graph", "device only"]
    if sim is not None:
        headers.append("eager simulate()")
    return _table(headers, rows)


def tag_table(sizes: list[int], host: Host = HOST) -> str:
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
            eager = predict_env_rate(env, mode="eager", host=host)
            direct = predict_env_rate(env, mode="direct", host=host)
            graph = predict_env_rate(env, mode="graph", host=host)
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


def anchor_table(host: Host = HOST) -> str:
    """Predicted rates of the anchors' configurations in every mode, and the ratio to each."""
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
        preds = [predict_env_rate(env, mode=m, host=host) for m in MODES]
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
        preds = [predict_sampler_rate(count, 5, mode=m, host=host) for m in MODES]
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
