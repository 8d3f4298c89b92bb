"""Hybrid sync/async sessions (issue 31 item 4): frames/s of one session against N sessions
that train one network Hogwild-style (``meta.distributed: shared``), on the same cores.

Each case is a trial run by ``batchenv.experiment.run`` (one process per session, one core
per session: ``meta.cpus_per_session: 1``; in-graph envs step in that process) in a scratch
folder, with the driver and so every session pinned to ``--cores``:

    one          1 session  x E envs       (the baseline)
    one-wide     1 session  x N*E envs     (SLM Lab's baseline: the same envs in one worker)
    independent  N sessions x E envs, meta.distributed: false (N networks)
    shared       N sessions x E envs, meta.distributed: shared (one network)

fps = training env frames of all sessions / the longest session's wall time (from its
start to its last checkpoint, eval phases included; interpreter start and imports are not).
``independent`` against ``shared`` is the cost of sharing the parameters; ``one`` against
``independent`` is what the cores give.

    python benchmarks/hogwild_fps.py                              # N = the cores here
    python benchmarks/hogwild_fps.py --sessions 4 --cores 0-3 --steps 100000 --json out.json
    python benchmarks/hogwild_fps.py --steps 2000 --rounds 1      # smoke test

The model, and what it predicts for 16 cores. A session is one process doing everything
(envs, acting, replay, gradient steps) on one core; Hogwild adds no lock and no message,
only cache-coherence traffic: every gradient step of a session writes all P parameters (4P
bytes), which the other sessions re-read at their next forward pass. For DQN on CartPole
(120-84 MLP, P = 10,934, 44 KB; one gradient step per 10 env steps) that is 4.4 KB per env
step per session: at 16 sessions x 5,000 frames/s, 350 MB/s, a small fraction of a server's
memory bandwidth (SAC steps its 256-256 policy and twin Qs once per env step: ~100x more
bytes per frame, at far fewer frames/s). So

    fps(N shared) = N x fps(one) x e(N)

where e(N) (<= 1) is the per-core efficiency of N busy independent processes (clock speed
with all cores busy, shared L3 and memory bandwidth; the ``independent`` case measures it)
times the sharing cost (``shared`` / ``independent``, ~1 by the estimate above). On 16
free cores the model predicts close to 16 x fps(one) with 16 sessions of E envs (SLM Lab
measured 10.5x: PPO on RoboschoolAnt, 360 fps with 1 worker x 16 envs -> 3,800 fps with 16
workers x 4 envs). On this 2-core VM, shared with other work, expect at most 2x and
probably less. Hogwild buys frames per second, not learning per frame: N sessions' updates
race on one network, so returns per frame may differ from one session's; this benchmark
does not measure learning. The script prints the 16-core prediction from its own e(N).
Results go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

CASES = ("one", "one-wide", "independent", "shared")
PREDICT_CORES = 16


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithm", default="dqn", choices=("dqn", "sac"))
    parser.add_argument("--env", default=None, help="default: in-graph CartPole (dqn), Pendulum")
    parser.add_argument("--sessions", type=int, default=None, help="N (default: --cores count)")
    parser.add_argument("--cores", default=None, help="CPU list, e.g. 0-3 or 0,2 (default: all)")
    parser.add_argument("--envs", type=int, default=4, help="E: envs per session")
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per session")
    parser.add_argument("--rounds", type=int, default=3, help="runs per case; medians shown")
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)

    cores = _parse_cores(args.cores) if args.cores else sorted(os.sched_getaffinity(0))
    sessions = args.sessions or len(cores)
    cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    unknown = [case for case in cases if case not in CASES]
    if unknown:
        parser.error(f"--cases: unknown {unknown[0]!r}; expected some of {', '.join(CASES)}")
    if sessions > len(cores):
        print(f"note: {sessions} sessions on {len(cores)} cores run in turns", file=sys.stderr)
    os.sched_setaffinity(0, cores)  # the sessions inherit it
    env = args.env or ("batchenv.kernels:CartPole" if args.algorithm == "dqn" else "Pendulum-v1")

    results: dict[str, list[dict]] = {case: [] for case in cases}
    for round_ in range(args.rounds):
        for case in cases[round_ % len(cases) :] + cases[: round_ % len(cases)]:
            measured = run_case(case, args.algorithm, env, sessions, args.envs, args.steps)
            results[case].append(measured)
            print(
                f"round {round_ + 1} {case:12s} {measured['sessions']} x {measured['envs']} "
                f"envs: {measured['fps']:,.0f} fps ({measured['frames']:,} frames in "
                f"{measured['seconds']:.1f} s)",
                file=sys.stderr,
            )
    summary = {
        case: statistics.median(run["fps"] for run in runs) for case, runs in results.items()
    }
    print(f"\n{args.algorithm} on {env}, cores {cores}, {sessions} sessions x {args.envs} envs")
    for case, fps in summary.items():
        ratio = f"  ({fps / summary['one']:.2f}x one)" if "one" in summary else ""
        print(f"  {case:12s} {fps:10,.0f} fps{ratio}")
    prediction = predict(summary, sessions)
    if prediction is not None:
        print(
            f"  model: {PREDICT_CORES} cores, {PREDICT_CORES} shared sessions -> "
            f"{prediction['fps']:,.0f} fps ({PREDICT_CORES} x one x e = "
            f"{prediction['efficiency']:.2f} measured at N = {sessions})"
        )
    if args.json:
        record = {
            "algorithm": args.algorithm,
            "env": env,
            "cores": cores,
            "sessions": sessions,
            "envs": args.envs,
            "steps": args.steps,
            "runs": results,
            "median_fps": summary,
            "prediction": prediction,
        }
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


def run_case(case: str, algorithm: str, env: str, sessions: int, envs: int, steps: int) -> dict:
    """One trial of ``case``; its training frames, the longest session's seconds and fps."""
    from batchenv.experiment import run
    from batchenv.experiment.spec import spec_from_dict

    count = sessions if case in ("independent", "shared") else 1
    rows = envs * sessions if case == "one-wide" else envs
    data = {
        "algorithm": algorithm,
        "env": env,
        "config": {"num_envs": rows},
        "meta": {
            "sessions": count,
            "steps": steps,
            "eval_every": steps,  # one train phase, one eval phase at the end
            "cpus_per_session": 1,
            "distributed": "shared" if case == "shared" else False,
        },
    }
    spec = spec_from_dict(f"hogwild_{case.replace('-', '_')}", data)
    with tempfile.TemporaryDirectory(prefix="hogwild-fps-") as scratch:
        started = time.perf_counter()
        result = run(spec, mode="train", runs_dir=scratch, progress=False)
        driver_seconds = time.perf_counter() - started
        trial = result.trials[0]
        if trial.status != "done":
            raise RuntimeError(f"case {case}: the trial {trial.status}: {trial.error}")
        frames, seconds = 0, 0.0
        for session in range(count):
            record = json.loads((result.path / "t0" / f"s{session}" / "session.json").read_text())
            frames += int(record["frames"][-1])
            seconds = max(seconds, float(record["metrics"]["wall_time"]))
    return {
        "sessions": count,
        "envs": rows,
        "frames": frames,
        "seconds": seconds,
        "fps": frames / seconds,
        "driver_seconds": driver_seconds,
    }


def predict(summary: dict[str, float], sessions: int) -> dict | None:
    """The model's fps for :data:`PREDICT_CORES` shared sessions on as many cores: one
    session's fps times the cores times the efficiency e = shared / (N x one) measured
    here (None without both cases)."""
    if "one" not in summary or "shared" not in summary:
        return None
    efficiency = min(1.0, summary["shared"] / (sessions * summary["one"]))
    return {"fps": PREDICT_CORES * summary["one"] * efficiency, "efficiency": efficiency}


def _parse_cores(text: str) -> list[int]:
    cores: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return sorted(cores)


if __name__ == "__main__":
    sys.exit(main())
