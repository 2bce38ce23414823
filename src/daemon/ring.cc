#include "daemon/ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

#include "base/clock.h"

namespace tessera::daemon {
namespace {

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

bool ring_wait(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleeping, uint32_t seen, int64_t spin_ns,
               int timeout_ms) {
  const int64_t start = now_ns();
  while (word.load(std::memory_order_acquire) == seen) {
    if (now_ns() - start < spin_ns) {
      __builtin_ia32_pause();
      continue;
    }
    sleeping.store(1, std::memory_order_seq_cst);
    if (word.load(std::memory_order_seq_cst) == seen) {
      timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
      futex(&word, FUTEX_WAIT, seen, timeout_ms < 0 ? nullptr : &ts);  // a shared futex: not FUTEX_PRIVATE
    }
    sleeping.store(0, std::memory_order_relaxed);
    if (timeout_ms >= 0) return word.load(std::memory_order_acquire) != seen;
  }
  return true;
}

void ring_post(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleeping, uint32_t value) {
  word.store(value, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) != 0) futex(&word, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace tessera::daemon
