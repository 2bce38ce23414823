// ThreadPool: a fixed set of worker threads that run one parallel loop at a
// time, for the two-layer executor (op by op, each op's rTasks spread over
// the pool).
//
// The calling thread takes part, so a pool of size N has N-1 workers. Tasks
// are claimed with one fetch_add each. Between loops workers spin briefly
// (~kSpinIterations pauses, tens of microseconds) and then park on a futex
// (std::atomic::wait); a loop wakes parked workers once, with one
// notify_all, and never when none are parked.
//
// Thread-safety: parallel_for may be called by one thread at a time (the
// owner); the pool itself is not reentrant.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "base/function_ref.h"
#include "base/spin_park.h"

namespace tessera {

class ThreadPool {
 public:
  // `threads` counts the caller: 1 means no workers at all. `on_start` runs
  // first on each worker thread (e.g. to pin it or set per-thread library
  // state); it may be empty.
  explicit ThreadPool(int threads, std::function<void(int worker)> on_start = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task, thread) for every task in [0, n) and returns when all are
  // done. `thread` is in [0, size()); 0 is the caller.
  void parallel_for(int64_t n, FunctionRef<void(int64_t task, int thread)> fn);

 private:
  static constexpr int kSpinIterations = 20000;

  void worker_main(int index);
  void run_tasks(int thread);

  std::vector<std::thread> workers_;
  std::function<void(int)> on_start_;

  // The current loop. Written by the caller before wake_.publish() and read
  // by workers after wake_.wait_change() returns.
  const FunctionRef<void(int64_t, int)>* fn_ = nullptr;
  int64_t count_ = 0;

  SpinPark wake_;                             // one publish per loop (base/spin_park.h)
  alignas(64) std::atomic<int64_t> next_{0};  // next unclaimed task
  alignas(64) std::atomic<int> busy_{0};      // workers still inside the loop
  std::atomic<bool> stop_{false};
};

}  // namespace tessera
