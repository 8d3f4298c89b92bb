// Python docstrings of batchenv.algorithms.impala.batcher (see also ../batcher.pyi).
// Each is a raw string starting on the line after its opening delimiter; "+ 1" skips that
// first newline.
#pragma once

namespace batchenv::batcher::docs {

inline constexpr const char* kModule = R"doc(
Dynamic batching for asynchronous IMPALA: a C++ DynamicBatcher and BatchingQueue.

The module moves contiguous buffers only and does not link libtorch, so it does not depend
on the torch ABI. Inputs and outputs are nests (tuple / list / dict with str keys / None,
arbitrarily nested) of NumPy arrays of any plain dtype. Pass CPU torch tensors as
``tensor.numpy()`` (a zero-copy view) and turn results back into tensors with
``torch.from_numpy(array)`` (zero copy too). Every blocking call releases the GIL; on the
main thread it still runs signal handlers, so Ctrl-C interrupts it.

Dict nests come back with their keys in sorted order; tuple subclasses (namedtuples) come back
as plain tuples.
)doc" + 1;

inline constexpr const char* kBatcherError = R"doc(
A compute() call got no outputs because the consumer failed its batch: the Batch was dropped
(garbage-collected) before set_outputs(), or the consumer raised inside ``with batch:``.
)doc" + 1;

inline constexpr const char* kClosedBatcherError = R"doc(
The DynamicBatcher or BatchingQueue was closed: raised by compute() / enqueue() after
close(), and by calls that were waiting when close() ran. Create a new batcher.
)doc" + 1;

inline constexpr const char* kDynamicBatcher = R"doc(
Batches concurrent compute() calls (actor threads) into one batch for a consumer (the
inference thread), then hands each caller its rows of the outputs.

A consumer waits until at least ``minimum_batch_size`` rows are pending, or until
``timeout_ms`` has passed since the oldest pending call (then it takes a partial batch;
``timeout_ms=None`` always waits for the minimum), and takes at most ``maximum_batch_size``
rows, oldest calls first. All calls in one batch must agree on nest structure, dtypes and
shapes apart from the batch extent; a call that does not gets a ValueError.

With ``check_outputs`` every output leaf must be a numpy.ndarray; without it, leaves are
converted with numpy.asarray. Either way each output leaf must have exactly the batch's row
count along ``batch_dim`` (anything else would corrupt memory).

Example::

    import threading
    import numpy as np
    from batchenv.algorithms.impala.batcher import DynamicBatcher

    batcher = DynamicBatcher(timeout_ms=10)

    def serve():
        for batch in batcher:
            with batch:
                batch.set_outputs(batch.get_inputs() * 2)

    server = threading.Thread(target=serve)
    server.start()
    print(batcher.compute(np.array([[1.0, 2.0]])))  # [[2. 4.]]
    batcher.close()
    server.join()
)doc" + 1;

inline constexpr const char* kCompute = R"doc(
Queues ``inputs`` (a nest of arrays that all have the same extent along batch_dim, between 1
and maximum_batch_size rows), blocks until a consumer has set the outputs of their batch, and
returns this call's rows of them as fresh arrays. The GIL is released while it waits.

Raises ValueError for inputs that do not fit (also when they differ from the batch's other
calls), TypeError for leaves that are not arrays or hold Python objects, ClosedBatcherError
after or during close(), and BatcherError when the consumer dropped or failed the batch.
)doc" + 1;

inline constexpr const char* kBatcherNext = R"doc(
The next Batch; blocks (GIL released) until one is ready. StopIteration once closed.
)doc" + 1;

inline constexpr const char* kBatcherClose = R"doc(
Wakes every waiting compute() call, queued or in a batch without outputs yet, with
ClosedBatcherError, and ends consumer iteration with StopIteration. Idempotent.
)doc" + 1;

inline constexpr const char* kBatch = R"doc(
One batch of compute() calls, handed out by iterating a DynamicBatcher.

Call set_outputs() exactly once. If the Batch is dropped (garbage-collected) without outputs,
its callers get BatcherError. Use ``with batch:`` so that an exception in the consumer fails
the callers at once, with the exception's text, instead of when the frame holding the Batch
is freed::

    for batch in batcher:
        with batch:
            batch.set_outputs(model(batch.get_inputs()))
)doc" + 1;

inline constexpr const char* kGetInputs = R"doc(
All callers' inputs concatenated along batch_dim (in the order they were queued), as fresh
arrays with the callers' nest structure. Each call returns new copies.
)doc" + 1;

inline constexpr const char* kSetOutputs = R"doc(
Hands each caller its rows of ``outputs``, a nest (any structure) whose every leaf has
``len(batch)`` rows along batch_dim; callers receive copies. Raises ValueError (saying what was
expected and what it got) when a leaf has the wrong row count, leaving the batch open for
another try, and RuntimeError when outputs were already set.
)doc" + 1;

inline constexpr const char* kBatchExit = R"doc(
Leaving ``with batch:`` without outputs fails the callers with BatcherError, naming the
consumer's exception if there was one. The exception is never swallowed.
)doc" + 1;

inline constexpr const char* kBatchingQueue = R"doc(
A FIFO queue of nests (for example [T+1, 1, ...] unrolls) that consumers take in batches:
iterating waits until at least ``minimum_batch_size`` items are queued (or ``timeout_ms`` has
passed since the oldest one), takes min(size, maximum_batch_size) items and concatenates each
leaf along ``batch_dim``. enqueue() blocks while ``maximum_queue_size`` items are queued.

Queued items must agree on nest structure, dtypes and shapes apart from the batch extent
(enqueue() raises ValueError otherwise). With ``check_inputs`` every leaf must be a
numpy.ndarray; without it, leaves are converted with numpy.asarray.

Example::

    import numpy as np
    from batchenv.algorithms.impala.batcher import BatchingQueue

    queue = BatchingQueue(batch_dim=1, minimum_batch_size=2, maximum_batch_size=2)
    queue.enqueue({"reward": np.zeros((5, 1))})
    queue.enqueue({"reward": np.ones((5, 1))})
    print(next(queue)["reward"].shape)  # (5, 2)
    queue.close()
)doc" + 1;

inline constexpr const char* kEnqueue = R"doc(
Copies ``item`` (a nest of arrays, each with a batch_dim axis) into the queue, blocking (GIL
released) while it is full. Raises ClosedBatcherError after or during close(), ValueError when
the item does not match the queued ones, TypeError for leaves that are not arrays.
)doc" + 1;

inline constexpr const char* kQueueNext = R"doc(
The next batch (a nest of concatenated arrays); blocks (GIL released) until one is ready.
After close() the remaining items are still handed out (fewer than the minimum if need be),
then StopIteration.
)doc" + 1;

inline constexpr const char* kQueueClose = R"doc(
Closes the queue: enqueue() raises ClosedBatcherError from now on, also in producers blocked
on a full queue. Queued items are still handed to consumers (drained); with ``drop=True``
they are discarded instead. Returns the number of discarded items. Idempotent: a later
``close(drop=True)`` discards whatever is still queued.
)doc" + 1;

}  // namespace batchenv::batcher::docs
