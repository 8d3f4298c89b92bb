"""End-to-end training SPS of real training loops with the vector-env class swapped (issue 19.3).

Random-action throughput is not what users feel; this measures whole training runs.

A. Unmodified CleanRL scripts: ``cleanrl/ppo.py`` (CartPole-v1, cases ``cartpole-8`` and
   ``cartpole-64``) and ``cleanrl/ppo_continuous_action.py`` (HalfCheetah-v5, ``cheetah-8`` and
   ``cheetah-16``), run with ``gymnasium.vector.SyncVectorEnv`` replaced by the class under
   test: ``sync`` (SyncVectorEnv itself), ``batch`` (batchenv.vector.BatchVectorEnv) or
   ``async`` (Gymnasium's AsyncVectorEnv, with ``--with-async``). Arguments: ``--seed 1
   --num-envs N --total-timesteps S --env-id ID --no-track --no-capture-video --no-cuda``
   (CPU even where a GPU exists), CleanRL's defaults for everything else.
B. ``own-cheetah-16``: a compact PPO loop of ours (CleanRL's agent and hyperparameters for
   HalfCheetah, 2048 steps per env per iteration, per-env buffers keyed by env id, GAE, 10
   epochs of 32 clipped minibatches) on HalfCheetah-v5 with 16 envs, run lockstep on each
   vector class and on batchenv's EnvPool-style async API (``api``): ``env =
   batchenv.make(ENV_ID, num_envs=16, batch_size=8, **ASYNC_API_KWARGS)``,
   ``env.async_reset(seed=1)`` (plain ``async_reset()`` where it takes no seed), ``observ,
   reward, terminated, truncated, info = env.recv()`` with ``info["env_id"]``, ``env.send(
   actions, env_ids)``, ``env.close()``. Where ``batchenv.make`` has no ``batch_size`` the row
   says "async API not available".

Every run is a fresh interpreter (``training_loop_child.py`` in this folder), in a scratch
working directory. SPS = env steps / wall time of the run inside that interpreter, from
before the envs are built to after they are closed (not the interpreter start and imports);
"loop SPS" is CleanRL's own last ``SPS:`` print (its clock starts after the envs are built)
or, for the own loop, the same span. Rounds interleave the classes (A, B, A, B, ... with the
order rotated each round); the tables show medians. "returns equal" compares the list of
(global_step, episodic_return) of BatchVectorEnv with SyncVectorEnv's on the same seed,
exactly, in every round (lockstep runs only; they should match: BatchVectorEnv returns
exactly what SyncVectorEnv returns).

    python benchmarks/training_loop.py                          # all cases, 3 rounds
    python benchmarks/training_loop.py --rounds 5 --with-async --json results.json
    python benchmarks/training_loop.py --cases cheetah-16 --batchvec-kwargs '{"parent_share": 0}'
    python benchmarks/training_loop.py --iterations 1 --rounds 1  # smoke test

CleanRL, pinned at commit ``CLEANRL_COMMIT`` below, is third-party code and never committed
here: the scripts are read from ``--cleanrl-dir`` (or ``$BATCHENV_CLEANRL_DIR``, default
``~/.cache/batchenv/cleanrl/<commit>/``) and, when missing, downloaded there from
raw.githubusercontent.com and checked against their SHA-256. CleanRL needs ``tyro`` and
``tensorboard`` (``pip install tyro tensorboard``): benchmark-only dependencies, not the
package's.

Shims, all in ``training_loop_child.py``, none in the scripts (CleanRL targets Gymnasium
0.29; this repository runs Gymnasium 1.x):

* ``gymnasium.wrappers.TransformObservation(env, func)``: Gymnasium 1.x requires a third
  argument, ``observation_space``; the shim defaults it to None (keep the env's space). It is
  installed in the harness's interpreter and, through a wrapper around each env constructor,
  in every worker process that builds an env.
* ``infos["final_info"]``: Gymnasium 1.x vector envs report the per-env
  ``RecordEpisodeStatistics`` info merged into arrays (``infos["episode"]["r"]`` with the mask
  ``infos["_episode"]``) and have no ``final_info``, so CleanRL would log no episode; a
  VectorWrapper rebuilds the 0.29 list of per-env ``{"episode": ...}`` dicts (or None).
* Not shimmed: Gymnasium 1.x's default NEXT_STEP autoreset. CleanRL assumes 0.29's
  same-step autoreset, so under 1.x each episode end costs one extra step whose action is
  ignored (reward 0). It is the same for every class, and it is what a user running these
  scripts on Gymnasium 1.x gets.

Default lengths, in whole PPO iterations (``--iterations`` or ``--steps`` change them):
cartpole-8 100 x 1,024 steps, cartpole-64 24 x 8,192, cheetah-8 4 x 16,384, cheetah-16 and
own-cheetah-16 2 x 32,768 -- 10-30 s per run. Estimated from a one-iteration smoke run on the
project's 2-core VM (2026-11-25): about 10 minutes for the default 3 rounds, about 20 with
``--with-async`` (AsyncVectorEnv is the slowest class); twice that on a day when the VM runs
at the speeds issue 19 quotes. Run it alone on the machine (other agents: ``flock``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLEANRL_COMMIT = "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"
CLEANRL_SHA256 = {
    "ppo.py": "d8dfbb7ac0b21e747b77d6e6673e566db4d6cdacc83bcebcd19cf87ad0e459ae",
    "ppo_continuous_action.py": "326dd8678bf9cc51abec833eb551ef2409a3804d604b689e1f0a084eca41f655",
}
CLEANRL_URL = "https://raw.githubusercontent.com/vwxyzjn/cleanrl/{commit}/cleanrl/{name}"
SEED = 1
CLASS_NAMES = {
    "sync": "SyncVectorEnv",
    "batch": "BatchVectorEnv",
    "async": "AsyncVectorEnv",
    "api": "batchenv async API",
}
RUN_TIMEOUT_S = 3600


@dataclasses.dataclass(frozen=True)
class Case:
    """One training setup; ``num_steps`` is CleanRL's steps per env per PPO iteration."""

    name: str
    env_id: str
    num_envs: int
    num_steps: int
    iterations: int
    script: str | None  # the CleanRL script, or None for the own PPO loop

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.num_steps


CASES = {
    case.name: case
    for case in [
        Case("cartpole-8", "CartPole-v1", 8, 128, 100, "ppo.py"),
        Case("cartpole-64", "CartPole-v1", 64, 128, 24, "ppo.py"),
        Case("cheetah-8", "HalfCheetah-v5", 8, 2048, 4, "ppo_continuous_action.py"),
        Case("cheetah-16", "HalfCheetah-v5", 16, 2048, 2, "ppo_continuous_action.py"),
        Case("own-cheetah-16", "HalfCheetah-v5", 16, 2048, 2, None),
    ]
}


# -- command line ----------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of %(default)s")
    parser.add_argument(
        "--classes", default="sync,batch,api", help="of sync,batch,async,api (api: own loop only)"
    )
    parser.add_argument("--with-async", action="store_true", help="add AsyncVectorEnv")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, help="PPO iterations for every case")
    parser.add_argument(
        "--steps",
        help="env steps, for every case (N) or per case (cheetah-8=32768,...); "
        "rounded down to whole PPO iterations, at least one",
    )
    parser.add_argument(
        "--batchvec-kwargs",
        type=json.loads,
        default={},
        metavar="JSON",
        help="extra BatchVectorEnv kwargs, e.g. '{\"parent_share\": 0}'",
    )
    parser.add_argument(
        "--async-api-kwargs",
        type=json.loads,
        default={},
        metavar="JSON",
        help="extra batchenv.make kwargs for the async API runs",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS for every run, whatever the class (0: torch's default, one "
        "thread per core). On few cores torch's spinning threads take the cores a worker "
        "would step on: BatchVectorEnv's parent_share='auto' then keeps every env in the "
        "training process",
    )
    parser.add_argument(
        "--omp-wait-policy",
        choices=["active", "passive"],
        help="OMP_WAIT_POLICY for every run, whatever the class (default: unset, torch's "
        "OpenMP threads spin after each parallel region). 'passive' makes them sleep at "
        "once, leaving the cores to the workers",
    )
    parser.add_argument("--cleanrl-dir", type=Path, help="folder with the CleanRL scripts")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write all runs here")
    args = parser.parse_args(argv)
    args.cases = [CASES[name] for name in _names(args.cases, CASES)]
    args.classes = _names(args.classes, CLASS_NAMES)
    if args.with_async and "async" not in args.classes:
        args.classes.append("async")
    args.iterations = {case.name: iterations_of(case, args) for case in args.cases}
    return args


def _names(text: str, known) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown {unknown}; expected some of {', '.join(known)}")
    return names


def iterations_of(case: Case, args: argparse.Namespace) -> int:
    """PPO iterations of ``case``: its default, ``--iterations``, or ``--steps`` rounded down."""
    if args.iterations is not None:
        return max(1, args.iterations)
    if not args.steps:
        return case.iterations
    if "=" not in args.steps:
        return max(1, int(args.steps) // case.steps_per_iteration)
    per_case = dict(item.split("=") for item in args.steps.split(","))
    if case.name not in per_case:
        return case.iterations
    return max(1, int(per_case[case.name]) // case.steps_per_iteration)


# -- CleanRL scripts -------------------------------------------------------------------------


def cleanrl_dir(args: argparse.Namespace) -> Path:
    """The folder with the pinned CleanRL scripts, downloading them there if missing."""
    default = Path.home() / ".cache" / "batchenv" / "cleanrl" / CLEANRL_COMMIT
    folder = args.cleanrl_dir or Path(os.environ.get("BATCHENV_CLEANRL_DIR", default))
    for name, digest in CLEANRL_SHA256.items():
        path = folder / name
        if not path.exists():
            download(name, path)
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            print(f"warning: {path} is not CleanRL {CLEANRL_COMMIT[:10]}'s {name}")
    return folder


def download(name: str, path: Path) -> None:
    url = CLEANRL_URL.format(commit=CLEANRL_COMMIT, name=name)
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read()
    except OSError as error:
        print(
            f"cannot download {url} ({error}); put {' and '.join(CLEANRL_SHA256)} from "
            f"cleanrl/ at CleanRL commit {CLEANRL_COMMIT} in {path.parent} or pass --cleanrl-dir"
        )
        raise SystemExit(2) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)


def cleanrl_argv(case: Case, iterations: int) -> list[str]:
    return [
        f"--seed={SEED}",
        f"--env-id={case.env_id}",
        f"--num-envs={case.num_envs}",
        f"--total-timesteps={iterations * case.steps_per_iteration}",
        "--no-track",
        "--no-capture-video",
        "--no-cuda",
    ]


# -- one run ---------------------------------------------------------------------------------


def run_spec(case: Case, name: str, args: argparse.Namespace, scripts: Path | None) -> dict:
    """The JSON spec for ``training_loop_child`` of ``case`` on class ``name``."""
    kwargs = {"batch": args.batchvec_kwargs, "api": args.async_api_kwargs}.get(name, {})
    if case.script is not None:
        argv = cleanrl_argv(case, args.iterations[case.name])
        script = str(scripts / case.script)
        return {
            "torch_threads": args.torch_threads,
            "omp_wait_policy": args.omp_wait_policy,
            "kind": "cleanrl",
            "script": script,
            "vector": name,
            "vector_kwargs": kwargs,
            "argv": argv,
        }
    return {
        "kind": "own",
        "mode": name,
        "env_id": case.env_id,
        "num_envs": case.num_envs,
        "num_steps": case.num_steps,
        "iterations": args.iterations[case.name],
        "seed": SEED,
        "vector_kwargs": kwargs,
        "torch_threads": args.torch_threads,
        "omp_wait_policy": args.omp_wait_policy,
    }


def run_child(spec: dict) -> dict:
    """Run one spec in a fresh interpreter; its RESULT, episode returns, and loop SPS."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    if spec.get("torch_threads"):  # torch's default thread count, for every class alike
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(spec["torch_threads"])
    if spec.get("omp_wait_policy"):
        env["OMP_WAIT_POLICY"] = spec["omp_wait_policy"].upper()
    command = [sys.executable, "-c", "import training_loop_child as c; c.main()", json.dumps(spec)]
    with tempfile.TemporaryDirectory(prefix="training_loop_") as scratch:
        try:
            done = subprocess.run(
                command, cwd=scratch, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {RUN_TIMEOUT_S} s"}
    return parse_output(done.stdout, done.returncode, done.stderr)


def parse_output(stdout: str, returncode: int, stderr: str) -> dict:
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if returncode != 0 or not results:
        return {"error": f"exit {returncode}: " + "\n".join(stderr.strip().splitlines()[-8:])}
    result = json.loads(results[-1][len("RESULT ") :])
    if "unavailable" in result:
        return result
    result["sps"] = result["steps"] / result["seconds"]
    result["returns"] = re.findall(r"global_step=(\d+), episodic_return=(\S+)", stdout)
    sps_prints = re.findall(r"^SPS: (\d+)", stdout, re.MULTILINE)
    if sps_prints:
        result["loop_sps"] = float(sps_prints[-1])
    return result


# -- rounds and summary ----------------------------------------------------------------------


def classes_for(case: Case, classes: list[str]) -> list[str]:
    """The classes that apply to ``case``: the async API only drives the own loop."""
    return [name for name in classes if name != "api" or case.script is None]


def rotated(items: list, shift: int) -> list:
    shift %= len(items)
    return items[shift:] + items[:shift]


def measure(args: argparse.Namespace, scripts: Path | None) -> dict:
    """runs[case][class] = one result per round, the classes interleaved and rotated."""
    runs = {
        case.name: {name: [] for name in classes_for(case, args.classes)} for case in args.cases
    }
    for round_index in range(args.rounds):
        for case in args.cases:
            for name in rotated(classes_for(case, args.classes), round_index):
                result = run_child(run_spec(case, name, args, scripts))
                runs[case.name][name].append(result)
                print(
                    f"[round {round_index + 1}/{args.rounds}] {case.name} {name}: "
                    f"{describe(result)}",
                    flush=True,
                )
    return runs


def describe(result: dict) -> str:
    if "error" in result:
        return "FAILED " + result["error"]
    if "unavailable" in result:
        return result["unavailable"]
    return (
        f"{result['sps']:,.0f} SPS end to end, {result.get('loop_sps', 0):,.0f} loop SPS, "
        f"{result['steps']:,} steps in {result['seconds']:.1f} s, "
        f"{len(result['returns'])} episodes"
    )


def median(results: list[dict], key: str) -> float | None:
    values = [result[key] for result in results if key in result]
    return statistics.median(values) if values else None


def returns_equal(results: list[dict], reference: list[dict]) -> str:
    """Whether every round's episode returns equal the reference's, exactly."""
    pairs = [
        (a["returns"], b["returns"])
        for a, b in zip(results, reference)
        if "returns" in a and "returns" in b
    ]
    if not pairs:
        return "–"
    if any(a != b for a, b in pairs):
        return f"NO ({sum(a != b for a, b in pairs)}/{len(pairs)} rounds differ)"
    return f"yes ({len(pairs[0][0])} episodes)" if pairs[0][0] else "no episodes"


def table(args: argparse.Namespace, runs: dict, key: str) -> list[str]:
    """Markdown table of the medians of ``key`` ("sps" or "loop_sps")."""
    extra = ["AsyncVectorEnv"] if "async" in args.classes else []
    header = ["case", "steps", "SyncVectorEnv", "BatchVectorEnv", "ratio", *extra, "returns equal"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for case in args.cases:
        by_class = runs[case.name]
        sync = by_class.get("sync", [])
        rows = (
            [(_label(case, "lockstep"), "batch")] if case.script is None else [(case.name, "batch")]
        )
        if case.script is None and "api" in by_class:
            rows.append((_label(case, f"async API, batch_size={case.num_envs // 2}"), "api"))
        for label, name in rows:
            lines.append(_row(label, case, args, by_class, sync, name, key, extra))
    return lines


def _label(case: Case, what: str) -> str:
    return f"{case.name} ({what})"


def _row(label, case, args, by_class, sync, name, key, extra) -> str:
    results = by_class.get(name, [])
    unavailable = next((r["unavailable"] for r in results if "unavailable" in r), None)
    ours, theirs = median(results, key), median(sync, key)
    ratio = f"{ours / theirs:.2f}x" if ours and theirs else "–"
    equal = "n/a (async)" if name == "api" else returns_equal(results, sync)
    cells = [
        label,
        f"{args.iterations[case.name] * case.steps_per_iteration:,}",
        _fmt(theirs),
        unavailable or _fmt(ours),
        ratio,
    ]
    if extra:
        cells.append("–" if name == "api" else _fmt(median(by_class.get("async", []), key)))
    return "| " + " | ".join([*cells, equal]) + " |"


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def machine() -> dict:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    scripts = None
    if any(case.script for case in args.cases):
        if not _has_module("tyro"):
            print("CleanRL needs tyro: pip install tyro")
            raise SystemExit(2)
        scripts = cleanrl_dir(args)
    info = machine()
    print(
        f"{info['date']}, {info['cpu']}, {info['cores']} cores "
        f"({info['usable_cores']} usable), Python {info['python']}, {info['platform']}"
    )
    print(
        f"cases {[case.name for case in args.cases]}, classes {args.classes}, "
        f"{args.rounds} rounds, BatchVectorEnv kwargs {args.batchvec_kwargs}, "
        f"torch threads {args.torch_threads or 'default'}, OMP_WAIT_POLICY "
        f"{args.omp_wait_policy or 'unset'}"
    )
    runs = measure(args, scripts)
    print("\nEnd-to-end SPS (medians; env construction + training + close):\n")
    print("\n".join(table(args, runs, "sps")))
    print(
        "\nLoop SPS (medians; CleanRL's own last SPS print, or the own loop's: clock started "
        "after the envs are built):\n"
    )
    print("\n".join(table(args, runs, "loop_sps")))
    if args.json:
        payload = {
            "machine": info,
            "cleanrl_commit": CLEANRL_COMMIT,
            "argv": sys.argv[1:],
            "iterations": args.iterations,
            "runs": runs,
        }
        args.json.write_text(json.dumps(payload, indent=1))


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    main()
