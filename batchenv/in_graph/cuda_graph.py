"""CudaGraphLoop: replay one iteration of an in-graph training loop as a single CUDA graph.

On a GPU a compiled rollout still launches its kernels one by one from the host: a PPO update
of 128 steps and 16 minibatches is ~1,000 launches, and at a few microseconds each the card
waits on Python and the driver (``benchmarks/RESULTS.md``, "The first GPU run"). JAX avoids
this by running the whole update inside one XLA program. ``CudaGraphLoop`` does the same with
a CUDA graph: it records every kernel of one iteration once and then replays them with one
call.

    loop = CudaGraphLoop(lambda: one_iteration(), roots={"env": env, "ppo": ppo},
                         counters=("ppo.updates_done",))
    for _ in range(updates):
        out = loop()          # the first ``warmup`` calls run eagerly, then replays
        keep(out.clone())     # outputs live in the graph's memory: copy what you keep

How state carries over. In-graph code is functional: ``batch.score = torch.where(...)``
binds a new tensor on every step. A replay, though, always reads the addresses that were
recorded. So after recording, the loop walks ``roots`` (attributes, dicts and lists,
recursively) and, for every tensor that the iteration rebound, records one more copy from the
new tensor back into the old one. Then it rebinds the old ones. Each replay thus reads and
writes the same buffers, and the Python objects always see the current state.

What must hold (checked where it can be):

- **No host work inside an iteration**: no ``.item()``, no printing of tensors, no ``if tensor:``
  and no CPU tensors built per iteration (``torch.tensor(x, device="cuda")`` copies from the
  host). CUDA refuses these while recording; the error says so and names this class.
- **Python values are frozen at recording time**, as with ``jax.jit``. Every number, flag or
  string reachable from ``roots`` is compared over the warm-up calls. A value that changes
  is refused, naming its path, unless it is listed in ``counters``. A listed counter must change
  by the same amount every call; the loop adds that amount after each replay. It must not
  feed the graph: keep what the kernels need (a step count for a learning-rate anneal, say) in
  a device tensor.
- **The same shapes every call**, and the same tensors in the same places (a path that
  appears, disappears or changes shape is refused).
- **State on the GPU.** Work on a CPU tensor runs once, while recording, and never again:
  state on the host that the iteration changes is refused by name. (An attribute that a class
  lists in ``cuda_graph_host_tokens`` is exempt: a CPU tensor that only orders host calls,
  such as :class:`~batchenv.in_graph.InGraphBatchEnv`'s ``clock``.)
- **All state reachable from ``roots``.** A tensor the iteration reads that the walk cannot
  find would be read from its recorded address forever. So the first replay is checked against
  an eager run of the same call (floats within 1e-4 relative, the rest exactly). A difference
  is refused, naming the first path that differs.

A refusal raises :class:`GraphCaptureError` and leaves the state as it was, so the caller can
go on eagerly (PPO's ``train`` does, with a warning).
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

#: Eager calls before recording: the first compiles, the next ones settle lazily allocated
#: workspaces and give the counters' step.
DEFAULT_WARMUP = 3
_MAX_DEPTH = 6


class GraphCaptureError(RuntimeError):
    """One iteration cannot be replayed as a CUDA graph (the message says which part)."""


class CudaGraphLoop:
    """Call ``fn()`` eagerly ``warmup`` times, then record it once and replay it.

    Args:
        fn: one iteration, no arguments; returns anything (tensors in it are the graph's).
        roots: ``{name: object}`` whose reachable tensors are the state between iterations.
        counters: dotted paths (``"ppo.updates_done"``) of Python numbers the iteration
            advances by a fixed step; they are advanced after each replay.
        warmup: eager calls before recording (>= 3: the first may set things up, the
            next two show each counter's step).
        backend: how graphs are recorded and replayed; default :class:`CudaBackend`
            (the tests pass one that emulates it on a CPU).
    """

    def __init__(
        self,
        fn: Callable[[], Any],
        roots: Mapping[str, Any],
        counters: Iterable[str] = (),
        warmup: int = DEFAULT_WARMUP,
        backend: Any = None,
    ) -> None:
        if warmup < 3:
            raise ValueError(f"CudaGraphLoop(warmup={warmup}): needs >= 3 eager calls")
        self.backend = backend if backend is not None else CudaBackend()
        if not self.backend.available():
            raise GraphCaptureError("CudaGraphLoop needs a CUDA device; on a CPU call fn() itself")
        self.fn = fn
        self.roots = dict(roots)
        self.counters = tuple(counters)
        self.warmup = warmup
        self.calls = 0
        self.graph: Any = None
        self._output: Any = None
        self._steps: dict[str, Any] = {}
        self._values: list[dict[str, Any]] = [python_values(self.roots)]

    def __call__(self) -> Any:
        self.calls += 1
        if self.graph is None and self.calls <= self.warmup:
            output = self._eager()
            self._values.append(python_values(self.roots))
            return output
        if self.graph is None:
            self._steps = counter_steps(self._values, self.counters)
            return self._record_and_verify()
        self.graph.replay()
        advance(self.roots, self._steps)
        return self._output

    def _record_and_verify(self) -> Any:
        """Record, replay once, and check the replay against an eager run of the same call.

        A tensor that the iteration reads but that is not reachable from ``roots`` would be
        read from its recorded address forever; this check catches it (and any other way a
        replay could differ) before training goes on. State is saved and restored without
        autograd: parameters are leaves that require grad.
        """
        before = tensor_paths(self.roots)
        saved = _detached_clones(before)
        values = self._values[-1]
        self._record(before)  # runs the Python once (counters advance), no kernels
        self._refuse_host_state(before, saved)
        self.graph.replay()
        replayed = _detached_clones(tensor_paths(self.roots))
        _copy_into(before.values(), (saved[path] for path in before))
        for path in self._steps:
            assign(self.roots, path, values[path])
        output = self._eager()
        after = tensor_paths(self.roots)
        for path in sorted(replayed):
            if not _agree(replayed[path], after[path]):
                raise GraphCaptureError(
                    f"CudaGraphLoop: the replayed iteration differs from the eager one at "
                    f"{path}; something the iteration reads is not reachable from roots "
                    f"({', '.join(self.roots)}), or it depends on host state"
                )
        for path in write_back(before, after):
            assign(self.roots, path, before[path])
        return output

    def _refuse_host_state(
        self, before: Mapping[str, torch.Tensor], saved: Mapping[str, torch.Tensor]
    ) -> None:
        """Refuse state that the iteration changes on the host (a CPU tensor next to GPU
        work): recording ran that work once, and replays would never run it again."""
        for path, tensor in before.items():
            if self.backend.replays(tensor) or _bitwise_equal(tensor, saved[path]):
                continue
            parent, key = _parent(self.roots, path)
            if key in getattr(type(parent), "cuda_graph_host_tokens", ()):
                continue  # its value orders host calls and is never read
            _copy_into(before.values(), saved.values())
            self._undo(before)
            self.graph = None
            raise GraphCaptureError(
                f"CudaGraphLoop: state tensor {path} is on the {tensor.device.type} and the "
                "iteration changes it; a CUDA graph replays only GPU work, so it would keep its "
                "recorded value: create it on the GPU"
            )

    def _undo(self, before: Mapping[str, torch.Tensor]) -> None:
        """After a failed recording: the state as it was (nothing of the iteration ran)."""
        for path, tensor in before.items():
            try:
                assign(self.roots, path, tensor)
            except (AttributeError, IndexError, KeyError, StopIteration):
                pass  # a container the failed iteration replaced; its tensors were rebound
        for path, value in self._values[-1].items():
            if path in self._steps:
                assign(self.roots, path, value)

    def _eager(self) -> Any:
        with self.backend.eager():
            return self.fn()

    def _record(self, before: Mapping[str, torch.Tensor]) -> None:
        global _RECORDING
        graph = self.backend.graph()
        try:
            with self.backend.capture(graph):
                _RECORDING += 1
                try:
                    output = self.fn()
                finally:
                    _RECORDING -= 1
                after = tensor_paths(self.roots)
                check_same_layout(before, after)
                rebound = write_back(before, after)
        except GraphCaptureError:
            self._undo(before)
            raise
        except RuntimeError as error:
            self._undo(before)
            raise GraphCaptureError(
                f"CudaGraphLoop: the iteration cannot be recorded as a CUDA graph ({error}); "
                "it must not synchronise with the host (.item(), printing tensors, "
                "`if tensor:`, torch.tensor(..., device='cuda') of Python values, "
                "simulate()'s per-step finite check: use rollout(), whose check is deferred, "
                "or check_finite=False)"
            ) from error
        for path in rebound:
            assign(self.roots, path, before[path])
        self.graph, self._output = graph, output


#: CudaGraphLoop recordings in progress (nested never, but counted).
_RECORDING = 0


def recording() -> bool:
    """Whether a CUDA graph is being recorded, by a CudaGraphLoop (on any backend) or on the
    current CUDA stream: host reads of tensors are not allowed then."""
    if _RECORDING:
        return True
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


class CudaBackend:
    """Recording and replay with ``torch.cuda.CUDAGraph`` on the current CUDA device."""

    available = staticmethod(torch.cuda.is_available)

    def graph(self) -> torch.cuda.CUDAGraph:
        return torch.cuda.CUDAGraph()

    def capture(self, graph: torch.cuda.CUDAGraph) -> Any:
        return torch.cuda.graph(graph)

    @staticmethod
    def replays(tensor: torch.Tensor) -> bool:
        """Whether a replay redoes the work on ``tensor`` (GPU work only)."""
        return tensor.is_cuda

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Eager calls on a side stream, as torch.cuda.graphs asks, so that lazy allocations
        (cuBLAS workspaces, caching-allocator blocks) are not made during recording."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            yield
        torch.cuda.current_stream().wait_stream(stream)


def _children(value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return ((str(key), item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ((str(index), item) for index, item in enumerate(value))
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return vars(value).items()
    return ()


def _walk(roots: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    """Every (dotted path, leaf) under ``roots``; each object is entered once."""
    seen: set[int] = set()
    stack = [(name, value, 0) for name, value in reversed(list(roots.items()))]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, torch.Tensor) or _is_python_value(value):
            yield path, value
            continue
        if id(value) in seen or depth >= _MAX_DEPTH or isinstance(value, _OPAQUE):
            continue
        seen.add(id(value))
        children = list(_children(value))
        stack.extend((f"{path}.{key}", item, depth + 1) for key, item in reversed(children))


def _is_python_value(value: Any) -> bool:
    return value is None or isinstance(value, (bool, numbers.Number, str, bytes))


def tensor_paths(roots: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors reachable from ``roots``, by dotted path."""
    return {path: value for path, value in _walk(roots) if isinstance(value, torch.Tensor)}


def python_values(roots: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers, flags and strings reachable from ``roots``, by dotted path."""
    return {path: value for path, value in _walk(roots) if not isinstance(value, torch.Tensor)}


def counter_steps(snapshots: list[dict[str, Any]], counters: Iterable[str]) -> dict[str, Any]:
    """The fixed step of each counter over the warm-up snapshots; any other change refused."""
    counters = set(counters)
    steps: dict[str, Any] = {}
    snapshots = snapshots[1:]  # the first call may set things up once
    first, last = snapshots[0], snapshots[-1]
    for path in sorted(set(first) | set(last)):
        values = [snapshot.get(path, _MISSING) for snapshot in snapshots]
        if all(_same(value, values[0]) for value in values[1:]):
            continue
        if path not in counters:
            raise GraphCaptureError(
                f"CudaGraphLoop: {path} changed between calls ({values[-2]!r} -> {values[-1]!r}), "
                "but a replayed graph keeps Python values fixed; keep it in a device tensor, or "
                "list it in counters= if it only counts and does not feed the graph"
            )
        numeric = all(isinstance(v, numbers.Number) and not isinstance(v, bool) for v in values)
        deltas = {b - a for a, b in zip(values, values[1:])} if numeric else set()
        if len(deltas) != 1:
            raise GraphCaptureError(
                f"CudaGraphLoop: counter {path} must change by a fixed step each call; got "
                f"{values!r}"
            )
        steps[path] = deltas.pop()
    return steps


def _agree(replayed: torch.Tensor, eager: torch.Tensor) -> bool:
    """Equal, but for float rounding (a graph may sum atomically in another order)."""
    if replayed.shape != eager.shape or replayed.dtype != eager.dtype:
        return False
    if replayed.is_floating_point() or replayed.is_complex():
        return torch.allclose(replayed, eager, rtol=1e-4, atol=1e-5, equal_nan=True)
    return torch.equal(replayed, eager)


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN equal to NaN."""
    if a.is_floating_point() or a.is_complex():
        return torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)
    return torch.equal(a, b)


def _same(a: Any, b: Any) -> bool:
    return a is b or a == b or (a != a and b != b)  # NaN equals NaN here


def check_same_layout(
    before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]
) -> None:
    """Refuse an iteration that adds, drops or reshapes a state tensor."""
    for path in sorted(set(before) ^ set(after)):
        where = "appeared" if path in after else "disappeared"
        raise GraphCaptureError(f"CudaGraphLoop: state tensor {path} {where} during an iteration")
    for path, old in before.items():
        new = after[path]
        if (new.shape, new.dtype, new.device) != (old.shape, old.dtype, old.device):
            raise GraphCaptureError(
                f"CudaGraphLoop: state tensor {path} changed from {tuple(old.shape)} "
                f"{old.dtype} to {tuple(new.shape)} {new.dtype} during an iteration"
            )


def write_back(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> list[str]:
    """Copy each rebound tensor into the one it replaced; the rebound paths.

    New values that alias a replaced buffer (a view of old state, say) are cloned first, so
    no copy reads a buffer that an earlier copy has already overwritten.
    """
    rebound = [path for path, old in before.items() if after[path] is not old]
    targets: dict[int, tuple[str, torch.Tensor]] = {}
    for path in rebound:
        old, new = before[path], after[path]
        seen = targets.setdefault(id(old), (path, new))
        if seen[1] is not new:
            raise GraphCaptureError(
                f"CudaGraphLoop: {seen[0]} and {path} held one tensor and were given two "
                "different ones during an iteration"
            )
    old_storages = {old.untyped_storage().data_ptr() for old in before.values()}
    sources = {}
    for key, (_path, new) in targets.items():
        aliased = new.untyped_storage().data_ptr() in old_storages
        sources[key] = new.clone() if aliased else new
    for path in rebound:
        old = before[path]
        if id(old) in sources:
            _copy_into([old], [sources.pop(id(old))])
    return rebound


def _detached_clones(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {path: tensor.clone() for path, tensor in tensors.items()}


def _copy_into(targets: Iterable[torch.Tensor], sources: Iterable[torch.Tensor]) -> None:
    """``target.copy_(source)`` pairwise, outside autograd (a parameter is a leaf that
    requires grad, which autograd refuses to write in place)."""
    with torch.no_grad():
        for target, source in zip(targets, sources):
            target.copy_(source)


def assign(roots: Mapping[str, Any], path: str, value: Any) -> None:
    """Bind ``path`` to ``value`` in the objects as they are now (tuples are rebuilt)."""
    parent, key = _parent(roots, path)
    if isinstance(parent, tuple):
        items = list(parent)
        items[int(key)] = value
        rebuilt = type(parent)(*items) if hasattr(parent, "_fields") else tuple(items)
        assign(roots, path.rsplit(".", 1)[0], rebuilt)
    elif isinstance(parent, list):
        parent[int(key)] = value
    elif isinstance(parent, Mapping):
        parent[_key(parent, key)] = value
    else:
        setattr(parent, key, value)


def advance(roots: Mapping[str, Any], steps: Mapping[str, Any]) -> None:
    """Add each counter's step, as the Python of one more iteration would have."""
    for path, step in steps.items():
        parent, key = _parent(roots, path)
        if isinstance(parent, Mapping):
            current = parent[_key(parent, key)]
        elif isinstance(parent, (list, tuple)):
            current = parent[int(key)]
        else:
            current = getattr(parent, key)
        assign(roots, path, current + step)


def _parent(roots: Mapping[str, Any], path: str) -> tuple[Any, str]:
    *head, key = path.split(".")
    node: Any = roots
    for part in head:
        if isinstance(node, Mapping):
            node = node[_key(node, part)]
        elif isinstance(node, (list, tuple)):
            node = node[int(part)]
        else:
            node = getattr(node, part)
    return node, key


def _key(mapping: Mapping[Any, Any], text: str) -> Any:
    """The key of ``mapping`` whose ``str`` is ``text`` (dict keys need not be strings)."""
    return next(key for key in mapping if str(key) == text)


_MISSING = object()
#: Not state: code (compiled programs included), classes, modules and weak references.
_OPAQUE = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.ModuleType,
    functools.partial,
    weakref.ref,
    type,
)
