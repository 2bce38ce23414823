#include "devices/cpu/cpu_vdevice.h"

#include "kernels/cpu/gemm.h"
#include "topology/cpu_topology.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

namespace tessera {
namespace {

// Each thread that calls run() on a pinning vDevice ends up on PU 0 (and
// nowhere else), so it never shares a core with a spinning worker; without
// pinning its affinity is left as it was.
TEST(CpuVDevice, PinsEachCallingThreadToTheFirstPu) {
  const CpuTopology& t = cpu_topology();
  Plan plan;  // two vEUs with nothing to do
  plan.veus = 2;
  plan.program.resize(2);
  plan.tasks_per_veu = {0, 0};
  const std::vector<StepArgs> steps;
  for (bool pin : {true, false}) {
    CpuVDevice device(2, 64, pin);
    for (int caller = 0; caller < 2; ++caller) {
      std::thread th([&] {
        cpu_set_t before, after;
        ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
        device.run(plan, steps);
        device.run(plan, steps);
        ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof after, &after), 0);
        if (pin) {
          EXPECT_EQ(CPU_COUNT(&after), 1) << "caller " << caller;
          EXPECT_TRUE(CPU_ISSET(t.pu_order[0], &after)) << "caller " << caller;
        } else {
          EXPECT_TRUE(CPU_EQUAL(&before, &after)) << "caller " << caller;
        }
      });
      th.join();
    }
  }
}

// A library leaves the thread that constructs it as it found it: pinned
// while a pinning device it made lives, its own mask back once the last
// one is gone, so that threads and processes it starts later are not
// confined to one PU.
TEST(CpuVDevice, GivesTheConstructingThreadItsAffinityBack) {
  const CpuTopology& t = cpu_topology();
  if (t.pu_order.size() < 2) GTEST_SKIP() << "one PU: pinning to it leaves the mask as it was";
  std::thread th([&] {
    cpu_set_t before, now;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
    ASSERT_GT(CPU_COUNT(&before), 1);
    auto first = std::make_unique<CpuVDevice>(2, 64, true);
    auto second = std::make_unique<CpuVDevice>(2, 64, true);
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    EXPECT_EQ(CPU_COUNT(&now), 1);
    first.reset();
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    EXPECT_EQ(CPU_COUNT(&now), 1) << "a pinning device it made is still alive";
    second.reset();
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&before, &now));
    CpuVDevice third(2, 64, true);  // and pinned again by the next one
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    EXPECT_EQ(CPU_COUNT(&now), 1);
    EXPECT_TRUE(CPU_ISSET(t.pu_order[0], &now));
  });
  th.join();
}

// One rTask per call of `f`, whatever the task index.
class FnOp : public ROp {
 public:
  FnOp(int64_t tasks, std::function<void(int64_t)> f) : f_(std::move(f)) { tasks_ = tasks; }
  void run(int64_t task, const TaskArgs&) const override { f_(task); }

 private:
  std::function<void(int64_t)> f_;
};

// The kernels' first sgemm starts oneDNN's OpenMP runtime on a vEU's
// thread; each vEU stays on its own PU after it (a second OpenMP runtime
// linked beside oneDNN's re-pinned that thread, and both vEUs of a Plan
// ran on one core).
TEST(CpuVDevice, EachVeuKeepsItsPuThroughTheKernelsFirstSgemm) {
  const CpuTopology& t = cpu_topology();
  if (t.pu_order.size() < 2) GTEST_SKIP() << "one PU";
  Plan plan;
  plan.veus = 2;
  plan.program = {{{Instr::Kind::kRun, 0, 0}}, {{Instr::Kind::kRun, 0, 1}}};
  plan.tasks_per_veu = {1, 1};
  bool measure = false;
  cpu_set_t masks[2];
  FnOp op(2, [&](int64_t task) {
    if (measure) {
      pthread_getaffinity_np(pthread_self(), sizeof masks[task], &masks[task]);
      return;
    }
    const float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1};
    float c[4] = {};
    sgemm(false, false, 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2);
    EXPECT_EQ(c[3], 4.f);
  });
  const std::vector<StepArgs> steps = {{&op, nullptr, nullptr}};
  std::thread th([&] {
    CpuVDevice device(2, 64, true);
    device.run(plan, steps);
    measure = true;
    device.run(plan, steps);
  });
  th.join();
  for (int u = 0; u < 2; ++u) {
    EXPECT_EQ(CPU_COUNT(&masks[u]), 1) << "vEU " << u;
    EXPECT_TRUE(CPU_ISSET(t.pu_order[static_cast<size_t>(u)], &masks[u])) << "vEU " << u;
  }
}

// vEU 1 runs `writes` rTasks, the last of which publishes the run number
// after a pause; vEU 0 waits for all of them, then reads it.
Plan handoff_plan(int64_t writes) {
  Plan p;
  p.veus = 2;
  p.program.resize(2);
  for (int64_t t = 0; t < writes; ++t) p.program[1].push_back({Instr::Kind::kRun, 1, t});
  p.program[0].push_back({Instr::Kind::kWait, 1, writes});
  p.program[0].push_back({Instr::Kind::kRun, 0, 0});
  p.tasks_per_veu = {1, writes};
  return p;
}

// A Plan replaced by another in the same object (the same address), with
// fewer rTasks on the writing vEU: every run's wait still waits for this
// run's writes, not for counts an earlier Plan left behind.
TEST(CpuVDevice, AnotherPlanAtTheSameAddressWaitsForItsOwnRun) {
  std::atomic<int> published{0};
  int run_no = 0, seen = -1, wrong = 0;
  int64_t writes = 0;
  FnOp writer(8, [&](int64_t t) {
    if (t + 1 < writes) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
    while (std::chrono::steady_clock::now() < until) {
    }
    published.store(run_no, std::memory_order_relaxed);
  });
  FnOp reader(1, [&](int64_t) { seen = published.load(std::memory_order_relaxed); });
  const std::vector<StepArgs> steps = {{&reader, nullptr, nullptr}, {&writer, nullptr, nullptr}};
  CpuVDevice device(2, 64, false);
  Plan plan;
  for (int64_t w : {8, 8, 8, 1, 1, 3, 1}) {
    writes = w;
    plan = handoff_plan(w);
    ++run_no;
    device.run(plan, steps);
    wrong += seen != run_no;
  }
  EXPECT_EQ(wrong, 0);
}

// Step 0's rTasks 0..7 on vEU 0 and 8..15 on vEU 1, each predicted to
// take `task_us`; vEU 0 then waits for vEU 1's count `awaited` and runs
// step 1 (one rTask), vEU 1 runs step 2 (one rTask) after its share.
Plan balance_plan(double task_us, int64_t awaited = 8) {
  Plan p;
  p.veus = 2;
  p.program.resize(2);
  for (int64_t t = 0; t < 8; ++t) {
    p.program[0].push_back({Instr::Kind::kRun, 0, t});
    p.placements.push_back({0, t, 0, static_cast<int32_t>(t), task_us * t, task_us * (t + 1)});
    p.program[1].push_back({Instr::Kind::kRun, 0, t + 8});
    p.placements.push_back({0, t + 8, 1, static_cast<int32_t>(t), task_us * t, task_us * (t + 1)});
  }
  p.program[0].push_back({Instr::Kind::kWait, 1, awaited});
  p.program[0].push_back({Instr::Kind::kRun, 1, 0});
  p.placements.push_back({1, 0, 0, 8, task_us * 8, task_us * 9});
  p.program[1].push_back({Instr::Kind::kRun, 2, 0});
  p.placements.push_back({2, 0, 1, 8, task_us * 8, task_us * 9});
  p.tasks_per_veu = {9, 9};
  return p;
}

// A wait right after a vEU's share of an op takes rTasks of that op from
// the vEU it waits for, where they are predicted worth taking and end by
// the awaited count; nothing else does.
TEST(PlanBalance, NamesTheRunsAWaitMayTakeFrom) {
  const PlanBalance worth(balance_plan(5.0));
  EXPECT_EQ(worth.runs(), 1u);
  EXPECT_EQ(worth.waits(), 1u);
  EXPECT_TRUE(PlanBalance(balance_plan(PlanBalance::kMinTaskUs / 4)).empty()) << "rTasks too short to take";
  EXPECT_TRUE(PlanBalance(balance_plan(5.0, 4)).empty()) << "the awaited count comes before the run ends";
  Plan other = balance_plan(5.0);  // vEU 0 last ran another op before its wait
  other.program[0].insert(other.program[0].begin() + 8, {Instr::Kind::kRun, 3, 0});
  other.placements.push_back({3, 0, 0, 8, 40, 45});
  other.placements[16].index = 9;
  other.tasks_per_veu[0] = 10;
  EXPECT_TRUE(PlanBalance(other).empty()) << "the waiter has not run an rTask of that op";
  Plan one;
  one.program.resize(1);
  one.program[0].push_back({Instr::Kind::kRun, 0, 0});
  EXPECT_TRUE(PlanBalance(one).empty());
}

// vEU 1's first rTask holds until vEU 0 has taken one of its others, so
// every run takes some, and each taken rTask lingers before it counts
// itself: each rTask still runs exactly once per run, and step 1 (after
// vEU 0's wait), step 2 (after vEU 1's share) and the caller (after the
// run) see every one of them done. In a traced run nothing is taken (the
// hold times out).
TEST(PlanBalance, AWaiterTakesRTasksThatEachRunOnce) {
  std::atomic<int> ran[16] = {};
  std::atomic<int> taken_by_caller{0};
  std::thread::id caller = std::this_thread::get_id();
  int run_no = 0, step1_wrong = 0, step2_wrong = 0;
  bool traced = false;
  auto spin_for = [](std::chrono::microseconds d, const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  };
  FnOp work(16, [&](int64_t t) {
    if (t >= 8 && std::this_thread::get_id() == caller) {
      taken_by_caller.fetch_add(1, std::memory_order_relaxed);
      spin_for(std::chrono::microseconds(200), [] { return false; });
    } else if (t == 8) {
      spin_for(std::chrono::milliseconds(traced ? 20 : 2000),
               [&] { return taken_by_caller.load(std::memory_order_relaxed) > 0; });
    }
    ran[t].fetch_add(1, std::memory_order_relaxed);
  });
  FnOp check0(1, [&](int64_t) {
    for (auto& r : ran) step1_wrong += r.load(std::memory_order_relaxed) != run_no;
  });
  FnOp check1(1, [&](int64_t) {
    for (int t = 8; t < 16; ++t) step2_wrong += ran[t].load(std::memory_order_relaxed) != run_no;
  });
  const std::vector<StepArgs> steps = {
      {&work, nullptr, nullptr}, {&check0, nullptr, nullptr}, {&check1, nullptr, nullptr}};
  const Plan plan = balance_plan(5.0);
  PlanBalance balance(plan);
  ASSERT_FALSE(balance.empty());
  CpuVDevice device(2, 64, false);
  int64_t taken = 0, runs_without = 0;
  for (run_no = 1; run_no <= 30; ++run_no) {
    taken_by_caller.store(0);
    device.run(plan, steps, false, &balance);
    taken += device.taken();
    runs_without += device.taken() == 0;
    EXPECT_EQ(device.taken(), taken_by_caller.load()) << "run " << run_no;
    for (int t = 0; t < 16; ++t) ASSERT_EQ(ran[t].load(), run_no) << "rTask " << t << ", run " << run_no;
  }
  EXPECT_EQ(step1_wrong, 0);
  EXPECT_EQ(step2_wrong, 0);
  EXPECT_EQ(runs_without, 0);
  EXPECT_GE(taken, 30);
  // The same device and balance, a run traced: every rTask where placed.
  std::vector<std::pair<int64_t, int64_t>> spans(plan.placements.size());
  traced = true;
  taken_by_caller.store(0);
  device.set_trace(&spans);
  device.run(plan, steps, false, &balance);
  device.set_trace(nullptr);
  EXPECT_EQ(device.taken(), 0);
  EXPECT_EQ(taken_by_caller.load(), 0);
  for (int t = 0; t < 16; ++t) EXPECT_EQ(ran[t].load(), run_no) << "rTask " << t << ", traced run";
  EXPECT_EQ(step1_wrong + step2_wrong, 0);
}

}  // namespace
}  // namespace tessera
