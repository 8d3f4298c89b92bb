// BatchingQueue core: producers enqueue whole items (unrolls); consumers take them in FIFO
// batches and concatenate each leaf along batch_dim. Pure C++17 (no Python); module.cpp adds
// the GIL handling and the Python face.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "buffer.h"
#include "nest.h"
#include "sync.h"

namespace batchenv::batcher {

struct BatchingQueueOptions {
  int batch_dim = 1;
  std::int64_t minimum_batch_size = 1;  // items
  std::int64_t maximum_batch_size = 1024;
  // Hand out a partial batch this long after the oldest queued item; nullopt: never.
  std::optional<Clock::duration> timeout;
  // enqueue() blocks while this many items are queued; nullopt: unbounded.
  std::optional<std::int64_t> maximum_queue_size;
};

// Throws std::invalid_argument naming the first bad option.
void validate(const BatchingQueueOptions& options);

struct Item {
  Structure structure;
  std::vector<Leaf> leaves;  // each with a batch_dim axis (any extent)
  TimePoint enqueued;
};

class BatchingQueueCore {
 public:
  explicit BatchingQueueCore(BatchingQueueOptions options);
  ~BatchingQueueCore();

  const BatchingQueueOptions& options() const { return options_; }

  // Queues `item` (moving it out of the pointer) once there is room. Returns false, leaving
  // `item` alone, when `until` passes first. Throws ClosedError once closed (also when close()
  // runs while it waits for room), std::invalid_argument when the item's structure, dtypes
  // or non-batch shapes differ from the newest queued item's (every queued item matches every
  // other, so any batch can be concatenated).
  bool enqueue(std::unique_ptr<Item>& item, TimePoint until);

  // Waits until >= minimum_batch_size items are queued, the oldest has waited `timeout`, or
  // the queue is closed with items left (drain), then takes min(size, maximum_batch_size)
  // items, oldest first. Returns no items when `until` passes first (*stop false), or when
  // the queue is closed and empty (*stop true).
  std::vector<std::unique_ptr<Item>> next_batch(TimePoint until, bool* stop);

  // Closes the queue: enqueue() raises from now on, blocked enqueue() calls wake with
  // ClosedError. Queued items are still handed to consumers, or, with `drop`, discarded;
  // returns how many were discarded. Idempotent (a later close(drop=true) discards what is
  // still queued).
  std::int64_t close(bool drop);

  bool is_closed();
  std::int64_t size();

 private:
  const BatchingQueueOptions options_;

  std::mutex mu_;
  // Wakes consumers blocked in next_batch(). Notified (one) by enqueue() for every new item,
  // (one) by next_batch() when it leaves items behind for another consumer, and (all) by
  // close().
  std::condition_variable consumer_cv_;
  // Wakes producers blocked in enqueue() on a full queue. Notified (all) by next_batch()
  // after it took items, and by close().
  std::condition_variable producer_cv_;
  std::deque<std::unique_ptr<Item>> items_ BATCHER_GUARDED_BY(mu_);
  bool closed_ BATCHER_GUARDED_BY(mu_) = false;
};

}  // namespace batchenv::batcher
