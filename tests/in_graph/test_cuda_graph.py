"""CudaGraphLoop: the state walk and its checks (CPU), and replays against eager runs (CUDA)."""

from collections import namedtuple

import pytest
import torch

from batchenv.in_graph.cuda_graph import (
    CudaGraphLoop,
    GraphCaptureError,
    advance,
    assign,
    check_same_layout,
    counter_steps,
    python_values,
    tensor_paths,
    write_back,
)
from tests.in_graph.graph_emulator import EmulatedBackend

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


@pytest.fixture(autouse=True)
def compile_in_process(monkeypatch):
    """No pool of Inductor compile workers (a many-core GPU host starts one; they outlive a
    test)."""
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)


Pair = namedtuple("Pair", "first second")


class Holder:
    def __init__(self):
        self.x = torch.zeros(3)
        self.nested = {"a": torch.ones(2), 7: [torch.arange(4), Pair(torch.zeros(1), 5)]}
        self.count = 0
        self.name = "n"
        self.fn = lambda: self.x  # code is not state: never walked
        self.me = self  # cycles are entered once


def test_the_walk_finds_tensors_and_python_values_by_path():
    holder = Holder()
    paths = tensor_paths({"h": holder})
    assert list(paths) == ["h.x", "h.nested.a", "h.nested.7.0", "h.nested.7.1.0"]
    assert paths["h.nested.7.0"] is holder.nested[7][0]
    values = python_values({"h": holder})
    assert values == {"h.nested.7.1.1": 5, "h.count": 0, "h.name": "n"}


def test_assign_rebinds_attributes_dict_entries_list_items_and_rebuilds_tuples():
    holder = Holder()
    roots = {"h": holder}
    new = torch.full((1,), 9.0)
    assign(roots, "h.nested.7.1.0", new)
    assert isinstance(holder.nested[7][1], Pair) and holder.nested[7][1].first is new
    assign(roots, "h.nested.7.0", new)
    assign(roots, "h.x", new)
    assert holder.nested[7][0] is new and holder.x is new
    advance(roots, {"h.count": 2, "h.nested.7.1.1": -1})
    assert (holder.count, holder.nested[7][1].second) == (2, 4)


def test_counters_must_step_evenly_and_other_python_values_must_not_change():
    snaps = [{"c": 0, "lazy": None}, {"c": 1, "lazy": 1}, {"c": 2, "lazy": 1}, {"c": 3, "lazy": 1}]
    assert counter_steps(snaps, ["c"]) == {"c": 1}  # the first call may set things up
    with pytest.raises(
        GraphCaptureError,
        match=r"^CudaGraphLoop: c changed between calls \(2 -> 3\)",
    ):
        counter_steps(snaps, [])
    uneven = [{"c": 0}, {"c": 1}, {"c": 2}, {"c": 4}]
    with pytest.raises(
        GraphCaptureError, match=r"counter c must change by a fixed step each call; got \[1, 2, 4\]"
    ):
        counter_steps(uneven, ["c"])
    nan = float("nan")
    assert counter_steps([{"v": nan}] * 4, []) == {}


def test_state_that_appears_disappears_or_reshapes_is_refused():
    a, b = torch.zeros(2), torch.zeros(3)
    with pytest.raises(GraphCaptureError, match="state tensor p.y appeared during an iteration"):
        check_same_layout({"p.x": a}, {"p.x": a, "p.y": b})
    with pytest.raises(GraphCaptureError, match="state tensor p.x disappeared"):
        check_same_layout({"p.x": a}, {})
    with pytest.raises(GraphCaptureError, match=r"p.x changed from \(2,\) torch.float32 to \(3,\)"):
        check_same_layout({"p.x": a}, {"p.x": b})


def test_write_back_copies_new_values_into_the_old_buffers_without_reading_overwritten_ones():
    # A swap: x's new value is y's old buffer and y's new value is x's old buffer.
    x, y = torch.tensor([1.0]), torch.tensor([2.0])
    z = torch.zeros(1)
    rebound = write_back({"x": x, "y": y, "z": z}, {"x": y, "y": x, "z": torch.ones(1)})
    assert rebound == ["x", "y", "z"]
    assert (x.item(), y.item(), z.item()) == (2.0, 1.0, 1.0)
    shared = torch.zeros(1)
    with pytest.raises(
        GraphCaptureError, match="a and b held one tensor and were given two different ones"
    ):
        write_back({"a": shared, "b": shared}, {"a": torch.ones(1), "b": torch.ones(1)})


def test_without_cuda_the_loop_says_so_and_warmup_is_checked():
    with pytest.raises(ValueError, match=r"warmup=2\): needs >= 3 eager calls"):
        CudaGraphLoop(lambda: None, {}, warmup=2)
    if not torch.cuda.is_available():
        with pytest.raises(GraphCaptureError, match="needs a CUDA device; on a CPU call fn"):
            CudaGraphLoop(lambda: None, {})


def test_the_learning_rate_anneal_on_the_device_is_pythons_number():
    from batchenv.algorithms.ppo import PPOConfig
    from batchenv.algorithms.ppo.train import make_env, make_ppo

    config = PPOConfig(total_timesteps=512 * 7, compile=False)
    ppo = make_ppo(config, make_env(config))
    for done in range(10):  # past the end of the anneal too
        ppo.update_index = torch.tensor(float(done), dtype=torch.float64)
        frac = 0.0 if done >= ppo.num_updates else 1.0 - done / ppo.num_updates
        expected = torch.tensor(config.learning_rate * frac, dtype=torch.float32)
        assert torch.equal(ppo._learning_rate(), expected)


def test_emulated_replays_of_ppo_train_exactly_as_eager_updates():
    """On the CPU stand-in for CUDA graphs, a replayed update reads and writes exactly the
    state an eager one does: every return, loss and parameter equal over 9 updates."""
    from batchenv.algorithms.ppo import PPOConfig
    from batchenv.algorithms.ppo.train import Updates, make_env, make_ppo

    def run(replayed: bool):
        config = PPOConfig(
            total_timesteps=64 * 9, num_steps=16, update_epochs=2, num_minibatches=2, compile=False
        )
        env = make_env(config)
        ppo = make_ppo(config, env)
        updates = Updates(config, env, ppo, backend=EmulatedBackend() if replayed else None)
        return [updates() for _ in range(config.num_updates)], ppo

    plain, plain_ppo = run(False)
    replayed, replayed_ppo = run(True)
    assert replayed_ppo.updates_done == plain_ppo.updates_done == 9
    assert torch.equal(replayed_ppo.update_index, plain_ppo.update_index)
    assert torch.equal(replayed_ppo.params, plain_ppo.params)
    for a, b in zip(plain, replayed):  # each UpdateResult is a copy: replays overwrite
        assert torch.equal(a.returns.nan_to_num(-1.0), b.returns.nan_to_num(-1.0))
        assert torch.equal(a.done, b.done) and torch.equal(a.score, b.score)
        for name in a.terms:
            assert torch.equal(a.terms[name], b.terms[name]), name


def test_emulated_replays_of_ppo_on_minatar_breakout_equal_eager_updates():
    """The MinAtar kernel env's state (its dict of game fields, draw counters, action table)
    is all under the roots: replayed updates equal eager ones."""
    from batchenv.algorithms.ppo import PPOConfig
    from batchenv.algorithms.ppo.config import PRESETS
    from batchenv.algorithms.ppo.train import Updates, make_env, make_ppo

    small = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, compile=False)
    config = PPOConfig(**{**PRESETS["minatar-breakout"], **small, "total_timesteps": 64 * 6})

    def run(replayed: bool):
        env = make_env(config)
        ppo = make_ppo(config, env)
        updates = Updates(config, env, ppo, backend=EmulatedBackend() if replayed else None)
        return [updates() for _ in range(config.num_updates)], ppo

    (plain, plain_ppo), (replayed, replayed_ppo) = run(False), run(True)
    assert torch.equal(replayed_ppo.params, plain_ppo.params)
    for a, b in zip(plain, replayed):
        assert torch.equal(a.score, b.score) and torch.equal(a.done, b.done)


def test_emulated_recording_refuses_host_reads_and_leaves_the_state_as_it_was():
    state = {"x": torch.zeros(4)}

    def iteration():
        state["x"] = state["x"] + 1
        return float(state["x"].sum())  # a host read: not recordable

    loop = CudaGraphLoop(iteration, {"s": state}, backend=EmulatedBackend())
    assert [loop() for _ in range(3)] == [4.0, 8.0, 12.0]
    with pytest.raises(GraphCaptureError, match="must not synchronise with the host"):
        loop()
    assert torch.equal(state["x"], torch.full((4,), 3.0))


def test_state_out_of_reach_of_the_roots_is_caught_by_the_check_against_an_eager_call():
    hidden = {"x": torch.zeros(2)}  # the iteration's state, not under the roots given
    visible = {"y": torch.zeros(2)}

    def iteration():
        hidden["x"] = hidden["x"] + 1
        visible["y"] = hidden["x"] * 2

    loop = CudaGraphLoop(iteration, {"v": visible}, backend=EmulatedBackend())
    for _ in range(3):
        loop()
    with pytest.raises(GraphCaptureError, match="differs from the eager one at v.y; something"):
        loop()


def test_an_unlisted_python_value_that_changes_is_refused_by_name():
    class Counter:
        def __init__(self):
            self.calls = 0
            self.x = torch.zeros(1)

    counter = Counter()

    def iteration():
        counter.calls += 1
        counter.x = counter.x + counter.calls  # a Python value feeding the graph

    loop = CudaGraphLoop(iteration, {"c": counter}, backend=EmulatedBackend())
    for _ in range(3):
        loop()
    with pytest.raises(GraphCaptureError, match=r"c.calls changed between calls \(2 -> 3\)"):
        loop()


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=cuda)], ids=["emulated", "cuda"]
)
def test_a_replayed_rollout_equals_plain_rollouts(device):
    from batchenv.in_graph.algorithm import RandomAlgorithm
    from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
    from batchenv.in_graph.rollout import rollout
    from batchenv.kernels import CartPole

    backend = EmulatedBackend() if device == "cpu" else None
    compiled = device == "cuda"  # the emulator sees eager ops only

    def run(graphed: bool) -> list[torch.Tensor]:
        # With the finite check on: rollout()'s is tensor code, read after the rollout.
        env = InGraphBatchEnv(CartPole(num_envs=64, seed=3, device=device))
        algo = RandomAlgorithm(env.single_action_space, seed=3, device=device)
        call = lambda: rollout(env, algo, steps=8, compile=compiled)  # noqa: E731
        roots = {"env": env, "algo": algo}
        step = CudaGraphLoop(call, roots, backend=backend) if graphed else call
        return [
            torch.cat([out.done.float(), out.score]).clone() for out in (step() for _ in range(7))
        ]

    for plain, replayed in zip(run(False), run(True)):
        assert torch.equal(plain, replayed)


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=cuda)], ids=["emulated", "cuda"]
)
def test_a_nan_in_a_replayed_rollout_is_raised_by_the_check_after_it(device):
    from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
    from batchenv.in_graph.rollout import rollout
    from batchenv.kernels import Pendulum
    from tests.in_graph.test_rollout import NanAction

    env = InGraphBatchEnv(Pendulum(num_envs=4, seed=0, device=device))
    algo = NanAction(4, row=3, at=22)  # the 6th call's second step: a replay
    algo.rows, algo.t = algo.rows.to(device), algo.t.to(device)
    call = lambda: rollout(env, algo, steps=4, compile=device == "cuda")  # noqa: E731
    backend = EmulatedBackend() if device == "cpu" else None
    loop = CudaGraphLoop(call, {"env": env, "algo": algo}, backend=backend)
    for _ in range(5):
        loop()
        env.raise_if_nonfinite()
    loop()
    with pytest.raises(ValueError, match=r"^non-finite action in rows \[3\]; .*first at step 22"):
        env.raise_if_nonfinite()


@cuda
def test_ppo_with_a_cuda_graph_trains_as_without_one():
    from batchenv.algorithms.ppo import PPOConfig, train

    # 3 eager updates, the recorded one (checked against an eager run), 2 replays. Float sums
    # on the GPU are not bitwise repeatable, hence the tolerance.
    config = dict(total_timesteps=512 * 6, device="cuda")
    plain = train(PPOConfig(**config, cuda_graph=False))
    graphed = train(PPOConfig(**config, cuda_graph=True))
    assert torch.allclose(plain.returns, graphed.returns, equal_nan=True)
    for name, values in plain.losses.items():
        assert torch.allclose(values, graphed.losses[name], rtol=1e-4, atol=1e-6), name
    assert graphed.ppo.updates_done == 6 and float(graphed.ppo.update_index) == 6.0


@cuda
def test_host_work_in_an_iteration_is_refused_and_the_state_is_left_as_it_was():
    state = {"x": torch.zeros(4, device="cuda")}

    def iteration():
        state["x"] = state["x"] + 1
        return float(state["x"].sum())  # a host sync: not recordable

    loop = CudaGraphLoop(iteration, {"s": state})
    for _ in range(3):
        loop()
    with pytest.raises(GraphCaptureError, match="must not synchronise with the host"):
        loop()
    assert torch.equal(state["x"].cpu(), torch.full((4,), 3.0))


def on_host(tensor: torch.Tensor) -> bool:
    """The emulator's stand-in for a CPU tensor next to GPU work: float64 ones."""
    return tensor.dtype == torch.float64


def test_state_the_iteration_changes_on_the_host_is_refused_by_name():
    # Adam's step count kept on the CPU: recording would bake its value into the graph.
    state = {"x": torch.zeros(2), "count": torch.zeros((), dtype=torch.float64)}

    def iteration():
        state["count"] = state["count"] + 1
        state["x"] = state["x"] + state["count"].float()

    loop = CudaGraphLoop(iteration, {"opt": state}, backend=EmulatedBackend(host=on_host))
    for _ in range(3):
        loop()
    with pytest.raises(GraphCaptureError, match=r"state tensor opt.count is on the cpu and the"):
        loop()
    assert float(state["count"]) == 3.0 and torch.equal(state["x"], torch.full((2,), 6.0))
    loop_again = CudaGraphLoop(iteration, {"opt": state}, backend=EmulatedBackend())
    for _ in range(4):  # on the device, the same iteration replays
        loop_again()
    assert float(state["count"]) == 7.0 and torch.equal(state["x"], torch.full((2,), 28.0))


def test_a_host_token_that_only_orders_calls_is_left_out_of_the_check():
    class Env:
        cuda_graph_host_tokens = ("clock",)

        def __init__(self):
            self.clock = torch.zeros((), dtype=torch.float64)  # "on the host"
            self.x = torch.zeros(2)

    env = Env()

    def iteration():
        env.clock += 1  # host work: runs once while recording
        env.x = env.x + 1

    loop = CudaGraphLoop(iteration, {"env": env}, backend=EmulatedBackend(host=on_host))
    for _ in range(6):
        loop()
    assert torch.equal(env.x, torch.full((2,), 6.0))


def test_every_ppo_state_tensor_lives_on_the_training_device():
    from batchenv.algorithms.ppo import PPOConfig
    from batchenv.algorithms.ppo.train import make_env, make_ppo

    # The meta device builds the state without computing it; only the env's host token is off it.
    config = PPOConfig(total_timesteps=512 * 7, compile=False, device="meta")
    env = make_env(config)
    paths = tensor_paths({"env": env, "ppo": make_ppo(config, env)})
    assert "ppo.opt_state.count" in paths
    assert [path for path, t in paths.items() if t.device.type != "meta"] == ["env.clock"]


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=cuda)], ids=["emulated", "cuda"]
)
def test_a_module_trained_by_torch_optim_replays_as_eager_steps(device):
    """The usual PyTorch loop (an ``nn.Module``, ``loss.backward()``, a ``torch.optim``
    step) as an iteration. Its parameters are leaves that require grad, so the loop saves
    and restores them without autograd around its check of the first replay."""
    backend = EmulatedBackend() if device == "cpu" else None

    def run(graphed: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        ).to(device)
        if device == "cuda":  # Adam keeps its step count on the GPU
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
        else:  # the emulator cannot hold Adam's host-side count; SGD keeps no state
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        data = {"x": torch.randn(16, 3, device=device), "step": torch.zeros((), device=device)}

        def iteration():
            target = (data["x"].sum(-1, keepdim=True) * data["step"].cos()).detach()
            loss = (model(data["x"]) - target).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            data["step"] = data["step"] + 1
            return loss.detach()

        optimizer_state = [optimizer.state[p] for p in model.parameters()]
        roots = {"model": model, "data": data, "optimizer": optimizer_state}
        step = CudaGraphLoop(iteration, roots, backend=backend) if graphed else iteration
        losses = [step().clone() for _ in range(7)]
        return losses + [p.detach().clone() for p in model.parameters()]

    for plain, replayed in zip(run(False), run(True)):
        torch.testing.assert_close(replayed, plain, rtol=1e-5, atol=1e-7)
