#include "base/thread_pool.h"

#include <immintrin.h>

#include "base/check.h"

namespace tessera {

ThreadPool::ThreadPool(int threads, std::function<void(int)> on_start) : on_start_(std::move(on_start)) {
  TESSERA_CHECK(threads >= 1);
  workers_.reserve(threads - 1);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  wake_.publish();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks(int thread) {
  const auto& fn = *fn_;
  const int64_t n = count_;
  while (true) {
    int64_t task = next_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n) return;
    fn(task, thread);
  }
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int)> fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  fn_ = &fn;
  count_ = n;
  next_.store(0, std::memory_order_relaxed);
  busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  wake_.publish();
  run_tasks(0);
  // Workers decrement busy_ with release after their last task; acquire here
  // makes their writes visible to the caller.
  while (busy_.load(std::memory_order_acquire) != 0) _mm_pause();
}

void ThreadPool::worker_main(int index) {
  if (on_start_) on_start_(index);
  // Start from the generation at construction, not the current one: a loop
  // published before this thread got here must still be seen as new.
  uint64_t seen = 0;
  while (true) {
    seen = wake_.wait_change(seen, kSpinIterations);
    if (stop_.load(std::memory_order_relaxed)) return;
    run_tasks(index);
    busy_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace tessera
