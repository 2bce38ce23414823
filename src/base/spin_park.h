// The wake-up protocol shared by the thread pool and the CPU vDevice:
// a generation word the publisher bumps once per unit of work, and workers
// that spin on it for a while and then park on it (futex, through
// std::atomic::wait).
//
// Correctness (no lost wake-up): a worker increments `parked` and then
// re-reads the generation, both seq_cst; the publisher bumps the generation
// and then reads `parked`, both seq_cst. In the single total order either
// the worker's re-read sees the bump (it does not sleep) or the
// publisher's read sees the worker parked (it calls notify_all). The
// publisher makes no system call while nobody is parked.
#pragma once

#include <immintrin.h>

#include <atomic>
#include <cstdint>

namespace tessera {

struct SpinPark {
  alignas(64) std::atomic<uint64_t> generation{0};
  alignas(64) std::atomic<int> parked{0};

  // Publisher: everything written before is visible to a worker that
  // returns from wait_change() with the new generation.
  void publish() {
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (parked.load(std::memory_order_seq_cst) > 0) generation.notify_all();
  }

  // Worker: returns the first generation different from `seen`, after
  // spinning `spins` pause instructions and then parking.
  uint64_t wait_change(uint64_t seen, int spins) {
    uint64_t g;
    int n = 0;
    while ((g = generation.load(std::memory_order_acquire)) == seen) {
      if (++n < spins) {
        _mm_pause();
        continue;
      }
      parked.fetch_add(1, std::memory_order_seq_cst);
      if (generation.load(std::memory_order_seq_cst) == seen) generation.wait(seen, std::memory_order_acquire);
      parked.fetch_sub(1, std::memory_order_relaxed);
      n = 0;
    }
    return g;
  }
};

}  // namespace tessera
