"""BatchPPO learning benchmark (not CI): does it reach the targets of issue 5 §3?

    flock /tmp/bench.lock python benchmarks/learning_batchppo.py cartpole
    flock /tmp/bench.lock python benchmarks/learning_batchppo.py pendulum --max-minutes 10
    python benchmarks/learning_batchppo.py cheetah --seeds 0 1 2 --full # needs mujoco; ~1 h

Tasks (the preset of the same name, batch-ppo v1.4 values, plus the task's own settings;
``--preset-only`` drops those, ``--set`` adds more):

    cartpole  CartPole-v1      eval return >= 475   within 200k training env steps
    pendulum  Pendulum-v1      eval return >= -200  within 1M
                               learning_rate=1e-3 gae_lambda=0.95 discount=0.9
    cheetah   HalfCheetah-v5   eval return >= 2000  after 1M (3 seeds)
                               learning_rate=3e-4 gae_lambda=0.95 minibatches=5

The v1.4 values are slow on the two continuous tasks at this budget: Pendulum's best eval
was -580 after 880k steps, HalfCheetah's 1754 after 1M (benchmarks/RESULTS.md). Both
settings keep the algorithm (KL penalty, cutoff, 25 epochs, 30 agents) and tune only the
step size, the advantage estimator and, for HalfCheetah, the number of gradient steps.

Each run trains with :func:`batchenv.algorithms.batchppo.train` into
``benchmarks/out/learning_batchppo/<task>-seed<k>/`` and stops at the target (unless
``--full``), at the step budget, or after ``--max-minutes``. It prints one line per run
(steps and wall time to the target, best and last eval return) and draws the eval and
train returns against env steps, with the target, into ``benchmarks/curves/``.
``--in-graph`` runs CartPole and Pendulum as the torch envs of ``batchenv.kernels``
(the same dynamics as Gymnasium's) instead of Gymnasium envs in worker processes.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from batchenv.algorithms.batchppo import PRESETS, BatchPPOConfig, train

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Task:
    """One learning target."""

    preset: str
    """The BatchPPO preset."""
    target: float
    """Eval return to reach."""
    budget: int
    """Training env steps allowed."""
    in_graph: str | None
    """The batchenv.kernels env with the same dynamics, if any."""
    settings: tuple[str, ...] = ()
    """``key=value`` overrides of the preset that the recorded results used."""


TASKS = {
    "cartpole": Task("cartpole", 475.0, 200_000, "batchenv.kernels:CartPole"),
    "pendulum": Task(
        "pendulum",
        -200.0,
        1_000_000,
        "batchenv.kernels:Pendulum",
        ("learning_rate=1e-3", "gae_lambda=0.95", "discount=0.9"),
    ),
    "cheetah": Task(
        "cheetah",
        2000.0,
        1_000_000,
        None,
        ("learning_rate=3e-4", "gae_lambda=0.95", "minibatches=5"),
    ),
}


class Stop(Exception):
    """Raised after a round to end a run (target reached or time up)."""


def run(task: Task, config: BatchPPOConfig, logdir: Path, full: bool, minutes: float) -> dict:
    """Train one seed; the figures of the run."""
    started = time.perf_counter()
    cpu_started = time.process_time()  # CPU time: what a busy shared machine distorts least
    reached: dict[str, float] = {}

    def after_round(steps: int, score: float) -> None:
        seconds = time.perf_counter() - started
        if score >= task.target and not reached:
            reached.update(steps=steps, seconds=seconds, cpu=time.process_time() - cpu_started)
        if (reached and not full) or seconds > 60 * minutes:
            raise Stop

    if logdir.exists():
        shutil.rmtree(logdir)
    try:
        scores = train(config, logdir=logdir, after_round=after_round)
    except Stop:
        scores = [float(row["mean_score"]) for row in _rows(logdir) if row["phase"] == "eval"]
    rows = _rows(logdir)
    return {
        "steps": int(rows[-1]["step"]),
        "seconds": time.perf_counter() - started,
        "best": max(scores),
        "last": scores[-1],
        "reached": reached,
        "rows": rows,
    }


def plot(name: str, task: Task, results: dict[int, dict], title: str) -> Path:
    """Eval (and faint train) return vs env steps for every seed, with the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for seed, result in sorted(results.items()):
        for phase, style in (("eval", dict(marker="o", markersize=3)), ("train", dict(alpha=0.35))):
            points = [
                (int(row["step"]), float(row["mean_score"]))
                for row in result["rows"]
                if row["phase"] == phase and row["mean_score"] not in ("", "nan")
            ]
            if points:
                xs, ys = zip(*points)
                axes.plot(xs, ys, label=f"{phase} seed {seed}", **style)
    axes.axhline(task.target, color="k", linestyle="--", linewidth=1, label="target")
    axes.set_xlabel("training env steps")
    axes.set_ylabel("mean episode return")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    target = HERE / "curves" / f"{name}.png"
    target.parent.mkdir(exist_ok=True)
    figure.savefig(target, dpi=100)
    plt.close(figure)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--in-graph", action="store_true", help="use the batchenv.kernels env")
    parser.add_argument("--full", action="store_true", help="run the whole budget")
    parser.add_argument("--max-minutes", type=float, default=10.0, help="per seed")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--preset-only", action="store_true", help="the preset's v1.4 values, no task settings"
    )
    parser.add_argument("--name", default=None, help="name of the curve file and run folders")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    task = TASKS[args.task]
    base = PRESETS[task.preset].replace(steps=task.budget)
    if args.in_graph:
        if task.in_graph is None:
            parser.error(f"{args.task} has no in-graph env")
        base = base.replace(env=task.in_graph)
    overrides = ([] if args.preset_only else list(task.settings)) + list(args.set)
    base = BatchPPOConfig.from_overrides(overrides, base=base)
    name = args.name or f"batchppo_{args.task}{'_in_graph' if args.in_graph else ''}"
    print(
        f"{name}: {base.env}, {base.num_agents} envs, target {task.target} within "
        f"{task.budget:,} steps; overrides {overrides or 'none'}",
        flush=True,
    )

    results = {}
    for seed in args.seeds:
        logdir = HERE / "out" / "learning_batchppo" / f"{name}-seed{seed}"
        result = run(task, base.replace(seed=seed), logdir, args.full, args.max_minutes)
        results[seed] = result
        reached = result["reached"]
        when = (
            f"reached {task.target} at {reached['steps']:,} steps after {reached['seconds']:.1f} s "
            f"({reached['cpu']:.1f} s CPU)"
            if reached
            else f"did NOT reach {task.target}"
        )
        print(
            f"{name} seed {seed}: {when}; ran {result['steps']:,} steps in "
            f"{result['seconds']:.0f} s; best eval {result['best']:.1f}, last {result['last']:.1f}",
            flush=True,
        )
    title = f"BatchPPO on {base.env} ({', '.join(overrides) or 'preset'})"
    print(f"curve: {plot(name, task, results, title)}")
    return 0


def _rows(logdir: Path) -> list[dict[str, str]]:
    with open(logdir / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


if __name__ == "__main__":
    sys.exit(main())
