// The scheduler on task graphs built by hand, as another backend would give
// it one: no model, no rKernels. Independent ops spread, chains stay
// together, a split op's parts balance, dear crossings keep data where it
// was made; and on random graphs every policy's Plan runs every rTask once
// with its dependencies covered.
#include <gtest/gtest.h>

#include <random>

#include "compiler/plan.h"

namespace tessera {
namespace {

using Op = TaskGraph::Op;
using In = TaskGraph::Input;

// An op of `tasks` rTasks reading the whole output of each of `from`.
Op op(int64_t tasks, std::vector<int> from = {}, double bytes = 4096) {
  Op o;
  o.tasks = tasks;
  for (int q : from) {
    o.inputs.push_back({q, bytes, Access::kWhole});
    o.preds.push_back(q);
  }
  return o;
}

Plan plan_of(const TaskGraph& g, const std::vector<double>& cost, int veus, Policy policy,
             const VeuCosts* costs = nullptr) {
  EXPECT_TRUE(g.validate().ok()) << g.validate().to_string();
  ScheduleOptions o;
  o.veus = veus;
  o.policy = policy;
  o.costs = costs;
  Result<Plan> p = schedule(g, cost, o);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return {};
  EXPECT_TRUE(plan_validate(g, *p).ok()) << plan_validate(g, *p).to_string();
  return *p;
}

int veu_of(const Plan& p, int step, int64_t task) {
  for (const TaskPlacement& t : p.placements)
    if (t.step == step && t.task == task) return t.veu;
  return -1;
}

TEST(TaskGraphSchedule, IndependentOpsSpreadAndChainsStayTogether) {
  TaskGraph g;
  g.ops = {op(1), op(1)};
  for (Policy policy : {Policy::kWavefront, Policy::kCriticalPath}) {
    SCOPED_TRACE(policy_name(policy));
    Plan p = plan_of(g, {10, 10}, 2, policy);
    EXPECT_NE(veu_of(p, 0, 0), veu_of(p, 1, 0));
    EXPECT_NEAR(p.predicted_us, 10, 1e-9);
    EXPECT_EQ(p.waits, 0);
  }
  TaskGraph chain;
  chain.ops = {op(1), op(1, {0}), op(1, {1})};
  for (Policy policy : {Policy::kWavefront, Policy::kCriticalPath}) {
    SCOPED_TRACE(policy_name(policy));
    Plan p = plan_of(chain, {5, 5, 5}, 2, policy);
    EXPECT_EQ(veu_of(p, 0, 0), veu_of(p, 1, 0));
    EXPECT_EQ(veu_of(p, 1, 0), veu_of(p, 2, 0));
    EXPECT_EQ(p.waits, 0);
    EXPECT_NEAR(p.predicted_us, 15, 1e-9);
  }
}

// A fork of 4 equal rTasks between two light ops: two per vEU, so the
// makespan is the light ops, two rTasks and the hand-offs between vEUs.
TEST(TaskGraphSchedule, ASplitOpBalancesAcrossVeus) {
  TaskGraph g;
  g.ops = {op(1), op(4, {0}), op(1, {1})};
  const std::vector<double> cost = {1, 10, 1};
  for (Policy policy : {Policy::kWavefront, Policy::kCriticalPath}) {
    SCOPED_TRACE(policy_name(policy));
    Plan p = plan_of(g, cost, 2, policy);
    EXPECT_EQ(p.tasks_per_veu[0] + p.tasks_per_veu[1], 6);
    int on0 = 0;
    for (int64_t t = 0; t < 4; ++t) on0 += veu_of(p, 1, t) == 0;
    EXPECT_EQ(on0, 2);
    EXPECT_GE(p.predicted_us, 22);
    EXPECT_LE(p.predicted_us, 22 + 2 * kDefaultHandoffUs + 1e-9);
    EXPECT_GT(p.waits, 0);
  }
}

// Reading the producer's 1 MB output on the other vEU costs more than
// running the reader's second rTask after its first: with such a cost
// model the reader's rTasks stay where the data is; free crossing splits.
TEST(TaskGraphSchedule, DearCrossingsKeepDataWhereItWasMade) {
  TaskGraph g;
  g.ops = {op(1), op(2, {0}, 1 << 20)};
  const std::vector<double> cost = {5, 3};
  VeuCosts dear = VeuCosts::uniform(2);
  dear.sizes_kb = {1024};
  dear.crossing_us_per_kb = {{0, 0.01, 0.01, 0}};  // 10 µs per MB across vEUs
  dear.crossing_free = false;
  for (Policy policy : {Policy::kWavefront, Policy::kCriticalPath}) {
    SCOPED_TRACE(policy_name(policy));
    Plan kept = plan_of(g, cost, 2, policy, &dear);
    EXPECT_EQ(veu_of(kept, 1, 0), veu_of(kept, 0, 0));
    EXPECT_EQ(veu_of(kept, 1, 1), veu_of(kept, 0, 0));
    EXPECT_NEAR(kept.predicted_us, 11, 1e-9);
    Plan split = plan_of(g, cost, 2, policy);
    EXPECT_NE(veu_of(split, 1, 0), veu_of(split, 1, 1));
  }
}

TEST(TaskGraphSchedule, MalformedGraphsAndPlansAreRefused) {
  TaskGraph forward;
  forward.ops = {op(1, {1}), op(1)};
  EXPECT_FALSE(forward.validate().ok());
  TaskGraph empty_op;
  empty_op.ops = {op(0)};
  EXPECT_FALSE(empty_op.validate().ok());
  TaskGraph g;
  g.ops = {op(2), op(1, {0})};
  ScheduleOptions o;
  o.veus = 2;
  EXPECT_FALSE(schedule(g, {1}, o).ok());  // one cost per op
  Plan p = plan_of(g, {1, 1}, 2, Policy::kCriticalPath);
  Plan missing = p;
  for (auto& list : missing.program)
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].kind == Instr::Kind::kRun && list[i].a == 1) list.erase(list.begin() + static_cast<long>(i));
  EXPECT_FALSE(plan_validate(g, missing).ok());
}

// Random DAGs of up to 40 ops, 1 to 6 rTasks each, on 1 to 4 vEUs: every
// policy's Plan validates (every rTask once, every dependency covered by a
// wait or program order, no wait cycle), its prediction is at least the
// critical path's work, and building it twice gives the same Plan.
TEST(TaskGraphSchedule, RandomGraphsGiveValidDeterministicPlans) {
  std::mt19937_64 rng(20261125);
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE(trial);
    TaskGraph g;
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<double> cost;
    for (int s = 0; s < n; ++s) {
      std::vector<int> from;
      for (int q = 0; q < s; ++q)
        if (rng() % 5 == 0) from.push_back(q);
      g.ops.push_back(op(1 + static_cast<int64_t>(rng() % 6), from));
      cost.push_back(0.5 + static_cast<double>(rng() % 100) / 10);
    }
    // Longest chain of single-rTask costs: a lower bound on any makespan.
    std::vector<double> longest(static_cast<size_t>(n), 0);
    double bound = 0;
    for (int s = 0; s < n; ++s) {
      for (int q : g.ops[static_cast<size_t>(s)].preds)
        longest[static_cast<size_t>(s)] = std::max(longest[static_cast<size_t>(s)], longest[static_cast<size_t>(q)]);
      longest[static_cast<size_t>(s)] += cost[static_cast<size_t>(s)];
      bound = std::max(bound, longest[static_cast<size_t>(s)]);
    }
    const int veus = 1 + static_cast<int>(rng() % 4);
    for (Policy policy : {Policy::kWavefront, Policy::kCriticalPath, Policy::kRandom}) {
      Plan a = plan_of(g, cost, veus, policy);
      Plan b = plan_of(g, cost, veus, policy);
      ASSERT_EQ(a.placements.size(), b.placements.size());
      for (size_t i = 0; i < a.placements.size(); ++i) {
        EXPECT_EQ(a.placements[i].veu, b.placements[i].veu);
        EXPECT_EQ(a.placements[i].step, b.placements[i].step);
      }
      EXPECT_GE(a.predicted_us, bound - 1e-9) << policy_name(policy);
    }
  }
}

}  // namespace
}  // namespace tessera
