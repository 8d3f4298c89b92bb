#include "batching_queue.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "errors.h"

namespace batchenv::batcher {

void validate(const BatchingQueueOptions& options) {
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
  if (options.maximum_queue_size && *options.maximum_queue_size < options.maximum_batch_size) {
    throw std::invalid_argument(
        "maximum_queue_size must be >= maximum_batch_size, got maximum_queue_size=" +
        std::to_string(*options.maximum_queue_size) +
        " and maximum_batch_size=" + std::to_string(options.maximum_batch_size));
  }
  if (options.timeout && *options.timeout < Clock::duration::zero()) {
    throw std::invalid_argument("timeout_ms must be >= 0 or None");
  }
}

BatchingQueueCore::BatchingQueueCore(BatchingQueueOptions options) : options_(std::move(options)) {
  validate(options_);
}

BatchingQueueCore::~BatchingQueueCore() { close(/*drop=*/true); }

bool BatchingQueueCore::enqueue(std::unique_ptr<Item>& item, TimePoint until) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (closed_) {
        throw ClosedError("enqueue() on a closed BatchingQueue; the item was not queued");
      }
      const bool full = options_.maximum_queue_size &&
                        static_cast<std::int64_t>(items_.size()) >= *options_.maximum_queue_size;
      if (!full) break;
      if (until != kForever && Clock::now() >= until) return false;
      wait_until(producer_cv_, lock, until);
    }
    if (!items_.empty()) {
      const Item& newest = *items_.back();
      std::string why = describe_mismatch(*newest.structure, newest.leaves, *item->structure,
                                          item->leaves, options_.batch_dim);
      if (!why.empty()) {
        throw std::invalid_argument(
            "enqueue(): this item cannot be batched with the items already queued: " + why);
      }
    }
    item->enqueued = Clock::now();
    items_.push_back(std::move(item));
  }
  consumer_cv_.notify_one();
  return true;
}

std::vector<std::unique_ptr<Item>> BatchingQueueCore::next_batch(TimePoint until, bool* stop) {
  *stop = false;
  std::vector<std::unique_ptr<Item>> batch;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      TimePoint wake = until;
      if (!items_.empty()) {
        const auto size = static_cast<std::int64_t>(items_.size());
        if (closed_ || size >= options_.minimum_batch_size) break;
        if (options_.timeout) {
          const TimePoint deadline = items_.front()->enqueued + *options_.timeout;
          if (Clock::now() >= deadline) break;  // hand out a partial batch
          wake = std::min(wake, deadline);
        }
      } else if (closed_) {
        *stop = true;
        return batch;
      }
      if (until != kForever && Clock::now() >= until) {
        // This consumer may have been the one woken for the queued items; hand the watch
        // over, in case it does not come back (its caller was interrupted).
        if (!items_.empty()) consumer_cv_.notify_one();
        return batch;
      }
      wait_until(consumer_cv_, lock, wake);
    }
    const std::size_t n = std::min<std::size_t>(
        items_.size(), static_cast<std::size_t>(options_.maximum_batch_size));
    batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(items_.front()));
      items_.pop_front();
    }
    if (!items_.empty()) consumer_cv_.notify_one();  // the rest is another consumer's
  }
  producer_cv_.notify_all();
  return batch;
}

std::int64_t BatchingQueueCore::close(bool drop) {
  std::deque<std::unique_ptr<Item>> dropped;  // freed after the lock is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    if (drop) dropped.swap(items_);
  }
  consumer_cv_.notify_all();
  producer_cv_.notify_all();
  return static_cast<std::int64_t>(dropped.size());
}

bool BatchingQueueCore::is_closed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::int64_t BatchingQueueCore::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<std::int64_t>(items_.size());
}

}  // namespace batchenv::batcher
