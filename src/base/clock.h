// Monotonic clock in nanoseconds (steady_clock; vDSO, no system call).
#pragma once

#include <chrono>
#include <cstdint>

namespace tessera {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace tessera
