"""Random-action stepping throughput of batchenv's MinAtar games against gymnax and MinAtar.

Per game (``--games``, default all five) and number of envs N (``--sizes``, default 256,
4096, 65536), env steps per second (all N envs together, run time only) of:

* batchenv eager: ``batchenv.kernels.minatar.<Game>(N).step(action, reset_mask=done)`` in a
  Python loop, pre-drawn random actions, finished rows started afresh;
* batchenv compiled (opt-in, ``--compiled``): ``batchenv.in_graph.rollout(env,
  RandomAlgorithm, steps=S, unroll=--unroll)``, the in-graph counterpart of gymnax's scan.
  Inductor's compile time for a MinAtar step is minutes on a small CPU (per game and N, and
  more with a larger ``--unroll``), hence opt-in; it is printed in its own table, never
  counted in steps/s;
* gymnax: its MinAtar port (``gymnax.make("Breakout-MinAtar")``, its default params:
  no sticky actions, episodes truncated at 1000 steps), ``jax.jit`` of a ``lax.scan`` of S
  steps of ``vmap(env.step)`` (gymnax >= 1.0: ``obs, state, reward, terminated, truncated,
  info``; it resets finished envs itself), random actions drawn in the program; compile
  time (``lower().compile()``) in the compile table;
* minatar: the reference package's ``minatar.Environment`` objects stepped one by one in a
  Python loop (``act``, ``state()``, ``reset()`` at the end), only at N <= ``--minatar-max-n``
  (building N Python envs costs memory and time). Every env steps in every sweep; a short
  ``--seconds`` times fewer sweeps, never a subset of the envs.

S, the steps per compiled call, is 64, or 2**17 // N where that is fewer (2 at N = 65,536): at
large N one step already hides the call's overhead, and gymnax's Seaquest port, a few
thousand steps/s on a small CPU, would take minutes per 64-step call.

batchenv's games run with MinAtar's settings (sticky actions 0.1, difficulty ramping, no
time limit). Their observations are bool, in the compiled rows too (``InGraphBatchEnv`` keeps
a bool Box bool); gymnax's ports return float32 observations, a conversion an algorithm pays
at its first layer either way (it was half of a compiled Breakout step, RESULTS.md).
Target: batchenv >= 1.0x gymnax at every N (the ratio columns: batchenv steps/s over
gymnax's at the same N).

Every run is a fresh interpreter (``minatar_throughput_child.py`` in this folder, one per
side and game, all sizes in it) in a scratch working directory: gymnax with the JAX venv's
python (made by ``python benchmarks/jax_parity.py --setup``: jax[cpu], gymnax >= 1.0), ours
and minatar with this python, an empty TorchInductor cache for the compiled rows. Rounds
interleave the sides (the order reversed each round); the tables show medians over rounds.

    python benchmarks/jax_parity.py --setup                      # once: the JAX venv
    flock /tmp/bench.lock python benchmarks/minatar_throughput.py            # a few minutes
    flock /tmp/bench.lock python benchmarks/minatar_throughput.py --games breakout --compiled
    python benchmarks/minatar_throughput.py --games breakout --sizes 64 --seconds 0.2  # smoke
    python benchmarks/minatar_throughput.py --json minatar.json  # also write every run
    python benchmarks/minatar_throughput.py --torch-threads 1    # batchenv on one thread
    # a GPU machine whose python3 has jax with CUDA (gymnax on PYTHONPATH): both on the card
    python benchmarks/minatar_throughput.py --device cuda --jax-python python3 --compiled

Run the measurement with nothing else on the machine (other agents: under ``flock
/tmp/bench.lock``): every side uses every core. The JAX packages are never dependencies of
this project; ``--jax-python`` takes another interpreter (PYTHONPATH is then passed on to it).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from jax_parity import CACHE, machine, run_fresh, venv_python
from minatar_throughput_child import GAMES

SIDES = ("gymnax", "batchenv", "minatar")
RUN_TIMEOUT_S = 3600


# -- one run -----------------------------------------------------------------------------------


def spec_for(side: str, game: str, args: argparse.Namespace) -> dict | None:
    """The child's SPEC; None when the side has nothing to run (minatar above its max N)."""
    sizes = args.sizes
    if side == "minatar":
        sizes = [n for n in sizes if n <= args.minatar_max_n]
        if not sizes:
            return None
    spec = {"side": side, "game": game, "sizes": sizes, "seconds": args.seconds}
    if side == "batchenv":
        spec.update(
            device=args.device,
            compiled=args.compiled,
            unroll=args.unroll,
            threads=args.torch_threads,
            triton=args.triton,
        )
    return spec


def run_child(spec: dict, args: argparse.Namespace) -> dict:
    """Run ``spec`` in a fresh interpreter of its side; its RESULT, or ``{"error": ...}``."""
    return run_fresh("minatar_throughput_child.py", spec, args, jax_side="gymnax")


def describe(result: dict) -> str:
    failed = "FAILED " + result["error"] if "error" in result else ""
    if failed and not result.get("entries"):
        return failed
    parts = [failed] if failed else []
    for entry in result["entries"]:
        if "unavailable" in entry:
            parts.append(f"{entry['label']}: {entry['unavailable']}")
            continue
        compile_s = entry["compile_seconds"]
        parts.append(
            f"N={entry['num_envs']:,} {entry['steps_per_second']:,.0f} steps/s"
            + (f" (compile {compile_s:.1f} s)" if compile_s else "")
        )
    return "; ".join(parts)


def measure(args: argparse.Namespace) -> dict:
    """runs[game][side] = one result per round; the sides' order reversed every other round."""
    runs = {game: {side: [] for side in SIDES} for game in args.games}
    for round_index in range(args.rounds):
        for game in args.games:
            sides = SIDES if round_index % 2 == 0 else SIDES[::-1]
            for side in sides:
                spec = spec_for(side, game, args)
                if spec is None:
                    continue
                result = run_child(spec, args)
                runs[game][side].append(result)
                print(
                    f"[round {round_index + 1}/{args.rounds}] {game} {side}: {describe(result)}",
                    flush=True,
                )
    return runs


# -- summary -----------------------------------------------------------------------------------


def medians(results: list[dict], key: str) -> dict[tuple[str, int], float | str]:
    """``{(label, N): median of key over rounds}``; an unavailable entry gives its reason."""
    values: dict[tuple[str, int], list] = {}
    for result in results:
        for entry in result.get("entries", []):
            slot = values.setdefault((entry["label"], entry["num_envs"]), [])
            slot.append(entry.get(key, entry.get("unavailable")))
    return {
        where: found[0] if isinstance(found[0], str) else statistics.median(found)
        for where, found in values.items()
    }


def rate_of(rates: dict, num_envs: int, word: str) -> float | str | None:
    """The median rate of the program whose label contains ``word``, at ``num_envs``."""
    return next((v for (label, n), v in rates.items() if n == num_envs and word in label), None)


def rate_cell(value: float | str | None) -> str:
    if value is None:
        return "–"
    return value if isinstance(value, str) else f"{value:,.0f}"


def ratio_cell(ours: float | str | None, theirs: float | str | None) -> str:
    if isinstance(ours, float) and isinstance(theirs, float) and theirs > 0:
        return f"{ours / theirs:.2f}x"
    return "–"


def table(runs: dict, args: argparse.Namespace) -> list[str]:
    """One row per game and N: each side's steps/s and ours over gymnax's."""
    header = ["game", "N", "batchenv eager", "gymnax", "minatar loop", "eager / gymnax"]
    if args.compiled:
        header[3:3] = ["batchenv compiled"]
        header.append("compiled / gymnax")
    if args.triton:
        header[3:3] = ["batchenv Triton", "Triton, CUDA graph"]
        header += ["Triton / gymnax", "graph / gymnax"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for game, by_side in runs.items():
        rates = {side: medians(results, "steps_per_second") for side, results in by_side.items()}
        for n in args.sizes:
            eager = rate_of(rates["batchenv"], n, "eager")
            compiled = rate_of(rates["batchenv"], n, "compiled")
            gymnax = rate_of(rates["gymnax"], n, "gymnax")
            reference = rate_of(rates["minatar"], n, "minatar")
            if reference is None and n > args.minatar_max_n:
                reference = f"not run (N > --minatar-max-n {args.minatar_max_n:,})"
            cells = [game, f"{n:,}", rate_cell(eager), rate_cell(gymnax), rate_cell(reference)]
            cells.append(ratio_cell(eager, gymnax))
            if args.compiled:
                cells[3:3] = [rate_cell(compiled)]
                cells.append(ratio_cell(compiled, gymnax))
            if args.triton:
                kernel = rate_of(rates["batchenv"], n, "Triton")
                graphed = rate_of(rates["batchenv"], n, "CUDA graph")  # CUDA only
                cells[3:3] = [rate_cell(kernel), rate_cell(graphed)]
                cells += [ratio_cell(kernel, gymnax), ratio_cell(graphed, gymnax)]
            lines.append("| " + " | ".join(cells) + " |")
        for side in SIDES:
            failed = [r["error"] for r in by_side[side] if "error" in r]
            if failed:  # the last line of the first failure (the exception, usually)
                lines.append(f"| {game} | {side} FAILED: {failed[0].splitlines()[-1]} |")
    return lines


def compile_table(runs: dict, args: argparse.Namespace) -> list[str]:
    """Compile seconds (medians) of the programs that compile: gymnax's jit and, with
    ``--compiled``, our rollout."""
    header = ["game", "N", "gymnax jit s"] + (["batchenv rollout s"] if args.compiled else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for game, by_side in runs.items():
        ours = medians(by_side["batchenv"], "compile_seconds")
        theirs = medians(by_side["gymnax"], "compile_seconds")
        for n in args.sizes:
            cells = [game, f"{n:,}"]
            for rates, word in ((theirs, "gymnax"), (ours, "compiled")):
                if word == "compiled" and not args.compiled:
                    continue
                value = rate_of(rates, n, word)
                cells.append(f"{value:.1f}" if isinstance(value, float) else "–")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


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
    parser.add_argument("--games", default=",".join(GAMES), help="some of %(default)s")
    parser.add_argument("--sizes", default="256,4096,65536", help="numbers of envs")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed per program")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the median")
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also batchenv's compiled rollout (minutes of compiling per game and N on a CPU)",
    )
    parser.add_argument(
        "--triton",
        action="store_true",
        help="also the games' Triton kernels (backend='triton'; a GPU, or Triton's "
        "interpreter), and on CUDA those steps replayed as one CUDA graph per call",
    )
    parser.add_argument("--unroll", type=int, default=1, help="steps per compiled program")
    parser.add_argument(
        "--torch-threads",
        type=int,
        help="torch.set_num_threads on batchenv's side (default: torch's, every core; on a "
        "busy CPU one thread can be much faster for these small per-step ops)",
    )
    parser.add_argument(
        "--minatar-max-n", type=int, default=4096, help="the minatar loop only up to this N"
    )
    parser.add_argument(
        "--device", default="cpu", help="batchenv's torch device (gymnax: JAX's default device)"
    )
    parser.add_argument("--venv", type=Path, default=CACHE / "jax-venv")
    parser.add_argument(
        "--jax-python",
        type=Path,
        help="gymnax's interpreter instead of the venv's (e.g. a GPU machine's python3 with "
        "jax[cuda]; PYTHONPATH is then passed on, for gymnax)",
    )
    parser.add_argument("--timeout", type=int, default=RUN_TIMEOUT_S, help="per run, seconds")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write all runs here")
    args = parser.parse_args(argv)
    args.games = [name.strip() for name in args.games.split(",") if name.strip()]
    unknown = [name for name in args.games if name not in GAMES]
    if unknown or not args.games:
        parser.error(f"--games {unknown or args.games}: expected some of {', '.join(GAMES)}")
    try:
        args.sizes = [int(size) for size in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: expected comma-separated integers, e.g. 256,4096")
    if args.rounds < 1 or args.seconds <= 0 or args.timeout < 1 or min(args.sizes) < 1:
        parser.error("--rounds, --seconds, --timeout and every --sizes value must be positive")
    if args.torch_threads is not None and args.torch_threads < 1:
        parser.error(f"--torch-threads {args.torch_threads}: expected an int >= 1")
    if not 1 <= args.unroll <= 64:
        parser.error(f"--unroll {args.unroll}: expected 1 to 64 (steps per compiled program)")
    if args.device != "cpu":
        import torch

        try:
            device = torch.device(args.device)
        except RuntimeError as error:
            parser.error(f"--device {args.device}: {error}")
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error(f"--device {args.device}: this torch sees no CUDA device; use cpu")
        if args.jax_python is None:
            print("note: gymnax runs in the CPU venv; pass --jax-python for JAX with CUDA")
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no folder {args.json.parent}; create it first")
    if args.jax_python is None and not venv_python(args.venv).exists():
        parser.error(f"no JAX venv at {args.venv}; run: python benchmarks/jax_parity.py --setup")
    if args.jax_python is not None and not (
        args.jax_python.exists() or _on_path(str(args.jax_python))
    ):
        parser.error(f"--jax-python {args.jax_python}: no such interpreter; pass a python path")
    return args


def _on_path(name: str) -> bool:
    from shutil import which

    return which(name) is not None


def main(argv=None) -> None:
    args = parse_args(argv)
    info = machine()
    load = ", ".join(f"{value:.2f}" for value in info["load_average"])
    print(f"{info['date']}, {info['cpu']}, {info['cores']} cores, load average {load}")
    print(
        f"games {args.games}, N {args.sizes}, {args.rounds} round(s) of {args.seconds} s, "
        f"device {args.device}, compiled rows: {'yes' if args.compiled else 'no (--compiled)'}"
    )
    runs = measure(args)
    print(f"\nversions: {versions(runs)}")
    print(
        "\nEnv steps per second (all envs; medians over rounds; compile time excluded); "
        "ratios: batchenv / gymnax at the same N (target >= 1.0x). Observations: batchenv's "
        "are bool, gymnax's float32.\n"
    )
    print("\n".join(table(runs, args)))
    print("\nCompile seconds (medians over rounds):\n")
    print("\n".join(compile_table(runs, args)))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "args": _jsonable(args), "runs": runs}))


def _jsonable(args: argparse.Namespace) -> dict:
    return {
        key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
    }


if __name__ == "__main__":
    main()
