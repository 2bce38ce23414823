// A cloud session's submission and completion rings (the io_uring shape):
// a shared-memory region the client makes (a memfd) and registers, passed
// by the daemon to the session's worker. The client writes inputs into
// the region's data area and a descriptor into the submission queue; the
// worker copies the descriptor out, checks every offset and size against
// the region and the session, runs with the Plan reading the inputs and
// writing the outputs there, and posts a completion. Neither the socket
// nor the daemon is on this path; waits spin briefly, then sleep on a
// shared futex, woken only when the other side says it sleeps.
// docs/formats/protocol.md describes the layout.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::daemon {

inline constexpr uint32_t kRingMagic = 0x474e5254;  // "TRNG"
inline constexpr uint32_t kRingVersion = 1;
inline constexpr uint32_t kRingEntries = 8;
inline constexpr uint32_t kRingMaxTensors = 16;

struct RingSpan {
  uint64_t offset, bytes;  // within the data area
};

struct RingSqe {
  uint64_t user_data;
  uint32_t inputs, outputs;  // in the session's order
  RingSpan in[kRingMaxTensors], out[kRingMaxTensors];
};

struct RingCqe {
  uint64_t user_data;
  int32_t code;  // a tessera::StatusCode; 0: ok
  float compute_ms;
  char message[240];
};

struct RingHeader {
  uint32_t magic, version, entries, reserved;
  uint64_t data_offset, data_bytes;
  alignas(64) std::atomic<uint32_t> sq_tail;  // the client's
  std::atomic<uint32_t> sq_sleeping;          // the worker's: it sleeps on sq_tail
  alignas(64) std::atomic<uint32_t> sq_head;  // the worker's
  alignas(64) std::atomic<uint32_t> cq_tail;  // the worker's
  std::atomic<uint32_t> cq_sleeping;          // the client's: it sleeps on cq_tail
  alignas(64) std::atomic<uint32_t> cq_head;  // the client's
  alignas(64) RingSqe sq[kRingEntries];
  RingCqe cq[kRingEntries];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);
// The layout is an interface between processes (docs/formats/protocol.md).
static_assert(sizeof(RingSqe) == 528 && sizeof(RingCqe) == 256);
static_assert(offsetof(RingHeader, sq_tail) == 64 && offsetof(RingHeader, sq_sleeping) == 68 &&
              offsetof(RingHeader, sq_head) == 128 && offsetof(RingHeader, cq_tail) == 192 &&
              offsetof(RingHeader, cq_sleeping) == 196 && offsetof(RingHeader, cq_head) == 256 &&
              offsetof(RingHeader, sq) == 320 && offsetof(RingHeader, cq) == 320 + 8 * 528);

// Where the data area starts (a page after the header's start).
inline constexpr uint64_t kRingDataOffset = (sizeof(RingHeader) + 4095) / 4096 * 4096;

// The latency histogram's bounds (seconds), shared by the daemon's
// metrics and the workers that count ring runs.
inline constexpr double kLatencyBounds[] = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3};
inline constexpr size_t kLatencyBuckets = sizeof kLatencyBounds / sizeof kLatencyBounds[0] + 1;

// Waits until `word` differs from `seen`: spins about `spin_ns`, then sleeps
// on the futex (shared between processes), saying so in `sleeping`, for at
// most `timeout_ms` (-1: no limit). True when it changed.
bool ring_wait(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleeping, uint32_t seen, int64_t spin_ns,
               int timeout_ms);
// Publishes `value` to `word` and wakes its sleeper, if one says it sleeps.
void ring_post(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleeping, uint32_t value);

}  // namespace tessera::daemon
