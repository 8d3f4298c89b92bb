"""GPU-native env throughput: Triton kernels vs torch eager vs torch.compile, the sampler,
and an end-to-end training loop, with ratios to WarpDrive's published V100 figures.

Sections (each row is measured in this run, on this machine):

  env steps/s   Tag (discrete and continuous) over num_envs (100 ... 100k) and agents per
                env (5 ... 1000). One step = every env advances once with random actions,
                and the envs that finished at the previous step start afresh in the same
                call (``reset_mask``), so episode turnover is included and nothing leaves
                the device. "env steps/s" counts envs x steps per second (WarpDrive's unit);
                agent steps/s are that times the agents per env. On a GPU each Triton row
                has a "triton-graphed" twin: the same loop, 8 steps recorded once as a CUDA
                graph and replayed (one launch per 8 steps).
  sampler       actions/s of ``sample_categorical`` (Triton) vs ``torch.multinomial`` and
                ``torch.distributions.Categorical`` on ``[envs x agents, 5]`` logits.
  end-to-end    training iterations/s (env steps/s of a rollout + learning loop): per step a
                shared MLP policy, categorical sampling and the env step; every 16 steps one
                actor-critic gradient step. WarpDrive's unit again. On a GPU a
                "triton-graphed" row replays each 16 steps and their gradient step as one
                CUDA graph.
  classic       CartPole steps/s over N, the same loop as the env rows (step with the
                previous step's finished rows as ``reset_mask``, then ``terminated |
                truncated``).

Anchors (WarpDrive: Lan et al., "WarpDrive: Extremely Fast End-to-End Deep Multi-Agent
Reinforcement Learning on a GPU", 2021; one V100): discrete Tag 2000 envs x 5 agents 9.8M env
steps/s, x 1000 agents 2.9M; continuous Tag 2000 x 5 8.3M, x 105 0.15M; sampler 18M
actions/s; end-to-end 1.3M (x 5 agents), 0.58M (x 1000). gymnax (Lange, 2022): CartPole
~20M steps/s with 2k envs on an A100. Target: >= 5x WarpDrive's figures. Rows with the
anchor's configuration print the ratio.

Predicted column: every Triton row (measured, or listed as needing a GPU) also prints what
the roofline model of ``benchmarks/gpu_model.py`` predicts for the same configuration and
loop on an H100 (an H200 when the device is one), and the measured/predicted ratio -- the
first GPU run checks the model (docs/gpu.md) in this one command. ``--no-predict`` skips it.

Without a GPU the Triton rows are listed as needing one (on CPU Triton runs only in its
interpreter, which is for tests) and the torch backends run at modest sizes::

    python benchmarks/gpu_envs.py                 # full grid on CUDA, modest grid on CPU
    python benchmarks/gpu_envs.py --quick         # fewer sizes, shorter runs
    python benchmarks/gpu_envs.py --no-compile    # skip the torch.compile rows
    python benchmarks/gpu_envs.py --no-predict    # skip the model's predicted column
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from batchenv.kernels import CartPole, ContinuousTag, DiscreteTag, _triton
from batchenv.kernels.sampler import _sample_kernel, sample_categorical

try:  # the roofline model, for the predicted column
    from benchmarks import gpu_model
except ImportError:
    try:
        import gpu_model  # run as a script: this folder is on sys.path
    except ImportError:
        gpu_model = None

# (name, num_envs, agents) -> WarpDrive's V100 figure.
ANCHORS = {
    ("discrete", 2000, 5): 9.8e6,
    ("discrete", 2000, 1000): 2.9e6,
    ("continuous", 2000, 5): 8.3e6,
    ("continuous", 2000, 105): 0.15e6,
    ("sampler", 2000, 5): 18e6,
    ("end-to-end", 2000, 5): 1.3e6,
    ("end-to-end", 2000, 1000): 0.58e6,
    ("cartpole", 2048, 1): 20e6,  # gymnax, one A100
}
TARGET = 5.0
#: Steps recorded in one CUDA graph by the graphed rows.
GRAPH_STEPS = 8
#: Largest observation tensor a row may allocate; bigger rows use the partial observation.
MAX_OBS_BYTES = 1 << 30


@dataclass
class Row:
    """One measured configuration."""

    section: str
    game: str
    backend: str
    num_envs: int
    agents: int
    rate: float | None  #: steps (or actions) per second; None: not run
    note: str = ""
    predicted: float | None = None  #: the roofline model's figure for this row (Triton rows)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(
    step: Callable[[int], object], device: torch.device, seconds: float, warmup: int
) -> float:
    """Calls of ``step(i)`` per second, after ``warmup`` calls, for about ``seconds``."""
    for i in range(warmup):
        step(i)
    sync(device)
    calls, begin = 0, time.perf_counter()
    batch = 1
    while True:
        for i in range(batch):
            step(calls + i)
        calls += batch
        sync(device)
        elapsed = time.perf_counter() - begin
        if elapsed >= seconds:
            return calls / elapsed
        batch = min(batch * 2, 256)


# -- envs -----------------------------------------------------------------------------------


def make_game(game: str, num_envs: int, agents: int, backend: str, device: torch.device):
    """Tag with ``agents`` per env: discrete (agents - 1 taggers, one runner; full
    observation unless it would exceed MAX_OBS_BYTES) or continuous (1 tagger per 20 agents,
    the rest runners, all others observed up to the same memory cap, else the 10 nearest);
    or ``"cartpole"`` (``agents`` is 1)."""
    if game == "cartpole":
        return CartPole(num_envs, device=device, seed=0, backend=backend), ""
    if game == "discrete":
        full = num_envs * agents * (4 * agents + 1) * 4 <= MAX_OBS_BYTES
        env = DiscreteTag(
            num_envs,
            num_taggers=agents - 1,
            full_observation=full,
            device=device,
            seed=0,
            backend=backend,
        )
        return env, "full obs" if full else "partial obs"
    taggers = max(1, agents // 20)
    all_observed = num_envs * agents * (7 * (agents - 1) + 1) * 4 * 8 <= MAX_OBS_BYTES * 4
    env = ContinuousTag(
        num_envs,
        num_taggers=taggers,
        num_runners=agents - taggers,
        num_other_agents_observed=None if all_observed else min(10, agents - 1),
        device=device,
        seed=0,
        backend=backend,
    )
    return env, "all observed" if all_observed else "10 nearest"


def random_actions(env, count: int) -> list[torch.Tensor]:
    if isinstance(env, CartPole):
        shape, high = (env.num_envs,), 2
    else:
        shape = (env.num_envs, env.num_agents, *env.single_action_space.shape)
        high = 5 if isinstance(env, DiscreteTag) else int(env.single_action_space.nvec[0])
    generator = torch.Generator(device=env.device).manual_seed(0)
    return [
        torch.randint(0, high, shape, generator=generator, device=env.device) for _ in range(count)
    ]


def env_rate(game, num_envs, agents, backend, device, seconds, compiled=False) -> Row:
    label = "torch-compiled" if compiled else backend
    try:
        env, note = make_game(game, num_envs, agents, backend, device)
        actions = random_actions(env, 8)
        # Plain torch.compile: fullgraph=True costs a config patch on every call; the tests
        # check with fullgraph=True that the step has no graph break.
        step = torch.compile(env.step) if compiled else env.step
        state = {"done": torch.zeros(num_envs, dtype=torch.bool, device=device)}

        def one(i):
            _, _, terminated, truncated = step(actions[i % 8], state["done"])
            state["done"] = terminated | truncated

        rate = timed(one, device, seconds, warmup=3 if compiled else 2) * num_envs
        return Row(section(game), game, label, num_envs, agents, rate, note)
    except torch.OutOfMemoryError:
        return Row(section(game), game, label, num_envs, agents, None, "out of memory")
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def graphed_env_rate(game, num_envs, agents, device, seconds) -> Row:
    """The Triton row's loop with ``GRAPH_STEPS`` steps recorded once as a CUDA graph
    (``CudaGraphLoop``) and replayed: one launch per ``GRAPH_STEPS`` steps instead of the
    kernel and its few torch ops on every step."""
    from batchenv.in_graph.cuda_graph import CudaGraphLoop, GraphCaptureError

    label = "triton-graphed"
    try:
        env, note = make_game(game, num_envs, agents, "triton", device)
        actions = random_actions(env, GRAPH_STEPS)
        state = {"done": torch.zeros(num_envs, dtype=torch.bool, device=device)}

        def steps():
            for action in actions:
                _, _, terminated, truncated = env.step(action, state["done"])
                state["done"] = terminated | truncated

        loop = CudaGraphLoop(steps, {"env": env, "state": state})
        rate = timed(lambda i: loop(), device, seconds, warmup=5) * num_envs * GRAPH_STEPS
        return Row(section(game), game, label, num_envs, agents, rate, note)
    except GraphCaptureError as error:
        reason = str(error).splitlines()[0]
        return Row(section(game), game, label, num_envs, agents, None, f"not graphed: {reason}")
    except torch.OutOfMemoryError:
        return Row(section(game), game, label, num_envs, agents, None, "out of memory")
    finally:
        torch.cuda.empty_cache()


def section(game: str) -> str:
    return "classic" if game == "cartpole" else "env"


# -- the model's predictions --------------------------------------------------------------------


def predict(row: Row, gpu_name: str) -> float | None:
    """The roofline model's figure for a Triton row (None for other rows, or without the
    model): env steps/s of the same loop, or sampler actions/s, eager launches."""
    if gpu_model is None or row.backend != "triton":
        return None
    gpu = gpu_model.gpu_for(gpu_name)
    meta = torch.device("meta")
    try:
        if row.section == "sampler":
            rows = row.num_envs * row.agents
            return gpu_model.predict_sampler_rate(rows, 5, gpu=gpu).steps_per_s
        if row.section in ("env", "classic"):
            env, _ = make_game(row.game, row.num_envs, row.agents, "torch", meta)
            return gpu_model.predict_env_rate(env, gpu=gpu).steps_per_s
    except Exception as error:  # noqa: BLE001 -- a missing prediction must not stop the run
        print(f"  no prediction for {row.game} {row.num_envs} x {row.agents}: {error}")
    return None


# -- sampler --------------------------------------------------------------------------------


def sampler_rows(num_envs, agents, device, seconds, triton_ok) -> list[Row]:
    logits = torch.randn(num_envs, agents, 5, device=device)
    rows = []
    methods = {
        "torch.multinomial": lambda i: torch.multinomial(
            torch.softmax(logits.reshape(-1, 5), dim=-1), 1
        ),
        "torch Categorical": lambda i: torch.distributions.Categorical(logits=logits).sample(),
    }
    if triton_ok:
        out = torch.empty(num_envs, agents, dtype=torch.int64, device=device)
        methods = {
            "triton": lambda i: sample_categorical(
                logits=logits, seed=1, offset=i, out=out, validate=False
            ),
            **methods,
        }
    else:
        rows.append(Row("sampler", "categorical", "triton", num_envs, agents, None, "needs a GPU"))
    for name, fn in methods.items():
        rate = timed(fn, device, seconds, warmup=2) * num_envs * agents
        rows.append(Row("sampler", "categorical", name, num_envs, agents, rate))
    return rows


# -- end to end -----------------------------------------------------------------------------


class Policy(nn.Module):
    """Shared actor-critic MLP over every agent's observation."""

    def __init__(self, observ_size: int, hidden: int = 64):
        super().__init__()
        self.torso = nn.Sequential(nn.Linear(observ_size, hidden), nn.Tanh())
        self.heads = nn.Linear(hidden, 6)  # 5 logits and a value

    def forward(self, observ):
        out = self.heads(self.torso(observ))
        return out[..., :5], out[..., 5]


def training_tag(num_envs, agents, backend, device) -> tuple[DiscreteTag, Policy]:
    """The end-to-end rows' env (discrete Tag, partial observation) and a fresh policy."""
    env = DiscreteTag(
        num_envs,
        num_taggers=agents - 1,
        full_observation=False,
        device=device,
        seed=0,
        backend=backend,
    )
    return env, Policy(env.obs_dim).to(device)


def a2c_step(policy, optimizer, buffer, rollout) -> None:
    """One actor-critic gradient step on ``rollout`` buffered steps (discounted returns)."""
    obs, act, rew, fin = (torch.stack(x) for x in zip(*buffer))
    logits, value = policy(obs)
    with torch.no_grad():
        ret = torch.zeros_like(rew[0])
        returns = []
        for t in reversed(range(rollout)):
            ret = rew[t] + 0.97 * ret * (~fin[t])[:, None]
            returns.append(ret)
        returns = torch.stack(returns[::-1])
    log_prob = torch.log_softmax(logits, -1).gather(-1, act[..., None])[..., 0]
    advantage = (returns - value).detach()
    loss = -(log_prob * advantage).mean() + 0.5 * (returns - value).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def end_to_end_rate(num_envs, agents, backend, device, seconds, rollout=16) -> Row:
    """Env steps/s of a rollout + A2C loop on discrete Tag (partial observation)."""
    try:
        env, policy = training_tag(num_envs, agents, backend, device)
        optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
        observ = env.reset(torch.arange(num_envs, device=device))
        done = torch.zeros(num_envs, dtype=torch.bool, device=device)
        buffer: list[tuple[torch.Tensor, ...]] = []
        use_kernel = backend == "triton"

        def one(i):
            nonlocal observ, done
            with torch.no_grad():
                logits, _ = policy(observ)
                if use_kernel:
                    action = sample_categorical(logits=logits, seed=0, offset=i, validate=False)
                else:
                    probs = torch.softmax(logits.reshape(-1, 5), dim=-1)
                    action = torch.multinomial(probs, 1).reshape(num_envs, agents)
            next_observ, reward, terminated, truncated = env.step(action, done)
            buffer.append((observ, action, reward, terminated | truncated))
            observ, done = next_observ, terminated | truncated
            if len(buffer) == rollout:
                a2c_step(policy, optimizer, buffer, rollout)
                buffer.clear()

        rate = timed(one, device, seconds, warmup=rollout) * num_envs
        return Row("end-to-end", "discrete", backend, num_envs, agents, rate)
    except torch.OutOfMemoryError:
        return Row("end-to-end", "discrete", backend, num_envs, agents, None, "out of memory")


def graphed_end_to_end_rate(num_envs, agents, device, seconds, rollout=16) -> Row:
    """The Triton end-to-end loop with one iteration (``rollout`` steps and the gradient
    step) recorded as one CUDA graph and replayed. Actions are Gumbel-max samples of
    counter-based uniforms keyed by a step count on the device (the Triton sampler takes
    its offset as a Python int, which a replay would freeze); Adam is ``capturable``."""
    from batchenv.algorithms.ppo.distributions import sample_categorical as gumbel_max
    from batchenv.in_graph.counter_rng import counter_uniform, make_key
    from batchenv.in_graph.cuda_graph import CudaGraphLoop, GraphCaptureError

    label = "triton-graphed"
    try:
        env, policy = training_tag(num_envs, agents, "triton", device)
        optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3, capturable=True)
        key, rows = make_key(0, device), torch.arange(num_envs * agents, device=device)
        state = {
            "observ": env.reset(torch.arange(num_envs, device=device)),
            "done": torch.zeros(num_envs, dtype=torch.bool, device=device),
            "count": torch.zeros((), dtype=torch.int64, device=device),
        }

        def iteration():
            buffer = []
            for _ in range(rollout):
                with torch.no_grad():
                    logits, _ = policy(state["observ"])
                    u = counter_uniform(key, rows, state["count"].expand(rows.shape), 5)
                    action = gumbel_max(logits, u.reshape(logits.shape))
                next_observ, reward, terminated, truncated = env.step(action, state["done"])
                finished = terminated | truncated
                buffer.append((state["observ"], action, reward, finished))
                state.update(observ=next_observ, done=finished, count=state["count"] + 1)
            a2c_step(policy, optimizer, buffer, rollout)

        iteration()  # Adam makes its state on its first step
        adam = [optimizer.state[p] for p in policy.parameters()]
        loop = CudaGraphLoop(iteration, {"env": env, "policy": policy, "adam": adam, "s": state})
        rate = timed(lambda i: loop(), device, seconds, warmup=5) * num_envs * rollout
        return Row("end-to-end", "discrete", label, num_envs, agents, rate)
    except GraphCaptureError as error:
        reason = str(error).splitlines()[0]
        return Row(
            "end-to-end", "discrete", label, num_envs, agents, None, f"not graphed: {reason}"
        )
    except torch.OutOfMemoryError:
        return Row("end-to-end", "discrete", label, num_envs, agents, None, "out of memory")


# -- the report -----------------------------------------------------------------------------


def fmt_rate(rate: float | None) -> str:
    if rate is None:
        return "-"
    if rate < 1e3:
        return f"{rate:.1f}"
    if rate >= 1e9:
        return f"{rate / 1e9:.3f}G"
    return f"{rate / 1e6:.3f}M" if rate >= 1e5 else f"{rate / 1e3:.1f}k"


def print_rows(rows: list[Row]) -> None:
    print(
        f"{'section':<11}{'game':<12}{'backend':<19}{'envs':>8}{'agents':>7}"
        f"{'per second':>13}{'agent-steps/s':>15}{'vs anchor':>10}{'predicted':>11}"
        f"{'meas/pred':>10}  note"
    )
    for row in rows:
        anchor_key = (
            "sampler" if row.section == "sampler" else row.section,
            row.num_envs,
            row.agents,
        )
        if row.section in ("env", "classic"):
            anchor_key = (row.game, row.num_envs, row.agents)
        anchor = ANCHORS.get(anchor_key)
        ratio = "" if anchor is None or row.rate is None else f"{row.rate / anchor:.3f}x"
        agent_rate = (
            "" if row.section != "env" or row.rate is None else fmt_rate(row.rate * row.agents)
        )
        predicted = "" if row.predicted is None else fmt_rate(row.predicted)
        checked = (
            "" if row.predicted is None or row.rate is None else f"{row.rate / row.predicted:.2f}"
        )
        note = row.note
        if anchor is not None and row.rate is not None and row.backend.startswith("triton"):
            note = (note + "; " if note else "") + (
                "meets the 5x target" if row.rate >= TARGET * anchor else "below the 5x target"
            )
        print(
            f"{row.section:<11}{row.game:<12}{row.backend:<19}{row.num_envs:>8}{row.agents:>7}"
            f"{fmt_rate(row.rate):>13}{agent_rate:>15}{ratio:>10}{predicted:>11}{checked:>10}"
            f"  {note}"
        )


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes, shorter runs")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile rows")
    parser.add_argument("--seconds", type=float, default=None, help="time per measurement")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument(
        "--no-predict", action="store_true", help="skip the roofline model's predicted column"
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gpu = device.type == "cuda"
    seconds = args.seconds or (0.5 if args.quick else 1.0 if gpu else 1.5)
    triton_reason = _triton.unavailable_reason(_sample_kernel, device)
    if triton_reason is None and _triton.kernel_mode(_sample_kernel) == "interpreted":
        triton_reason = "only Triton's interpreter is available here (tests only)"
    triton_ok = triton_reason is None
    name = torch.cuda.get_device_name(device) if gpu else platform.processor() or platform.machine()
    print(
        f"device: {device} ({name}); torch {torch.__version__}; threads {torch.get_num_threads()}"
    )
    if not triton_ok:
        print(
            f"NOTE: the Triton rows need a GPU ({triton_reason}); they are listed, not run. "
            "The torch backends run at modest sizes. On a CUDA machine this script runs the "
            "full grid unchanged."
        )
    if gpu:
        env_sizes = [100, 1000, 2000, 10000, 100000]
        agent_counts = [5, 50, 200, 1000]
        continuous_agents = [5, 105]
    elif args.quick:
        env_sizes, agent_counts, continuous_agents = [100, 2000], [5, 50], [5]
    else:
        env_sizes, agent_counts, continuous_agents = (
            [100, 1000, 2000, 10000],
            [5, 50, 200],
            [5, 105],
        )
    if args.quick and gpu:
        env_sizes, agent_counts = [100, 2000, 100000], [5, 1000]
    backends = ["torch"] + (["triton"] if triton_ok else [])
    compile_sizes = {2000} if args.no_compile is False else set()

    rows: list[Row] = []
    configs = [("discrete", n, 5) for n in env_sizes]
    configs += [("discrete", 2000, a) for a in agent_counts if a != 5]
    configs += [("continuous", n, 5) for n in env_sizes if n <= (100000 if gpu else 2000)]
    configs += [("continuous", 2000 if gpu else 200, a) for a in continuous_agents if a != 5]
    for game, n, agents in configs:
        for backend in backends:
            rows.append(env_rate(game, n, agents, backend, device, seconds))
        if triton_ok and gpu:
            rows.append(graphed_env_rate(game, n, agents, device, seconds))
        if not triton_ok:
            rows.append(Row("env", game, "triton", n, agents, None, "needs a GPU"))
        if n in compile_sizes and (agents == 5 or gpu):
            rows.append(env_rate(game, n, agents, "torch", device, seconds, compiled=True))
        print_progress(rows[-1])
    rows += sampler_rows(2000, 5, device, seconds, triton_ok)
    if gpu:
        rows += sampler_rows(2000, 1000, device, seconds, triton_ok)
    classic_sizes = [2048, 65536, 1 << 20, 1 << 22] if gpu else [2048, 65536]
    for n in classic_sizes:
        for backend in backends:
            rows.append(env_rate("cartpole", n, 1, backend, device, seconds))
        if triton_ok and gpu:
            rows.append(graphed_env_rate("cartpole", n, 1, device, seconds))
        if not triton_ok:
            rows.append(Row("classic", "cartpole", "triton", n, 1, None, "needs a GPU"))
        print_progress(rows[-1])
    e2e_agents = [5, 1000] if gpu else [5]
    for agents in e2e_agents:
        for backend in backends:
            rows.append(end_to_end_rate(2000, agents, backend, device, seconds * 2))
        if triton_ok and gpu:
            rows.append(graphed_end_to_end_rate(2000, agents, device, seconds * 2))
        if not triton_ok:
            rows.append(Row("end-to-end", "discrete", "triton", 2000, agents, None, "needs a GPU"))
    if not args.no_predict:
        if gpu_model is None:
            print("NOTE: benchmarks/gpu_model.py could not be imported; no predicted column")
        else:
            model = gpu_model.gpu_for(name)
            print(
                f"predicted: the roofline model on an {model.name} (HBM "
                f"{model.hbm_bytes_per_s / 1e12:.2f} TB/s), eager launches; see docs/gpu.md"
            )
            rows = [replace(row, predicted=predict(row, name)) for row in rows]
    print()
    print_rows(rows)
    return rows


def print_progress(row: Row) -> None:
    print(f"  measured {row.game} {row.num_envs} envs x {row.agents} agents", flush=True)


if __name__ == "__main__":
    main()
