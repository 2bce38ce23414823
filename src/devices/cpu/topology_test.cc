#include "devices/cpu/topology.h"

#include "devices/cpu/cpu_vdevice.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <set>
#include <thread>

namespace tessera {
namespace {

TEST(Topology, PlacementOrderCoversAllowedPusOncePerCoreFirst) {
  const CpuTopology& t = cpu_topology();
  ASSERT_GE(t.cores, 1);
  ASSERT_GE(t.pus, t.cores);
  ASSERT_EQ(static_cast<int>(t.pu_order.size()), t.pus);
  std::set<unsigned> unique(t.pu_order.begin(), t.pu_order.end());
  EXPECT_EQ(unique.size(), t.pu_order.size()) << "a PU appears twice";
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  for (unsigned pu : t.pu_order) EXPECT_TRUE(CPU_ISSET(pu, &allowed)) << "PU " << pu << " is not ours to use";
  EXPECT_EQ(CPU_COUNT(&allowed), t.pus);
  EXPECT_FALSE(t.summary.empty());
}

TEST(Topology, PinningMovesTheThread) {
  const CpuTopology& t = cpu_topology();
  for (int slot = 0; slot < t.pus; ++slot) {
    std::thread th([&] {
      ASSERT_TRUE(pin_current_thread(slot));
      cpu_set_t set;
      ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof set, &set), 0);
      EXPECT_EQ(CPU_COUNT(&set), 1);
      EXPECT_TRUE(CPU_ISSET(t.pu_order[static_cast<size_t>(slot)], &set));
      std::this_thread::yield();
      EXPECT_EQ(sched_getcpu(), static_cast<int>(t.pu_order[static_cast<size_t>(slot)]));
    });
    th.join();
  }
}

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

}  // namespace
}  // namespace tessera
