"""The HBM bytes of one launch, counted from the tensors a real batchenv launcher passes:
the launcher runs (on any device, ``meta`` included) with its ``@triton.jit`` kernel swapped
for a :class:`Recorder`, and every pointer argument is priced by its role (:data:`ROLES`)."""

from __future__ import annotations

import functools
import inspect
import math
import sys
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch

from batchenv.kernels import ContinuousTag, DiscreteTag, sampler
from batchenv.kernels._classic import ClassicControlEnv


class Recorder:
    """Stands in for a ``@triton.jit`` kernel: records ``kernel[grid](*args, **kwargs)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple, dict]] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((tuple(grid), args, kwargs))

        return launch


class NoLaunch:
    """Stands in for a ``@triton.jit`` kernel and does nothing (keeps no arguments alive)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@dataclass
class Launch:
    """One kernel launch as a batchenv launcher makes it."""

    kernel: Any  #: the ``@triton.jit`` function (compiled or interpreted mode)
    family: str  #: "classic", "tag_discrete", "tag_continuous" or "sampler"
    grid: tuple[int, ...]
    call_args: tuple  #: positional arguments, as passed
    call_kwargs: dict  #: keyword arguments (constexprs and launch options), as passed

    @property
    def name(self) -> str:
        module = self.kernel.fn.__module__.rsplit(".", 1)[-1]
        return f"{module}.{self.kernel.fn.__name__}"

    @functools.cached_property
    def args(self) -> dict[str, Any]:
        """Every kernel parameter by name (positional and constexpr), in signature order."""
        names = list(inspect.signature(self.kernel.fn).parameters)
        given = dict(zip(names, self.call_args))
        given.update({k: v for k, v in self.call_kwargs.items() if k in names})
        return {name: given[name] for name in names if name in given}

    @property
    def programs(self) -> int:
        return math.prod(self.grid)

    @property
    def num_warps(self) -> int:
        return int(self.call_kwargs.get("num_warps", 4))  # Triton's default

    def describe(self) -> str:
        """The launch's configuration in a few words (for the report tables)."""
        shown = ("E", "N", "NT", "K", "A", "OBS_DIM", "BLOCK", "BLOCK_A", "BLOCK_I", "ROWS")
        flags = ("FULL_OBS", "ALL_OBSERVED", "LOGITS", "STEP", "RESET")
        parts = [f"{k}={self.args[k]}" for k in shown if k in self.args]
        parts += [k.lower().replace("_", " ") for k in flags if self.args.get(k) is True]
        state = next((v for k, v in self.args.items() if k in ("state_ptr", "x_ptr")), None)
        if isinstance(state, torch.Tensor) and state.dtype == torch.float64:
            parts.append("fp64")
        return " ".join(parts)


def kernel_family(env: Any) -> str:
    """The model's name for an env's kernel: "classic", "tag_discrete" or "tag_continuous"."""
    if isinstance(env, ClassicControlEnv):
        return "classic"
    if isinstance(env, DiscreteTag):
        return "tag_discrete"
    if isinstance(env, ContinuousTag):
        return "tag_continuous"
    raise TypeError(f"no Triton kernel model for {type(env).__name__}")


def zero_action(env: Any) -> torch.Tensor:
    """An all-zero action batch of the env's shape and dtype (int64 for discrete spaces)."""
    space = env.single_action_space
    discrete = not hasattr(space, "low")
    agents = (env.num_agents,) if hasattr(env, "num_agents") else ()
    shape = (env.num_envs, *agents, *space.shape)
    dtype = torch.int64 if discrete else torch.float32
    return torch.zeros(shape, dtype=dtype, device=env.device)


def capture_env_launch(env: Any, step: bool = True, reset: bool = True) -> Launch:
    """The launch ``env.step(action, reset_mask)`` makes (``step=False``: ``env.reset``),
    recorded instead of run. Works for any env built with ``backend="torch"`` as well (the
    triton launcher only reads the env's tensors), on any device, ``meta`` included."""
    if not step and not reset:
        raise ValueError("capture_env_launch: a launch steps, resets, or both")
    module = sys.modules[type(env).__module__]
    recorder = Recorder()
    action = zero_action(env) if step else None
    mask = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device) if reset else None
    with mock.patch.object(module, "_step_kernel", recorder):
        env._launch(action, mask)
    (grid, args, kwargs), *_ = recorder.calls
    return Launch(module._step_kernel, kernel_family(env), grid, args, kwargs)


def capture_sampler_launch(
    rows: int, categories: int, logits: bool = True, dtype: torch.dtype = torch.float32
) -> Launch:
    """The launch ``sample_categorical`` makes for ``[rows, categories]`` inputs."""
    x = torch.empty(rows, categories, dtype=dtype, device="meta")
    out = torch.empty(rows, dtype=torch.int64, device="meta")
    recorder = Recorder()
    with mock.patch.object(sampler, "_sample_kernel", recorder):
        sampler.launch_sample(x, out, logits=logits, seed=0, offset=0)
    (grid, args, kwargs), *_ = recorder.calls
    return Launch(sampler._sample_kernel, "sampler", grid, args, kwargs)


# -- bytes ------------------------------------------------------------------------------------

#: What each pointer parameter is to its kernel: (read, written, when). ``read``/``written``
#: are how many times the whole tensor crosses HBM (``"fresh"``: only the rows that start
#: afresh, a fraction of them); ``when`` is the constexpr that must be True for the kernel to
#: touch it at all (None: always). Sizes and dtypes come from the tensors themselves.
ROLES: dict[str, dict[str, tuple[Any, Any, str | None]]] = {
    "classic": {
        "state_ptr": (1, 1, None),
        "elapsed_ptr": (1, 1, None),
        # Read by every row (the Philox counter); written by the rows that start afresh.
        "restarts_ptr": (1, "fresh", "RESET"),
        "action_ptr": (1, 0, "STEP"),
        "reset_mask_ptr": (1, 0, "RESET"),
        "observ_ptr": (0, 1, None),
        "reward_ptr": (0, 1, "STEP"),
        "terminated_ptr": (0, 1, "STEP"),
        "truncated_ptr": (0, 1, "STEP"),
    },
    "tag": {
        "pos_ptr": (1, 1, None),
        # Read back for the observations after the stores: L1/L2 hits, counted once.
        "state_ptr": (1, 1, None),
        "elapsed_ptr": (1, 1, None),
        "restarts_ptr": (1, 1, "RESET"),  # written for every env (+0 or +1)
        "action_ptr": (1, 0, "STEP"),
        "accel_ptr": (1, 0, "STEP"),  # the action grids: a few floats, cached
        "turn_ptr": (1, 0, "STEP"),
        "reset_mask_ptr": (1, 0, "RESET"),
        "observ_ptr": (0, 1, None),
        "reward_ptr": (0, 1, "STEP"),
        "terminated_ptr": (0, 1, "STEP"),
        "truncated_ptr": (0, 1, "STEP"),
    },
    "sampler": {"x_ptr": (1, 0, None), "out_ptr": (0, 1, None)},
}


@dataclass(frozen=True)
class Traffic:
    """HBM bytes one launch moves for one pointer parameter."""

    param: str
    dtype: torch.dtype
    read: float
    written: float


def traffic(launch: Launch, reset_fraction: float = 0.0) -> list[Traffic]:
    """Per pointer parameter, the bytes ``launch`` reads and writes (see :data:`ROLES`)."""
    roles = ROLES["tag" if launch.family.startswith("tag") else launch.family]
    rows = []
    for name, value in launch.args.items():
        if not isinstance(value, torch.Tensor):
            continue
        if name not in roles:
            raise KeyError(f"{launch.name}: no role for pointer {name!r}; add it to ROLES")
        read, written, when = roles[name]
        if when is not None and not launch.args.get(when, False):
            continue
        size = value.numel() * value.element_size()

        def times(count):
            return reset_fraction if count == "fresh" else count

        rows.append(Traffic(name, value.dtype, size * times(read), size * times(written)))
    return rows


def launch_bytes(launch: Launch, reset_fraction: float = 0.0) -> float:
    """Total HBM bytes ``launch`` reads and writes."""
    return sum(t.read + t.written for t in traffic(launch, reset_fraction))


def bytes_per_step(
    env: Any, reset_fraction: float = 0.0, step: bool = True, reset: bool = True
) -> float:
    """HBM bytes of one ``env.step(action, reset_mask)`` launch (all envs), counted from the
    tensors the env's launcher passes. ``reset_fraction``: the share of rows that start
    afresh in the call (only the classic envs' restart counters depend on it)."""
    return launch_bytes(capture_env_launch(env, step=step, reset=reset), reset_fraction)
