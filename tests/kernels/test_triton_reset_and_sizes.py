"""Issue 8 §3-§4 contracts not covered elsewhere: the in-kernel reset keeps the terminal
observation (simulate's contract), the checker holds the kernels at the odd sizes 1 and 1000,
and without Triton the package imports, the torch backends run and the triton backend says
why it cannot."""

from __future__ import annotations

import functools
import math
import subprocess
import sys
import textwrap

import torch

from batchenv.in_graph.algorithm import Algorithm
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import simulate
from batchenv.kernels import CartPole
from batchenv.kernels.consistency import check_consistency

THETA_LIMIT = 12 * 2 * math.pi / 360


def _outside(observ: torch.Tensor) -> torch.Tensor:
    return (observ[:, 0].abs() > 2.4) | (observ[:, 2].abs() > THETA_LIMIT)


def test_terminal_observation_survives_the_in_kernel_reset(triton_device):
    env = CartPole(3, device=triton_device, seed=0, backend="triton")
    start = env.get_state()
    start["state"][0] = torch.tensor([2.39, 1.0, 0.0, 0.0])  # leaves the track this step
    env.set_state(start)
    push = torch.ones(3, dtype=torch.int64, device=triton_device)
    observ, _, terminated, _ = env.step(push)
    assert terminated.tolist() == [True, False, False]
    terminal = observ[0].clone()
    assert float(terminal[0]) > 2.4  # the terminal observation, not a fresh start
    fresh, reward, terminated, truncated = env.step(push, reset_mask=terminated)
    assert torch.equal(observ[0], terminal)  # the reset wrote a new tensor
    assert float(fresh[0].abs().max()) <= 0.05  # row 0 restarted in the initial box
    assert reward[0] == 0 and not terminated[0] and not truncated[0]
    assert int(env.get_state()["elapsed"][0]) == 0


class _Recorder(Algorithm):
    """Pushes right; records what experience() is handed."""

    def __init__(self, device):
        self.device, self.done_observ = device, []

    def perform(self, observ):
        return torch.ones(observ.shape[0], dtype=torch.int64, device=self.device)

    def experience(self, observ, action, reward, done, next_observ, truncated):
        self.done_observ.append(next_observ[done & ~truncated].clone())


def test_simulate_sees_terminal_observations_of_the_triton_backend(triton_device):
    env = InGraphBatchEnv(CartPole(5, device=triton_device, seed=1, backend="triton"))
    algo = _Recorder(triton_device)
    for _ in range(30):  # always pushing right ends every episode within ~10 steps
        simulate(env, algo)
    terminal = torch.cat(algo.done_observ)
    assert terminal.shape[0] >= 5
    assert bool(_outside(terminal).all())


def test_checker_at_size_one(triton_device):
    triton_env = functools.partial(CartPole, device=triton_device, backend="triton")
    report = check_consistency(
        triton_env, functools.partial(CartPole, device=triton_device), 1, 40, 3
    )
    assert report.passed, str(report)
    assert report.values_compared == 40 * (4 + 3) and report.episodes > 0


def test_checker_at_size_1000_against_gymnasium(triton_device):
    triton_env = functools.partial(
        CartPole, device=triton_device, backend="triton", dtype=torch.float64
    )
    report = check_consistency(triton_env, "CartPole-v1", 1000, 4, seed=5, atol=1e-6, rtol=1e-6)
    assert report.passed, str(report)
    assert report.values_compared == 4 * 1000 * 7


NO_TRITON = textwrap.dedent(
    """
    import sys
    sys.modules["triton"] = None  # import triton now raises ImportError
    import torch
    from batchenv.kernels import CartPole, ContinuousTag, DiscreteTag, _triton
    from batchenv.kernels.cartpole import _step_kernel
    from batchenv.kernels.sampler import sample_categorical

    assert not _triton.HAS_TRITON
    reason = _triton.unavailable_reason(_step_kernel, torch.device("cpu"))
    assert reason == "Triton is not installed", reason
    for make in (CartPole, DiscreteTag, ContinuousTag):
        make(2).reset(torch.arange(2))  # the torch backends work
        try:
            make(2, backend="triton")
        except NotImplementedError as error:
            assert "Triton is not installed; use backend='torch'" in str(error), error
        else:
            raise AssertionError("triton backend built without Triton")
    draws = sample_categorical(probs=torch.tensor([[0.0, 1.0]] * 3), seed=0)
    assert draws.tolist() == [1, 1, 1]
    print("ok")
    """
)


def test_without_triton_the_package_still_works():
    result = subprocess.run(
        [sys.executable, "-c", NO_TRITON], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
