// The Python module batchenv.algorithms.impala.batcher: a thin face over the pure C++ cores
// (dynamic_batcher.h, batching_queue.h). This file owns every GIL decision:
//   * nests are flattened and rebuilt with the GIL held (py_nest.cpp);
//   * every wait that can block runs with the GIL released (wait_interruptibly below);
//   * copies of more than kReleaseGilBytes run with the GIL released.
// It cannot use py::call_guard<py::gil_scoped_release> on whole methods, because each method
// reads or builds Python objects before and after its wait.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "batching_queue.h"
#include "docstrings.h"
#include "dynamic_batcher.h"
#include "errors.h"
#include "py_nest.h"

namespace batchenv::batcher {
namespace {

// Copies smaller than this keep the GIL: releasing and re-taking it costs more than the copy.
constexpr std::size_t kReleaseGilBytes = 64 * 1024;
// How often a wait on the main thread wakes to run Python signal handlers (Ctrl-C).
constexpr auto kSignalPoll = std::chrono::milliseconds(50);
// Longest timeout_ms honoured (about 3 years); larger values are clamped.
constexpr double kMaxTimeoutMs = 1e11;

unsigned long g_main_thread_ident = 0;  // set at import; threading.main_thread().ident

// Runs `attempt(until)` with the GIL released until it returns true. On the main thread it
// waits in slices of kSignalPoll and, between slices, re-takes the GIL and runs Python's
// signal handlers, so Ctrl-C interrupts a blocked call; if a handler raises, `on_interrupt`
// runs and the exception propagates. Other threads wait without slices.
template <class Attempt, class OnInterrupt>
void wait_interruptibly(Attempt&& attempt, OnInterrupt&& on_interrupt) {
  const bool main_thread = PyThread_get_thread_ident() == g_main_thread_ident;
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      done = attempt(main_thread ? Clock::now() + kSignalPoll : kForever);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) {
      on_interrupt();
      throw py::error_already_set();
    }
  }
}

int checked_batch_dim(std::int64_t batch_dim) {
  if (batch_dim < 0 || batch_dim > 64) {
    throw py::value_error("batch_dim must be >= 0 (and at most 64, NumPy's rank limit), got " +
                          std::to_string(batch_dim));
  }
  return static_cast<int>(batch_dim);
}

std::optional<Clock::duration> checked_timeout(std::optional<double> timeout_ms) {
  if (!timeout_ms) return std::nullopt;
  if (!(*timeout_ms >= 0)) {  // also NaN
    throw py::value_error("timeout_ms must be >= 0 or None, got " +
                          py::repr(py::float_(*timeout_ms)).cast<std::string>());
  }
  const double ms = std::min(*timeout_ms, kMaxTimeoutMs);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

std::string timeout_repr(const std::optional<Clock::duration>& timeout) {
  if (!timeout) return "None";
  const double ms = std::chrono::duration<double, std::milli>(*timeout).count();
  return py::repr(py::float_(ms)).cast<std::string>();
}

// Builds the arrays of concatenated leaves, copying with the GIL released when large.
template <class Concatenate>
std::vector<py::object> concatenated_arrays(const std::vector<const DType*>& dtypes,
                                            const std::vector<Shape>& shapes,
                                            std::size_t total_bytes, Concatenate&& concat) {
  std::vector<py::array> arrays;
  std::vector<std::uint8_t*> destinations;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    arrays.push_back(empty_array(dtypes[i], shapes[i]));
    destinations.push_back(static_cast<std::uint8_t*>(arrays.back().mutable_data()));
  }
  auto copy = [&] {
    for (std::size_t i = 0; i < destinations.size(); ++i) concat(i, destinations[i]);
  };
  if (total_bytes >= kReleaseGilBytes) {
    py::gil_scoped_release nogil;
    copy();
  } else {
    copy();
  }
  return std::vector<py::object>(arrays.begin(), arrays.end());
}

// --- DynamicBatcher -----------------------------------------------------------------------

class PyBatch {
 public:
  PyBatch(std::unique_ptr<BatchState> state, bool check_outputs)
      : state_(std::move(state)), check_outputs_(check_outputs) {}

  py::object get_inputs() {
    const BatchState& state = *state_;
    std::vector<const DType*> dtypes;
    std::vector<Shape> shapes;
    for (std::size_t i = 0; i < state.num_input_leaves(); ++i) {
      dtypes.push_back(state.input_dtype(i));
      shapes.push_back(state.input_shape(i));
    }
    std::vector<py::object> leaves = concatenated_arrays(
        dtypes, shapes, state.input_bytes(),
        [&](std::size_t i, std::uint8_t* dst) { state.concatenate_input(i, dst); });
    return unflatten(state.input_structure(), leaves);
  }

  void set_outputs(py::handle outputs) {
    if (state_->finished()) {
      throw std::runtime_error(
          "set_outputs() was already called on this Batch (or its callers already failed); "
          "every Batch takes its outputs exactly once");
    }
    FlatNest flat = flatten(outputs, state_->batch_dim(),
                            check_outputs_ ? LeafPolicy::kStrict : LeafPolicy::kConvert,
                            "set_outputs()");
    std::size_t bytes = 0;
    for (const LeafView& view : flat.views) bytes += num_bytes(*view.dtype, view.shape);
    if (bytes >= kReleaseGilBytes) {
      py::gil_scoped_release nogil;  // `flat` keeps the output arrays alive meanwhile
      state_->set_outputs(flat.structure, flat.views);
    } else {
      state_->set_outputs(flat.structure, flat.views);
    }
  }

  bool exit(py::handle exc_type, py::handle exc_value) {
    if (!exc_type.is_none()) {
      std::string what;
      try {
        what = py::str(exc_value).cast<std::string>();
      } catch (const py::error_already_set&) {
        what = "<unprintable exception>";
      }
      state_->fail("the consumer raised " + type_name(exc_type) + ": " + what +
                   " while it held this compute() call's batch (before set_outputs())");
    } else {
      state_->fail("the consumer left its `with batch:` block without calling set_outputs()");
    }
    return false;  // never swallow the consumer's exception
  }

  std::int64_t rows() const { return state_->rows(); }
  std::size_t num_callers() const { return state_->num_callers(); }

 private:
  static std::string type_name(py::handle type) {
    return py::str(type.attr("__qualname__")).cast<std::string>();
  }

  std::unique_ptr<BatchState> state_;
  const bool check_outputs_;
};

class PyDynamicBatcher {
 public:
  PyDynamicBatcher(std::int64_t batch_dim, std::int64_t minimum_batch_size,
                   std::int64_t maximum_batch_size, std::optional<double> timeout_ms,
                   bool check_outputs)
      : check_outputs_(check_outputs) {
    DynamicBatcherOptions options;
    options.batch_dim = checked_batch_dim(batch_dim);
    options.minimum_batch_size = minimum_batch_size;
    options.maximum_batch_size = maximum_batch_size;
    options.timeout = checked_timeout(timeout_ms);
    core_ = std::make_shared<DynamicBatcherCore>(options);
  }

  py::object compute(py::handle inputs) {
    const int axis = core_->options().batch_dim;
    FlatNest flat = flatten(inputs, axis, LeafPolicy::kStrict, "compute()");
    if (flat.views.empty()) {
      throw py::value_error("compute(): the inputs contain no arrays");
    }
    const std::int64_t rows = flat.views.front().shape[axis];
    for (const LeafView& view : flat.views) {
      if (view.shape[axis] != rows) {
        throw py::value_error(
            "compute(): every input array must have the same extent along batch_dim " +
            std::to_string(axis) + ", got shapes " + shape_string(flat.views.front().shape) +
            " and " + shape_string(view.shape));
      }
    }
    std::shared_ptr<Completion> completion;
    {
      py::gil_scoped_release nogil;  // `flat` keeps the input arrays alive meanwhile
      std::vector<Leaf> leaves;
      leaves.reserve(flat.views.size());
      for (const LeafView& view : flat.views) leaves.push_back(copy_leaf(view));
      completion = core_->submit(flat.structure, std::move(leaves), rows);
    }
    wait_interruptibly([&](TimePoint until) { return completion->wait_until(until); },
                       [&] { core_->cancel(completion); });
    Reply reply = completion->take();
    switch (reply.failure) {
      case Failure::kNone:
        break;
      case Failure::kInvalid:
        throw py::value_error(reply.message);
      case Failure::kClosed:
        throw ClosedError("compute(): " + reply.message);
      case Failure::kDropped:
      case Failure::kCancelled:
        throw BatcherFailure("compute(): " + reply.message);
    }
    std::vector<py::object> leaves;
    leaves.reserve(reply.leaves.size());
    for (Leaf& leaf : reply.leaves) leaves.push_back(adopt(std::move(leaf)));
    return unflatten(*reply.structure, leaves);
  }

  std::unique_ptr<PyBatch> next() {
    std::unique_ptr<BatchState> batch;
    bool closed = false;
    wait_interruptibly(
        [&](TimePoint until) {
          batch = core_->next_batch(until, &closed);
          return batch != nullptr || closed;
        },
        [] {});
    if (!batch) throw py::stop_iteration();
    return std::make_unique<PyBatch>(std::move(batch), check_outputs_);
  }

  void close() { core_->close(); }
  bool is_closed() { return core_->is_closed(); }
  std::int64_t size() { return core_->pending_rows(); }

  std::string repr() {
    const DynamicBatcherOptions& o = core_->options();
    return "DynamicBatcher(batch_dim=" + std::to_string(o.batch_dim) +
           ", minimum_batch_size=" + std::to_string(o.minimum_batch_size) +
           ", maximum_batch_size=" + std::to_string(o.maximum_batch_size) +
           ", timeout_ms=" + timeout_repr(o.timeout) +
           ", check_outputs=" + (check_outputs_ ? "True" : "False") +
           "; pending rows: " + std::to_string(size()) + (is_closed() ? ", closed)" : ")");
  }

 private:
  std::shared_ptr<DynamicBatcherCore> core_;
  const bool check_outputs_;
};

// --- BatchingQueue ------------------------------------------------------------------------

class PyBatchingQueue {
 public:
  PyBatchingQueue(std::int64_t batch_dim, std::int64_t minimum_batch_size,
                  std::int64_t maximum_batch_size, std::optional<double> timeout_ms,
                  std::optional<std::int64_t> maximum_queue_size, bool check_inputs)
      : check_inputs_(check_inputs) {
    BatchingQueueOptions options;
    options.batch_dim = checked_batch_dim(batch_dim);
    options.minimum_batch_size = minimum_batch_size;
    options.maximum_batch_size = maximum_batch_size;
    options.timeout = checked_timeout(timeout_ms);
    options.maximum_queue_size = maximum_queue_size;
    core_ = std::make_unique<BatchingQueueCore>(options);
  }

  void enqueue(py::handle nest) {
    FlatNest flat = flatten(nest, core_->options().batch_dim,
                            check_inputs_ ? LeafPolicy::kStrict : LeafPolicy::kConvert,
                            "enqueue()");
    auto item = std::make_unique<Item>();
    item->structure = flat.structure;
    {
      py::gil_scoped_release nogil;  // `flat` keeps the arrays alive meanwhile
      item->leaves.reserve(flat.views.size());
      for (const LeafView& view : flat.views) item->leaves.push_back(copy_leaf(view));
    }
    wait_interruptibly([&](TimePoint until) { return core_->enqueue(item, until); }, [] {});
  }

  py::object next() {
    std::vector<std::unique_ptr<Item>> items;
    bool stop = false;
    wait_interruptibly(
        [&](TimePoint until) {
          items = core_->next_batch(until, &stop);
          return !items.empty() || stop;
        },
        [] {});
    if (items.empty()) throw py::stop_iteration();
    const int axis = core_->options().batch_dim;
    const Item& first = *items.front();
    std::vector<std::vector<const Leaf*>> parts(first.leaves.size());
    std::vector<const DType*> dtypes;
    std::vector<Shape> shapes;
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < first.leaves.size(); ++i) {
      for (const auto& item : items) {
        parts[i].push_back(&item->leaves[i]);
        bytes += item->leaves[i].data.size();
      }
      dtypes.push_back(first.leaves[i].dtype);
      shapes.push_back(concat_shape(parts[i], axis));
    }
    std::vector<py::object> leaves = concatenated_arrays(
        dtypes, shapes, bytes,
        [&](std::size_t i, std::uint8_t* dst) { concatenate(parts[i], axis, dst); });
    return unflatten(*first.structure, leaves);
  }

  std::int64_t close(bool drop) { return core_->close(drop); }
  bool is_closed() { return core_->is_closed(); }
  std::int64_t size() { return core_->size(); }

  std::string repr() {
    const BatchingQueueOptions& o = core_->options();
    return "BatchingQueue(batch_dim=" + std::to_string(o.batch_dim) +
           ", minimum_batch_size=" + std::to_string(o.minimum_batch_size) +
           ", maximum_batch_size=" + std::to_string(o.maximum_batch_size) +
           ", timeout_ms=" + timeout_repr(o.timeout) + ", maximum_queue_size=" +
           (o.maximum_queue_size ? std::to_string(*o.maximum_queue_size) : "None") +
           ", check_inputs=" + (check_inputs_ ? "True" : "False") +
           "; queued items: " + std::to_string(size()) + (is_closed() ? ", closed)" : ")");
  }

 private:
  std::unique_ptr<BatchingQueueCore> core_;
  const bool check_inputs_;
};

}  // namespace
}  // namespace batchenv::batcher

PYBIND11_MODULE(batcher, m) {
  using namespace batchenv::batcher;
  namespace docs = batchenv::batcher::docs;
  m.doc() = docs::kModule;
  g_main_thread_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();

  // Both errors join batchenv's hierarchy (batchenv.errors) and stay RuntimeErrors. They are
  // siblings on purpose: a producer that retries on BatcherError must not spin on a closed
  // batcher.
  py::module_ errors = py::module_::import("batchenv.errors");
  py::handle runtime_error(PyExc_RuntimeError);
  py::tuple batcher_bases = py::make_tuple(errors.attr("BatchEnvError"), runtime_error);
  py::tuple closed_bases = py::make_tuple(errors.attr("ClosedError"), runtime_error);
  py::register_exception<BatcherFailure>(m, "BatcherError", batcher_bases);
  py::register_exception<ClosedError>(m, "ClosedBatcherError", closed_bases);
  m.attr("BatcherError").attr("__doc__") = docs::kBatcherError;
  m.attr("ClosedBatcherError").attr("__doc__") = docs::kClosedBatcherError;

  py::class_<PyBatch>(m, "Batch", docs::kBatch)
      .def("get_inputs", &PyBatch::get_inputs, docs::kGetInputs)
      .def("set_outputs", &PyBatch::set_outputs, py::arg("outputs"), docs::kSetOutputs)
      .def("__len__", &PyBatch::rows, "The number of rows (along batch_dim) in this batch.")
      .def_property_readonly("num_callers", &PyBatch::num_callers,
                             "How many compute() calls this batch serves.")
      .def("__enter__", [](py::object self) { return self; })
      .def(
          "__exit__",
          [](PyBatch& batch, py::handle type, py::handle value, py::handle) {
            return batch.exit(type, value);
          },
          docs::kBatchExit);

  py::class_<PyDynamicBatcher>(m, "DynamicBatcher", docs::kDynamicBatcher)
      .def(py::init<std::int64_t, std::int64_t, std::int64_t, std::optional<double>, bool>(),
           py::arg("batch_dim") = 0, py::arg("minimum_batch_size") = 1,
           py::arg("maximum_batch_size") = 1024, py::arg("timeout_ms") = 100,
           py::arg("check_outputs") = true)
      .def("compute", &PyDynamicBatcher::compute, py::arg("inputs"), docs::kCompute)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyDynamicBatcher::next, docs::kBatcherNext)
      .def("close", &PyDynamicBatcher::close, docs::kBatcherClose)
      .def("is_closed", &PyDynamicBatcher::is_closed, "Whether close() was called.")
      .def("size", &PyDynamicBatcher::size,
           "The number of rows waiting to be batched (not yet taken by a consumer).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyDynamicBatcher& batcher, py::handle, py::handle, py::handle) {
             batcher.close();
             return false;
           })
      .def("__repr__", &PyDynamicBatcher::repr);

  py::class_<PyBatchingQueue>(m, "BatchingQueue", docs::kBatchingQueue)
      .def(py::init<std::int64_t, std::int64_t, std::int64_t, std::optional<double>,
                    std::optional<std::int64_t>, bool>(),
           py::arg("batch_dim") = 1, py::arg("minimum_batch_size") = 1,
           py::arg("maximum_batch_size") = 1024, py::arg("timeout_ms") = py::none(),
           py::arg("maximum_queue_size") = py::none(), py::arg("check_inputs") = true)
      .def("enqueue", &PyBatchingQueue::enqueue, py::arg("item"), docs::kEnqueue)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyBatchingQueue::next, docs::kQueueNext)
      .def("close", &PyBatchingQueue::close, py::arg("drop") = false, docs::kQueueClose)
      .def("is_closed", &PyBatchingQueue::is_closed, "Whether close() was called.")
      .def("size", &PyBatchingQueue::size, "The number of queued items.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyBatchingQueue& queue, py::handle, py::handle, py::handle) {
             queue.close(/*drop=*/false);
             return false;
           })
      .def("__repr__", &PyBatchingQueue::repr);
}
