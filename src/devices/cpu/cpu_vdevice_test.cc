#include "devices/cpu/cpu_vdevice.h"

#include "topology/cpu_topology.h"

#include <gtest/gtest.h>
#include <sched.h>

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

}  // namespace
}  // namespace tessera
