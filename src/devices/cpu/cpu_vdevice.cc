#include "devices/cpu/cpu_vdevice.h"

#include "kernels/cpu/kernel.h"
#include "topology/cpu_topology.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/clock.h"
#include "ir/tensor.h"

namespace tessera {
namespace {

// Pause instructions a vEU spins between runs before it parks: ~50 µs
// where pause takes ~0.5 ns, 2.7 ms on Zen 3 (27 ns a pause). The longer
// spin keeps back-to-back runs free of the futex wake (a system call on the
// run path) when a vEU idles through most of a run.
constexpr int kParkSpins = 100000;

// The slot this thread was pinned to as a caller (-1: none). Thread-local,
// not a thread id kept by the device: ids of finished threads are reused.
thread_local int caller_slot = -1;

// The affinity this thread had before a device it constructed first pinned
// it, and how many pinning devices it constructed are alive: the last one
// destroyed on this thread gives the mask back.
thread_local int constructed_alive = 0;
thread_local cpu_set_t mask_before;
thread_local bool mask_saved = false;

bool shares_a_slot(std::vector<int> slots) {
  std::sort(slots.begin(), slots.end());
  return std::adjacent_find(slots.begin(), slots.end()) != slots.end();
}

}  // namespace

CpuVDevice::CpuVDevice(int veus, size_t scratch_bytes, bool pin, std::vector<int> slots)
    : veus_(veus),
      slots_(veu_slots(slots, veus)),
      oversubscribed_(veus > cpu_topology().pus || shares_a_slot(slots_)),
      pin_(pin),
      counters_(new Counter[static_cast<size_t>(veus)]),
      base_(static_cast<size_t>(veus), 0),
      next_base_(static_cast<size_t>(veus), 1),  // above the counters' 0: each run's final count is new
      wait_ns_(static_cast<size_t>(veus), 0) {
  TESSERA_CHECK(veus >= 1);
  scratch_stride_ = (scratch_bytes + 63) / 64 * 64;
  scratch_ = aligned_alloc64(scratch_stride_ * static_cast<size_t>(veus));
  threads_.reserve(static_cast<size_t>(veus - 1));
  for (int u = 1; u < veus; ++u)
    threads_.emplace_back([this, u, pin] {
      if (pin) pin_current_thread(slots_[static_cast<size_t>(u)]);
      cpu_kernels_thread_init();
      worker_main(u);
    });
  cpu_kernels_thread_init();
  if (pin_) {
    if (constructed_alive++ == 0)
      mask_saved = pthread_getaffinity_np(pthread_self(), sizeof mask_before, &mask_before) == 0;
    creator_ = pthread_self();
  }
  pin_caller();  // the usual caller, so that its runs make no system call
}

void CpuVDevice::pin_caller() const {
  if (pin_ && caller_slot != slots_[0]) {  // once per thread and slot; a failure is not retried
    pin_current_thread(slots_[0]);
    caller_slot = slots_[0];
  }
}

CpuVDevice::~CpuVDevice() {
  stop_.store(true, std::memory_order_relaxed);
  wake_.publish();
  for (auto& t : threads_) t.join();
  aligned_free64(scratch_);
  // A library leaves its caller's thread as it found it: threads and
  // processes it starts later inherit that mask.
  if (pin_ && pthread_equal(creator_, pthread_self()) && --constructed_alive == 0) {
    if (mask_saved) pthread_setaffinity_np(pthread_self(), sizeof mask_before, &mask_before);
    mask_saved = false;
    caller_slot = -1;
  }
}

void CpuVDevice::worker_main(int veu) {
  uint64_t seen = 0;  // generation at construction
  while (true) {
    seen = wake_.wait_change(seen, kParkSpins);
    if (stop_.load(std::memory_order_relaxed)) return;
    if (alone_veu_ >= 0) {
      if (veu == alone_veu_) execute_order(veu);
      continue;
    }
    execute(exchanged_ ? veu ^ 1 : veu);
  }
}

void CpuVDevice::execute(int u) {
  const Plan& plan = *plan_;
  const auto& steps = *steps_;
  const std::vector<Instr>& prog = plan.program[u];
  const uint64_t my_base = base_[u];
  void* scratch = static_cast<char*>(scratch_) + scratch_stride_ * static_cast<size_t>(u);
  Counter* counters = counters_.get();
  int64_t waited = 0;
  int32_t position = 0;
  for (const Instr& in : prog) {
    switch (in.kind) {
      case Instr::Kind::kRun: {
        const StepArgs& s = steps[static_cast<size_t>(in.a)];
        TaskArgs args{s.in, s.out, scratch};
        if (trace_ != nullptr) {
          int64_t t0 = now_ns();
          s.op->run(in.b, args);
          (*trace_)[static_cast<size_t>(trace_index_[static_cast<size_t>(trace_offset_[u] + position)])] = {t0, now_ns()};
        } else {
          s.op->run(in.b, args);
        }
        ++position;
        break;
      }
      case Instr::Kind::kSignal:
        // release: everything this vEU wrote before is visible to whoever
        // acquires this count.
        counters[u].value.store(my_base + static_cast<uint64_t>(in.b), std::memory_order_release);
        break;
      case Instr::Kind::kWait: {
        const uint64_t target = base_[static_cast<size_t>(in.a)] + static_cast<uint64_t>(in.b);
        // acquire: pairs with the producer's release store.
        if (counters[in.a].value.load(std::memory_order_acquire) >= target) break;
        int64_t t0 = now_ns();
        int spins = 0;
        while (counters[in.a].value.load(std::memory_order_acquire) < target) {
          _mm_pause();
          if (oversubscribed_ && ++spins == 4096) {
            spins = 0;
            sched_yield();  // more vEUs than cores: let the producer run
          }
        }
        waited += now_ns() - t0;
        break;
      }
    }
  }
  wait_ns_[static_cast<size_t>(u)] = waited;
  counters[u].value.store(my_base + static_cast<uint64_t>(plan.tasks_per_veu[u]), std::memory_order_release);
}

void CpuVDevice::execute_order(int veu) {
  void* scratch = static_cast<char*>(scratch_) + scratch_stride_ * static_cast<size_t>(veu);
  for (const auto& [step, task] : *order_) {
    const StepArgs& s = (*steps_)[static_cast<size_t>(step)];
    s.op->run(task, TaskArgs{s.in, s.out, scratch});
  }
  if (veu != 0)  // release: the caller acquires everything written
    counters_[veu].value.store(base_[static_cast<size_t>(veu)], std::memory_order_release);
}

void CpuVDevice::run_alone(const std::vector<std::pair<int32_t, int64_t>>& order, const std::vector<StepArgs>& steps,
                           int veu) {
  // On a worker only where it is the one worker: a publish wakes every
  // worker, and one that takes no part could still be reading this run's
  // fields when the caller writes the next run's.
  TESSERA_CHECK(veu == 0 || (veu == 1 && veus_ == 2));
  pin_caller();
  order_ = &order;
  steps_ = &steps;
  if (veu == 0) {
    alone_veu_ = -1;
    execute_order(0);
  } else {
    // The worker's count goes one above anything it published before and
    // signals the end; its next run starts above that.
    const size_t u = static_cast<size_t>(veu);
    base_[u] = next_base_[u];
    next_base_[u] = base_[u] + 1;
    alone_veu_ = veu;
    wake_.publish();
    int spins = 0;
    while (counters_[u].value.load(std::memory_order_acquire) < base_[u]) {
      _mm_pause();
      if (oversubscribed_ && ++spins == 4096) {
        spins = 0;
        sched_yield();
      }
    }
  }
  std::fill(wait_ns_.begin(), wait_ns_.end(), 0);
}

void CpuVDevice::run(const Plan& plan, const std::vector<StepArgs>& steps, bool exchanged) {
  // A Plan on all the vEUs, or a 1-vEU Plan on a device with a spare PU.
  TESSERA_CHECK(plan.veus == veus_ || (plan.veus == 1 && veus_ == 2));
  TESSERA_CHECK(!exchanged || veus_ == 2);
  pin_caller();
  const int lists = plan.veus;
  if (trace_ != nullptr) {
    // Map (vEU, position) to the placement index (each traced run: the
    // plan may be another than last time).
    trace_offset_.assign(static_cast<size_t>(veus_) + 1, 0);
    for (const TaskPlacement& t : plan.placements) ++trace_offset_[static_cast<size_t>(t.veu) + 1];
    for (int u = 0; u < veus_; ++u) trace_offset_[u + 1] += trace_offset_[u];
    trace_index_.assign(plan.placements.size(), 0);
    for (size_t i = 0; i < plan.placements.size(); ++i) {
      const TaskPlacement& t = plan.placements[i];
      trace_index_[static_cast<size_t>(trace_offset_[t.veu] + t.index)] = static_cast<int32_t>(i);
    }
  }
  // Each vEU's counts start above everything it published before, whatever
  // Plan that was: no earlier value can satisfy a wait of this run.
  for (int u = 0; u < lists; ++u) {
    base_[u] = next_base_[u];
    next_base_[u] = base_[u] + static_cast<uint64_t>(plan.tasks_per_veu[u]) + 1;
  }
  plan_ = &plan;
  steps_ = &steps;
  exchanged_ = exchanged;
  alone_veu_ = -1;
  // One list on the caller's PU needs no worker; on the spare PU the
  // worker runs it while the caller waits for its final count.
  if (lists > 1 || exchanged) wake_.publish();
  const int mine = exchanged ? 1 : 0;
  if (mine < lists) execute(mine);
  else wait_ns_[static_cast<size_t>(mine)] = 0;
  for (int u = 0; u < lists; ++u) {
    if (u == mine) continue;
    const uint64_t final_count = base_[u] + static_cast<uint64_t>(plan.tasks_per_veu[u]);
    int spins = 0;
    while (counters_[u].value.load(std::memory_order_acquire) < final_count) {
      _mm_pause();
      if (oversubscribed_ && ++spins == 4096) {
        spins = 0;
        sched_yield();
      }
    }
  }
}

}  // namespace tessera
