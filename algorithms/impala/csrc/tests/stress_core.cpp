// Threaded stress test of the pure C++ cores (no Python), meant for ThreadSanitizer:
//
//   cd algorithms/impala/csrc
//   g++ -std=c++17 -O1 -g -fsanitize=thread -pthread -I. -o /tmp/stress_core
//       tests/stress_core.cpp buffer.cpp nest.cpp dynamic_batcher.cpp batching_queue.cpp
//   /tmp/stress_core            # prints "ok" and exits 0, or aborts with a message
//
// (-fsanitize=address,undefined works too.) setup.py only builds csrc/*.cpp, so this
// subdirectory never ends up in the extension module.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "../batching_queue.h"
#include "../dynamic_batcher.h"
#include "../errors.h"

using namespace batchenv::batcher;

namespace {

const DType kFloat64{0, sizeof(double), "float64", false};
const DType kFloat32{1, sizeof(float), "float32", false};

#define CHECK(condition)                                                   \
  do {                                                                     \
    if (!(condition)) {                                                    \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

Structure leaf_structure() { return std::make_shared<const Node>(); }

// A [rows, 2] float64 leaf holding (value, caller) in every row.
Leaf make_leaf(double value, double caller, std::int64_t rows = 1) {
  Leaf leaf{&kFloat64, {rows, 2}, Buffer(sizeof(double) * 2 * rows)};
  auto* data = reinterpret_cast<double*>(leaf.data.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    data[2 * r] = value;
    data[2 * r + 1] = caller;
  }
  return leaf;
}

// Consumers compute output = input * 2 (so the caller column comes back doubled too).
void serve(DynamicBatcherCore& core, std::atomic<int>* batches) {
  for (;;) {
    bool closed = false;
    std::unique_ptr<BatchState> batch = core.next_batch(kForever, &closed);
    if (!batch) {
      CHECK(closed);
      return;
    }
    Leaf inputs{batch->input_dtype(0), batch->input_shape(0), Buffer(batch->input_bytes())};
    batch->concatenate_input(0, inputs.data.data());
    auto* data = reinterpret_cast<double*>(inputs.data.data());
    for (std::int64_t i = 0; i < 2 * batch->rows(); ++i) data[i] *= 2;
    LeafView view{inputs.dtype, inputs.shape, inputs.data.data()};
    if (batch->rows() % 7 == 3) {  // every so often, drop a batch instead
      batch.reset();
    } else {
      batch->set_outputs(leaf_structure(), {view});
    }
    batches->fetch_add(1);
  }
}

void stress_dynamic_batcher() {
  DynamicBatcherOptions options;
  options.minimum_batch_size = 4;
  options.maximum_batch_size = 16;
  options.timeout = std::chrono::milliseconds(2);
  auto core = std::make_shared<DynamicBatcherCore>(options);
  std::atomic<int> batches{0}, served{0}, dropped{0};
  std::vector<std::thread> consumers;
  for (int i = 0; i < 4; ++i) consumers.emplace_back(serve, std::ref(*core), &batches);
  std::vector<std::thread> producers;
  for (int p = 0; p < 16; ++p) {
    producers.emplace_back([&, p] {
      for (int k = 0; k < 200; ++k) {
        std::vector<Leaf> inputs;
        inputs.push_back(make_leaf(k, p));
        auto completion = core->submit(leaf_structure(), std::move(inputs), 1);
        CHECK(completion->wait_until(kForever));
        Reply reply = completion->take();
        if (reply.failure == Failure::kDropped) {
          dropped.fetch_add(1);
          continue;
        }
        CHECK(reply.failure == Failure::kNone);
        CHECK(reply.leaves.size() == 1 && reply.leaves[0].shape == Shape({1, 2}));
        const auto* out = reinterpret_cast<const double*>(reply.leaves[0].data.data());
        CHECK(out[0] == 2.0 * k && out[1] == 2.0 * p);
        served.fetch_add(1);
      }
    });
  }
  for (auto& t : producers) t.join();
  core->close();
  for (auto& t : consumers) t.join();
  CHECK(served + dropped == 16 * 200);
  std::printf("dynamic batcher: %d served, %d dropped, %d batches\n", served.load(),
              dropped.load(), batches.load());
}

void close_wakes_everyone() {
  DynamicBatcherOptions options;
  options.minimum_batch_size = 1000;  // never reached
  auto core = std::make_shared<DynamicBatcherCore>(options);
  std::atomic<int> closed_errors{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < 8; ++p) {
    threads.emplace_back([&, p] {
      std::vector<Leaf> inputs;
      inputs.push_back(make_leaf(0, p));
      auto completion = core->submit(leaf_structure(), std::move(inputs), 1);
      completion->wait_until(kForever);
      if (completion->take().failure == Failure::kClosed) closed_errors.fetch_add(1);
    });
  }
  for (int c = 0; c < 3; ++c) {
    threads.emplace_back([&] {
      bool closed = false;
      CHECK(core->next_batch(kForever, &closed) == nullptr && closed);
    });
  }
  while (core->pending_rows() < 8) std::this_thread::yield();
  core->close();
  core->close();
  for (auto& t : threads) t.join();
  CHECK(closed_errors == 8);
  bool threw = false;
  try {
    std::vector<Leaf> inputs;
    inputs.push_back(make_leaf(0, 0));
    core->submit(leaf_structure(), std::move(inputs), 1);
  } catch (const ClosedError&) {
    threw = true;
  }
  CHECK(threw);
}

void mismatched_caller_is_rejected() {
  DynamicBatcherOptions options;
  options.minimum_batch_size = 2;
  auto core = std::make_shared<DynamicBatcherCore>(options);
  std::vector<Leaf> a, b;
  a.push_back(make_leaf(1, 0));
  Leaf f32{&kFloat32, {1, 2}, Buffer(8)};
  std::memset(f32.data.data(), 0, 8);
  b.push_back(std::move(f32));
  auto first = core->submit(leaf_structure(), std::move(a), 1);
  auto second = core->submit(leaf_structure(), std::move(b), 1);
  bool closed = false;
  auto batch = core->next_batch(kForever, &closed);
  CHECK(batch && batch->rows() == 1);
  CHECK(second->wait_until(kForever) && second->take().failure == Failure::kInvalid);
  CHECK(!first->delivered());
}

void stress_queue() {
  BatchingQueueOptions options;
  options.batch_dim = 0;
  options.minimum_batch_size = 3;
  options.maximum_batch_size = 5;
  options.maximum_queue_size = 8;
  options.timeout = std::chrono::milliseconds(1);
  BatchingQueueCore queue(options);
  std::atomic<long> received{0};
  std::vector<std::thread> consumers;
  for (int c = 0; c < 3; ++c) {
    consumers.emplace_back([&] {
      for (;;) {
        bool stop = false;
        auto items = queue.next_batch(kForever, &stop);
        if (stop) return;
        CHECK(!items.empty() && items.size() <= 5);
        std::vector<const Leaf*> parts;
        for (auto& item : items) parts.push_back(&item->leaves[0]);
        Shape shape = concat_shape(parts, 0);
        Buffer out(sizeof(double) * 2 * shape[0]);
        concatenate(parts, 0, out.data());
        received.fetch_add(static_cast<long>(items.size()));
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < 8; ++p) {
    producers.emplace_back([&, p] {
      for (int k = 0; k < 300; ++k) {
        auto item = std::make_unique<Item>();
        item->structure = leaf_structure();
        item->leaves.push_back(make_leaf(k, p, 1 + k % 3));
        CHECK(queue.enqueue(item, kForever));
      }
    });
  }
  for (auto& t : producers) t.join();
  CHECK(queue.close(/*drop=*/false) == 0);
  for (auto& t : consumers) t.join();
  CHECK(received == 8 * 300);
  std::printf("batching queue: %ld items\n", received.load());
}

}  // namespace

int main() {
  stress_dynamic_batcher();
  close_wakes_everyone();
  mismatched_caller_is_rejected();
  stress_queue();
  std::printf("ok\n");
  return 0;
}
