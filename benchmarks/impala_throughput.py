"""IMPALA synchronous-mode throughput and learning, measured the way MonoBeast measures it.

MonoBeast reports agent steps per second: the steps the learner consumed (T * B per learner
step) over wall-clock time, printed every few seconds; we take the steady state (after a
warm-up) over ``--seconds`` (default 120, as in the anchor runs), with MonoBeast's default
flags: unroll 80, batch 8, 2 learner threads, RMSprop 4.8e-4, entropy 6e-4, 2 actors.

    flock /tmp/bench.lock python benchmarks/impala_throughput.py --env cartpole
    flock /tmp/bench.lock python benchmarks/impala_throughput.py --env pong --seconds 120

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
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ANCHORS = {
    "cartpole": {"env": "CartPole-v1", "sps": 17_500.0, "return_2min": (310.0, 410.0)},
    "pong": {"env": "PongNoFrameskip-v4", "sps": 1_000.0, "return_2min": None},
}
TARGET_RATIO = 1.5
TARGET_CARTPOLE_RETURN = 450.0


def run(name: str, args: argparse.Namespace) -> dict:
    from batchenv.algorithms.impala.actor_pool import prestart
    from batchenv.algorithms.impala.config import ImpalaConfig
    from batchenv.algorithms.impala.sync import SyncTrainer
    from batchenv.run_dir import RunDirectory

    anchor = ANCHORS[name]
    envs_per_actor = args.envs_per_actor or (32 if name == "cartpole" else 4)
    config = ImpalaConfig(
        env=anchor["env"],
        num_actors=args.num_actors,
        envs_per_actor=envs_per_actor,
        unroll_length=80,
        batch_size=8,
        num_learner_threads=2,
        hidden_sizes=(64, 64),
        total_steps=args.total_steps or (6_000_000 if name == "cartpole" else 2_000_000),
        log_interval=5.0,
        torch_threads=args.torch_threads,
        seed=args.seed,
    )
    prestart()  # the fork server imports torch once, before the clock starts
    workdir = Path(tempfile.mkdtemp(prefix=f"impala-bench-{name}-"))
    samples: list[tuple[float, int]] = []
    with RunDirectory(workdir, "impala", config, seed=config.seed, env_id=config.env) as run:
        trainer = SyncTrainer(config, run_dir=run)
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
        "env": config.env,
        "config": {
            "num_actors": config.num_actors,
            "envs_per_actor": config.envs_per_actor,
            "unroll_length": config.unroll_length,
            "batch_size": config.batch_size,
            "num_learner_threads": config.num_learner_threads,
            "total_steps": config.total_steps,
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


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seconds = [c[0] for c in report["curve"]]
    returns = [c[2] for c in report["curve"]]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(seconds, returns, marker="o", markersize=3, label="batchenv IMPALA sync")
    if report["name"] == "cartpole":
        axes.axhline(TARGET_CARTPOLE_RETURN, color="green", linestyle="--", label="target 450")
        axes.errorbar(
            [120.0],
            [360.0],
            yerr=[[50.0], [50.0]],
            fmt="s",
            color="grey",
            capsize=4,
            label="MonoBeast at 2 min: 310-410",
        )
    axes.set_xlabel("wall-clock seconds")
    axes.set_ylabel("mean episode return (per 5 s)")
    axes.set_title(
        f"IMPALA sync on {report['env']}: {report['steady_sps']:,.0f} SPS "
        f"({report['ratio']:.2f}x MonoBeast)"
    )
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=["cartpole", "pong", "all"], default="cartpole")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall-clock per env")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds left out of SPS")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument(
        "--envs-per-actor", type=int, default=None, help="default: 32 for CartPole, 4 for Pong"
    )
    parser.add_argument(
        "--total-steps",
        type=int,
        default=None,
        help="learning-rate decay horizon (default 6M CartPole, 2M Pong)",
    )
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--curves", default=str(Path(__file__).parent / "curves"))
    parser.add_argument("--json", default=None, help="also write the reports here")
    args = parser.parse_args(argv)
    names = ["cartpole", "pong"] if args.env == "all" else [args.env]
    reports = []
    for name in names:
        if name == "pong":
            try:
                import ale_py  # noqa: F401
            except ImportError:
                print("pong: skipped, ale-py is not installed (pip install 'batchenv[atari]')")
                continue
        report = run(name, args)
        reports.append(report)
        png = Path(args.curves) / f"impala_sync_{name}.png"
        plot(report, png)
        print(
            f"\n{report['env']} ({report['config']['model']}, {args.num_actors} actors x "
            f"{report['config']['envs_per_actor']} envs, T=80, B=8, 2 learner threads):"
        )
        print(
            f"  steady SPS {report['steady_sps']:,.0f} over {report['seconds']:.0f} s "
            f"(warm-up {args.warmup:.0f} s left out); MonoBeast {report['anchor_sps']:,.0f}: "
            f"ratio {report['ratio']:.2f}x (target {TARGET_RATIO}x)"
        )
        print("  return curve (seconds, steps, mean return):")
        for seconds, steps, mean in report["curve"]:
            print(f"    {seconds:6.1f} s {steps:>10,d} {mean:8.1f}")
        if name == "cartpole":
            reached = next((c[0] for c in report["curve"] if c[2] >= TARGET_CARTPOLE_RETURN), None)
            print(
                f"  mean return >= {TARGET_CARTPOLE_RETURN:.0f}: "
                + (f"reached at {reached:.0f} s" if reached is not None else "not reached")
                + "; MonoBeast: 310-410 at 2 min"
            )
        print(f"  curve: {png}")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
