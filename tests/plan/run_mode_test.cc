// A Plan's runs on the calling thread alone (devices/cpu/run_mode.h):
// plan_one_thread_order is an interleaving the Plan's waits allow, so the
// zoo's outputs are bitwise the Plan's on 2 and 4 vEUs, for list
// schedules and random valid ones; and the RunModeChooser, fed made-up run times,
// goes alone only where that is faster on average, comes back when the
// Plan is, and backs off its probes.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "devices/cpu/engine.h"
#include "devices/cpu/run_mode.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

using testing_util::compile_zoo;
using testing_util::expect_bitwise;

// Every rTask once; each vEU's in its list's order; none before the counts
// its waits name (the final count of a list published at its end).
void expect_valid_order(const Plan& plan, const std::vector<std::pair<int32_t, int64_t>>& order,
                        const std::string& what) {
  ASSERT_EQ(order.size(), plan.placements.size()) << what;
  std::map<std::pair<int32_t, int64_t>, size_t> at;
  for (size_t i = 0; i < order.size(); ++i) ASSERT_TRUE(at.emplace(order[i], i).second) << what << ": twice";
  for (int u = 0; u < plan.veus; ++u) {
    // Position in `order` of vEU u's k-th rTask.
    std::vector<size_t> pos;
    for (const Instr& in : plan.program[static_cast<size_t>(u)])
      if (in.kind == Instr::Kind::kRun) pos.push_back(at.at({in.a, in.b}));
    for (size_t k = 1; k < pos.size(); ++k) EXPECT_LT(pos[k - 1], pos[k]) << what << ": vEU " << u << " out of order";
  }
  for (int u = 0; u < plan.veus; ++u) {
    int64_t done = 0;
    for (const Instr& in : plan.program[static_cast<size_t>(u)]) {
      if (in.kind == Instr::Kind::kRun) ++done;
      if (in.kind != Instr::Kind::kWait) continue;
      // The next rTask of u must come after vEU in.a's first in.b rTasks.
      const std::vector<Instr>& mine = plan.program[static_cast<size_t>(u)];
      size_t next = SIZE_MAX;
      int64_t seen = 0;
      for (const Instr& x : mine)
        if (x.kind == Instr::Kind::kRun && seen++ == done) next = at.at({x.a, x.b});
      if (next == SIZE_MAX) continue;  // nothing after this wait
      int64_t k = 0;
      for (const Instr& x : plan.program[static_cast<size_t>(in.a)]) {
        if (x.kind == Instr::Kind::kRun && k++ < in.b) {
          EXPECT_LT(at.at({x.a, x.b}), next) << what << ": vEU " << u << " passed a wait on vEU " << in.a;
        }
      }
    }
  }
}

std::vector<Tensor> run_with(std::unique_ptr<Program> p, bool alone, const std::map<std::string, Tensor>& inputs) {
  EngineOptions o;
  o.executor = Executor::kPlan;
  o.adapt = false;
  o.always_alone = alone;
  auto s = Engine::create(std::move(p), o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return {};
  for (int rep = 0; rep < 2; ++rep) {
    (*s)->poison_arena();
    for (const Value* in : (*s)->inputs()) EXPECT_TRUE((*s)->set_input(in->name, inputs.at(in->name)).ok());
    EXPECT_TRUE((*s)->run().wait().ok());
    EXPECT_EQ((*s)->ran_alone(), alone);
  }
  std::vector<Tensor> outs;
  for (size_t i = 0; i < (*s)->outputs().size(); ++i) outs.push_back((*s)->output(i));
  return outs;
}

class RunAlone : public ::testing::TestWithParam<std::string> {};

TEST_P(RunAlone, BitwiseThePlansOutputsOnListAndRandomSchedules) {
  const std::string model = GetParam();
  for (Policy policy : {Policy::kCriticalPath, Policy::kRandom}) {
    for (int veus : {2, 4}) {
      if (testing_util::sweep_ends_only(model) &&
          !(policy == Policy::kCriticalPath && veus == 2) && !(policy == Policy::kRandom && veus == 4))
        continue;
      const std::string what = model + " " + std::string(policy_name(policy)) + " veus=" + std::to_string(veus);
      CompileConfig co;
      co.build_plan = true;
      co.schedule.veus = veus;
      co.schedule.policy = policy;
      co.schedule.seed = static_cast<uint64_t>(veus);
      std::map<std::string, Tensor> inputs;
      auto a = compile_zoo(model, co, &inputs);
      auto b = compile_zoo(model, co, &inputs);
      ASSERT_TRUE(a.ok() && b.ok()) << what;
      expect_valid_order(*(*a)->plan, plan_one_thread_order(*(*a)->plan), what);
      expect_bitwise(run_with(std::move(*b), true, inputs), run_with(std::move(*a), false, inputs), what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, RunAlone, ::testing::ValuesIn(testing_util::kZooModels),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(RunAlone, AWaitCycleHasNoOrder) {
  Plan p;
  p.veus = 2;
  p.tasks_per_veu = {1, 1};
  p.program = {{{Instr::Kind::kWait, 1, 1}, {Instr::Kind::kRun, 0, 0}},
               {{Instr::Kind::kWait, 0, 1}, {Instr::Kind::kRun, 0, 1}}};
  EXPECT_TRUE(plan_one_thread_order(p).empty());
}

// Two vEUs, each predicted to wait 10 µs of a 100 µs run.
RunModeChooser chooser() { return RunModeChooser({10, 10}, 100); }

// Feeds `n` runs of the mode the chooser asks for: plan runs take `plan_us`
// (every `stall_every`-th of them with vEU 1 waiting half the run), alone
// runs `alone_us`. Returns the modes it asked for ('P' or 'A').
std::string feed(RunModeChooser& c, int n, double plan_us, double alone_us, int stall_every) {
  std::string modes;
  int plan_runs = 0;
  for (int i = 0; i < n; ++i) {
    if (c.alone()) {
      modes += 'A';
      c.record(alone_us, {});
      continue;
    }
    modes += 'P';
    const bool stall = stall_every > 0 && ++plan_runs % stall_every == 0;
    const double run = stall ? 4 * plan_us : plan_us;
    const std::vector<double> waits = {10, stall ? run / 2 : 10};
    c.record(run, waits);
  }
  return modes;
}

TEST(RunModeChooser, AQuietHostStaysOnThePlan) {
  RunModeChooser c = chooser();
  EXPECT_EQ(feed(c, 500, 100, 180, 0), std::string(500, 'P'));
  // A stall now and then (1 in 10 runs: fewer than 3 of any 8) is no reason to probe.
  EXPECT_EQ(feed(c, 500, 100, 180, 10), std::string(500, 'P'));
}

TEST(RunModeChooser, GoesAloneWhereThatIsFasterOnAverage) {
  // Every other plan run loses its core for 3 runs' time: mean 250 µs
  // against 180 alone, though the median plan run (100) beats alone.
  RunModeChooser c = chooser();
  const std::string m = feed(c, 200, 100, 180, 2);
  ASSERT_GE(m.find('A'), 4u);
  const size_t settled = m.find("AAAAAAAAAAAAAAAA");
  ASSERT_NE(settled, std::string::npos) << m;
  EXPECT_LT(settled, 12u) << m;
  EXPECT_GT(c.settled_alone_runs(), 100) << m;
  // It still probes the Plan now and then, less often while alone keeps winning.
  EXPECT_NE(m.find("PPPPPPPP", settled), std::string::npos) << m;
}

TEST(RunModeChooser, StaysOnThePlanWhereAloneIsSlowerAndBacksOff) {
  // Stalled runs on every other run, but alone takes 4x a plan run: the
  // probes lose, and come less and less often.
  RunModeChooser c = chooser();
  const std::string m = feed(c, 600, 100, 400, 2);
  std::vector<size_t> probes;
  for (size_t i = m.find('A'); i != std::string::npos; i = m.find('A', i + RunModeChooser::kAloneProbe))
    probes.push_back(i);
  ASSERT_GE(probes.size(), 3u) << m;
  EXPECT_EQ(m.substr(probes[0], RunModeChooser::kAloneProbe), std::string(RunModeChooser::kAloneProbe, 'A'));
  for (size_t i = 2; i < probes.size(); ++i) EXPECT_GT(probes[i] - probes[i - 1], probes[i - 1] - probes[i - 2]) << m;
  EXPECT_EQ(c.settled_alone_runs(), 0);
}

TEST(RunModeChooser, ComesBackToThePlanWhenTheHostDoes) {
  RunModeChooser c = chooser();
  feed(c, 50, 100, 180, 2);
  ASSERT_TRUE(c.alone());
  // The host holds again: the next Plan probe wins and the Plan stays.
  const std::string m = feed(c, 300, 100, 180, 0);
  const size_t back = m.find("PPPPPPPPP");
  ASSERT_NE(back, std::string::npos) << m;
  EXPECT_EQ(m.find('A', back), std::string::npos) << m;
}

}  // namespace
}  // namespace tessera
