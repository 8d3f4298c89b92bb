// The one-shot reply slot between a consumer (or close()) and one waiting compute() call.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "buffer.h"
#include "nest.h"
#include "sync.h"

namespace batchenv::batcher {

// Why a compute() call got no outputs; the binding layer maps each to a Python exception.
enum class Failure {
  kNone,       // outputs delivered
  kInvalid,    // ValueError: the inputs could not join their batch
  kClosed,     // ClosedBatcherError: close() woke the caller
  kDropped,    // BatcherError: the consumer dropped or failed the batch
  kCancelled,  // the caller stopped waiting itself (a Python signal); nobody reads this
};

struct Reply {
  Failure failure = Failure::kNone;
  std::string message;      // when failure != kNone
  Structure structure;      // the caller's outputs, when failure == kNone
  std::vector<Leaf> leaves;
};

class Completion {
 public:
  // Stores `reply` and wakes the waiting caller. Only the first delivery counts: returns
  // false (and discards `reply`) when one was already delivered.
  bool deliver(Reply reply) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (delivered_) return false;
      delivered_ = true;
      reply_ = std::move(reply);
    }
    cv_.notify_all();
    return true;
  }

  bool delivered() {
    std::lock_guard<std::mutex> lock(mu_);
    return delivered_;
  }

  // Waits until a reply is delivered (true) or `until` passes (false).
  bool wait_until(TimePoint until) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!delivered_) {
      if (!batcher::wait_until(cv_, lock, until) && !delivered_) return false;
    }
    return true;
  }

  // The delivered reply (call once, after wait_until() returned true).
  Reply take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(reply_);
  }

 private:
  std::mutex mu_;
  // Wakes the one compute() call blocked in wait_until() when deliver() stores its reply.
  std::condition_variable cv_;
  bool delivered_ BATCHER_GUARDED_BY(mu_) = false;
  Reply reply_ BATCHER_GUARDED_BY(mu_);
};

}  // namespace batchenv::batcher
