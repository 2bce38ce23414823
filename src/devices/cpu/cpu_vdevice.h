// CpuVDevice: N vEUs (worker threads pinned to cores, by hwloc's topology)
// that execute a Plan.
//
// vEU 0 is the calling thread; vEUs 1..N-1 are workers, vEU u on a PU slot
// of its own (a core set: two devices on disjoint slots share no core and
// no counter). With pinning on, the constructing thread, and any other
// thread on its first run, is pinned to vEU 0's slot: left free, the OS
// may place it on a worker's PU, where it shares the core with a spinning
// worker for milliseconds (char_lm: runs of 8 ms instead of 0.03). That
// first run from a thread other than the constructing one is the only run
// that makes a system call. The constructing thread gets the affinity it
// had back when the last pinning device it constructed is destroyed on
// it (threads it starts meanwhile inherit vEU 0's slot); other threads a
// run pinned stay pinned. A run publishes the run (one generation bump,
// plus one futex wake only if some worker has parked), then every vEU
// walks its own instruction list:
//   run     call the rTask with its resolved arguments and this vEU's scratch
//   signal  counter[me].store(base + k, release)
//   wait    spin while counter[u].load(acquire) < base_u + k
// and publishes its final count. The caller returns once every counter
// holds its final value. No allocation, lock or system call on this path
// (a spinning wait yields the CPU only when there are more vEUs than cores).
//
// Counters are never reset: each run's base_u is one above vEU u's final
// count in the run before (base_u + n_u, n_u its rTask count under that
// run's Plan), so values only grow and a stale value from an earlier run,
// of this Plan or another, can never satisfy a wait; nothing is keyed by
// a Plan's address. Each counter has its own cache line.
//
// Between runs workers spin ~50 µs, then park on the generation word.
//
// Thread-safety: run() may be called by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <pthread.h>
#include <thread>
#include <vector>

#include "base/spin_park.h"
#include "compiler/plan.h"
#include "kernels/rkernel.h"

namespace tessera {

// Per-step arguments, resolved once by the Engine (devices/cpu/engine.h).
struct StepArgs {
  const ROp* op;
  const void* const* in;
  void* const* out;
};

class CpuVDevice {
 public:
  // `pin`: pin worker vEU i to PU slot slots[i] of the topology order (one
  // PU per core first; topology/cpu_topology.h; empty `slots`: slot i),
  // and the constructing thread and each thread that calls run() to vEU
  // 0's slot (their affinity stays so, the constructing thread's until the
  // last pinning device it constructed is destroyed on it; a thread that
  // runs devices on other slots by turns is pinned again, a system call,
  // when it changes device).
  // `scratch_bytes` per vEU.
  CpuVDevice(int veus, size_t scratch_bytes, bool pin, std::vector<int> slots = {});
  const std::vector<int>& slots() const { return slots_; }
  ~CpuVDevice();
  CpuVDevice(const CpuVDevice&) = delete;
  CpuVDevice& operator=(const CpuVDevice&) = delete;

  int veus() const { return veus_; }

  // Runs `plan` once; `steps` indexed like the Program's steps. Both must
  // outlive the call. Also records per-vEU time spent waiting (ns).
  // `exchanged` (a 2-vEU Plan): the two lists run on each other's PUs, the
  // calling thread running vEU 1's and the worker vEU 0's (each list with
  // its own counter and scratch, so the bits are the same). A device of 2
  // vEUs also runs a 1-vEU Plan: its list on the caller's PU, or, exchanged,
  // on the worker's (the spare PU) while the caller waits for it; wait_ns()
  // then holds 0 for the spare.
  void run(const Plan& plan, const std::vector<StepArgs>& steps, bool exchanged = false);
  // Runs the rTasks of `order` (plan_one_thread_order of a Plan) on one
  // vEU's thread with its scratch: `veu` 0, the calling thread, leaves the
  // workers as they are (parked once idle); on a device of 2 vEUs, `veu` 1
  // runs them on the worker while the caller waits for it. Every wait time
  // reads 0.
  void run_alone(const std::vector<std::pair<int32_t, int64_t>>& order, const std::vector<StepArgs>& steps,
                 int veu = 0);
  bool tracing() const { return trace_ != nullptr; }
  const std::vector<int64_t>& wait_ns() const { return wait_ns_; }
  // When set, run() records each rTask's start/end (ns, steady clock) into
  // trace[i] in the order of plan.placements. Costs two clock reads per
  // rTask; off by default.
  void set_trace(std::vector<std::pair<int64_t, int64_t>>* trace) { trace_ = trace; }

 private:
  struct alignas(64) Counter {
    std::atomic<uint64_t> value{0};
  };
  void worker_main(int veu);
  void pin_caller() const;  // this thread to PU 0, once per thread
  void execute(int veu);
  void execute_order(int veu);

  const int veus_;
  const std::vector<int> slots_;
  const bool oversubscribed_;
  const bool pin_;
  pthread_t creator_{};  // the constructing thread, with pin_: given its mask back on destruction
  std::vector<std::thread> threads_;
  std::unique_ptr<Counter[]> counters_;
  void* scratch_ = nullptr;
  size_t scratch_stride_ = 0;

  // The current run, written before wake_.publish().
  const Plan* plan_ = nullptr;
  const std::vector<StepArgs>* steps_ = nullptr;
  bool exchanged_ = false;
  const std::vector<std::pair<int32_t, int64_t>>* order_ = nullptr;  // a run alone on a worker: its rTasks
  int alone_veu_ = -1;  // that worker; -1: the run is the Plan's
  std::vector<uint64_t> base_;       // per vEU, this run
  std::vector<uint64_t> next_base_;  // per vEU, the next run: above its final count this run
  std::vector<int64_t> wait_ns_;
  std::vector<std::pair<int64_t, int64_t>>* trace_ = nullptr;
  std::vector<int64_t> trace_offset_;  // per vEU: first placement index, for tracing
  std::vector<int32_t> trace_index_;   // placement index of each (vEU, position)

  SpinPark wake_;  // one publish per run (base/spin_park.h)
  std::atomic<bool> stop_{false};
};

}  // namespace tessera
