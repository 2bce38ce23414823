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

// Spins until `ready()` (its loads acquire); with more vEUs than cores,
// yields every 4096 pauses so that the thread it waits for can run.
template <typename Ready>
void spin_until(bool oversubscribed, Ready ready) {
  int spins = 0;
  while (!ready()) {
    _mm_pause();
    if (oversubscribed && ++spins == 4096) {
      spins = 0;
      sched_yield();
    }
  }
}

// Runs rTask `task` of step `step` with this thread's scratch.
inline void run_rtask(const std::vector<StepArgs>& steps, int32_t step, int64_t task, void* scratch) {
  const StepArgs& s = steps[static_cast<size_t>(step)];
  s.op->run(task, TaskArgs{s.in, s.out, scratch});
}

// The claim word of a PlanBalance run: generation, front, back.
constexpr uint64_t claim_word(uint32_t gen, uint32_t front, uint32_t back) {
  return static_cast<uint64_t>(gen) << 32 | static_cast<uint64_t>(front) << 16 | back;
}

// Claims one rTask of a run of n: from the front (its owner) or the back
// (a taker). Returns its index in the run, or -1 with `*back` the end the
// owner's claims reached (what the takers left it).
int32_t claim(std::atomic<uint64_t>& word, uint32_t gen, int32_t n, bool front, int32_t* back = nullptr) {
  uint64_t w = word.load(std::memory_order_relaxed);
  while (true) {
    uint32_t f = 0, b = static_cast<uint32_t>(n);
    if (static_cast<uint32_t>(w >> 32) == gen) {
      f = static_cast<uint32_t>(w >> 16) & 0xffff;
      b = static_cast<uint32_t>(w) & 0xffff;
    }
    if (f >= b) {
      if (back != nullptr) *back = static_cast<int32_t>(b);
      return -1;
    }
    // Relaxed: a claim only decides who runs an rTask; the data it reads
    // were ready for both (the taker has run an rTask of the same op), and
    // the taken rTask's results reach the owner through `done`.
    const uint64_t next = front ? claim_word(gen, f + 1, b) : claim_word(gen, f, b - 1);
    if (word.compare_exchange_weak(w, next, std::memory_order_relaxed)) return static_cast<int32_t>(front ? f : b - 1);
  }
}

}  // namespace

PlanBalance::PlanBalance(const Plan& plan, double min_task_us) {
  const size_t U = plan.program.size();
  plan_veus_ = U;
  if (U < 2) return;
  // The predicted duration of each (vEU, position).
  std::vector<std::vector<double>> dur(U);
  for (size_t u = 0; u < U; ++u) {
    int64_t runs = 0;
    for (const Instr& in : plan.program[u]) runs += in.kind == Instr::Kind::kRun;
    dur[u].assign(static_cast<size_t>(runs), 0.0);
  }
  for (const TaskPlacement& t : plan.placements)
    if (t.veu >= 0 && static_cast<size_t>(t.veu) < U && t.index >= 0 &&
        static_cast<size_t>(t.index) < dur[static_cast<size_t>(t.veu)].size())
      dur[static_cast<size_t>(t.veu)][static_cast<size_t>(t.index)] = t.end_us - t.start_us;
  // Every maximal run of one op's rTasks on a vEU whose rTasks are worth
  // taking, with its op.
  std::vector<Run> cand;
  std::vector<int32_t> cand_step;
  for (size_t u = 0; u < U; ++u) {
    const std::vector<Instr>& prog = plan.program[u];
    int32_t pos = 0;
    for (size_t pc = 0; pc < prog.size();) {
      if (prog[pc].kind != Instr::Kind::kRun) {
        ++pc;
        continue;
      }
      const size_t start = pc;
      const int32_t step = prog[pc].a, first_pos = pos;
      double sum = 0;
      for (; pc < prog.size() && prog[pc].kind == Instr::Kind::kRun && prog[pc].a == step; ++pc, ++pos)
        sum += dur[u][static_cast<size_t>(pos)];
      const int32_t n = pos - first_pos;
      if (n <= 0xffff && sum >= min_task_us * n) {
        cand.push_back({static_cast<int32_t>(u), static_cast<int32_t>(start), first_pos, n});
        cand_step.push_back(step);
      }
    }
  }
  // Each wait whose vEU last ran an rTask of an op (signals and waits
  // between): the runs of that op on the awaited vEU that end by the
  // awaited count. Only runs some wait names are kept.
  std::vector<int32_t> index(cand.size(), -1);
  run_at_.resize(U);
  wait_at_.resize(U);
  for (size_t u = 0; u < U; ++u) {
    const std::vector<Instr>& prog = plan.program[u];
    run_at_[u].assign(prog.size(), -1);
    wait_at_[u].assign(prog.size(), -1);
    int32_t last_step = -1;
    for (size_t pc = 0; pc < prog.size(); ++pc) {
      const Instr& in = prog[pc];
      if (in.kind == Instr::Kind::kRun) last_step = in.a;
      if (in.kind != Instr::Kind::kWait || last_step < 0 || in.a < 0 || static_cast<size_t>(in.a) >= U ||
          static_cast<size_t>(in.a) == u)
        continue;
      const size_t first = victims_.size();
      for (size_t c = 0; c < cand.size(); ++c) {
        if (cand[c].veu != in.a || cand_step[c] != last_step || cand[c].first_pos + cand[c].n > in.b) continue;
        if (index[c] < 0) {
          index[c] = static_cast<int32_t>(runs_.size());
          runs_.push_back(cand[c]);
        }
        victims_.push_back(index[c]);
      }
      if (victims_.size() == first) continue;
      victims_.push_back(-1);
      wait_at_[u][pc] = static_cast<int32_t>(first);
      ++wait_count_;
    }
  }
  for (const Run& r : runs_) run_at_[static_cast<size_t>(r.veu)][static_cast<size_t>(r.first_pc)] = &r - runs_.data();
  state_ = std::make_unique<State[]>(runs_.size());
}

CpuVDevice::CpuVDevice(int veus, size_t scratch_bytes, bool pin, std::vector<int> slots)
    : veus_(veus),
      slots_(veu_slots(slots, veus)),
      oversubscribed_(veus > cpu_topology().pus || shares_a_slot(slots_)),
      pin_(pin),
      counters_(new Counter[static_cast<size_t>(veus)]),
      base_(static_cast<size_t>(veus), 0),
      next_base_(static_cast<size_t>(veus), 1),  // above the counters' 0: each run's final count is new
      wait_ns_(static_cast<size_t>(veus), 0),
      taken_(new Taken[static_cast<size_t>(veus)]) {
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
  PlanBalance* balance = balance_;
  const int32_t* run_at = balance != nullptr ? balance->run_at_[static_cast<size_t>(u)].data() : nullptr;
  const int32_t* wait_at = balance != nullptr ? balance->wait_at_[static_cast<size_t>(u)].data() : nullptr;
  int64_t waited = 0;
  int32_t position = 0;
  taken_[u].n = 0;
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const Instr& in = prog[pc];
    switch (in.kind) {
      case Instr::Kind::kRun: {
        if (run_at != nullptr && run_at[pc] >= 0) {  // a run others may take from
          const int32_t n = balance->runs_[static_cast<size_t>(run_at[pc])].n;
          run_own(u, run_at[pc], scratch, &waited);
          pc += static_cast<size_t>(n - 1);
          position += n;
          break;
        }
        if (trace_ != nullptr) {
          int64_t t0 = now_ns();
          run_rtask(steps, in.a, in.b, scratch);
          (*trace_)[static_cast<size_t>(trace_index_[static_cast<size_t>(trace_offset_[u] + position)])] = {t0, now_ns()};
        } else {
          run_rtask(steps, in.a, in.b, scratch);
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
        // Take rTasks of the op this vEU just ran from the awaited vEU,
        // one at a time, while the wait holds and some are left.
        if (wait_at != nullptr && wait_at[pc] >= 0) {
          const int32_t* victims = balance->victims_.data() + wait_at[pc];
          bool took = true;
          while (took && counters[in.a].value.load(std::memory_order_acquire) < target) {
            took = false;
            for (const int32_t* r = victims; *r >= 0 && !took; ++r) took = take_one(*r, scratch);
            taken_[u].n += took;
          }
        }
        int64_t t0 = now_ns();
        spin_until(oversubscribed_, [&] { return counters[in.a].value.load(std::memory_order_acquire) >= target; });
        waited += now_ns() - t0;
        break;
      }
    }
  }
  wait_ns_[static_cast<size_t>(u)] = waited;
  counters[u].value.store(my_base + static_cast<uint64_t>(plan.tasks_per_veu[u]), std::memory_order_release);
}

void CpuVDevice::run_own(int u, int32_t r, void* scratch, int64_t* waited) {
  PlanBalance::State& st = balance_->state_[static_cast<size_t>(r)];
  const PlanBalance::Run& run = balance_->runs_[static_cast<size_t>(r)];
  const Instr* first = plan_->program[static_cast<size_t>(u)].data() + run.first_pc;
  const auto& steps = *steps_;
  const uint32_t gen = balance_->gen_;
  int32_t back = run.n;
  for (int32_t i; (i = claim(st.claim, gen, run.n, true, &back)) >= 0;)
    run_rtask(steps, first[i].a, first[i].b, scratch);
  // The rTasks from `back` on were taken: this vEU's counts past them
  // mean they completed (acquire: their writes), and then no taker can
  // claim again this run, so the count starts from 0 for the next.
  const uint32_t taken = static_cast<uint32_t>(run.n - back);
  if (taken == 0) return;
  if (st.done.load(std::memory_order_acquire) != taken) {
    const int64_t t0 = now_ns();
    spin_until(oversubscribed_, [&] { return st.done.load(std::memory_order_acquire) == taken; });
    *waited += now_ns() - t0;
  }
  st.done.store(0, std::memory_order_relaxed);
}

bool CpuVDevice::take_one(int32_t r, void* scratch) {
  PlanBalance::State& st = balance_->state_[static_cast<size_t>(r)];
  const PlanBalance::Run& run = balance_->runs_[static_cast<size_t>(r)];
  const int32_t i = claim(st.claim, balance_->gen_, run.n, false);
  if (i < 0) return false;
  const Instr& in = plan_->program[static_cast<size_t>(run.veu)][static_cast<size_t>(run.first_pc + i)];
  run_rtask(*steps_, in.a, in.b, scratch);
  st.done.fetch_add(1, std::memory_order_release);  // the owner acquires its results
  return true;
}

int64_t CpuVDevice::taken() const {
  int64_t n = 0;
  for (int u = 0; u < veus_; ++u) n += taken_[u].n;
  return n;
}

void CpuVDevice::execute_order(int veu) {
  void* scratch = static_cast<char*>(scratch_) + scratch_stride_ * static_cast<size_t>(veu);
  for (const auto& [step, task] : *order_) {
    run_rtask(*steps_, step, task, scratch);
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
  for (int u = 0; u < veus_; ++u) taken_[u].n = 0;
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
    spin_until(oversubscribed_, [&] { return counters_[u].value.load(std::memory_order_acquire) >= base_[u]; });
  }
  std::fill(wait_ns_.begin(), wait_ns_.end(), 0);
}

void CpuVDevice::run(const Plan& plan, const std::vector<StepArgs>& steps, bool exchanged, PlanBalance* balance) {
  // A Plan on all the vEUs, or a 1-vEU Plan on a device with a spare PU.
  TESSERA_CHECK(plan.veus == veus_ || (plan.veus == 1 && veus_ == 2));
  TESSERA_CHECK(!exchanged || veus_ == 2);
  TESSERA_CHECK(balance == nullptr || balance->empty() || balance->plan_veus_ == plan.program.size());
  pin_caller();
  // Traced runs show each rTask on the vEU the Plan placed it on.
  balance_ = balance != nullptr && !balance->empty() && trace_ == nullptr ? balance : nullptr;
  if (balance_ != nullptr) ++balance_->gen_;  // published with the run
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
  for (int u = lists; u < veus_; ++u) taken_[u].n = 0;  // each list's vEU sets its own
  const int mine = exchanged ? 1 : 0;
  if (mine < lists) execute(mine);
  else wait_ns_[static_cast<size_t>(mine)] = 0;
  for (int u = 0; u < lists; ++u) {
    if (u == mine) continue;
    const uint64_t final_count = base_[u] + static_cast<uint64_t>(plan.tasks_per_veu[u]);
    spin_until(oversubscribed_,
               [&] { return counters_[u].value.load(std::memory_order_acquire) >= final_count; });
  }
}

}  // namespace tessera
