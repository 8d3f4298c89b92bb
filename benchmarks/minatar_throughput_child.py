"""One measured run of ``benchmarks/minatar_throughput.py``, in a fresh interpreter.

    python minatar_throughput_child.py SPEC

SPEC is a JSON object with ``side`` ("gymnax", "batchenv" or "minatar"), ``game`` (MinAtar's
name: "asterix", "breakout", "freeway", "seaquest" or "space_invaders"), ``sizes`` (numbers
of envs) and ``seconds`` (timed per program); the "batchenv" side also ``device``,
``compiled``, ``unroll`` and ``threads`` (torch's intra-op threads; None: torch's default).
The "gymnax" side runs with the JAX interpreter (jax, gymnax); the others with the
project's python. Each side imports only its own libraries, inside the functions below. The
run ends with one ``RESULT {json}`` line of the same shape on every side: ``{"side",
"game", "versions", "entries": [...]}``, each entry one measured program: ``label``,
``num_envs``, ``steps_per_second`` (env steps of all envs per second, run time only) and
``compile_seconds`` (0 for programs that compile nothing). An entry whose code
cannot be imported is ``{"label", "num_envs", "unavailable": reason}``.
"""

from __future__ import annotations

import json
import sys

# Helpers shared with the JAX parity benchmark (stdlib only at import, so the JAX
# interpreter can import them too; this folder is on sys.path as the script's own).
from jax_parity_child import (
    device_sync,
    first_call_compile,
    gymnax_scan,
    package_versions,
    steady_rate,
)

RESULT_PREFIX = "RESULT "
SCAN_STEPS = 64  # the most steps per compiled program call (gymnax's lax.scan, our rollout)
CALL_ENV_STEPS = 2**17  # fewer steps per call at large N: env steps of all envs per call
ACTION_BATCHES = 64  # distinct pre-drawn action batches for the per-step methods, cycled
WARM_STEPS = 3  # eager and reference steps before the clock starts

#: MinAtar's game name: (batchenv class in batchenv.kernels.minatar, gymnax id).
GAMES = {
    "asterix": ("Asterix", "Asterix-MinAtar"),
    "breakout": ("Breakout", "Breakout-MinAtar"),
    "freeway": ("Freeway", "Freeway-MinAtar"),
    "seaquest": ("Seaquest", "Seaquest-MinAtar"),
    "space_invaders": ("SpaceInvaders", "SpaceInvaders-MinAtar"),
}


def steps_per_call(num_envs: int) -> int:
    """Steps per compiled call at ``num_envs``: SCAN_STEPS, fewer where N is large (at N =
    65,536 a call is then 2 steps, still long enough to hide the per-call overhead, and one
    call of gymnax's Seaquest port, a few thousand steps/s on a small CPU, stays short)."""
    return max(1, min(SCAN_STEPS, CALL_ENV_STEPS // num_envs))


def main() -> None:
    spec = json.loads(sys.argv[-1])
    run = {"gymnax": run_gymnax, "batchenv": run_batchenv, "minatar": run_minatar}[spec["side"]]
    entries, versions = run(spec)
    result = {
        "side": spec["side"],
        "game": spec["game"],
        "versions": versions,
        "entries": entries,
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# -- gymnax (JAX) -------------------------------------------------------------------------------


def run_gymnax(spec: dict) -> tuple[list[dict], dict]:
    import jax

    versions = package_versions(["jax", "jaxlib", "gymnax"])
    versions["jax_devices"] = [str(device) for device in jax.devices()]
    entries = [gymnax_port(spec["game"], n, spec["seconds"]) for n in spec["sizes"]]
    return entries, versions


def gymnax_port(game: str, num_envs: int, seconds: float) -> dict:
    """gymnax's port of ``game``: a jitted ``lax.scan`` of ``steps_per_call`` random steps."""
    return gymnax_scan(GAMES[game][1], num_envs, seconds, steps_per_call(num_envs))


# -- batchenv -----------------------------------------------------------------------------------


def run_batchenv(spec: dict) -> tuple[list[dict], dict]:
    import torch

    if spec["threads"] is not None:
        torch.set_num_threads(spec["threads"])
    versions = package_versions(["torch", "batchenv"])
    versions["torch_threads"] = torch.get_num_threads()
    device = torch.device(spec["device"])
    if device.type == "cuda":
        versions["torch_device"] = torch.cuda.get_device_name(device)
    entries = []

    def measured(what: str, n: int, measure, *extra) -> None:
        """``measure(game, n, seconds, device, *extra)``; says on stderr what runs and prints
        its ENTRY line when done, so that a run cut by the parent's timeout tells both."""
        print(f"{spec['game']} N={n:,}: {what}", file=sys.stderr, flush=True)
        entries.append(measure(spec["game"], n, spec["seconds"], device, *extra))
        print("ENTRY " + json.dumps(entries[-1]), flush=True)

    for n in spec["sizes"]:
        measured("torch ops, eager", n, batchenv_eager)
        if spec.get("triton"):
            measured("Triton kernel", n, batchenv_eager, "triton")
            if device.type == "cuda":
                measured("CUDA graph", n, batchenv_graphed)
        if spec["compiled"]:
            measured("compiled rollout", n, batchenv_rollout, spec["unroll"])
            torch._dynamo.reset()  # the next N compiles afresh, timed on its own
    return entries, versions


def game_class(game: str):
    from batchenv.kernels import minatar

    return getattr(minatar, GAMES[game][0])


def batchenv_eager(game: str, num_envs: int, seconds: float, device, backend="torch") -> dict:
    """The env alone: ``env.step(action, reset_mask=done)`` with pre-drawn random actions, one
    call per step (the finished rows start afresh instead of stepping), on the game's eager
    torch ops or (``backend="triton"``) its one Triton kernel per step."""
    import torch

    label = f"batchenv {GAMES[game][0]}.step, " + ("eager" if backend == "torch" else "Triton")
    try:
        env = game_class(game)(num_envs, device=device, seed=0, backend=backend)
    except (ValueError, RuntimeError) as error:  # no Triton kernel for the game, or no GPU
        return {"label": label, "num_envs": num_envs, "unavailable": str(error).splitlines()[0]}
    generator = torch.Generator().manual_seed(0)
    shape = (ACTION_BATCHES, num_envs)
    actions = torch.randint(0, env.single_action_space.n, shape, generator=generator)
    actions = actions.to(device)
    done = torch.zeros(num_envs, dtype=torch.bool, device=device)
    index = 0

    def call():
        nonlocal done, index
        _, _, terminated, truncated = env.step(actions[index % ACTION_BATCHES], done)
        done = terminated | truncated
        index += 1

    sync = device_sync(device)
    with torch.inference_mode():
        for _ in range(WARM_STEPS):
            call()
        sync()
        rate = steady_rate(call, sync, seconds)
    return {
        "label": label,
        "num_envs": num_envs,
        "compile_seconds": 0.0,
        "steps_per_second": rate * num_envs,
    }


def batchenv_graphed(game: str, num_envs: int, seconds: float, device) -> dict:
    """The Triton step called ``steps_per_call(N)`` times (pre-drawn actions, finished rows
    started afresh), recorded once as a CUDA graph (``CudaGraphLoop``) and replayed: one
    launch per call instead of one per step."""
    import torch

    from batchenv.in_graph.cuda_graph import CudaGraphLoop, GraphCaptureError

    steps = steps_per_call(num_envs)
    label = f"batchenv {GAMES[game][0]}.step, kernel steps as one CUDA graph per {steps}"
    try:
        env = game_class(game)(num_envs, device=device, seed=0, backend="triton")
    except (ValueError, RuntimeError) as error:
        return {"label": label, "num_envs": num_envs, "unavailable": str(error).splitlines()[0]}
    generator = torch.Generator().manual_seed(0)
    shape = (steps, num_envs)
    actions = torch.randint(0, env.single_action_space.n, shape, generator=generator)
    carry = {"actions": actions.to(device), "done": torch.zeros(num_envs, dtype=torch.bool)}
    carry["done"] = carry["done"].to(device)

    def call():
        for step in range(steps):
            _, _, terminated, truncated = env.step(carry["actions"][step], carry["done"])
            carry["done"] = terminated | truncated

    try:  # 3 eager calls, the recording and its check against an eager call
        loop = CudaGraphLoop(call, {"env": env, "carry": carry})
        compile_seconds, rate = first_call_compile(loop, device_sync(device), 5, seconds)
    except GraphCaptureError as error:
        return {"label": label, "num_envs": num_envs, "unavailable": str(error).splitlines()[0]}
    return {
        "label": label,
        "num_envs": num_envs,
        "compile_seconds": compile_seconds,
        "steps_per_second": rate * steps * num_envs,
    }


def batchenv_rollout(game: str, num_envs: int, seconds: float, device, unroll: int) -> dict:
    """The in-graph counterpart of the gymnax scan: ``batchenv.in_graph.rollout(env, algo,
    steps=steps_per_call(N), unroll=unroll)`` with ``RandomAlgorithm`` (reset of finished rows,
    random actions, score and length bookkeeping, all compiled)."""
    from batchenv.in_graph.algorithm import RandomAlgorithm
    from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
    from batchenv.in_graph.rollout import rollout

    env = InGraphBatchEnv(game_class(game)(num_envs, device=device, seed=0))
    steps = steps_per_call(num_envs)
    unroll = min(unroll, steps)
    algo = RandomAlgorithm(env.single_action_space, device=device, seed=0)
    compile_seconds, rate = first_call_compile(
        lambda: rollout(env, algo, steps=steps, unroll=unroll),
        device_sync(device),
        3,
        seconds,
    )
    return {
        "label": f"batchenv rollout(steps={steps}, unroll={unroll}), compiled",
        "num_envs": num_envs,
        "compile_seconds": compile_seconds,
        "steps_per_second": rate * steps * num_envs,
    }


# -- the minatar package ------------------------------------------------------------------------


def run_minatar(spec: dict) -> tuple[list[dict], dict]:
    versions = package_versions(["MinAtar", "numpy"])
    entries = [minatar_loop(spec["game"], n, spec["seconds"]) for n in spec["sizes"]]
    return entries, versions


def minatar_loop(game: str, num_envs: int, seconds: float) -> dict:
    """The reference: ``num_envs`` ``minatar.Environment`` objects (MinAtar's defaults: sticky
    actions 0.1, ramping) stepped in a Python loop, every env once per sweep: ``act``, its
    observation ``state()``, ``reset()`` when it ended. All envs step in every sweep (no
    subset); a short ``--seconds`` just times fewer sweeps."""
    label = "minatar package, Python loop over the envs"
    try:
        import minatar
        import numpy as np
    except ImportError as error:
        return {"label": label, "num_envs": num_envs, "unavailable": f"not installed ({error})"}
    envs = [minatar.Environment(game) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.seed(i)
        env.reset()
    table = np.asarray(envs[0].minimal_action_set())
    rng = np.random.default_rng(0)
    actions = table[rng.integers(0, len(table), size=(ACTION_BATCHES, num_envs))].tolist()
    index = 0

    def call():
        nonlocal index
        for env, action in zip(envs, actions[index % ACTION_BATCHES]):
            _, terminal = env.act(action)
            env.state()
            if terminal:
                env.reset()
        index += 1

    for _ in range(WARM_STEPS):
        call()
    rate = steady_rate(call, lambda: None, seconds)
    return {
        "label": label,
        "num_envs": num_envs,
        "compile_seconds": 0.0,
        "steps_per_second": rate * num_envs,
    }


if __name__ == "__main__":
    main()
