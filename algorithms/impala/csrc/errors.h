// The core's exceptions. module.cpp maps them to Python: ClosedError -> ClosedBatcherError,
// BatcherFailure -> BatcherError; pybind11 maps std::invalid_argument -> ValueError and any
// other std::exception (std::runtime_error here) -> RuntimeError.
#pragma once

#include <stdexcept>
#include <string>

namespace batchenv::batcher {

// The batcher or queue was closed.
struct ClosedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The consumer failed a caller's batch (dropped it without outputs, or raised inside it).
struct BatcherFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace batchenv::batcher
