"""Tests of the C++ DynamicBatcher and BatchingQueue (batchenv.algorithms.impala.batcher).

Every thread a test starts runs through ``Worker``, whose result() joins with a deadline: a
hang fails the test instead of the suite.
"""

from __future__ import annotations

import signal
import threading
import time
import traceback

import numpy as np
import pytest

from batchenv.algorithms.impala.batcher import (
    Batch,
    BatcherError,
    BatchingQueue,
    ClosedBatcherError,
    DynamicBatcher,
)
from batchenv.errors import BatchEnvError, ClosedError

DEADLINE = 10.0  # seconds any single wait in these tests may take before it counts as a hang


class Worker(threading.Thread):
    """Runs ``fn(*args)`` in a daemon thread; result() joins with a deadline and re-raises.

    An exception is stored without its traceback object (kept as text), so the frames it ran
    in, and any Batch they held, are freed as they would be in a thread that just died.
    """

    def __init__(self, fn, *args):
        super().__init__(target=None, daemon=True)
        self._fn, self._args = fn, args
        self.value = None
        self.error: BaseException | None = None
        self.trace = ""
        self.start()

    def run(self):
        try:
            self.value = self._fn(*self._args)
        except BaseException as error:  # noqa: BLE001 - handed to result()
            self.trace = traceback.format_exc()
            self.error = error.with_traceback(None)
            del error

    def result(self, timeout: float = DEADLINE):
        self.join(timeout)
        assert not self.is_alive(), f"{self._fn} still blocked after {timeout} s"
        if self.error is not None:
            raise self.error
        return self.value


def wait_for(predicate, timeout: float = DEADLINE, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def serve_forever(batcher, fn):
    """A consumer loop: outputs = fn(inputs) for every batch until the batcher closes."""
    batches = 0
    for batch in batcher:
        with batch:
            batch.set_outputs(fn(batch.get_inputs()))
        batches += 1
    return batches


# --- DynamicBatcher: batching semantics ------------------------------------------------------


def test_timeout_flushes_a_partial_batch():
    with DynamicBatcher(minimum_batch_size=5, maximum_batch_size=5, timeout_ms=300) as batcher:
        start = time.monotonic()
        producer = Worker(batcher.compute, np.array([7.0]))
        batch = next(batcher)
        elapsed = time.monotonic() - start
        assert (len(batch), batch.num_callers) == (1, 1)
        assert 0.25 <= elapsed < 3.0, elapsed
        batch.set_outputs(batch.get_inputs() + 1)
        np.testing.assert_array_equal(producer.result(), [8.0])


def test_without_timeout_waits_for_the_minimum():
    with DynamicBatcher(minimum_batch_size=2, timeout_ms=None) as batcher:
        first = Worker(batcher.compute, np.array([1]))
        consumer = Worker(next, batcher)
        time.sleep(0.3)
        assert consumer.is_alive() and batcher.size() == 1
        second = Worker(batcher.compute, np.array([2]))
        batch = consumer.result()
        assert len(batch) == 2
        batch.set_outputs(batch.get_inputs() * 10)
        assert first.result()[0] == 10 and second.result()[0] == 20


def test_maximum_batch_size_splits_pending_rows():
    with DynamicBatcher(maximum_batch_size=4, timeout_ms=0) as batcher:
        producers = [Worker(batcher.compute, np.array([i])) for i in range(10)]
        wait_for(lambda: batcher.size() == 10, what="10 pending rows")
        sizes = []
        for _ in range(3):
            batch = next(batcher)
            sizes.append(len(batch))
            batch.set_outputs(batch.get_inputs())
        assert sizes == [4, 4, 2]
        assert sorted(int(p.result()[0]) for p in producers) == list(range(10))


def test_callers_may_bring_several_rows():
    with DynamicBatcher(minimum_batch_size=5, timeout_ms=None) as batcher:
        two = Worker(batcher.compute, np.array([[1, 1], [2, 2]]))
        wait_for(lambda: batcher.size() == 2)
        three = Worker(batcher.compute, np.array([[3, 3], [4, 4], [5, 5]]))
        batch = next(batcher)
        assert (len(batch), batch.num_callers) == (5, 2)
        batch.set_outputs(-batch.get_inputs())
        np.testing.assert_array_equal(two.result(), [[-1, -1], [-2, -2]])
        np.testing.assert_array_equal(three.result(), [[-3, -3], [-4, -4], [-5, -5]])


def test_64_producers_and_16_consumers_each_get_their_own_rows():
    producers_count, calls, consumers_count = 64, 100, 16

    def model(inputs):  # output = input * 2 + caller id
        return {"y": inputs["x"] * 2 + inputs["caller"], "caller": inputs["caller"]}

    def produce(caller):
        for k in range(calls):
            x = np.array([caller * 1000.0 + k])
            out = batcher.compute({"x": x, "caller": np.array([caller], dtype=np.int64)})
            assert out["y"][0] == x[0] * 2 + caller, (caller, k, out)
            assert out["caller"].dtype == np.int64 and out["caller"][0] == caller
        return calls

    with DynamicBatcher(maximum_batch_size=64, timeout_ms=5) as batcher:
        consumers = [Worker(serve_forever, batcher, model) for _ in range(consumers_count)]
        producers = [Worker(produce, caller) for caller in range(producers_count)]
        served = sum(p.result(timeout=60) for p in producers)
    assert served == producers_count * calls
    assert sum(c.result() for c in consumers) >= 1


# --- DynamicBatcher: outputs ------------------------------------------------------------------


def test_wrong_output_batch_size_is_a_value_error_and_the_batch_stays_open():
    with DynamicBatcher(minimum_batch_size=2, timeout_ms=None) as batcher:
        producers = [Worker(batcher.compute, np.array([[i, i]])) for i in range(2)]
        batch = next(batcher)
        with pytest.raises(ValueError, match=r"expected 2, got 3 rows"):
            batch.set_outputs(np.zeros((3, 1)))
        with pytest.raises(ValueError, match=r"\['logits'\] has shape \(\), which has no axis"):
            batch.set_outputs({"logits": np.array(1.0), "v": np.zeros(2)})
        with pytest.raises(TypeError, match=r"leaf \[1\]\[0\] has type float"):
            batch.set_outputs((np.zeros(2), [0.0, 1.0]))  # a list is structure, not a leaf
        batch.set_outputs(batch.get_inputs() + 1)
        assert sorted(p.result()[0, 0] for p in producers) == [1, 2]


def test_set_outputs_twice_is_a_runtime_error():
    with DynamicBatcher() as batcher:
        producer = Worker(batcher.compute, np.array([1.0]))
        batch = next(batcher)
        batch.set_outputs(np.array([2.0]))
        with pytest.raises(RuntimeError, match="already called"):
            batch.set_outputs(np.array([3.0]))
        assert producer.result()[0] == 2.0


class ArrayLike:
    """Not an ndarray, but numpy.asarray() can convert it (like a CPU torch tensor)."""

    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values


def test_check_outputs_false_converts_leaves_with_asarray():
    with DynamicBatcher(check_outputs=False) as batcher:
        producer = Worker(batcher.compute, np.array([1.0]))
        batch = next(batcher)
        with pytest.raises(ValueError, match="no axis"):  # the batch extent is still checked
            batch.set_outputs({"action": 3})
        batch.set_outputs({"action": ArrayLike([3]), "value": np.array([0.5], np.float32)})
        out = producer.result()
        assert out["action"].tolist() == [3] and out["value"].dtype == np.float32
    with DynamicBatcher() as strict:
        producer = Worker(strict.compute, np.array([1.0]))
        with pytest.raises(TypeError, match=r"leaf <root> has type ArrayLike"):
            next(strict).set_outputs(ArrayLike([3]))


# --- DynamicBatcher: close and consumer failures ---------------------------------------------


def test_close_wakes_waiting_producers_and_consumers():
    batcher = DynamicBatcher(minimum_batch_size=100, timeout_ms=None)
    producers = [Worker(batcher.compute, np.ones((1, 2))) for _ in range(4)]
    wait_for(lambda: batcher.size() == 4, what="4 pending rows")
    consumers = [Worker(lambda: list(batcher)) for _ in range(2)]
    time.sleep(0.1)
    start = time.monotonic()
    batcher.close()
    for producer in producers:
        with pytest.raises(ClosedBatcherError, match="closed while this compute"):
            producer.result()
    assert all(consumer.result() == [] for consumer in consumers)
    assert time.monotonic() - start < 2.0
    batcher.close()  # idempotent
    assert batcher.is_closed() and batcher.size() == 0
    with pytest.raises(ClosedBatcherError, match="closed DynamicBatcher"):
        batcher.compute(np.ones((1, 2)))
    with pytest.raises(StopIteration):
        next(batcher)


def test_close_wakes_callers_whose_batch_a_consumer_holds():
    batcher = DynamicBatcher(minimum_batch_size=2, timeout_ms=None)
    producers = [Worker(batcher.compute, np.array([i])) for i in range(2)]
    batch = next(batcher)
    batcher.close()
    for producer in producers:
        with pytest.raises(ClosedBatcherError, match="consumer held"):
            producer.result()
    # The consumer may still finish its batch; nobody is left to receive the outputs.
    assert sorted(batch.get_inputs()) == [0, 1]
    batch.set_outputs(np.zeros(2))


def test_a_dropped_batch_fails_its_callers():
    with DynamicBatcher(minimum_batch_size=3, timeout_ms=None) as batcher:
        producers = [Worker(batcher.compute, np.array([i])) for i in range(3)]
        batch = next(batcher)
        del batch
        for producer in producers:
            with pytest.raises(BatcherError, match="dropped without outputs") as info:
                producer.result()
            assert type(info.value) is BatcherError


def test_a_consumer_exception_does_not_strand_producers():
    def broken_model(inputs):
        raise ZeroDivisionError("model exploded")

    def crashing_consumer():
        for _batch in batcher:  # no `with`: the Batch is dropped when this frame dies
            broken_model(_batch.get_inputs())

    with DynamicBatcher(timeout_ms=10) as batcher:
        consumer = Worker(crashing_consumer)
        with pytest.raises(BatcherError, match="dropped without outputs"):
            batcher.compute(np.array([1.0]))
        with pytest.raises(ZeroDivisionError):
            consumer.result()
        healthy = Worker(serve_forever, batcher, lambda x: x + 1)  # service goes on
        assert batcher.compute(np.array([1.0]))[0] == 2.0
    assert healthy.result() == 1


def test_with_batch_fails_callers_at_once_naming_the_exception():
    kept = []  # a kept exception keeps its traceback, its frames, and their Batch alive

    def consumer():
        for batch in batcher:
            try:
                with batch:
                    raise ValueError("model exploded")
            except ValueError as error:
                kept.append(error)

    with DynamicBatcher(timeout_ms=10) as batcher:
        worker = Worker(consumer)
        with pytest.raises(BatcherError, match="consumer raised ValueError: model exploded"):
            batcher.compute(np.array([1.0]))
    worker.result()
    assert len(kept) == 1


def test_leaving_with_batch_without_outputs_fails_callers():
    with DynamicBatcher() as batcher:
        producer = Worker(batcher.compute, np.array([1.0]))
        with next(batcher):
            pass
        with pytest.raises(BatcherError, match="without calling set_outputs"):
            producer.result()


# --- Nests, dtypes and input checks -----------------------------------------------------------

DTYPES = {
    "float32": np.float32,
    "int64": np.int64,
    "bool": np.bool_,
    "uint8": np.uint8,
    "float16": np.float16,
    "complex128": np.complex128,
    "big-endian-f4": np.dtype(">f4"),
    "datetime64": np.dtype("datetime64[ms]"),
    "str": np.dtype("<U3"),
    "structured": np.dtype([("a", "<i4"), ("b", "<f8")]),
}


def make_leaf(dtype, shape, seed):
    values = np.arange(np.prod(shape), dtype=np.int64).reshape(shape) + 100 * seed
    return (
        values.astype(dtype)
        if np.dtype(dtype).fields is None
        else values.astype(np.int32).astype(dtype)
    )


@pytest.mark.parametrize("batch_dim", [0, 1, 2], ids=lambda d: f"batch_dim={d}")
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_nests_round_trip_through_a_batch(batch_dim, dtype):
    def nest(caller, rows):
        shape = [3, 1, 2]
        shape.insert(batch_dim, rows)
        return {
            "obs": (make_leaf(dtype, shape, caller), [make_leaf(np.float32, shape, caller)]),
            "state": None,
            "id": np.full(shape[: batch_dim + 1], caller, dtype=np.int16),
        }

    inputs = [nest(0, 1), nest(1, 2)]
    with DynamicBatcher(batch_dim=batch_dim, minimum_batch_size=3, timeout_ms=None) as batcher:
        first = Worker(batcher.compute, inputs[0])
        wait_for(lambda: batcher.size() == 1)
        second = Worker(batcher.compute, inputs[1])
        batch = next(batcher)
        got = batch.get_inputs()
        assert sorted(got) == ["id", "obs", "state"] and got["state"] is None
        assert isinstance(got["obs"], tuple) and isinstance(got["obs"][1], list)
        for leaf, parts in [
            (got["obs"][0], [x["obs"][0] for x in inputs]),
            (got["obs"][1][0], [x["obs"][1][0] for x in inputs]),
            (got["id"], [x["id"] for x in inputs]),
        ]:
            assert leaf.dtype == parts[0].dtype and leaf.flags.c_contiguous
            np.testing.assert_array_equal(leaf, np.concatenate(parts, axis=batch_dim))
        batch.set_outputs(got)  # echo: each caller must get exactly its own inputs back
        for worker, sent in zip([first, second], inputs):
            out = worker.result()
            assert out["state"] is None and out["obs"][0].dtype == sent["obs"][0].dtype
            np.testing.assert_array_equal(out["obs"][0], sent["obs"][0])
            np.testing.assert_array_equal(out["obs"][1][0], sent["obs"][1][0])
            np.testing.assert_array_equal(out["id"], sent["id"])
            assert out["obs"][0].flags.writeable and out["obs"][0].flags.c_contiguous


def test_non_contiguous_inputs_are_copied():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    with DynamicBatcher(batch_dim=1, timeout_ms=0) as batcher:
        producer = Worker(batcher.compute, base[:, ::3])  # strided view, shape (4, 2)
        batch = next(batcher)
        np.testing.assert_array_equal(batch.get_inputs(), base[:, ::3])
        batch.set_outputs(batch.get_inputs().T.copy().T)  # Fortran order on the way back
        np.testing.assert_array_equal(producer.result(), base[:, ::3])


MISMATCHES = {
    "dtype": (np.zeros((1, 3), np.float32), np.zeros((1, 3), np.float64), "dtype float64"),
    "shape": (np.zeros((1, 3)), np.zeros((1, 4)), r"shape \(B, 4\)"),
    "structure": ({"a": np.zeros(1)}, {"b": np.zeros(1)}, "nest structure"),
}


@pytest.mark.parametrize(
    "first_inputs, second_inputs, message", MISMATCHES.values(), ids=list(MISMATCHES)
)
def test_callers_that_do_not_match_their_batch_get_a_value_error(
    first_inputs, second_inputs, message
):
    with DynamicBatcher(minimum_batch_size=2, timeout_ms=None) as batcher:
        first = Worker(batcher.compute, first_inputs)
        wait_for(lambda: batcher.size() == 1)
        second = Worker(batcher.compute, second_inputs)
        wait_for(lambda: batcher.size() == 2)
        batch = next(batcher)
        assert (len(batch), batch.num_callers) == (1, 1)
        with pytest.raises(ValueError, match=f"cannot join their batch.*{message}"):
            second.result()
        batch.set_outputs(batch.get_inputs())
        first.result()


class Opaque:
    pass


BAD_INPUTS = {
    "float-leaf": ({"x": 1.0}, TypeError, r"leaf \['x'\] has type float, expected a numpy.ndarray"),
    "array-like-leaf": ([ArrayLike([1.0])], TypeError, r"leaf \[0\] has type ArrayLike"),
    "object-dtype": (np.array([Opaque()]), TypeError, "holds Python objects"),
    "no-batch-axis": ({"x": np.array(1.0)}, ValueError, r"\['x'\] .*no axis"),
    "too-many-rows": (np.zeros((5, 1)), ValueError, "maximum_batch_size=4"),
    "zero-rows": (np.zeros((0, 1)), ValueError, "between 1 and"),
    "uneven-rows": ((np.zeros((1, 1)), np.zeros((2, 1))), ValueError, "same extent"),
    "no-arrays": ({"a": None, "b": ()}, ValueError, "no arrays"),
    "int-key": ({1: np.zeros(1)}, TypeError, "keys in a nest must be str"),
}


@pytest.mark.parametrize("inputs, error, message", BAD_INPUTS.values(), ids=list(BAD_INPUTS))
def test_bad_compute_inputs_fail_fast(inputs, error, message):
    with DynamicBatcher(maximum_batch_size=4) as batcher:
        with pytest.raises(error, match=message):
            batcher.compute(inputs)
        assert batcher.size() == 0


def test_self_containing_nest_is_refused():
    loop = [np.zeros(1)]
    loop.append(loop)
    with DynamicBatcher() as batcher, pytest.raises(ValueError, match="contain itself"):
        batcher.compute(loop)


def test_torch_tensors_travel_as_numpy_views():
    torch = pytest.importorskip("torch")
    with DynamicBatcher(timeout_ms=0) as batcher:
        consumer = Worker(serve_forever, batcher, lambda x: x * 3)
        observ = torch.arange(4, dtype=torch.float32).reshape(1, 4)
        with pytest.raises(TypeError, match=r"tensor.numpy\(\)"):
            batcher.compute(observ)
        out = batcher.compute(observ.numpy())
        action = torch.from_numpy(out)  # zero copy
        assert action.data_ptr() == out.ctypes.data
        assert torch.equal(action, observ * 3)
    consumer.result()


# --- GIL and signals --------------------------------------------------------------------------


def _spin_while_blocked(block):
    """How many pure-Python loop iterations another thread ran while ``block()`` ran."""
    stop = threading.Event()
    counter = [0]

    def spin():
        while not stop.is_set():
            counter[0] += 1

    spinner = Worker(spin)
    time.sleep(0.05)
    before = counter[0]
    block()
    during = counter[0] - before
    stop.set()
    spinner.result()
    return during


def _block_in_compute():
    with DynamicBatcher(minimum_batch_size=2, timeout_ms=300) as batcher:
        consumer = Worker(serve_forever, batcher, lambda x: x)
        batcher.compute(np.ones(1))
    consumer.result()


def _block_in_batcher_next():
    with DynamicBatcher(minimum_batch_size=2, timeout_ms=300) as batcher:
        producer = Worker(batcher.compute, np.ones(1))
        next(batcher).set_outputs(np.ones(1))
    producer.result()


def _block_in_queue_next():
    with BatchingQueue(batch_dim=0, minimum_batch_size=2, timeout_ms=300) as queue:
        queue.enqueue(np.ones(1))
        next(queue)


def _block_in_enqueue():
    with BatchingQueue(batch_dim=0, maximum_batch_size=1, maximum_queue_size=1) as queue:
        queue.enqueue(np.ones(1))
        taker = Worker(lambda: (time.sleep(0.3), next(queue)))
        queue.enqueue(np.ones(1))
    taker.result()


@pytest.mark.parametrize(
    "block",
    [_block_in_compute, _block_in_batcher_next, _block_in_queue_next, _block_in_enqueue],
    ids=["compute", "DynamicBatcher.__next__", "BatchingQueue.__next__", "enqueue"],
)
def test_blocking_calls_release_the_gil(block):
    assert _spin_while_blocked(block) > 10_000


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, frame):
    raise Interrupted


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_a_signal_interrupts_a_blocked_compute_and_withdraws_its_rows():
    previous = signal.signal(signal.SIGALRM, _raise_interrupted)
    try:
        with DynamicBatcher(minimum_batch_size=2, timeout_ms=None) as batcher:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            start = time.monotonic()
            with pytest.raises(Interrupted):
                batcher.compute(np.ones(1))
            assert time.monotonic() - start < 2.0
            assert batcher.size() == 0
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with BatchingQueue(timeout_ms=None) as queue, pytest.raises(Interrupted):
                next(queue)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- BatchingQueue ----------------------------------------------------------------------------


def drain(queue):
    return [batch.tolist() for batch in queue]


def test_queue_enqueue_blocks_while_full_and_unblocks_on_dequeue():
    with BatchingQueue(batch_dim=0, maximum_batch_size=2, maximum_queue_size=2) as queue:
        queue.enqueue(np.array([0]))
        queue.enqueue(np.array([1]))
        producer = Worker(queue.enqueue, np.array([2]))
        time.sleep(0.2)
        assert producer.is_alive() and queue.size() == 2
        assert next(queue).tolist() == [0, 1]
        producer.result()
        assert queue.size() == 1


def test_queue_is_fifo_and_respects_minimum_and_maximum():
    with BatchingQueue(batch_dim=0, minimum_batch_size=2, maximum_batch_size=3) as queue:
        for i in range(9):
            queue.enqueue(np.array([i]))
        assert [next(queue).tolist() for _ in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
        queue.enqueue(np.array([9]))
        consumer = Worker(next, queue)
        time.sleep(0.2)
        assert consumer.is_alive()  # one item, minimum two, no timeout
        queue.enqueue(np.array([10]))
        assert consumer.result().tolist() == [9, 10]


def test_queue_timeout_hands_out_a_partial_batch():
    with BatchingQueue(batch_dim=0, minimum_batch_size=4, timeout_ms=200) as queue:
        start = time.monotonic()
        queue.enqueue(np.array([1.0]))
        assert next(queue).tolist() == [1.0]
        assert 0.15 <= time.monotonic() - start < 3.0


def test_queue_concatenates_unrolls_along_batch_dim():
    unroll_length, batch_size = 5, 3
    with BatchingQueue(minimum_batch_size=batch_size, maximum_batch_size=batch_size) as queue:
        for actor in range(batch_size):
            queue.enqueue(
                {
                    "observ": np.full((unroll_length + 1, 1, 4), actor, np.float32),
                    "extras": (np.full((unroll_length + 1, 1), actor, np.int64), None),
                }
            )
        batch = next(queue)
    assert batch["observ"].shape == (unroll_length + 1, batch_size, 4)
    assert batch["extras"][0].shape == (unroll_length + 1, batch_size)
    assert batch["extras"][1] is None
    np.testing.assert_array_equal(batch["observ"][0, :, 0], [0, 1, 2])


def test_queue_close_drains_pending_items():
    with BatchingQueue(batch_dim=0, minimum_batch_size=2, maximum_batch_size=2) as queue:
        for i in range(5):
            queue.enqueue(np.array([i]))
        assert queue.close() == 0
        with pytest.raises(ClosedBatcherError, match="closed BatchingQueue"):
            queue.enqueue(np.array([5]))
        assert queue.is_closed() and queue.close() == 0
        assert drain(queue) == [[0, 1], [2, 3], [4]]


def test_queue_close_drop_reports_how_many_items_it_discarded():
    queue = BatchingQueue(batch_dim=0)
    for i in range(5):
        queue.enqueue(np.array([i]))
    assert queue.close(drop=True) == 5
    assert drain(queue) == [] and queue.size() == 0
    assert queue.close(drop=True) == 0


def test_queue_close_wakes_blocked_producers_and_consumers():
    full = BatchingQueue(batch_dim=0, maximum_batch_size=1, maximum_queue_size=1)
    full.enqueue(np.array([0]))
    producer = Worker(full.enqueue, np.array([1]))
    empty = BatchingQueue(batch_dim=0)
    consumers = [Worker(drain, empty) for _ in range(3)]
    time.sleep(0.1)
    full.close()
    empty.close()
    with pytest.raises(ClosedBatcherError):
        producer.result(timeout=2.0)
    assert [c.result(timeout=2.0) for c in consumers] == [[], [], []]
    assert drain(full) == [[0]]


def test_queue_rejects_items_that_do_not_match_the_queued_ones():
    with BatchingQueue(batch_dim=0) as queue:
        queue.enqueue(np.zeros((1, 3), np.float32))
        with pytest.raises(ValueError, match="dtype float64"):
            queue.enqueue(np.zeros((1, 3), np.float64))
        with pytest.raises(ValueError, match=r"shape \(B, 4\)"):
            queue.enqueue(np.zeros((1, 4), np.float32))
        queue.enqueue(np.zeros((2, 3), np.float32))  # another batch extent is fine
        assert next(queue).shape == (3, 3)
        queue.enqueue({"other": np.zeros(1)})  # the queue is empty: anything goes again
        assert next(queue)["other"].shape == (1,)


def test_queue_check_inputs():
    with BatchingQueue(batch_dim=0) as strict, pytest.raises(TypeError, match="numpy.ndarray"):
        strict.enqueue(ArrayLike([[1.0, 2.0]]))
    with BatchingQueue(batch_dim=0, check_inputs=False) as lenient:
        lenient.enqueue(ArrayLike([[1.0, 2.0]]))
        assert next(lenient).tolist() == [[1.0, 2.0]]


def test_queue_with_many_producers_and_consumers_delivers_every_item_once():
    producers_count, items = 8, 50

    def produce(producer):
        for k in range(items):
            queue.enqueue({"who": np.array([producer]), "k": np.array([k])})

    queue = BatchingQueue(
        batch_dim=0, minimum_batch_size=3, maximum_batch_size=5, timeout_ms=5, maximum_queue_size=8
    )
    consumers = [
        Worker(lambda: [(b["who"].tolist(), b["k"].tolist()) for b in queue]) for _ in range(3)
    ]
    for producer in [Worker(produce, p) for p in range(producers_count)]:
        producer.result()
    queue.close()
    received = []
    for consumer in consumers:
        for who, ks in consumer.result():
            assert len(who) <= 5
            received.extend(zip(who, ks))
    assert sorted(received) == [(p, k) for p in range(producers_count) for k in range(items)]


# --- Construction -----------------------------------------------------------------------------

BAD_ARGUMENTS = {
    "batcher-min": (DynamicBatcher, {"minimum_batch_size": 0}, "minimum_batch_size must be >= 1"),
    "batcher-max": (
        DynamicBatcher,
        {"minimum_batch_size": 5, "maximum_batch_size": 4},
        "maximum_batch_size must be >= minimum_batch_size",
    ),
    "batcher-dim": (DynamicBatcher, {"batch_dim": -1}, "batch_dim must be >= 0"),
    "batcher-timeout": (DynamicBatcher, {"timeout_ms": -1}, "timeout_ms must be >= 0 or None"),
    "batcher-nan": (DynamicBatcher, {"timeout_ms": float("nan")}, "timeout_ms must be >= 0"),
    "queue-min": (BatchingQueue, {"minimum_batch_size": 0}, "minimum_batch_size must be >= 1"),
    "queue-max": (
        BatchingQueue,
        {"minimum_batch_size": 3, "maximum_batch_size": 2},
        "maximum_batch_size must be >= minimum_batch_size",
    ),
    "queue-size": (
        BatchingQueue,
        {"maximum_batch_size": 8, "maximum_queue_size": 4},
        "maximum_queue_size must be >= maximum_batch_size",
    ),
    "queue-dim": (BatchingQueue, {"batch_dim": -2}, "batch_dim must be >= 0"),
    "queue-timeout": (BatchingQueue, {"timeout_ms": -0.5}, "timeout_ms must be >= 0 or None"),
}


@pytest.mark.parametrize("cls, kwargs, message", BAD_ARGUMENTS.values(), ids=list(BAD_ARGUMENTS))
def test_constructor_arguments_are_validated(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


def test_public_surface():
    assert issubclass(ClosedBatcherError, RuntimeError) and issubclass(BatcherError, RuntimeError)
    assert issubclass(ClosedBatcherError, ClosedError) and issubclass(BatcherError, BatchEnvError)
    assert not issubclass(ClosedBatcherError, BatcherError)  # retrying on BatcherError is safe
    with pytest.raises(TypeError):
        Batch()
    batcher = DynamicBatcher(timeout_ms=None)
    assert "timeout_ms=None" in repr(batcher) and not batcher.is_closed()
    assert "maximum_queue_size=None" in repr(BatchingQueue())
