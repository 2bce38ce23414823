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
// Balancing (PlanBalance, below): where a vEU reaches a wait on vEU v right
// after its share of an op, and v still has rTasks of that op to run, the
// waiter takes them from the end of v's share, one at a time, until its
// wait passes or none are left. v claims its own rTasks from the front, and
// before going past its share waits for the ones taken to complete, so its
// counts keep their meaning (everything up to count K done) and the Plan's
// happens-before, memory plan and bits are unchanged: an rTask computes the
// same on any thread (kernels/rkernel.h), and the taker has run an rTask of
// the same op, so that op's inputs are ready for it. A static split cannot
// follow a host that runs one PU slower than the other for a while; this
// gives the difference to whichever vEU is free.
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

class CpuVDevice;

// What lets a vEU that waits take rTasks from the vEU it waits for, built
// once for a Plan (not on the run path): the runs of consecutive rTasks of
// one op on a vEU that a waiter may take from, and for each wait that
// follows a vEU's share of an op, those of the same op on the awaited vEU
// that end by the awaited count. Only rTasks the Plan predicts to take at
// least `min_task_us` qualify: claiming one costs an atomic
// compare-and-swap, and taking one moves its claim word and its data
// between cores. Holds the claim words, so one run at a time; every run
// given it must be of this Plan.
class PlanBalance {
 public:
  // Below this an rTask is not worth taking: a cross-core claim and its
  // inputs' lines cost ~0.1-0.3 µs (a hand-off between vCPUs measures
  // 0.05-0.3 µs).
  static constexpr double kMinTaskUs = 1.0;

  PlanBalance() = default;
  explicit PlanBalance(const Plan& plan, double min_task_us = kMinTaskUs);
  // No run may take anything (a 1-vEU Plan, or no op worth it).
  bool empty() const { return runs_.empty(); }
  // Runs that some wait may take from.
  size_t runs() const { return runs_.size(); }
  // Waits that may take rTasks.
  size_t waits() const { return wait_count_; }

 private:
  friend class CpuVDevice;
  struct Run {
    int32_t veu = 0;
    int32_t first_pc = 0;   // its first kRun in the vEU's list
    int32_t first_pos = 0;  // that rTask's position among the vEU's rTasks
    int32_t n = 0;          // rTasks, at most 65535 (the claim word's fields)
  };
  // Per run, its own cache line: the claim word (generation 32 bits, front
  // 16, back 16: the owner claims from the front of [front, back), takers
  // from the back; a word of an older generation reads as [0, n), so it is
  // never reset: someone claims in every run, so a stale word is always
  // the run before's) and how many taken rTasks completed (the owner sets
  // it back to 0 once all have, when no taker can claim any more).
  struct alignas(64) State {
    std::atomic<uint64_t> claim{0};
    std::atomic<uint32_t> done{0};
  };
  std::vector<Run> runs_;
  std::vector<std::vector<int32_t>> run_at_;   // [vEU][pc]: the run starting there, or -1
  std::vector<std::vector<int32_t>> wait_at_;  // [vEU][pc]: a wait's first entry in victims_, or -1
  std::vector<int32_t> victims_;               // runs, each wait's list ended by -1
  size_t wait_count_ = 0;
  std::unique_ptr<State[]> state_;
  uint32_t gen_ = 0;  // this run's generation (bumped by CpuVDevice::run)
  size_t plan_veus_ = 0;
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
  // `balance` (built for `plan`; null: none): waiters take rTasks from
  // the vEUs they wait for (see above); ignored in traced runs, whose
  // lanes show each rTask where the Plan placed it. taken() then says how
  // many rTasks went to a vEU other than their own.
  void run(const Plan& plan, const std::vector<StepArgs>& steps, bool exchanged = false,
           PlanBalance* balance = nullptr);
  // rTasks of the last run that a vEU took from another (0 without balance).
  int64_t taken() const;
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
  // PlanBalance: vEU u runs `r`, its own run, claiming from the front;
  // takes from the back of run `r` (another vEU's) once: false if none left.
  void run_own(int u, int32_t r, void* scratch, int64_t* waited);
  bool take_one(int32_t r, void* scratch);

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
  PlanBalance* balance_ = nullptr;   // this run's, or null
  struct alignas(64) Taken {
    int64_t n = 0;
  };
  std::unique_ptr<Taken[]> taken_;  // per vEU (list), the last run
  std::vector<std::pair<int64_t, int64_t>>* trace_ = nullptr;
  std::vector<int64_t> trace_offset_;  // per vEU: first placement index, for tracing
  std::vector<int32_t> trace_index_;   // placement index of each (vEU, position)

  SpinPark wake_;  // one publish per run (base/spin_park.h)
  std::atomic<bool> stop_{false};
};

}  // namespace tessera
