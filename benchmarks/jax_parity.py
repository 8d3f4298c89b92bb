"""batchenv's compiled PPO and in-graph stepping side by side with PureJaxRL and gymnax (JAX).

Workloads (``--only`` picks some; default all), each run once per round on both sides:

* ``ppo``: PureJaxRL's ``purejaxrl/ppo.py`` with its own CartPole-v1 config (NUM_ENVS 4,
  NUM_STEPS 128, TOTAL_TIMESTEPS 5e5, UPDATE_EPOCHS 4, NUM_MINIBATCHES 4, LR 2.5e-4 annealed,
  ...), one seed under ``jax.jit``, against ``batchenv.algorithms.ppo.train(PPOConfig(
  env_id="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=500_000, update_epochs=4,
  num_minibatches=4, seeds=1))``.
* ``seeds``: the same with 8 seeds in one program (``jax.jit(jax.vmap(train))`` on keys
  split from one, as PureJaxRL's walkthrough does; ``seeds=8`` on ours).
* ``stepping``: CartPole-v1 with random actions at N = 256 and 65,536 envs: gymnax's step in
  a ``lax.scan`` of 64 steps against ``batchenv.in_graph.rollout(env, algo, steps=64)``
  (``torch.compile(simulate)`` called 64 times where ``rollout`` does not exist yet, and
  labelled so), the same rollout without ``InGraphBatchEnv``'s per-step finite check
  (gymnax checks nothing; on CUDA this row replays each call as one CUDA graph), the
  compiled ``CartPole.step`` alone, and Gymnasium's NumPy vector env.

Every run is a fresh interpreter (``jax_parity_child.py`` in this folder) in a scratch
working directory: the JAX side with the JAX venv's python, ours with this python and an
empty TorchInductor cache (``TORCHINDUCTOR_CACHE_DIR``), so that both compile from cold as
JAX does without a persistent compilation cache. Rounds interleave the sides (JAX, batchenv,
JAX, batchenv, ... with the order swapped each round); the table shows medians over rounds.

``--second-run`` runs each side twice in the same scratch directory, the second time with
the compiled code the first left on disk: TorchInductor's cache on ours, JAX's persistent
compilation cache (``JAX_COMPILATION_CACHE_DIR``, every program kept) on theirs. The second
runs are rows of their own, "(second run)", compared with each other: what a user sees when
running the same training again.

Columns: wall seconds (program building, compiling and running; not the interpreter start
or imports), env steps per second (run time only, compile excluded; all seeds together),
compile seconds (JAX: ``lower().compile()``; torch: the warm-up calls minus the same number
of calls at the steady rate), where the mean episode return first reaches 475 (the return
curve: per update, the mean return of the episodes that ended in it, carried forward through
updates where none ended; averaged over seeds; env steps of one seed) and how many seeds end
at or above 475 (last update), and the ratio batchenv / JAX of steps per second and of wall
time (stepping: against gymnax at the same N). Below the table, each batchenv stepping
program's steps/s over Gymnasium's NumPy vector env's at the same N.

    python benchmarks/jax_parity.py --setup      # once: JAX venv and patched PureJaxRL
    flock /tmp/bench.lock python benchmarks/jax_parity.py            # all, 2 rounds
    flock /tmp/bench.lock python benchmarks/jax_parity.py --only ppo,seeds --rounds 3
    python benchmarks/jax_parity.py --only stepping --seconds 0.3 --rounds 1   # smoke test
    python benchmarks/jax_parity.py --json parity.json   # also write every run and curve
    # a GPU machine whose python3 has jax with CUDA (gymnax and distrax on PYTHONPATH):
    python benchmarks/jax_parity.py --device cuda --jax-python python3 --sizes 4096,1048576

Run the measurement with nothing else on the machine (other agents: under ``flock
/tmp/bench.lock``): both sides use every core.

The JAX peers are never dependencies of this project. ``--setup`` makes a venv in
``~/.cache/batchenv-bench/jax-venv`` (``--venv``) with ``jax[cpu]``, ``gymnax>=1.0``, flax,
optax and distrax, and puts PureJaxRL (third-party code, never committed here) at commit
``PUREJAXRL_COMMIT`` in ``~/.cache/batchenv-bench/purejaxrl`` (``--purejaxrl-dir``) with
``git clone``; without network to GitHub, put a checkout of that commit there yourself.

PureJaxRL predates gymnax 1.0, whose ``env.step`` returns ``(obs, state, reward, terminated,
truncated, info)``. Its ``purejaxrl/wrappers.py`` unpacks five values and imports brax and
navix at the top (needed only by its Brax and Navix wrappers). Every run (and ``--setup``)
adapts that file in the cache, idempotently, in two places, and changes nothing else:

1. the three top-level lines ``from brax import envs``, ``from brax.envs.wrappers.training
   import EpisodeWrapper, AutoResetWrapper`` and ``import navix as nx`` become comments;
2. in ``FlattenObservationWrapper.step`` (the wrapper that calls gymnax's step for
   ``ppo.py``) the unpack becomes ``obs, state, reward, terminated, truncated, info = ...``
   followed by ``done = jnp.logical_or(terminated, truncated)``, which is the ``done`` that
   gymnax before 1.0 returned, so PPO's GAE and the LogWrapper see what they did then.

``ppo.py`` itself is used unchanged (its ``make_train`` is imported).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "batchenv-bench"
PUREJAXRL_URL = "https://github.com/luchris429/purejaxrl"
PUREJAXRL_COMMIT = "31756b197773a52db763fdbe6d635e4b46522a73"
PPO_SHA256 = "6650c9f8943ed67e8d287d0dd1536e49d8f603e04550cdc506727e46b34024fd"
JAX_PACKAGES = ["jax[cpu]", "gymnax>=1.0", "flax", "optax", "distrax"]
WORKLOADS = ("ppo", "seeds", "stepping")
SIDES = ("jax", "batchenv")
TARGET_RETURN = 475.0
RUN_TIMEOUT_S = 3600

# PureJaxRL ppo.py's __main__ config, minus DEBUG (its per-episode print callback).
# TOTAL_TIMESTEPS is the int of its 5e5 so NUM_UPDATES is an int for lax.scan's length.
PUREJAXRL_CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 500_000,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
}
BATCHENV_CONFIG = {
    "env_id": "CartPole-v1",
    "num_envs": 4,
    "num_steps": 128,
    "total_timesteps": 500_000,
    "update_epochs": 4,
    "num_minibatches": 4,
}
SEEDS = {"ppo": 1, "seeds": 8}

# The adaptation of PureJaxRL's wrappers.py to gymnax >= 1.0: (original, adapted) pairs.
MARK = "# batchenv-bench:"
WRAPPERS_PATCH = [
    (
        "from brax import envs\n"
        "from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper\n"
        "import navix as nx\n",
        f"{MARK} brax and navix are only needed by the Brax and Navix wrappers\n"
        "# from brax import envs\n"
        "# from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper\n"
        "# import navix as nx\n",
    ),
    (
        "        obs, state, reward, done, info = self._env.step(key, state, action, params)\n"
        "        obs = jnp.reshape(obs, (-1,))\n",
        f"        {MARK} gymnax >= 1.0 returns terminated and truncated\n"
        "        obs, state, reward, terminated, truncated, info = self._env.step(\n"
        "            key, state, action, params\n"
        "        )\n"
        "        done = jnp.logical_or(terminated, truncated)\n"
        "        obs = jnp.reshape(obs, (-1,))\n",
    ),
]


# -- setup: the JAX venv and PureJaxRL ---------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def setup_venv(venv: Path) -> None:
    """Create ``venv`` (if missing) and install the JAX packages into it."""
    if not venv_python(venv).exists():
        print(f"creating {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"installing {' '.join(JAX_PACKAGES)} into {venv}", flush=True)
    subprocess.run([str(venv_python(venv)), "-m", "pip", "install", *JAX_PACKAGES], check=True)


def setup_purejaxrl(folder: Path) -> None:
    """Clone PureJaxRL at PUREJAXRL_COMMIT into ``folder`` unless it is already there."""
    if (folder / "purejaxrl" / "ppo.py").exists():
        return
    print(f"cloning {PUREJAXRL_URL} at {PUREJAXRL_COMMIT[:10]} into {folder}", flush=True)
    try:
        subprocess.run(["git", "clone", "-q", PUREJAXRL_URL, str(folder)], check=True)
        subprocess.run(["git", "-C", str(folder), "checkout", "-q", PUREJAXRL_COMMIT], check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise SystemExit(
            f"cannot clone PureJaxRL ({error}); put a checkout of {PUREJAXRL_URL} at commit "
            f"{PUREJAXRL_COMMIT} in {folder} (or pass --purejaxrl-dir) and run --setup again"
        ) from None


def patch_wrappers(folder: Path) -> None:
    """Adapt ``purejaxrl/wrappers.py`` to gymnax >= 1.0 (see the module docstring); a
    second call changes nothing."""
    path = folder / "purejaxrl" / "wrappers.py"
    text = path.read_text()
    patched = text
    for original, adapted in WRAPPERS_PATCH:
        if adapted in patched:
            continue
        if patched.count(original) != 1:
            raise SystemExit(
                f"{path} is not PureJaxRL {PUREJAXRL_COMMIT[:10]}'s wrappers.py (expected "
                f"once: {original.splitlines()[0].strip()!r}); check out that commit there"
            )
        patched = patched.replace(original, adapted)
    if patched != text:
        path.write_text(patched)
        print(f"adapted {path} to gymnax >= 1.0", flush=True)


def check_ready(args: argparse.Namespace) -> None:
    """Fail fast, before any run, when the venv or PureJaxRL is missing."""
    if args.jax_python is None and not venv_python(args.venv).exists():
        raise SystemExit(
            f"no JAX venv at {args.venv}; run: python benchmarks/jax_parity.py --setup"
        )
    ppo = args.purejaxrl_dir / "purejaxrl" / "ppo.py"
    if not ppo.exists():
        raise SystemExit(
            f"no PureJaxRL at {args.purejaxrl_dir}; run: python benchmarks/jax_parity.py --setup"
        )
    if hashlib.sha256(ppo.read_bytes()).hexdigest() != PPO_SHA256:
        print(f"warning: {ppo} is not PureJaxRL {PUREJAXRL_COMMIT[:10]}'s ppo.py")
    patch_wrappers(args.purejaxrl_dir)


# -- one run -----------------------------------------------------------------------------------


def spec_for(side: str, workload: str, args: argparse.Namespace) -> dict:
    spec = {"side": side, "workload": workload}
    if side == "batchenv":
        spec["device"] = args.device
        spec["torch_threads"] = args.torch_threads
    if workload == "stepping":
        return {**spec, "sizes": args.sizes, "seconds": args.seconds}
    spec.update(seeds=SEEDS[workload], seed=args.seed)
    if side == "jax":
        spec.update(
            purejaxrl_config=PUREJAXRL_CONFIG,
            purejaxrl_dir=str(args.purejaxrl_dir / "purejaxrl"),
        )
    else:
        spec.update(batchenv_config=BATCHENV_CONFIG)
    return spec


SECOND_RUN = " (second run)"


def run_child(spec: dict, args: argparse.Namespace, scratch: str | None = None) -> dict:
    """Run ``spec`` in a fresh interpreter of its side; its RESULT, or ``{"error": ...}``."""
    return run_fresh("jax_parity_child.py", spec, args, jax_side="jax", scratch=scratch)


def run_fresh(
    script: str, spec: dict, args: argparse.Namespace, jax_side: str, scratch: str | None = None
) -> dict:
    """Run ``script SPEC`` (a file of this folder) in a fresh interpreter, in a scratch
    directory with an empty TorchInductor cache: the JAX interpreter (``args.jax_python`` or
    the venv's) where ``spec["side"] == jax_side``, else this one. The child's last
    ``RESULT {json}`` line, or ``{"error": ...}`` within ``args.timeout`` seconds. A child
    that runs out of time leaves the ``ENTRY {json}`` lines it printed as ``"entries"``, and
    its last line on stderr (what it was doing) in the error.

    ``scratch``: a directory to run in instead of a new one, with the compilation caches
    (TorchInductor's and JAX's persistent one) that earlier runs there left."""
    if scratch is None:
        with tempfile.TemporaryDirectory(prefix=f"{Path(script).stem}_") as fresh:
            return run_fresh(script, spec, args, jax_side, scratch=fresh)
    python = sys.executable
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if spec["side"] == jax_side:
        python = str(args.jax_python or venv_python(args.venv))
        if args.jax_python is None:
            env.pop("PYTHONPATH", None)  # nothing of this project's interpreter
    env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(scratch) / "inductor")
    if getattr(args, "second_run", False):  # JAX keeps every compiled program on disk
        env["JAX_COMPILATION_CACHE_DIR"] = str(Path(scratch) / "jax")
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
    command = [python, str(HERE / script), json.dumps(spec)]
    try:
        done = subprocess.run(
            command, cwd=scratch, env=env, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired as error:
        return timed_out(error, args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        return {"error": f"exit {done.returncode}: {tail}"}
    return json.loads(lines[-1][len("RESULT ") :])


def timed_out(error: subprocess.TimeoutExpired, seconds: int) -> dict:
    """What a child that ran out of time left: its finished entries and its last stderr line."""

    def text(output) -> str:  # partial output may come back undecoded
        if isinstance(output, bytes):
            return output.decode(errors="replace")
        return output or ""

    entries = [
        json.loads(line[len("ENTRY ") :])
        for line in text(error.stdout).splitlines()
        if line.startswith("ENTRY ")
    ]
    message = f"timed out after {seconds} s"
    last = text(error.stderr).strip().splitlines()[-1:]
    if last:
        message += f"; last started: {last[0].strip()}"
    return {"error": message, "entries": entries}


def describe(result: dict) -> str:
    if "error" in result:
        return "FAILED " + result["error"]
    parts = []
    for entry in result["entries"]:
        if "unavailable" in entry:
            parts.append(f"{entry['label']}: {entry['unavailable']}")
            continue
        size = f" N={entry['num_envs']:,}" if "num_envs" in entry else ""
        wall = f", wall {entry['wall_seconds']:.1f} s" if "wall_seconds" in entry else ""
        parts.append(
            f"{entry['label']}{size}: {entry['steps_per_second']:,.0f} steps/s, "
            f"compile {entry['compile_seconds']:.1f} s{wall}"
        )
    return "; ".join(parts)


def measure(args: argparse.Namespace) -> dict:
    """runs[workload][side] = one result per round; the sides alternate, swapped each round."""
    runs = {workload: {side: [] for side in SIDES} for workload in args.only}
    for round_index in range(args.rounds):
        for workload in args.only:
            sides = SIDES if round_index % 2 == 0 else SIDES[::-1]
            for side in sides:
                for result in runs_of(spec_for(side, workload, args), args):
                    runs[workload][side].append(result)
                    print(
                        f"[round {round_index + 1}/{args.rounds}] {workload} {side}: "
                        f"{describe(result)}",
                        flush=True,
                    )
    return runs


def runs_of(spec: dict, args: argparse.Namespace) -> list[dict]:
    """One run of ``spec``; with ``--second-run``, two in one scratch directory, the second's
    entries labelled SECOND_RUN."""
    if not args.second_run:
        return [run_child(spec, args)]
    with tempfile.TemporaryDirectory(prefix="jax_parity_child_") as scratch:
        first = run_child(spec, args, scratch)
        second = run_child(spec, args, scratch)
    for entry in second.get("entries", []):
        entry["label"] += SECOND_RUN
    return [first, second]


# -- summary -----------------------------------------------------------------------------------


def first_reached(entry: dict) -> int | None:
    """Env steps (of one seed) at the end of the first update whose return, averaged over
    seeds, is at least TARGET_RETURN; None if never."""
    for update, row in enumerate(entry["returns"]):
        values = [value for value in row if value is not None]
        if values and statistics.fmean(values) >= TARGET_RETURN:
            return (update + 1) * entry["steps_per_update"]
    return None


def seeds_at_end(entry: dict) -> str:
    last = entry["returns"][-1] if entry["returns"] else []
    return f"{sum(v is not None and v >= TARGET_RETURN for v in last)}/{entry['seeds']}"


def entries_by_label(results: list[dict]) -> dict[tuple, list[dict]]:
    """The entries of all rounds, grouped by (label, num_envs), in first-seen order."""
    grouped: dict[tuple, list[dict]] = {}
    for result in results:
        for entry in result.get("entries", []):
            grouped.setdefault((entry["label"], entry.get("num_envs")), []).append(entry)
    return grouped


def median_of(entries: list[dict], key: str) -> float | None:
    values = [entry[key] for entry in entries if key in entry]
    return statistics.median(values) if values else None


def table(runs: dict) -> list[str]:
    header = [
        "workload",
        "program",
        "wall s",
        "steps/s",
        "compile s",
        f"return >= {TARGET_RETURN:.0f} first at",
        "seeds >= 475 at end",
        "steps/s ratio",
        "wall ratio",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for workload, by_side in runs.items():
        jax_groups = entries_by_label(by_side["jax"])
        ours_groups = entries_by_label(by_side["batchenv"])
        for side, groups in (("jax", jax_groups), ("batchenv", ours_groups)):
            for (label, num_envs), entries in groups.items():
                peer = next(
                    (
                        e
                        for (peer_label, n), e in jax_groups.items()
                        if n == num_envs
                        and peer_label.endswith(SECOND_RUN) == label.endswith(SECOND_RUN)
                    ),
                    None,
                )
                lines.append(_row(workload, label, num_envs, entries, side, peer))
        for side in SIDES:
            failed = [r["error"] for r in by_side[side] if "error" in r]
            if failed:  # the last line of the first failure (the exception, usually)
                lines.append(f"| {workload} | {side} FAILED: {failed[0].splitlines()[-1]} |")
    return lines


def against_gymnasium(runs: dict) -> list[str]:
    """Per N, each batchenv stepping program's steps/s over Gymnasium's NumPy vector env's."""
    if "stepping" not in runs:
        return []
    rates = {
        key: median_of(entries, "steps_per_second")
        for key, entries in entries_by_label(runs["stepping"]["batchenv"]).items()
    }
    gymnasium = {n: rate for (label, n), rate in rates.items() if "Gymnasium" in label}
    return [
        f"N={n:,}: {label} {rate / gymnasium[n]:.2f}x Gymnasium's NumPy vector env"
        for (label, n), rate in rates.items()
        if "Gymnasium" not in label and rate and gymnasium.get(n)
    ]


def _row(workload, label, num_envs, entries, side, peer) -> str:
    name = workload if num_envs is None else f"{workload} N={num_envs:,}"
    unavailable = next((e["unavailable"] for e in entries if "unavailable" in e), None)
    if unavailable:
        return f"| {name} | {label} | {unavailable} |"
    sps, wall = median_of(entries, "steps_per_second"), median_of(entries, "wall_seconds")
    ratio = wall_ratio = "–"
    if side == "batchenv" and peer:
        peer_sps = median_of(peer, "steps_per_second")
        peer_wall = median_of(peer, "wall_seconds")
        ratio = f"{sps / peer_sps:.2f}x" if peer_sps else "–"
        wall_ratio = f"{wall / peer_wall:.2f}x" if wall and peer_wall else "–"
    reached = first = "–"
    if "returns" in entries[0]:
        steps = sorted({first_reached(e) for e in entries}, key=lambda s: s or 0)
        first = ", ".join("never" if s is None else f"{s:,}" for s in steps)
        reached = ", ".join(sorted({seeds_at_end(e) for e in entries}))
    cells = [
        name,
        label,
        "–" if wall is None else f"{wall:.1f}",
        f"{sps:,.0f}",
        f"{median_of(entries, 'compile_seconds'):.1f}",
        first,
        reached,
        ratio,
        wall_ratio,
    ]
    return "| " + " | ".join(cells) + " |"


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
        "load_average": os.getloadavg(),
        "platform": platform.platform(),
    }


def versions(runs: dict) -> dict:
    found = {}
    for by_side in runs.values():
        for results in by_side.values():
            for result in results:
                found.update(result.get("versions", {}))
    return found


# -- command line ------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", action="store_true", help="build the JAX venv and PureJaxRL")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="of %(default)s")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the median")
    parser.add_argument("--sizes", default="256,65536", help="stepping: numbers of envs")
    parser.add_argument("--seconds", type=float, default=2.0, help="stepping: timed per program")
    parser.add_argument("--seed", type=int, default=30, help="PPO key (ppo.py's PRNGKey(30))")
    parser.add_argument("--venv", type=Path, default=CACHE / "jax-venv")
    parser.add_argument(
        "--jax-python",
        type=Path,
        help="the JAX side's interpreter instead of the venv's (e.g. a GPU machine's python3 "
        "with jax[cuda]; PYTHONPATH is then passed on, for gymnax and distrax)",
    )
    parser.add_argument(
        "--device", default="cpu", help="batchenv's torch device (the JAX side: JAX's default)"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="batchenv's torch threads (0: torch's default for stepping, PPOConfig's choice "
        "for PPO: one thread for its small CPU programs)",
    )
    parser.add_argument("--purejaxrl-dir", type=Path, default=CACHE / "purejaxrl")
    parser.add_argument("--timeout", type=int, default=RUN_TIMEOUT_S, help="per run, seconds")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write all runs here")
    parser.add_argument(
        "--second-run",
        action="store_true",
        help="run each side again with the compilation caches its first run left",
    )
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in args.only if name not in WORKLOADS]
    if unknown or not args.only:
        parser.error(f"--only {unknown or args.only}: expected some of {', '.join(WORKLOADS)}")
    try:
        args.sizes = [int(size) for size in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: expected comma-separated integers, e.g. 256,65536")
    if args.rounds < 1 or args.seconds <= 0 or min(args.sizes) < 1 or args.torch_threads < 0:
        parser.error(
            "--rounds, --seconds and every --sizes value must be positive, --torch-threads >= 0"
        )
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.setup:
        CACHE.mkdir(parents=True, exist_ok=True)
        setup_venv(args.venv)
        setup_purejaxrl(args.purejaxrl_dir)
        patch_wrappers(args.purejaxrl_dir)
        print(f"ready: {venv_python(args.venv)}, {args.purejaxrl_dir}")
        return
    check_ready(args)
    info = machine()
    load = ", ".join(f"{value:.2f}" for value in info["load_average"])
    print(f"{info['date']}, {info['cpu']}, {info['cores']} cores, load average {load}")
    print(f"workloads {args.only}, {args.rounds} rounds, PureJaxRL {PUREJAXRL_COMMIT[:10]}")
    runs = measure(args)
    print(f"\nversions: {versions(runs)}")
    print(
        "\nMedians over rounds. steps/s: run time only, all seeds; ratios: batchenv / JAX "
        "(steps/s above 1 and wall below 1: batchenv is faster).\n"
    )
    print("\n".join(table(runs)))
    print("\n".join(["", *against_gymnasium(runs)]))
    if args.json:
        payload = {"machine": info, "purejaxrl_commit": PUREJAXRL_COMMIT, "runs": runs}
        args.json.write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
