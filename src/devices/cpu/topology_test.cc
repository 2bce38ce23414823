#include "devices/cpu/topology.h"

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

}  // namespace
}  // namespace tessera
