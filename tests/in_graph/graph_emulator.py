"""A CPU stand-in for CUDA graphs, for CudaGraphLoop's tests on machines without a GPU.

Recording runs the iteration once under a dispatch mode that logs every ATen call with the
very tensors it read and wrote. Replaying calls the same ops on those same tensors again and
copies each result into the tensor recorded for it. So, as with a CUDA graph, a replay reads
the recorded buffers (whatever they hold now) and Python values are frozen; reading a value
on the host while recording fails as it does on a GPU. A CUDA stream that records runs
nothing, so the writes that recording made into tensors older than it are undone at the end.
Only eager code goes through the dispatcher, so the code under test must run uncompiled.

``host=`` marks tensors that stand for CPU tensors next to a GPU graph (a predicate): ops
that write one, or read only such tensors, run once while recording and are never replayed
or undone, as host work during a CUDA capture; an op that reads one into recorded work is
recorded with that tensor's value at the time (a CUDA kernel takes a CPU scalar by value).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

#: Ops that move a value to the host: not allowed while a CUDA stream records.
_HOST_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default}


class RecordedGraph:
    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def replay(self) -> None:
        with torch.no_grad():  # a CUDA graph replays kernels, with no autograd around them
            for func, args, kwargs, recorded in self.ops:
                result = func(*args, **kwargs)
                for old, new in zip(tree_leaves(recorded), tree_leaves(result)):
                    if isinstance(old, torch.Tensor) and old is not new:
                        old.copy_(new)


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: RecordedGraph, host) -> None:
        super().__init__()
        self.graph, self.host = graph, host
        self.fresh: set[int] = set()  # storages allocated while recording
        self.undo: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _HOST_READS:
            raise RuntimeError("operation not permitted when stream is capturing (emulated)")
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_host = [self.host(t) for t in tensors]
        if any(self.host(t) for t in _written(func, args, kwargs)) or (tensors and all(on_host)):
            return func(*args, **kwargs)  # host work: runs now, never again
        if any(on_host):  # frozen: the value now, as a kernel argument
            args, kwargs = tree_map(
                lambda t: t.clone() if _is_host(self.host, t) else t, (args, kwargs)
            )
        for written in _written(func, args, kwargs):
            if written.untyped_storage().data_ptr() not in self.fresh:
                self.undo.append((written, written.clone()))
        result = func(*args, **kwargs)
        inputs = {_storage(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for out in tree_leaves(result):
            if isinstance(out, torch.Tensor) and _storage(out) not in inputs:
                self.fresh.add(_storage(out))
        self.graph.ops.append((func, args, kwargs, result))
        return result

    def __exit__(self, *exc):
        result = super().__exit__(*exc)  # first, so that the undoing is not recorded
        with torch.no_grad():  # parameters are leaves that require grad
            for tensor, saved in reversed(self.undo):
                tensor.copy_(saved)
        return result


def _is_host(host, value) -> bool:
    return isinstance(value, torch.Tensor) and host(value)


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensor arguments that ``func`` writes into (in-place and ``out=`` ones)."""
    written = []
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        written += [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
    return written


class EmulatedBackend:
    """CudaGraphLoop's backend protocol, on the CPU; ``host(tensor)`` says which tensors play
    CPU tensors (none by default)."""

    def __init__(self, host=lambda tensor: False) -> None:
        self.host = host

    @staticmethod
    def available() -> bool:
        return True

    def graph(self) -> RecordedGraph:
        return RecordedGraph()

    def capture(self, graph: RecordedGraph) -> _Recorder:
        return _Recorder(graph, self.host)

    def replays(self, tensor: torch.Tensor) -> bool:
        return not self.host(tensor)

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        yield
