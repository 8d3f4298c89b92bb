"""Measuring the host time of a step call on this CPU: the real launchers and Triton's real
dispatch (``JITFunction.run``), against a stand-in CUDA driver that compiles for sm_90 and
launches nothing (:func:`measure_host`)."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from unittest import mock

import torch

from batchenv.kernels import CartPole, ContinuousTag, DiscreteTag, _triton, sampler

from .launches import Launch, NoLaunch, Recorder, zero_action


class _StandInDriver:
    """Enough of Triton's CUDA driver for ``JITFunction.run`` to bind, specialise, compile
    for sm_90 and 'launch' (a no-op) on a machine without a GPU."""

    class utils:  # noqa: N801
        @staticmethod
        def load_binary(name, kernel, shared, device):
            return 1, 1, 64, 0, 1024  # module, function, n_regs, n_spills, max threads

        @staticmethod
        def get_device_properties(device):
            return {"max_shared_mem": 232448, "multiprocessor_count": 132, "warpSize": 32}

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")

    def launcher_cls(self, src, metadata):
        return lambda *args: None


def _call_s(fn: Callable[[], object], calls: int = 1000, rounds: int = 7) -> float:
    """Seconds per call of ``fn``: the best of ``rounds`` averages over ``calls`` calls (on
    a shared machine the least disturbed round is the closest to the call's own cost)."""
    fn()
    times = []
    for _ in range(rounds):
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - begin) / calls)
    return min(times)


def measure_host(calls: int = 1000, rounds: int = 7) -> dict[str, float]:
    """Seconds of one step call per env family (and one sampler call, and a direct
    ``CompiledKernel`` launch) on this CPU (:func:`_call_s`), through the real launchers and
    Triton's real dispatch, against :class:`_StandInDriver`; and each step call again with
    the kernel replaced by a no-op (``"<family> launcher only"``: batchenv's Python alone).
    Needs the kernels in compiled mode."""
    from triton.runtime import driver as driver_config

    if _triton.kernel_mode(sampler._sample_kernel) != "compiled":
        raise RuntimeError("measure_host: run with TRITON_INTERPRET unset")
    previous = driver_config._active
    driver_config.set_active(_StandInDriver())
    try:
        results = {}
        envs = {
            "classic": CartPole(2000, seed=0),
            "tag_discrete": DiscreteTag(2000, num_taggers=4, seed=0),
            "tag_continuous": ContinuousTag(2000, num_taggers=1, num_runners=4, seed=0),
        }
        for family, env in envs.items():
            env.backend = "triton"  # the launcher's code path; the kernels go to the stand-in
            step = functools.partial(
                env.step, zero_action(env), torch.zeros(env.num_envs, dtype=torch.bool)
            )
            results[family] = _call_s(step, calls, rounds)
            # The same call with the kernel a no-op stand-in: batchenv's own Python only.
            module = sys.modules[type(env).__module__]
            with mock.patch.object(module, "_step_kernel", NoLaunch()):
                results[f"{family} launcher only"] = _call_s(step, calls, rounds)
        logits = torch.zeros(2000, 5, 5)
        out = torch.empty(2000, 5, dtype=torch.int64)
        rows = logits.reshape(-1, 5)
        flat = out.view(-1)
        sample = functools.partial(
            sampler.sample_categorical, logits=logits, seed=0, offset=1, out=out, validate=False
        )
        with mock.patch.object(sampler, "unavailable_reason", lambda kernel, device: None):
            results["sampler"] = _call_s(sample, calls, rounds)
            with mock.patch.object(sampler, "_sample_kernel", NoLaunch()):
                results["sampler launcher only"] = _call_s(sample, calls, rounds)
        sampler.launch_sample(rows, flat, logits=True, seed=0, offset=0)
        compiled = next(iter(sampler._sample_kernel.device_caches[0][0].values()))
        recorder = Recorder()
        with mock.patch.object(sampler, "_sample_kernel", recorder):
            sampler.launch_sample(rows, flat, logits=True, seed=0, offset=0)
        (grid, args, kwargs), *_ = recorder.calls
        launch = Launch(sampler._sample_kernel, "sampler", grid, args, kwargs)
        runner = compiled[(*grid, 1, 1)[:3]]
        bound = tuple(launch.args.values())
        results["compiled_launch"] = _call_s(lambda: runner(*bound), calls * 5, rounds)
        return results
    finally:
        driver_config._active = previous
