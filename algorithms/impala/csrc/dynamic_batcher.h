// DynamicBatcher core: many producers each submit a few rows and wait; consumers take the
// pending rows as one batch, compute, and hand every producer its slice of the outputs.
// Pure C++17 (no Python); module.cpp adds the GIL handling and the Python face.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "buffer.h"
#include "completion.h"
#include "nest.h"
#include "sync.h"

namespace batchenv::batcher {

struct DynamicBatcherOptions {
  int batch_dim = 0;
  std::int64_t minimum_batch_size = 1;  // rows
  std::int64_t maximum_batch_size = 1024;
  // Flush a partial batch this long after the oldest pending request; nullopt: never.
  std::optional<Clock::duration> timeout;
};

// Throws std::invalid_argument naming the first bad option.
void validate(const DynamicBatcherOptions& options);

// One compute() call: its inputs (owned copies) and the slot its reply arrives in.
struct Request {
  Structure structure;
  std::vector<Leaf> inputs;
  std::int64_t rows = 0;  // extent of every input leaf along batch_dim
  TimePoint enqueued;
  std::shared_ptr<Completion> completion;
};

class BatchState;

class DynamicBatcherCore : public std::enable_shared_from_this<DynamicBatcherCore> {
 public:
  explicit DynamicBatcherCore(DynamicBatcherOptions options);
  ~DynamicBatcherCore();

  const DynamicBatcherOptions& options() const { return options_; }

  // Producer side: queues the inputs (every leaf with `rows` rows along batch_dim, 1 <= rows
  // <= maximum_batch_size, checked here) and returns the slot the reply will arrive in.
  // Throws ClosedError after close().
  std::shared_ptr<Completion> submit(Structure structure, std::vector<Leaf> inputs,
                                     std::int64_t rows);

  // The producer stopped waiting (a Python signal handler raised): drops its request if it
  // is still queued, and turns any later reply into a no-op.
  void cancel(const std::shared_ptr<Completion>& completion);

  // Consumer side: waits for a batch (>= minimum_batch_size rows pending, or the oldest one
  // pending for `timeout`) and takes up to maximum_batch_size rows, oldest first. Returns
  // nullptr when `until` passes first, or once closed (then *closed is set). Requests whose
  // structure, dtypes or shapes differ from the batch's first request are failed with
  // Failure::kInvalid and left out.
  std::unique_ptr<BatchState> next_batch(TimePoint until, bool* closed);

  // Fails every waiting caller (queued, or in a batch without outputs yet) with
  // Failure::kClosed and ends consumer iteration. Idempotent.
  void close();

  bool is_closed();
  std::int64_t pending_rows();

 private:
  friend class BatchState;
  // A batch delivered (or failed) all its callers, or was destroyed: forget it.
  void forget_batch(std::uint64_t batch_id);

  const DynamicBatcherOptions options_;

  std::mutex mu_;
  // Wakes consumers blocked in next_batch(). Notified (one) by submit() for every new
  // request, (one) by next_batch() when it leaves requests behind for another consumer, and
  // (all) by close().
  std::condition_variable consumer_cv_;
  std::deque<std::unique_ptr<Request>> pending_ BATCHER_GUARDED_BY(mu_);
  std::int64_t pending_rows_ BATCHER_GUARDED_BY(mu_) = 0;
  bool closed_ BATCHER_GUARDED_BY(mu_) = false;
  std::uint64_t next_batch_id_ BATCHER_GUARDED_BY(mu_) = 0;
  // Callers of the batches that consumers hold, so that close() can wake them too.
  std::unordered_map<std::uint64_t, std::vector<std::shared_ptr<Completion>>> in_flight_
      BATCHER_GUARDED_BY(mu_);
};

// A batch a consumer holds. Destroying it before set_outputs() fails its callers.
class BatchState {
 public:
  BatchState(std::shared_ptr<DynamicBatcherCore> core, std::uint64_t id,
             std::vector<std::unique_ptr<Request>> requests);
  ~BatchState();
  BatchState(const BatchState&) = delete;
  BatchState& operator=(const BatchState&) = delete;

  std::int64_t rows() const { return rows_; }
  std::size_t num_callers() const { return requests_.size(); }
  int batch_dim() const { return core_->options().batch_dim; }

  // The concatenated inputs, leaf by leaf (inputs stay readable for the batch's lifetime).
  const Node& input_structure() const { return *requests_.front()->structure; }
  std::size_t num_input_leaves() const { return requests_.front()->inputs.size(); }
  const DType* input_dtype(std::size_t leaf) const;
  Shape input_shape(std::size_t leaf) const;
  std::size_t input_bytes() const;
  void concatenate_input(std::size_t leaf, std::uint8_t* dst) const;

  // True once outputs were delivered (or the callers failed); set_outputs() would raise.
  bool finished();

  // Hands every caller its rows of `outputs` (C-contiguous views, kept alive by the caller of
  // this function). Throws std::runtime_error when outputs were already set or the callers
  // already failed, std::invalid_argument when a leaf has no batch_dim axis or not rows()
  // rows along it (then the batch stays open and set_outputs() may be called again).
  void set_outputs(const Structure& structure, const std::vector<LeafView>& outputs);

  // Fails every caller still waiting with Failure::kDropped and `message`. Idempotent.
  void fail(const std::string& message);

 private:
  enum class State { kOpen, kSetting, kFinished };

  const std::shared_ptr<DynamicBatcherCore> core_;
  const std::uint64_t id_;
  const std::vector<std::unique_ptr<Request>> requests_;  // immutable after construction
  std::int64_t rows_ = 0;

  std::mutex mu_;
  // kOpen -> kSetting (one set_outputs() validating and copying) -> kFinished, or back to
  // kOpen when the outputs were invalid; kOpen -> kFinished when fail() runs.
  State state_ BATCHER_GUARDED_BY(mu_) = State::kOpen;
};

}  // namespace batchenv::batcher
