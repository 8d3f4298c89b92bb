"""One measured run of ``benchmarks/jax_parity.py``, in a fresh interpreter.

    python jax_parity_child.py SPEC

SPEC is a JSON object with ``side`` ("jax" or "batchenv"), ``workload`` ("ppo", "seeds" or
"stepping") and the workload's settings. The "jax" side runs with the JAX venv's python (jax,
gymnax, flax, optax, distrax, and PureJaxRL's folder from ``purejaxrl_dir``); the "batchenv"
side with the project's python. Each side imports only its own libraries, inside the
functions below. The run ends with one ``RESULT {json}`` line of the same shape on both sides:
``{"side", "workload", "versions", "entries": [...]}``, each entry one measured program:

* ppo, seeds: ``label``, ``seeds``, ``env_steps`` (all seeds), ``wall_seconds`` (building,
  compiling and running the training, not the interpreter start or imports),
  ``compile_seconds``, ``run_seconds``, ``steps_per_second`` (env steps / run seconds),
  ``steps_per_update`` and ``returns``: per update and seed (``[updates][seeds]``) the mean
  return of the episodes that ended in that update, carried forward through updates where
  none ended (None before the first);
* stepping: ``label``, ``num_envs``, ``compile_seconds``, ``steps_per_second``.

An entry whose code cannot be imported is ``{"label", "unavailable": reason}``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable

RESULT_PREFIX = "RESULT "
SCAN_STEPS = 64  # env steps per program call in the stepping workload
ACTION_BATCHES = 64  # distinct pre-drawn action batches for the per-step methods, cycled


def main() -> None:
    spec = json.loads(sys.argv[-1])
    run = {"jax": run_jax, "batchenv": run_batchenv}[spec["side"]]
    entries, versions = run(spec)
    result = {
        "side": spec["side"],
        "workload": spec["workload"],
        "versions": versions,
        "entries": entries,
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# -- shared helpers ---------------------------------------------------------------------------


def carried_forward(means: list[list[float]]) -> list[list[float | None]]:
    """Replace NaN (no episode ended in that update) by the seed's previous value."""
    curve, last = [], [None] * (len(means[0]) if means else 0)
    for row in means:
        last = [last[i] if math.isnan(value) else float(value) for i, value in enumerate(row)]
        curve.append(list(last))
    return curve


def steady_rate(call: Callable[[], object], sync: Callable[[], None], seconds: float) -> float:
    """Calls of ``call()`` per second over at least ``seconds`` (after the caller warmed it)."""
    count, begin = 0, time.perf_counter()
    while True:
        call()
        count += 1
        if count % 4 == 0 or count < 4:
            sync()
            elapsed = time.perf_counter() - begin
            if elapsed >= seconds:
                return count / elapsed


def first_call_compile(
    call: Callable[[], object], sync: Callable[[], None], warm_calls: int, seconds: float
) -> tuple[float, float]:
    """``(compile_seconds, calls_per_second)`` of a function that compiles on first use.

    The warm-up (``warm_calls`` calls) takes compile time plus ``warm_calls`` ordinary calls;
    compile time is the warm-up minus ``warm_calls`` calls at the steady rate measured after.
    """
    begin = time.perf_counter()
    for _ in range(warm_calls):
        call()
    sync()
    warm = time.perf_counter() - begin
    rate = steady_rate(call, sync, seconds)
    return max(0.0, warm - warm_calls / rate), rate


def package_versions(names: list[str]) -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


# -- JAX: PureJaxRL's ppo.py and gymnax -------------------------------------------------------


def run_jax(spec: dict) -> tuple[list[dict], dict]:
    import jax

    versions = package_versions(["jax", "jaxlib", "gymnax", "flax", "optax", "distrax"])
    versions["jax_devices"] = [str(device) for device in jax.devices()]
    if spec["workload"] == "stepping":
        entries = [jax_stepping(n, spec["seconds"]) for n in spec["sizes"]]
    else:
        entries = [jax_ppo(spec)]
    return entries, versions


def jax_ppo(spec: dict) -> dict:
    """PureJaxRL's ``make_train(config)`` under ``jax.jit`` (one seed) or ``jax.jit(jax.vmap)``
    over ``seeds`` keys split from one (as PureJaxRL's walkthrough runs many seeds)."""
    import jax
    import numpy as np

    sys.path.insert(0, spec["purejaxrl_dir"])
    import ppo  # PureJaxRL's purejaxrl/ppo.py

    seeds = spec["seeds"]
    config = dict(spec["purejaxrl_config"])
    begin = time.perf_counter()
    train = ppo.make_train(config)
    key = jax.random.PRNGKey(spec["seed"])
    if seeds == 1:
        program, argument = jax.jit(train), key
    else:
        program, argument = jax.jit(jax.vmap(train)), jax.random.split(key, seeds)
    compiled = program.lower(argument).compile()
    compiled_at = time.perf_counter()
    out = jax.block_until_ready(compiled(argument))
    end = time.perf_counter()

    metrics = out["metrics"]
    returns = np.asarray(metrics["returned_episode_returns"], dtype=np.float64)
    ended = np.asarray(metrics["returned_episode"], dtype=np.float64)
    if seeds == 1:  # [updates, steps, envs] -> [1, updates, steps, envs]
        returns, ended = returns[None], ended[None]
    with np.errstate(invalid="ignore"):
        means = (returns * ended).sum(axis=(2, 3)) / ended.sum(axis=(2, 3))  # [seeds, updates]
    updates = means.shape[1]
    steps_per_update = config["NUM_STEPS"] * config["NUM_ENVS"]
    env_steps = seeds * updates * steps_per_update
    kind = "jax.jit" if seeds == 1 else f"jax.jit(jax.vmap) over {seeds} seeds"
    return {
        "label": f"PureJaxRL ppo.py, {kind}",
        "seeds": seeds,
        "env_steps": env_steps,
        "wall_seconds": end - begin,
        "compile_seconds": compiled_at - begin,
        "run_seconds": end - compiled_at,
        "steps_per_second": env_steps / (end - compiled_at),
        "steps_per_update": steps_per_update,
        "returns": carried_forward(means.T.tolist()),
    }


def jax_stepping(num_envs: int, seconds: float) -> dict:
    """gymnax CartPole-v1 in a ``lax.scan`` of SCAN_STEPS steps (:func:`gymnax_scan`)."""
    return gymnax_scan("CartPole-v1", num_envs, seconds, SCAN_STEPS)


def gymnax_scan(env_name: str, num_envs: int, seconds: float, steps: int) -> dict:
    """gymnax's ``env_name``: ``jax.jit`` of a ``lax.scan`` over ``steps`` steps of
    ``vmap(env.step)`` (which resets finished envs itself) with uniformly random actions
    drawn in the program. The carry keeps the last observation, the reward sum and the
    number of finished episodes, so XLA computes what a training loop reads (an unused
    observation would be dead code)."""
    import gymnax
    import jax
    import jax.numpy as jnp

    env, params = gymnax.make(env_name)
    actions = env.num_actions
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def body(carry, _):
        key, state, _, reward_sum, episodes = carry
        key, action_key, step_key = jax.random.split(key, 3)
        action = jax.random.randint(action_key, (num_envs,), 0, actions)
        keys = jax.random.split(step_key, num_envs)
        obs, state, reward, terminated, truncated, _ = step(keys, state, action, params)
        done = jnp.logical_or(terminated, truncated)
        return (key, state, obs, reward_sum + reward, episodes + done), None

    def rollout(carry):
        carry, _ = jax.lax.scan(body, carry, None, length=steps)
        return carry

    key, reset_key = jax.random.split(jax.random.PRNGKey(0))
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(reset_key, num_envs), params
    )
    carry = (key, state, obs, jnp.zeros(num_envs), jnp.zeros(num_envs, jnp.int32))
    begin = time.perf_counter()
    compiled = jax.jit(rollout).lower(carry).compile()
    compile_seconds = time.perf_counter() - begin
    carry = jax.block_until_ready(compiled(carry))

    def call():
        nonlocal carry
        carry = compiled(carry)

    rate = steady_rate(call, lambda: jax.block_until_ready(carry), seconds)
    return {
        "label": f"gymnax lax.scan of {steps} steps",
        "num_envs": num_envs,
        "compile_seconds": compile_seconds,
        "steps_per_second": rate * steps * num_envs,
    }


# -- batchenv ---------------------------------------------------------------------------------


def run_batchenv(spec: dict) -> tuple[list[dict], dict]:
    import torch

    versions = package_versions(["torch", "batchenv", "gymnasium"])
    if spec.get("torch_threads"):
        torch.set_num_threads(spec["torch_threads"])
    versions["torch_threads"] = torch.get_num_threads()
    device = torch.device(spec.get("device", "cpu"))
    if device.type == "cuda":
        versions["torch_device"] = torch.cuda.get_device_name(device)
    if spec["workload"] == "stepping":
        entries = []
        for n in spec["sizes"]:
            entries += [
                batchenv_rollout(n, spec["seconds"], device),
                # gymnax checks nothing: the same rollout without the finite check, replayed
                # as one CUDA graph on a GPU
                batchenv_rollout(n, spec["seconds"], device, check_finite=False),
                batchenv_step(n, spec["seconds"], device),
                gymnasium_vector(n, spec["seconds"]),
            ]
            torch._dynamo.reset()
    else:
        entries = [batchenv_ppo(spec)]
    return entries, versions


def batchenv_ppo(spec: dict) -> dict:
    """``batchenv.algorithms.ppo.train`` on PureJaxRL's CartPole config."""
    import numpy as np

    label = f"batchenv PPO train, {spec['seeds']} seed{'s' if spec['seeds'] > 1 else ''}"
    try:
        from batchenv.algorithms.ppo import PPOConfig, train
    except ImportError as error:
        return {"label": label, "unavailable": f"not available ({error})"}
    config = PPOConfig(
        **spec["batchenv_config"],
        seeds=spec["seeds"],
        device=spec.get("device", "cpu"),
        torch_threads=spec.get("torch_threads") or 0,
    )
    begin = time.perf_counter()
    result = train(config)
    wall = time.perf_counter() - begin
    returns = result.returns
    returns = np.asarray(returns.cpu() if hasattr(returns, "cpu") else returns, dtype=np.float64)
    returns = returns.reshape(returns.shape[0], -1)  # [updates, seeds]
    steps_per_update = config.num_envs * config.num_steps
    env_steps = returns.size * steps_per_update
    rate = float(result.steps_per_second)  # after compiling, all seeds
    return {
        "label": label,
        "seeds": spec["seeds"],
        "env_steps": env_steps,
        "wall_seconds": wall,
        "compile_seconds": float(result.compile_seconds),
        "run_seconds": env_steps / rate,
        "steps_per_second": rate,
        "steps_per_update": steps_per_update,
        "torch_threads": config.threads() or "torch's default",
        "returns": carried_forward(returns.tolist()),
    }


def random_algorithm():
    """``RandomAlgorithm`` from ``batchenv.in_graph``, or its module where not re-exported."""
    try:
        from batchenv.in_graph import RandomAlgorithm
    except ImportError:
        from batchenv.in_graph.algorithm import RandomAlgorithm
    return RandomAlgorithm


def device_sync(device) -> Callable[[], None]:
    """What makes a timer honest on ``device``: CUDA runs kernels asynchronously."""
    import torch

    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def batchenv_rollout(num_envs: int, seconds: float, device, check_finite: bool = True) -> dict:
    """``batchenv.in_graph.rollout(env, algo, steps=SCAN_STEPS)``: the in-graph counterpart of
    the gymnax scan (reset of finished rows, random actions, score and length bookkeeping).
    Where ``rollout`` is missing: ``torch.compile(simulate)`` called SCAN_STEPS times.
    ``check_finite=False``: without InGraphBatchEnv's per-step check of non-finite values,
    and on CUDA each call replays the rollout as one CUDA graph (``CudaGraphLoop``; the check
    reads a count on the host, which a graph cannot record)."""
    from batchenv.kernels import CartPole

    env = CartPole(num_envs=num_envs, seed=0, device=device)
    algo = random_algorithm()(env.single_action_space, seed=0, device=device)
    try:
        from batchenv.in_graph import rollout
    except ImportError:
        return simulate_loop(env, algo, num_envs, seconds)
    rollout = getattr(rollout, "rollout", rollout)  # the module's function, if not re-exported
    graph = not check_finite and device.type == "cuda"
    if not check_finite:
        from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv

        env = InGraphBatchEnv(env, check_finite=False)

    def call():
        return rollout(env, algo, steps=SCAN_STEPS)

    if graph:
        from batchenv.in_graph.cuda_graph import CudaGraphLoop

        call = CudaGraphLoop(call, {"env": env, "algo": algo})
    # A graph's warm-up: 3 eager calls, the recording and the check against an eager call.
    warm_calls = 5 if graph else 3
    compile_seconds, rate = first_call_compile(call, device_sync(device), warm_calls, seconds)
    return {
        "label": f"batchenv rollout(steps={SCAN_STEPS})"
        + (", CUDA graph" if graph else "")
        + ("" if check_finite else ", no finite check"),
        "num_envs": num_envs,
        "compile_seconds": compile_seconds,
        "steps_per_second": rate * SCAN_STEPS * num_envs,
    }


def simulate_loop(env, algo, num_envs: int, seconds: float) -> dict:
    import torch

    from batchenv.in_graph.simulate import simulate

    compiled = torch.compile(simulate)

    def call():
        for _ in range(SCAN_STEPS):
            compiled(env, algo)

    # One warm-up call is 64 simulate() steps: enough for Dynamo to see index-set sizes
    # 0, 1 and many, after which nothing recompiles.
    compile_seconds, rate = first_call_compile(call, lambda: None, 1, seconds)
    return {
        "label": f"batchenv torch.compile(simulate) x {SCAN_STEPS} (rollout not available)",
        "num_envs": num_envs,
        "compile_seconds": compile_seconds,
        "steps_per_second": rate * SCAN_STEPS * num_envs,
    }


def batchenv_step(num_envs: int, seconds: float, device) -> dict:
    """The env alone: ``torch.compile`` of ``CartPole.step(action, reset_mask=done)`` with
    pre-drawn random actions, one call per step (no algorithm, no bookkeeping)."""
    import torch

    from batchenv.kernels import CartPole

    env = CartPole(num_envs=num_envs, seed=0, device=device)
    actions = torch.randint(0, 2, (ACTION_BATCHES, num_envs), device=device)
    done = torch.zeros(num_envs, dtype=torch.bool, device=device)

    def step(action, reset_mask):
        _, _, terminated, truncated = env.step(action, reset_mask)
        return terminated | truncated

    compiled = torch.compile(step)
    index = 0

    def call():
        nonlocal done, index
        for _ in range(SCAN_STEPS):
            done = compiled(actions[index % ACTION_BATCHES], done)
            index += 1

    compile_seconds, rate = first_call_compile(call, device_sync(device), 1, seconds)
    return {
        "label": "batchenv CartPole.step, torch.compile",
        "num_envs": num_envs,
        "compile_seconds": compile_seconds,
        "steps_per_second": rate * SCAN_STEPS * num_envs,
    }


def gymnasium_vector(num_envs: int, seconds: float) -> dict:
    """Gymnasium's NumPy-vectorised CartPole (``vector_entry_point``), pre-drawn random
    actions, autoreset on the next step."""
    import gymnasium as gym
    import numpy as np

    env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(ACTION_BATCHES, num_envs))
    index = 0

    def call():
        nonlocal index
        for _ in range(SCAN_STEPS):
            env.step(actions[index % ACTION_BATCHES])
            index += 1

    call()
    rate = steady_rate(call, lambda: None, seconds)
    env.close()
    return {
        "label": f"Gymnasium {gym.__version__} NumPy vector env",
        "num_envs": num_envs,
        "compile_seconds": 0.0,
        "steps_per_second": rate * SCAN_STEPS * num_envs,
    }


if __name__ == "__main__":
    main()
