#include "devices/cpu/cpu_vdevice.h"

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

}  // namespace
}  // namespace tessera
