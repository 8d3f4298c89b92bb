#include "dynamic_batcher.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "errors.h"

namespace batchenv::batcher {

void validate(const DynamicBatcherOptions& options) {
  if (options.batch_dim < 0) {
    throw std::invalid_argument("batch_dim must be >= 0, got " +
                                std::to_string(options.batch_dim));
  }
  if (options.minimum_batch_size < 1) {
    throw std::invalid_argument("minimum_batch_size must be >= 1, got " +
                                std::to_string(options.minimum_batch_size));
  }
  if (options.maximum_batch_size < options.minimum_batch_size) {
    throw std::invalid_argument(
        "maximum_batch_size must be >= minimum_batch_size, got maximum_batch_size=" +
        std::to_string(options.maximum_batch_size) +
        " and minimum_batch_size=" + std::to_string(options.minimum_batch_size));
  }
  if (options.timeout && *options.timeout < Clock::duration::zero()) {
    throw std::invalid_argument("timeout_ms must be >= 0 or None");
  }
}

DynamicBatcherCore::DynamicBatcherCore(DynamicBatcherOptions options)
    : options_(std::move(options)) {
  validate(options_);
}

DynamicBatcherCore::~DynamicBatcherCore() { close(); }

std::shared_ptr<Completion> DynamicBatcherCore::submit(Structure structure,
                                                       std::vector<Leaf> inputs,
                                                       std::int64_t rows) {
  if (rows < 1 || rows > options_.maximum_batch_size) {
    throw std::invalid_argument(
        "compute(): the inputs have " + std::to_string(rows) + " rows along batch_dim " +
        std::to_string(options_.batch_dim) + "; each call must bring between 1 and " +
        "maximum_batch_size=" + std::to_string(options_.maximum_batch_size) + " rows");
  }
  auto request = std::make_unique<Request>();
  request->structure = std::move(structure);
  request->inputs = std::move(inputs);
  request->rows = rows;
  request->completion = std::make_shared<Completion>();
  std::shared_ptr<Completion> completion = request->completion;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      throw ClosedError("compute() called on a closed DynamicBatcher; create a new one");
    }
    request->enqueued = Clock::now();
    pending_rows_ += rows;
    pending_.push_back(std::move(request));
  }
  consumer_cv_.notify_one();
  return completion;
}

void DynamicBatcherCore::cancel(const std::shared_ptr<Completion>& completion) {
  std::unique_ptr<Request> removed;  // destroyed after the lock is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& request) {
      return request->completion == completion;
    });
    if (it != pending_.end()) {
      pending_rows_ -= (*it)->rows;
      removed = std::move(*it);
      pending_.erase(it);
    }
  }
  completion->deliver(Reply{Failure::kCancelled, "compute() was interrupted", nullptr, {}});
}

std::unique_ptr<BatchState> DynamicBatcherCore::next_batch(TimePoint until, bool* closed) {
  *closed = false;
  std::vector<std::unique_ptr<Request>> taken;
  std::vector<std::unique_ptr<Request>> rejected;
  std::uint64_t batch_id = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (closed_) {
        *closed = true;
        return nullptr;
      }
      TimePoint wake = until;
      if (!pending_.empty()) {
        if (pending_rows_ >= options_.minimum_batch_size) break;
        if (options_.timeout) {
          const TimePoint deadline = pending_.front()->enqueued + *options_.timeout;
          if (Clock::now() >= deadline) break;  // flush a partial batch
          wake = std::min(wake, deadline);
        }
      }
      if (until != kForever && Clock::now() >= until) {
        // This consumer may have been the one woken for the pending requests; hand the
        // watch over, in case it does not come back (its caller was interrupted).
        if (!pending_.empty()) consumer_cv_.notify_one();
        return nullptr;
      }
      wait_until(consumer_cv_, lock, wake);
    }
    // Take the oldest requests, up to maximum_batch_size rows (submit() made sure that a
    // single request never exceeds it, so at least one is taken).
    std::int64_t rows = 0;
    while (!pending_.empty() && rows + pending_.front()->rows <= options_.maximum_batch_size) {
      rows += pending_.front()->rows;
      taken.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    pending_rows_ -= rows;
    // Every caller must agree with the first on structure, dtypes and non-batch shapes.
    const Request& first = *taken.front();
    for (auto& request : taken) {
      if (request.get() == &first) continue;
      std::string why = describe_mismatch(*first.structure, first.inputs, *request->structure,
                                          request->inputs, options_.batch_dim);
      if (!why.empty()) {
        const std::string message = "compute(): these inputs cannot join their batch: " + why;
        request->completion->deliver(Reply{Failure::kInvalid, message, nullptr, {}});
        rejected.push_back(std::move(request));
      }
    }
    taken.erase(std::remove(taken.begin(), taken.end(), nullptr), taken.end());
    batch_id = next_batch_id_++;
    auto& callers = in_flight_[batch_id];
    for (const auto& request : taken) callers.push_back(request->completion);
    if (!pending_.empty()) consumer_cv_.notify_one();  // the rest is another consumer's
  }
  return std::make_unique<BatchState>(shared_from_this(), batch_id, std::move(taken));
}

void DynamicBatcherCore::close() {
  std::deque<std::unique_ptr<Request>> pending;
  std::vector<std::shared_ptr<Completion>> in_flight;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    pending.swap(pending_);
    pending_rows_ = 0;
    for (auto& entry : in_flight_) {
      in_flight.insert(in_flight.end(), entry.second.begin(), entry.second.end());
    }
    in_flight_.clear();
  }
  consumer_cv_.notify_all();
  for (auto& request : pending) {
    request->completion->deliver(Reply{
        Failure::kClosed,
        "the DynamicBatcher was closed while this compute() call waited for a batch", nullptr, {}});
  }
  for (auto& completion : in_flight) {
    completion->deliver(Reply{Failure::kClosed,
                              "the DynamicBatcher was closed while a consumer held this "
                              "compute() call's batch (before set_outputs())",
                              nullptr,
                              {}});
  }
}

bool DynamicBatcherCore::is_closed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::int64_t DynamicBatcherCore::pending_rows() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_rows_;
}

void DynamicBatcherCore::forget_batch(std::uint64_t batch_id) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(batch_id);
}

// ---------------------------------------------------------------------------------------

BatchState::BatchState(std::shared_ptr<DynamicBatcherCore> core, std::uint64_t id,
                       std::vector<std::unique_ptr<Request>> requests)
    : core_(std::move(core)), id_(id), requests_(std::move(requests)) {
  for (const auto& request : requests_) rows_ += request->rows;
}

BatchState::~BatchState() {
  bool finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished = state_ == State::kFinished;
  }
  if (!finished) {
    const std::string message =
        "batch dropped without outputs: the consumer released its Batch of " +
        std::to_string(rows_) + " rows (" + std::to_string(requests_.size()) +
        " compute() calls) without calling set_outputs(), for example because it raised";
    for (const auto& request : requests_) {
      request->completion->deliver(Reply{Failure::kDropped, message, nullptr, {}});
    }
  }
  core_->forget_batch(id_);
}

const DType* BatchState::input_dtype(std::size_t leaf) const {
  return requests_.front()->inputs[leaf].dtype;
}

Shape BatchState::input_shape(std::size_t leaf) const {
  Shape shape = requests_.front()->inputs[leaf].shape;
  shape[batch_dim()] = rows_;
  return shape;
}

std::size_t BatchState::input_bytes() const {
  std::size_t total = 0;
  for (const auto& request : requests_) {
    for (const Leaf& leaf : request->inputs) total += leaf.data.size();
  }
  return total;
}

void BatchState::concatenate_input(std::size_t leaf, std::uint8_t* dst) const {
  std::vector<const Leaf*> parts;
  parts.reserve(requests_.size());
  for (const auto& request : requests_) parts.push_back(&request->inputs[leaf]);
  concatenate(parts, batch_dim(), dst);
}

bool BatchState::finished() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ != State::kOpen;
}

void BatchState::set_outputs(const Structure& structure, const std::vector<LeafView>& outputs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kOpen) {
      throw std::runtime_error(
          "set_outputs() was already called on this Batch (or its callers already failed); "
          "every Batch takes its outputs exactly once");
    }
    state_ = State::kSetting;
  }
  try {
    const int axis = batch_dim();
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const LeafView& leaf = outputs[i];
      const bool has_axis = static_cast<int>(leaf.shape.size()) > axis;
      if (!has_axis || leaf.shape[axis] != rows_) {
        const std::string path = leaf_paths(*structure)[i];
        const std::string got =
            has_axis ? "got " + std::to_string(leaf.shape[axis]) + " rows"
                     : "got an array of shape " + shape_string(leaf.shape) + " without that axis";
        throw std::invalid_argument(
            "set_outputs(): output leaf " + path + " must have " + std::to_string(rows_) +
            " rows along batch_dim " + std::to_string(axis) +
            " (the batch's input rows): expected " + std::to_string(rows_) + ", " + got);
      }
    }
    std::int64_t row_begin = 0;
    for (const auto& request : requests_) {
      Reply reply;
      reply.structure = structure;
      reply.leaves.reserve(outputs.size());
      for (const LeafView& leaf : outputs) {
        Shape shape = leaf.shape;
        shape[axis] = request->rows;
        Buffer data(num_bytes(*leaf.dtype, shape));
        slice_rows(leaf.data, leaf.shape, leaf.dtype->itemsize, axis, row_begin, request->rows,
                   data.data());
        reply.leaves.push_back(Leaf{leaf.dtype, std::move(shape), std::move(data)});
      }
      request->completion->deliver(std::move(reply));
      row_begin += request->rows;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kOpen;
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kFinished;
  }
  core_->forget_batch(id_);
}

void BatchState::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kOpen) return;  // delivered, failing, or being set right now
    state_ = State::kFinished;
  }
  for (const auto& request : requests_) {
    request->completion->deliver(Reply{Failure::kDropped, message, nullptr, {}});
  }
  core_->forget_batch(id_);
}

}  // namespace batchenv::batcher
