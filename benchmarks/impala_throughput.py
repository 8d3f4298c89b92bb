"""IMPALA throughput and learning, sync vs async mode, measured the way MonoBeast measures it.

MonoBeast reports agent steps per second: the steps the learner consumed (T * B per learner
step) over wall-clock time, printed every few seconds; we take the steady state (after a
warm-up) over ``--seconds`` (default 120, as in the anchor runs), with MonoBeast's default
flags: unroll 80, batch 8, 2 learner threads, RMSprop 4.8e-4, entropy 6e-4, 2 actors.
``--envs`` is the total env count, split over the 2 actors (sync: stepped in the actor
processes; async: in one batchenv worker per actor thread, inference batched in-process).

    flock /tmp/bench.lock python benchmarks/impala_throughput.py --env cartpole
    flock /tmp/bench.lock python benchmarks/impala_throughput.py --env pong --seconds 120
    # issue 7: both modes at 8, 32 and 64 envs, on both envs
    flock /tmp/bench.lock python benchmarks/impala_throughput.py --env all \
        --modes sync,async --envs 8,32,64 --seconds 45 --warmup 10
    # on a GPU machine: learning (and async inference) on the GPU
    python benchmarks/impala_throughput.py --env all --modes sync,async --device cuda

Anchors recorded on this machine (TorchBeast MonoBeast, 2 actors): CartPole-v1 with a 2x64
MLP ~17.5k SPS, mean return rising ~60 -> 310-410 in 2 minutes; PongNoFrameskip-v4 with the
shallow Atari net ~1.0k SPS. Targets: >= 1.5x those SPS; CartPole mean return >= 450 in
2 minutes. The script prints SPS, the ratio to the anchor, the return curve, and saves the
curve as a PNG under benchmarks/curves/.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ANCHORS = {
    "cartpole": {"env": "CartPole-v1", "sps": 17_500.0, "return_2min": (310.0, 410.0)},
    "pong": {"env": "PongNoFrameskip-v4", "sps": 1_000.0, "return_2min": None},
}
TARGET_RATIO = 1.5  # sync vs MonoBeast (issue 6)
TARGET_ASYNC_RATIO = 2.0  # async vs MonoBeast (issue 7)
TARGET_ASYNC_OVER_SYNC = 1.3  # async vs sync at 32+ envs (issue 7)
TARGET_CARTPOLE_RETURN = 450.0
DEFAULT_ENVS = {"cartpole": 64, "pong": 8}


def run(name: str, mode: str, num_envs: int, args: argparse.Namespace) -> dict:
    from batchenv.algorithms.impala.actor_pool import prestart
    from batchenv.algorithms.impala.async_mode import AsyncTrainer
    from batchenv.algorithms.impala.config import ImpalaConfig
    from batchenv.algorithms.impala.sync import SyncTrainer
    from batchenv.algorithms.impala.trainer import resolve_device
    from batchenv.run_dir import RunDirectory

    anchor = ANCHORS[name]
    if num_envs % args.num_actors:
        raise SystemExit(f"--envs {num_envs} is not a multiple of --num-actors {args.num_actors}")
    config = ImpalaConfig(
        env=anchor["env"],
        mode=mode,
        num_actors=args.num_actors,
        envs_per_actor=num_envs // args.num_actors,
        env_workers=args.async_env_workers if mode == "async" else 0,
        unroll_length=80,
        batch_size=8,
        num_learner_threads=2,
        hidden_sizes=(64, 64),
        total_steps=args.total_steps or (6_000_000 if name == "cartpole" else 2_000_000),
        log_interval=5.0,
        torch_threads=args.torch_threads,
        precision=args.precision,
        device=args.device,
        seed=args.seed,
    )
    prestart()  # the fork server imports torch once, before the clock starts
    workdir = Path(tempfile.mkdtemp(prefix=f"impala-bench-{name}-"))
    samples: list[tuple[float, int]] = []
    with RunDirectory(workdir, "impala", config, seed=config.seed, env_id=config.env) as run:
        trainer = (AsyncTrainer if mode == "async" else SyncTrainer)(config, run_dir=run)
        started = time.monotonic()

        finished = threading.Event()

        def watch() -> None:
            while time.monotonic() - started < args.seconds and not finished.is_set():
                samples.append((time.monotonic() - started, trainer.step))
                time.sleep(0.5)
            samples.append((time.monotonic() - started, trainer.step))
            trainer.stop()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            result = trainer.train()
        finally:
            finished.set()
            watcher.join()
        with open(run.logger.csv_path, newline="") as file:
            rows = list(csv.DictReader(file))
    curve = [
        (float(r["wall_time"]), int(r["step"]), float(r["mean_score"]))
        for r in rows
        if r.get("mean_score")
    ]
    # Steady state: from the first sample after the warm-up to the last one.
    warm = next((s for s in samples if s[0] >= args.warmup and s[1] > 0), samples[0])
    end = samples[-1]
    sps = (end[1] - warm[1]) / max(end[0] - warm[0], 1e-9)
    return {
        "name": name,
        "mode": mode,
        "num_envs": num_envs,
        "env": config.env,
        "config": {
            "num_actors": config.num_actors,
            "envs_per_actor": config.envs_per_actor,
            "unroll_length": config.unroll_length,
            "batch_size": config.batch_size,
            "num_learner_threads": config.num_learner_threads,
            "total_steps": config.total_steps,
            "precision": config.precision,
            "device": str(resolve_device(config.device)),
            "model": "2x64 MLP" if name == "cartpole" else "AtariNet (shallow)",
        },
        "seconds": round(end[0], 1),
        "steps": result.steps,
        "steady_sps": round(sps, 1),
        "anchor_sps": anchor["sps"],
        "ratio": round(sps / anchor["sps"], 2),
        "curve": curve,
        "final_return": curve[-1][2] if curve else None,
        "best_return": max((c[2] for c in curve), default=None),
        "actor_restarts": result.actor_restarts,
        "run_dir": str(workdir),
    }


def return_at(report: dict, steps: int) -> float | None:
    """The logged mean return at the last row with at most ``steps`` steps."""
    before = [c[2] for c in report["curve"] if c[1] <= steps]
    return before[-1] if before else None


def plot(reports: list[dict], path: Path) -> None:
    """Return against agent steps for every run on one env (the learning comparison)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for report in reports:
        steps = [c[1] for c in report["curve"]]
        returns = [c[2] for c in report["curve"]]
        style = "-" if report["mode"] == "async" else "--"
        axes.plot(
            steps,
            returns,
            style,
            marker="o",
            markersize=2,
            label=f"{report['mode']} {report['num_envs']} envs: {report['steady_sps']:,.0f} SPS",
        )
    if reports[0]["name"] == "cartpole":
        axes.axhline(TARGET_CARTPOLE_RETURN, color="green", linestyle=":", label="450")
    axes.set_xlabel("agent steps")
    axes.set_ylabel("mean episode return (per 5 s)")
    axes.set_title(f"batchenv IMPALA on {reports[0]['env']}")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _print_run(report: dict, args: argparse.Namespace) -> None:
    config = report["config"]
    print(
        f"\n{report['env']} {report['mode']} ({config['model']}, {args.num_actors} actors x "
        f"{config['envs_per_actor']} envs, T=80, B=8, 2 learner threads, "
        f"{config['precision']}, {config['device']}):"
    )
    target = TARGET_ASYNC_RATIO if report["mode"] == "async" else TARGET_RATIO
    print(
        f"  steady SPS {report['steady_sps']:,.0f} over {report['seconds']:.0f} s "
        f"(warm-up {args.warmup:.0f} s left out); MonoBeast {report['anchor_sps']:,.0f}: "
        f"ratio {report['ratio']:.2f}x (target {target}x)"
    )
    print("  return curve (seconds, steps, mean return):")
    for seconds, steps, mean in report["curve"]:
        print(f"    {seconds:6.1f} s {steps:>10,d} {mean:8.1f}")
    if report["name"] == "cartpole":
        reached = next((c[0] for c in report["curve"] if c[2] >= TARGET_CARTPOLE_RETURN), None)
        print(
            f"  mean return >= {TARGET_CARTPOLE_RETURN:.0f}: "
            + (f"reached at {reached:.0f} s" if reached is not None else "not reached")
            + "; MonoBeast: 310-410 at 2 min"
        )


def _print_comparison(reports: list[dict]) -> None:
    """async vs sync per env count, SPS and return at the steps both reached."""
    by_key = {(r["name"], r["num_envs"], r["mode"]): r for r in reports}
    rows = sorted({(r["name"], r["num_envs"]) for r in reports})
    if not any((n, e, "sync") in by_key and (n, e, "async") in by_key for n, e in rows):
        return
    print("\nsync vs async (SPS; mean return at the steps both runs reached):")
    print("  env       envs   sync SPS  async SPS  async/sync  async/MonoBeast  returns s / a")
    for name, envs in rows:
        sync, fast = by_key.get((name, envs, "sync")), by_key.get((name, envs, "async"))
        if sync is None or fast is None:
            continue
        common = min(sync["steps"], fast["steps"])
        returns = [return_at(r, common) for r in (sync, fast)]
        shown = " / ".join("-" if v is None else f"{v:.1f}" for v in returns)
        print(
            f"  {name:8s} {envs:5d} {sync['steady_sps']:10,.0f} {fast['steady_sps']:10,.0f} "
            f"{fast['steady_sps'] / max(sync['steady_sps'], 1e-9):10.2f}x "
            f"{fast['ratio']:14.2f}x   {shown} (at {common:,} steps)"
        )
    print(
        f"  targets: async >= {TARGET_ASYNC_RATIO}x MonoBeast; async >= "
        f"{TARGET_ASYNC_OVER_SYNC}x sync at 32+ envs; returns no worse at equal steps"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=["cartpole", "pong", "all"], default="cartpole")
    parser.add_argument("--modes", default="sync", help="comma-separated: sync, async")
    parser.add_argument(
        "--envs",
        default=None,
        help="comma-separated total env counts (default: 64 for CartPole, 8 for Pong)",
    )
    parser.add_argument("--seconds", type=float, default=120.0, help="wall-clock per run")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds left out of SPS")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument(
        "--total-steps",
        type=int,
        default=None,
        help="learning-rate decay horizon (default 6M CartPole, 2M Pong)",
    )
    parser.add_argument(
        "--async-env-workers",
        type=int,
        default=1,
        help="env worker processes per async actor",
    )
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="model forward precision (bf16: torch.autocast; pays on AVX512-BF16/AMX CPUs, GPUs)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="learner (and async inference) device: cpu, cuda, cuda:N or auto",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--curves", default=str(Path(__file__).parent / "curves"))
    parser.add_argument("--json", default=None, help="also write the reports here")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("sync", "async") for m in modes):
        parser.error(f"--modes takes sync and/or async, got {args.modes!r}")
    names = ["cartpole", "pong"] if args.env == "all" else [args.env]
    reports = []
    for name in names:
        if name == "pong":
            try:
                import ale_py  # noqa: F401
            except ImportError:
                print("pong: skipped, ale-py is not installed (pip install 'batchenv[atari]')")
                continue
        sizes = [int(n) for n in args.envs.split(",")] if args.envs else [DEFAULT_ENVS[name]]
        runs = []
        for num_envs in sizes:
            for mode in modes:
                report = run(name, mode, num_envs, args)
                _print_run(report, args)
                runs.append(report)
        png = Path(args.curves) / f"impala_{'_'.join(modes)}_{name}.png"
        plot(runs, png)
        print(f"  curves: {png}")
        reports.extend(runs)
    _print_comparison(reports)
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
