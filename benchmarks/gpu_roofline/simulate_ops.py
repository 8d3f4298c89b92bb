"""The work of one eager ``simulate()`` step as a CUDA device would get it -- kernel
launches, host reads and bytes, counted on the CPU by classifying every aten op the step
dispatches (:func:`count_simulate_ops`) -- and its predicted rate."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from unittest import mock

import torch

from .launches import Launch, kernel_family, launch_bytes
from .machine import H100, HOST, Gpu, Host
from .predict import StepPrediction, host_step, kernel_time

_NO_KERNEL = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "view",
    "_unsafe_view", "reshape", "expand", "squeeze", "unsqueeze", "select", "slice", "t",
    "transpose", "permute", "as_strided", "alias", "detach", "lift_fresh", "unbind", "split",
    "split_with_sizes", "view_as", "_reshape_alias", "sym_size", "sym_stride", "sym_numel",
    "result_type", "is_same_size", "resize_", "set_",
    "scalar_tensor",  # a Python number wrapped as a 0-dim CPU tensor (torch.where(m, 0.0, x))
}  # fmt: skip
#: aten ops that read a result back to the host (the stream drains first).
_SYNC = {"nonzero", "_local_scalar_dense", "is_nonzero", "item", "masked_select", "unique"}


@dataclass(frozen=True)
class OpCount:
    """The work of one call, as a CUDA device would get it."""

    torch_launches: int  #: aten ops that launch at least one kernel
    triton_launches: int
    syncs: int
    torch_bytes: float  #: inputs + outputs of those ops
    triton_bytes: float
    ops: Mapping[str, int]  #: per op name


def count_simulate_ops(env: Any, reset_share: int = 20) -> OpCount:
    """The launches, host reads and bytes of one steady-state ``simulate()`` step (random
    actions, ``InGraphBatchEnv`` with its default finite checks) over ``env`` on the triton
    backend -- counted on the CPU: ``env`` (built with ``backend="torch"``) is switched to
    the triton code path with its kernel replaced by a stand-in that writes plausible outputs
    (every ``reset_share``-th row terminates, so the step after it has resets to do), and
    every aten op dispatched in the step is classified.

    Counts are per step, after two warm-up steps. A custom op that reads a tensor back
    (``batchenv::raise_if_nonfinite``) counts as one sync.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from batchenv.in_graph.algorithm import RandomAlgorithm
    from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
    from batchenv.in_graph.simulate import simulate

    module = sys.modules[type(env).__module__]
    kernel = module._step_kernel
    counts: Counter = Counter()
    state = {"counting": False, "torch_bytes": 0.0, "triton_bytes": 0.0}

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not state["counting"]:
                return out
            namespace = func.namespace
            name = func.__name__.split(".")[0]
            if namespace != "aten":
                counts[f"{namespace}::{name}"] += 1
                return out
            if name in _NO_KERNEL:
                return out
            counts[name] += 1
            tensors = [
                t
                for t in torch.utils._pytree.tree_leaves((args, kwargs, out))
                if isinstance(t, torch.Tensor)
            ]
            state["torch_bytes"] += sum(t.numel() * t.element_size() for t in tensors)
            return out

    class Stand_in:  # noqa: N801 -- a kernel stand-in
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                was, state["counting"] = state["counting"], False
                launch_ = Launch(kernel, kernel_family(env), tuple(grid), args, kwargs)
                named = launch_.args
                named["observ_ptr"].zero_()
                if named.get("STEP"):
                    named["reward_ptr"].fill_(1.0)
                    done = named["terminated_ptr"]
                    done.zero_()
                    done.view(-1)[::reset_share] = True
                    named["truncated_ptr"].zero_()
                if was:
                    counts["triton kernel"] += 1
                    state["triton_bytes"] += launch_bytes(launch_, 1 / reset_share)
                state["counting"] = was

            return launch

    previous = env.backend
    env.backend = "triton"
    try:
        with mock.patch.object(module, "_step_kernel", Stand_in()), Counting():
            batch = InGraphBatchEnv(env)
            observation_space = env.single_observation_space if hasattr(env, "num_agents") else None
            algo = RandomAlgorithm(
                env.single_action_space, seed=0, observation_space=observation_space
            )
            simulate(batch, algo)
            simulate(batch, algo)
            state["counting"] = True
            simulate(batch, algo)
            state["counting"] = False
    finally:
        env.backend = previous
    triton = counts.pop("triton kernel", 0)
    customs = {k: v for k, v in counts.items() if "::" in k}
    syncs = sum(v for k, v in counts.items() if k in _SYNC) + customs.get(
        "batchenv::raise_if_nonfinite", 0
    )
    torch_launches = sum(v for k, v in counts.items() if "::" not in k)
    return OpCount(
        torch_launches=torch_launches,
        triton_launches=triton,
        syncs=syncs,
        torch_bytes=state["torch_bytes"],
        triton_bytes=state["triton_bytes"],
        ops=MappingProxyType(dict(counts)),
    )


def predict_simulate_rate(
    ops: OpCount, num_envs: int, count_envs: int, *, gpu: Gpu = H100, host: Host | None = None
) -> StepPrediction:
    """Predicted eager ``simulate()`` steps over ``num_envs`` rows from an :class:`OpCount`
    made at ``count_envs`` rows (bytes scale with the rows; launches and syncs do not). A
    host read drains the stream, so each sync adds ``Host.sync_s`` to the overlapped time."""
    host = host or HOST
    scale = num_envs / count_envs
    kernels = [
        kernel_time("torch ops", ops.torch_bytes * scale, gpu=gpu),
        kernel_time("triton kernels", ops.triton_bytes * scale, gpu=gpu),
    ]
    floors = (ops.torch_launches + ops.triton_launches) * gpu.kernel_floor_s
    device = max(floors, sum(k.seconds for k in kernels))
    triton_host = ops.triton_launches * host_step("classic", host)
    host_s = ops.torch_launches * host.torch_op_s + triton_host
    return StepPrediction(
        "simulate()", num_envs, 1, "eager", host_s, device, tuple(kernels), ops.syncs * host.sync_s
    )
