// Small synchronisation vocabulary shared by the batcher's core (pure C++17, no Python).
//
// Locking rules of the whole extension (read these before touching any mutex):
//   1. A thread that holds a batcher mutex never takes the GIL and never touches a Python
//      object. The core files (*.cpp other than module.cpp / py_nest.cpp) do not include
//      Python at all, so this holds by construction there.
//   2. A thread may lock a batcher mutex while holding the GIL (the critical sections are
//      short and never wait for the GIL, so this cannot deadlock).
//   3. Every wait that can block (a producer waiting for its reply, a consumer waiting for a
//      batch, an enqueue waiting for space) runs with the GIL released.
//   4. Lock order: a core mutex (DynamicBatcherCore::mu_, BatchingQueueCore::mu_) may be held
//      while locking a BatchState::mu_ or a Completion::mu_, never the other way round.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

// Documents which mutex guards a field (TorchBeast / Abseil style). It expands to nothing:
// libstdc++'s std::mutex carries no capability annotations, so clang's analysis cannot use it.
#define BATCHER_GUARDED_BY(mutex_name)

namespace batchenv::batcher {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// "No deadline": wait until notified.
inline constexpr TimePoint kForever = TimePoint::max();

// Waits on `cv` until notified or `until` passes (a plain wait() for kForever, which some
// standard libraries mishandle in wait_until). Returns false once `until` has passed.
template <class Lock>
bool wait_until(std::condition_variable& cv, Lock& lock, TimePoint until) {
  if (until == kForever) {
    cv.wait(lock);
    return true;
  }
  return cv.wait_until(lock, until) == std::cv_status::no_timeout;
}

}  // namespace batchenv::batcher
