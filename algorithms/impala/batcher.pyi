"""Type stub of the C++ extension ``batchenv.algorithms.impala.batcher`` (csrc/).

Dynamic batching for asynchronous IMPALA. The module moves contiguous buffers only and does
not link libtorch. Inputs and outputs are *nests*: tuples, lists, dicts with ``str`` keys and
``None``, arbitrarily nested, whose leaves are NumPy arrays of any plain dtype (not
``object``). Pass CPU torch tensors as ``tensor.numpy()`` (a zero-copy view) and turn the
arrays you get back into tensors with ``torch.from_numpy(array)`` (zero copy as well).
Inputs are copied when they are queued; results are fresh, writable, C-contiguous arrays.

Dicts come back with their keys in sorted order; tuple subclasses (namedtuples) come back as
plain tuples. Every call that can block releases the GIL; on the main thread it still runs
signal handlers, so Ctrl-C interrupts it (a compute() interrupted that way withdraws its rows).

    >>> import threading
    >>> import numpy as np
    >>> from batchenv.algorithms.impala.batcher import DynamicBatcher
    >>> batcher = DynamicBatcher(timeout_ms=10)
    >>> def serve():
    ...     for batch in batcher:
    ...         with batch:
    ...             batch.set_outputs(batch.get_inputs() * 2)
    >>> server = threading.Thread(target=serve)
    >>> server.start()
    >>> batcher.compute(np.array([[1.0, 2.0]]))
    array([[2., 4.]])
    >>> batcher.close()
    >>> server.join()
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any, TypeAlias

from batchenv.errors import BatchEnvError, ClosedError

# A nest of arrays: an ndarray, or a tuple / list / dict (str keys) / None of nests.
Nest: TypeAlias = Any

class BatcherError(BatchEnvError, RuntimeError):
    """A compute() call got no outputs because the consumer failed its batch: the Batch was
    dropped (garbage-collected) before set_outputs(), or the consumer raised inside
    ``with batch:`` (the message names the exception)."""

class ClosedBatcherError(ClosedError, RuntimeError):
    """The DynamicBatcher or BatchingQueue was closed: raised by compute() / enqueue() after
    close(), and by calls that were waiting when close() ran. Not a BatcherError, so a
    producer that retries on BatcherError stops on close."""

class Batch:
    """One batch of compute() calls, handed out by iterating a DynamicBatcher.

    Call set_outputs() exactly once. A Batch dropped without outputs fails its callers with
    BatcherError. ``with batch:`` fails them as soon as the consumer raises (a kept exception
    would otherwise keep the Batch, and its callers waiting, alive).
    """

    num_callers: int
    """How many compute() calls this batch serves."""

    def __len__(self) -> int:
        """The number of rows along batch_dim (the sum over the callers)."""
    def get_inputs(self) -> Nest:
        """All callers' inputs concatenated along batch_dim, in queue order, as fresh arrays."""
    def set_outputs(self, outputs: Nest) -> None:
        """Hands each caller its rows of ``outputs`` (any nest; every leaf must have
        ``len(self)`` rows along batch_dim). ValueError (expected vs got) leaves the batch open
        for another try; RuntimeError when outputs were already set. After the batcher was
        closed the callers are gone and the outputs are discarded."""
    def __enter__(self) -> Batch: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """Without outputs, fails the callers with BatcherError; never swallows ``exc``."""

class DynamicBatcher:
    """Batches concurrent compute() calls (actors) for consumers (inference threads).

    A consumer waits until ``minimum_batch_size`` rows are pending, or ``timeout_ms`` has
    passed since the oldest pending call (then it takes a partial batch of at least one call;
    ``None``: always wait for the minimum), and takes at most ``maximum_batch_size`` rows,
    oldest first. Calls in one batch must agree on nest structure, dtypes and non-batch
    shapes; a call that does not gets ValueError. ``check_outputs``: output leaves must be
    ndarrays (else they are converted with numpy.asarray); the batch extent of every output
    leaf is checked either way.
    """

    def __init__(
        self,
        batch_dim: int = 0,
        minimum_batch_size: int = 1,
        maximum_batch_size: int = 1024,
        timeout_ms: float | None = 100,
        check_outputs: bool = True,
    ) -> None: ...
    def compute(self, inputs: Nest) -> Nest:
        """Queues ``inputs`` (1..maximum_batch_size rows along batch_dim, equal in every
        leaf), blocks until its batch has outputs, returns this call's rows of them.

        Raises ValueError / TypeError for unusable inputs, ClosedBatcherError after or during
        close(), BatcherError when the consumer dropped or failed the batch."""
    def __iter__(self) -> Iterator[Batch]: ...
    def __next__(self) -> Batch:
        """Blocks until a batch is ready; StopIteration once closed."""
    def close(self) -> None:
        """Wakes every waiting caller (queued or in a batch without outputs) with
        ClosedBatcherError and ends iteration. Idempotent."""
    def is_closed(self) -> bool: ...
    def size(self) -> int:
        """Rows waiting to be batched."""
    def __enter__(self) -> DynamicBatcher: ...
    def __exit__(self, *exc_info: object) -> bool:
        """Closes the batcher."""

class BatchingQueue:
    """A FIFO queue of nests (unrolls) handed out in concatenated batches.

    Iterating waits until ``minimum_batch_size`` items are queued (or ``timeout_ms`` has passed
    since the oldest one; ``None``: wait for the minimum), takes min(size,
    maximum_batch_size) items and concatenates each leaf along ``batch_dim``. enqueue() blocks
    while ``maximum_queue_size`` items are queued (``None``: unbounded). Queued items must
    agree on structure, dtypes and non-batch shapes. ``check_inputs``: leaves must be
    ndarrays (else they are converted with numpy.asarray).
    """

    def __init__(
        self,
        batch_dim: int = 1,
        minimum_batch_size: int = 1,
        maximum_batch_size: int = 1024,
        timeout_ms: float | None = None,
        maximum_queue_size: int | None = None,
        check_inputs: bool = True,
    ) -> None: ...
    def enqueue(self, item: Nest) -> None:
        """Copies ``item`` into the queue, blocking while it is full. ClosedBatcherError after
        or during close(); ValueError when it does not match the queued items."""
    def __iter__(self) -> Iterator[Nest]: ...
    def __next__(self) -> Nest:
        """Blocks until a batch is ready. After close() the remaining items are still handed
        out (possibly fewer than the minimum), then StopIteration."""
    def close(self, drop: bool = False) -> int:
        """Closes the queue (enqueue() raises, blocked producers wake with
        ClosedBatcherError). Queued items are drained by consumers, or with ``drop`` discarded;
        returns the number discarded. Idempotent."""
    def is_closed(self) -> bool: ...
    def size(self) -> int:
        """Items queued."""
    def __enter__(self) -> BatchingQueue: ...
    def __exit__(self, *exc_info: object) -> bool:
        """Closes the queue (without dropping)."""

__all__ = [
    "Batch",
    "BatcherError",
    "BatchingQueue",
    "ClosedBatcherError",
    "DynamicBatcher",
]
