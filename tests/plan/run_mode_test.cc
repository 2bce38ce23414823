// A Plan's runs on the calling thread alone, and a 2-vEU Plan's runs with
// its lists exchanged (devices/cpu/run_mode.h): plan_one_thread_order is
// an interleaving the Plan's waits allow, so the zoo's outputs are bitwise
// the Plan's on 2 and 4 vEUs, for list schedules and random valid ones,
// and so are a 2-vEU Plan's run exchanged, and runs in which waiting vEUs
// take rTasks (PlanBalance). The RunModeChooser, fed made-up
// run times, goes alone only where that is faster on average, comes back
// when the Plan is, and backs off its probes; the ListExchangeChooser
// probes nothing on an even host, exchanges the lists while that is
// faster, follows the host back, and backs off probes that lose. A 1-vEU
// Plan given a spare PU gives its bits there too; the SpareCoreChooser
// probes nothing on an even host (time slices lost now and then are no
// slow PU), moves the list to the faster PU and back, and backs off
// probes that lose.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "devices/cpu/engine.h"
#include "devices/cpu/run_mode.h"
#include "tests/common/zoo_util.h"
#include "topology/cpu_topology.h"

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

enum class Way { kPlaced, kAlone, kAloneOnWorker, kExchanged, kBalanced };

std::vector<Tensor> run_with(std::unique_ptr<Program> p, Way way, const std::map<std::string, Tensor>& inputs,
                             int threads = 0) {
  EngineOptions o;
  o.executor = Executor::kPlan;
  o.threads = threads;
  o.adapt = false;
  o.balance = way == Way::kBalanced;
  o.always_alone = way == Way::kAlone || way == Way::kAloneOnWorker;
  o.alone_veu = way == Way::kAloneOnWorker ? 1 : 0;
  o.always_exchanged = way == Way::kExchanged;
  auto s = Engine::create(std::move(p), o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return {};
  // Balanced runs take rTasks only as the vEUs' timing falls: more runs,
  // each compared.
  std::vector<Tensor> first;
  int64_t taken = 0;
  for (int rep = 0; rep < (way == Way::kBalanced ? 8 : 2); ++rep) {
    (*s)->poison_arena();
    for (const Value* in : (*s)->inputs()) EXPECT_TRUE((*s)->set_input(in->name, inputs.at(in->name)).ok());
    EXPECT_TRUE((*s)->run().wait().ok());
    EXPECT_EQ((*s)->ran_alone(), way == Way::kAlone || way == Way::kAloneOnWorker);
    EXPECT_EQ((*s)->ran_exchanged(), way == Way::kExchanged);
    std::vector<double> waits;
    (*s)->wait_ms(waits);
    EXPECT_EQ(waits.size(), static_cast<size_t>((*s)->program().plan->veus));  // the Plan's vEUs, no spare
    if (way != Way::kBalanced) {
      EXPECT_EQ((*s)->rtasks_taken(), 0);
      continue;
    }
    taken += (*s)->rtasks_taken();
    std::vector<Tensor> outs;
    for (size_t i = 0; i < (*s)->outputs().size(); ++i) outs.push_back((*s)->output(i));
    if (rep == 0) first = std::move(outs);
    else expect_bitwise(outs, first, "balanced run " + std::to_string(rep));
  }
  if (way == Way::kBalanced) std::printf("  balanced: %lld rTasks taken in 8 runs\n", static_cast<long long>(taken));
  std::vector<Tensor> outs;
  for (size_t i = 0; i < (*s)->outputs().size(); ++i) outs.push_back((*s)->output(i));
  return outs;
}

class RunAlone : public ::testing::TestWithParam<std::string> {};

TEST_P(RunAlone, BitwiseThePlansOutputsOnListAndRandomSchedules) {
  const std::string model = GetParam();
  for (Policy policy : {Policy::kCriticalPath, Policy::kRandom}) {
    for (int veus : {2, 4}) {
      if (testing_util::kSweepEndsOnly &&
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
      const std::vector<Tensor> placed = run_with(std::move(*a), Way::kPlaced, inputs);
      expect_bitwise(run_with(std::move(*b), Way::kAlone, inputs), placed, what + " alone");
      if (veus == 2) {
        auto d = compile_zoo(model, co, &inputs);
        ASSERT_TRUE(d.ok()) << what;
        expect_bitwise(run_with(std::move(*d), Way::kAloneOnWorker, inputs), placed, what + " alone on vEU 1's thread");
        auto c = compile_zoo(model, co, &inputs);
        ASSERT_TRUE(c.ok()) << what;
        expect_bitwise(run_with(std::move(*c), Way::kExchanged, inputs), placed, what + " exchanged");
      }
      auto e = compile_zoo(model, co, &inputs);
      ASSERT_TRUE(e.ok()) << what;
      expect_bitwise(run_with(std::move(*e), Way::kBalanced, inputs), placed, what + " balanced");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, RunAlone, ::testing::ValuesIn(testing_util::kZooModels),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(SpareCore, A1VeuPlansListOnTheSparePuGivesItsBits) {
  if (cpu_topology().pus < 2) GTEST_SKIP() << "one PU: no spare to run a 1-vEU Plan on";
  for (const std::string model : {"mlp", "bert_tiny", "add_chain"}) {
    CompileConfig co;
    co.build_plan = true;
    co.schedule.veus = 1;
    std::map<std::string, Tensor> inputs;
    auto a = compile_zoo(model, co, &inputs);
    auto b = compile_zoo(model, co, &inputs);
    ASSERT_TRUE(a.ok() && b.ok()) << model;
    const std::vector<Tensor> placed = run_with(std::move(*a), Way::kPlaced, inputs, 2);
    expect_bitwise(run_with(std::move(*b), Way::kExchanged, inputs, 2), placed, model + " on the spare PU");
  }
}

// A Session times each run and hands the times to its device (ran()):
// from the first call on, the engine's choosers take those, not their own
// clock reads. Told that runs on the caller's PU take 70 µs, then 100,
// and on the spare 70, the spare core chooser moves the list there.
TEST(SpareCore, TheChoosersTakeTheCallersTimes) {
  if (cpu_topology().pus < 2) GTEST_SKIP() << "one PU: no spare to run a 1-vEU Plan on";
  CompileConfig co;
  co.build_plan = true;
  co.schedule.veus = 1;
  std::map<std::string, Tensor> inputs;
  auto p = compile_zoo("add_chain", co, &inputs);
  ASSERT_TRUE(p.ok());
  EngineOptions o;
  o.executor = Executor::kPlan;
  o.threads = 2;
  o.adapt = true;
  auto s = Engine::create(std::move(*p), o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  for (const Value* in : (*s)->inputs()) ASSERT_TRUE((*s)->set_input(in->name, inputs.at(in->name)).ok());
  std::string ways;
  int64_t now = 1000;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE((*s)->run().wait().ok());
    const bool spare = (*s)->ran_exchanged();
    ways += spare ? 'S' : 'C';
    const int64_t start = now;
    now += spare || i < 50 ? 70'000 : 100'000;
    (*s)->ran(start, now);
  }
  EXPECT_EQ(ways.substr(0, 50), std::string(50, 'C')) << ways;
  EXPECT_NE(ways.find(std::string(2 * SpareCoreChooser::kProbe, 'S'), 50), std::string::npos) << ways;
}

// A Plan the measured choice runs alone first (Plan::alone_first): adapting,
// its first kAloneBackoff runs go alone, then the Plan is probed; not
// adapting, every run goes alone. Its bits are the Plan's either way.
TEST(RunAlone, AnAloneFirstPlanRunsAloneFromItsFirstRun) {
  CompileConfig co;
  co.build_plan = true;
  co.schedule.veus = 2;
  co.schedule.policy = Policy::kCriticalPath;
  std::map<std::string, Tensor> inputs;
  auto placed_p = compile_zoo("nasnet_like", co, &inputs);
  ASSERT_TRUE(placed_p.ok());
  const std::vector<Tensor> placed = run_with(std::move(*placed_p), Way::kPlaced, inputs);
  for (bool adapt : {true, false}) {
    auto p = compile_zoo("nasnet_like", co, &inputs);
    ASSERT_TRUE(p.ok());
    (*p)->plan->alone_first = true;
    EngineOptions o;
    o.executor = Executor::kPlan;
    o.adapt = adapt;
    auto s = Engine::create(std::move(*p), o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    std::string ways;
    for (int run = 0; run < RunModeChooser::kAloneBackoff + 1; ++run) {
      (*s)->poison_arena();
      for (const Value* in : (*s)->inputs()) ASSERT_TRUE((*s)->set_input(in->name, inputs.at(in->name)).ok());
      ASSERT_TRUE((*s)->run().wait().ok());
      ways += (*s)->ran_alone() ? 'A' : 'P';
      std::vector<Tensor> outs;
      for (size_t i = 0; i < (*s)->outputs().size(); ++i) outs.push_back((*s)->output(i));
      expect_bitwise(outs, placed, "nasnet_like alone first, run " + std::to_string(run));
    }
    EXPECT_EQ(ways, std::string(RunModeChooser::kAloneBackoff, 'A') + (adapt ? 'P' : 'A')) << "adapt " << adapt;
  }
}

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

// Feeds `n` runs of the mode the chooser asks for: alone runs take
// `alone_us`, plan runs what `plan_run(k)` says for the k-th of them (its
// time and each vEU's wait). Returns the modes it asked for ('P' or 'A').
template <typename PlanRun>
std::string feed_runs(RunModeChooser& c, int n, double alone_us, PlanRun plan_run) {
  std::string modes;
  int plan_runs = 0;
  for (int i = 0; i < n; ++i) {
    if (c.alone()) {
      modes += 'A';
      c.record(alone_us, {});
      continue;
    }
    modes += 'P';
    const auto [run, waits] = plan_run(++plan_runs);
    c.record(run, waits);
  }
  return modes;
}

// As feed_runs: plan runs take `plan_us`, every `stall_every`-th of them
// with vEU 1 waiting half the run.
std::string feed(RunModeChooser& c, int n, double plan_us, double alone_us, int stall_every) {
  return feed_runs(c, n, alone_us, [&](int k) {
    const bool stall = stall_every > 0 && k % stall_every == 0;
    const double run = stall ? 4 * plan_us : plan_us;
    return std::pair{run, std::vector<double>{10, stall ? run / 2 : 10}};
  });
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
  // The probe, then kAloneBackoff runs alone before the Plan's first probe.
  const size_t settled = m.find(std::string(RunModeChooser::kAloneProbe + RunModeChooser::kAloneBackoff, 'A'));
  ASSERT_NE(settled, std::string::npos) << m;
  EXPECT_LT(settled, 12u) << m;
  EXPECT_GT(c.settled_alone_runs(), 100) << m;
  // It still probes the Plan now and then, less often while alone keeps winning.
  EXPECT_NE(m.find("PPPPPPPP", settled), std::string::npos) << m;
}

TEST(RunModeChooser, GoesAloneOnThePuWhoseListWaited) {
  // Stalls where vEU 1 waits half of each stalled run (its partner's PU
  // slowed): alone goes on vEU 1's PU where any PU may take it, else on
  // the caller's; and with the lists exchanged, vEU 1's list ran on PU 0.
  for (int exchanged : {0, 1}) {
    for (bool any_pu : {true, false}) {
      RunModeChooser c({10, 10}, 100, any_pu);
      int runs = 0;
      while (!c.alone() && runs++ < 64) {
        const std::vector<double> waits = {10, runs % 2 == 0 ? 200.0 : 10};
        c.record(runs % 2 == 0 ? 400 : 100, waits, exchanged == 1);
      }
      ASSERT_TRUE(c.alone());
      EXPECT_EQ(c.alone_veu(), any_pu ? 1 - exchanged : 0) << "any_pu " << any_pu << " exchanged " << exchanged;
    }
  }
}

// A host that runs the two vEUs in turns on one core: every list's
// rTasks take twice their time and the waits stay as predicted (scaled
// with the run), so no run is stalled by its waits. Alone, one thread has
// the core to itself and beats the Plan: it goes alone. Lists slower by
// less than kInflated (a prediction a little off) are no reason to probe.
TEST(RunModeChooser, GoesAloneWhereEveryListRunsSlowAlike) {
  const auto run = [](RunModeChooser& c, int n, double plan_us, double alone_us) {
    std::string modes;
    for (int i = 0; i < n; ++i) {
      modes += c.alone() ? 'A' : 'P';
      if (c.alone()) c.record(alone_us, {});
      else c.record(plan_us, std::vector<double>{plan_us / 10, plan_us / 10});
    }
    return modes;
  };
  RunModeChooser slow = chooser();
  const std::string m = run(slow, 100, 200, 150);
  EXPECT_NE(m.find("AAAAAAAAAAAAAAAA"), std::string::npos) << m;
  EXPECT_GT(slow.settled_alone_runs(), 50) << m;
  const std::vector<double> predicted = {10, 10};
  EXPECT_TRUE(run_inflated(predicted, 100, 200, std::vector<double>{20, 20}));
  EXPECT_FALSE(run_inflated(predicted, 100, 200, std::vector<double>{20, 60}));  // one list ran as predicted
  RunModeChooser near = chooser();
  EXPECT_EQ(run(near, 200, 130, 120), std::string(200, 'P'));
}

TEST(RunModeChooser, StaysOnThePlanWhereAloneIsSlowerAndBacksOff) {
  // Stalled runs on every other run (plan mean 250 µs), but alone is
  // slower: 280 µs, a probe of kAloneProbe runs that loses; 400 µs, past
  // kHopeless at its first run, a probe of one run. Either way the probes
  // come less and less often.
  const std::pair<double, size_t> cases[] = {{280.0, size_t{RunModeChooser::kAloneProbe}}, {400.0, size_t{1}}};
  for (const auto& [alone_us, length] : cases) {
    RunModeChooser c = chooser();
    const std::string m = feed(c, 600, 100, alone_us, 2);
    std::vector<size_t> probes;
    for (size_t i = m.find('A'); i != std::string::npos; i = m.find('A', i + length)) probes.push_back(i);
    ASSERT_GE(probes.size(), 3u) << m;
    for (size_t p : probes) EXPECT_EQ(m.substr(p, length + 1), std::string(length, 'A') + "P") << alone_us << " " << m;
    for (size_t i = 2; i < probes.size(); ++i) EXPECT_GT(probes[i] - probes[i - 1], probes[i - 1] - probes[i - 2]) << m;
    EXPECT_EQ(c.settled_alone_runs(), 0);
  }
}

// A Plan the measured choice runs alone first (Plan::alone_first): its
// runs start alone; where the Plan runs faster, its first probe, after
// kAloneBackoff runs, takes over for good; where it does not, the runs
// stay alone, the probes coming less and less often.
TEST(RunModeChooser, AnAloneFirstPlanStartsAloneAndTakesThePlanWhereFaster) {
  RunModeChooser faster({10, 10}, 100, false, true);
  const std::string m = feed(faster, 200, 60, 100, 0);
  const std::string start = std::string(RunModeChooser::kAloneBackoff, 'A') + 'P';
  EXPECT_EQ(m.substr(0, start.size()), start) << m;
  EXPECT_EQ(m.find('A', start.size()), std::string::npos) << m;

  RunModeChooser slower({10, 10}, 100, false, true);
  const std::string s = feed(slower, 600, 130, 100, 0);
  std::vector<size_t> probes;
  for (size_t i = s.find('P'); i != std::string::npos; i = s.find('P', i + RunModeChooser::kPlanProbe))
    probes.push_back(i);
  ASSERT_GE(probes.size(), 3u) << s;
  EXPECT_EQ(probes[0], static_cast<size_t>(RunModeChooser::kAloneBackoff)) << s;
  for (size_t p : probes)
    EXPECT_EQ(s.substr(p, RunModeChooser::kPlanProbe + 1), std::string(RunModeChooser::kPlanProbe, 'P') + "A") << s;
  for (size_t i = 2; i < probes.size(); ++i) EXPECT_GT(probes[i] - probes[i - 1], probes[i - 1] - probes[i - 2]) << s;
  EXPECT_GT(slower.settled_alone_runs(), 500);

  EXPECT_FALSE(RunModeChooser({10, 10}, 100).alone()) << "other Plans start on their vEUs";
}

// A Plan chosen to start alone whose predicted timeline was traced while
// the host held its vEUs back (here: 64 µs predicted): alone it runs 37,
// the Plan 29 once the host lets the vEUs run at once, so the Plan takes
// over; when the host holds them back again, the Plan runs 64 as predicted
// (nothing stalls), and runs go alone again, the Plan probed now and then,
// because its runs are slower than those alone were.
TEST(RunModeChooser, APlanSlowerThanItsRunsAloneWereGoesAloneWithoutStalling) {
  RunModeChooser c({10, 10}, 64, false, true);
  const std::string free = feed(c, 40, 29, 37, 0);
  ASSERT_EQ(free.substr(free.size() - 10), std::string(10, 'P')) << free;
  const std::string held = feed(c, 200, 64, 37, 0);
  const std::string late = held.substr(100);
  EXPECT_GT(std::count(late.begin(), late.end(), 'A'), 80) << held;
}

// The first Plan runs after runs alone wake the other vEUs' threads and
// find their caches cold (here 200 µs against 70 after): a probe judged
// on all its runs would keep losing to alone's 100 µs; judged without its
// first kPlanProbeWarmup, the first probe takes the Plan.
TEST(RunModeChooser, APlanProbeLeavesOutItsWarmingRuns) {
  RunModeChooser c({10, 10}, 100, false, true);
  std::string modes;
  bool was_alone = true;
  int since_alone = 0;
  for (int i = 0; i < 60; ++i) {
    const bool alone = c.alone();
    modes += alone ? 'A' : 'P';
    if (alone) {
      c.record(100, {});
    } else {
      since_alone = was_alone ? 0 : since_alone + 1;
      const double us = since_alone < RunModeChooser::kPlanProbeWarmup ? 200 : 70;
      c.record(us, std::vector<double>{10, 10});
    }
    was_alone = alone;
  }
  const std::string start = std::string(RunModeChooser::kAloneBackoff, 'A');
  EXPECT_EQ(modes, start + std::string(modes.size() - start.size(), 'P')) << modes;
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

// As feed_runs, on a host that either lets the vEUs run at once (plan runs
// take `plan_us`, waiting as predicted) or holds vEU 1 back (`held`: every
// plan run takes `held_us`, vEU 0 waiting the difference).
std::string feed_host(RunModeChooser& c, int n, bool held, double plan_us, double held_us, double alone_us) {
  return feed_runs(c, n, alone_us, [&](int) {
    const double run = held ? held_us : plan_us;
    return std::pair{run, std::vector<double>{10 + run - plan_us, 10}};
  });
}

// The host begins to hold a vEU back after a long quiet stretch: every
// plan run now takes 250 µs against 220 alone. A probe alone judged on
// the last kWindow plan runs (five of them quiet, 100 µs: a mean of 156)
// would lose, and the Plan would stall on every run; judged on the plan
// runs since the first stall, it goes alone and stays.
TEST(RunModeChooser, AProbeAloneIsJudgedOnThePlanRunsSinceItStalled) {
  RunModeChooser c = chooser();
  ASSERT_EQ(feed_host(c, 40, false, 100, 250, 220), std::string(40, 'P'));
  const std::string m = feed_host(c, 400, true, 100, 250, 220);
  EXPECT_EQ(m.substr(0, RunModeChooser::kStalledOf + RunModeChooser::kAloneProbe),
            std::string(RunModeChooser::kStalledOf, 'P') + std::string(RunModeChooser::kAloneProbe, 'A'))
      << m;
  EXPECT_GT(std::count(m.begin(), m.end(), 'A'), 300) << m;  // the Plan's probes backing off
}

// Alone kept while the host still holds the vEUs back (the Plan 300 µs,
// alone 100): each probe of the Plan ends at its first timed run, after
// the kPlanProbeWarmup runs that wake the other vEUs, and the probes come
// less and less often.
TEST(RunModeChooser, APlanProbeOnAHostStillHeldEndsAtItsFirstTimedRun) {
  RunModeChooser c({10, 10}, 100, false, true);
  const std::string m = feed_host(c, 600, true, 100, 300, 100);
  const int length = RunModeChooser::kPlanProbeWarmup + 1;
  std::vector<size_t> probes;
  for (size_t i = m.find('P'); i != std::string::npos; i = m.find('P', i + static_cast<size_t>(length)))
    probes.push_back(i);
  ASSERT_GE(probes.size(), 4u) << m;
  EXPECT_EQ(probes[0], static_cast<size_t>(RunModeChooser::kAloneBackoff)) << m;
  for (size_t p : probes) EXPECT_EQ(m.substr(p, static_cast<size_t>(length) + 1), std::string(length, 'P') + "A") << m;
  for (size_t i = 2; i < probes.size(); ++i) EXPECT_GT(probes[i] - probes[i - 1], probes[i - 1] - probes[i - 2]) << m;
}

// A moment sends the session alone; the host lets the vEUs run at once
// again right after: the Plan is probed kAloneBackoff runs after going
// alone, and kept.
TEST(RunModeChooser, ComesBackSoonAfterAMomentThatSentItAlone) {
  static_assert(RunModeChooser::kAloneBackoff < RunModeChooser::kProbeBackoff, "back sooner than other probes");
  RunModeChooser c = chooser();
  feed_host(c, 40, false, 100, 400, 180);
  const std::string moment = feed_host(c, RunModeChooser::kStalledOf + RunModeChooser::kAloneProbe, true, 100, 400, 180);
  ASSERT_TRUE(c.alone()) << moment;
  const std::string after = feed_host(c, 100, false, 100, 400, 180);
  EXPECT_EQ(after, std::string(RunModeChooser::kAloneBackoff, 'A') + std::string(100 - RunModeChooser::kAloneBackoff, 'P'))
      << moment << " " << after;
}

// In `ways`, run by run after a long backoff with runs seconds apart: the
// other way (`mark`) probed within kProbeBackoff runs and kept to the end.
void expect_probed_and_kept(const std::string& ways, char mark) {
  EXPECT_LE(ways.find(mark), static_cast<size_t>(TwoWays::kProbeBackoff) + 1) << ways;
  EXPECT_EQ(ways.substr(ways.size() - 16), std::string(16, mark)) << "took over: " << ways;
}

// Alone kept, its probes of the Plan losing: the backoff grows to
// hundreds of runs. Runs then come seconds apart (a process serving now
// and then, or a benchmark running other systems in between): the next
// probe comes kMaxProbeGapNs after the last, not hundreds of runs later,
// and the Plan, faster again, takes over. Without run times the backoff is
// counted in runs alone.
TEST(RunModeChooser, ProbesAfterAWhileHoweverLongTheBackoff) {
  for (const bool timed : {true, false}) {
    RunModeChooser c({10, 10}, 100, false, true);  // starts alone
    int64_t now = 1;
    std::string m;
    const auto run = [&](double plan_us, double alone_us, int64_t gap_ns) {
      now += gap_ns;
      const bool alone = c.alone();
      m += alone ? 'A' : 'P';
      if (alone) c.record(alone_us, {}, false, timed ? now : 0);
      else c.record(plan_us, std::vector<double>{10, 10}, false, timed ? now : 0);
    };
    for (int i = 0; i < 2000; ++i) run(300, 100, 1000 * 1000);  // 1 ms apart, the Plan slower
    const size_t last = m.rfind('P');
    ASSERT_NE(last, std::string::npos) << m;
    const size_t first = m.find('P');
    ASSERT_GT(last - first, 1000u) << "probes backed off to long gaps: " << m;
    m.clear();
    for (int i = 0; i < 64; ++i) run(60, 100, 2 * RunModeChooser::kMaxProbeGapNs / 5);  // 2 s apart, the Plan faster
    if (timed) {
      expect_probed_and_kept(m, 'P');
    } else {
      EXPECT_EQ(m.find('P'), std::string::npos) << "counted in runs, the backoff has not passed: " << m;
    }
  }
}

// In `ways`, the probes (runs of `probe` `mark`s): at least `at_least` of
// them, each gap between them longer than the one before until the gaps
// reach `max_backoff`, and none longer than that plus a probe.
void expect_probes_back_off(const std::string& ways, char mark, int probe, int max_backoff, size_t at_least) {
  std::vector<size_t> probes;
  for (size_t i = ways.find(mark); i != std::string::npos; i = ways.find(mark, i + static_cast<size_t>(probe)))
    probes.push_back(i);
  ASSERT_GE(probes.size(), at_least) << ways;
  for (size_t i = 2; i < probes.size(); ++i) {
    const size_t gap = probes[i] - probes[i - 1], before = probes[i - 1] - probes[i - 2];
    EXPECT_LE(gap, static_cast<size_t>(max_backoff + probe)) << ways;
    if (before < static_cast<size_t>(max_backoff)) {
      EXPECT_GT(gap, before) << ways;
    }
  }
}

// List 0 busy the whole run, list 1 predicted to wait 40 of its 100 µs.
ListExchangeChooser exchanger() { return ListExchangeChooser({0, 40}, 100); }

// Feeds `n` runs the way the chooser asks: as placed they take `placed_us`,
// exchanged `exchanged_us`; in the slower way, list 1 waits the difference
// beyond its prediction (its partner's PU ran slow). Returns the ways it
// asked for ('P' placed, 'X' exchanged).
std::string feed(ListExchangeChooser& c, int n, double placed_us, double exchanged_us) {
  std::string ways;
  for (int i = 0; i < n; ++i) {
    const bool x = c.exchanged();
    ways += x ? 'X' : 'P';
    const double run = x ? exchanged_us : placed_us;
    const double other = x ? placed_us : exchanged_us;
    const double extra = std::max(0.0, run - other);
    const std::vector<double> waits = {0, 40 * run / 100 + extra};
    c.record(run, waits);
  }
  return ways;
}

TEST(ListExchangeChooser, AnEvenHostProbesNothing) {
  // Both ways alike, or the other 3 % faster: no list waits beyond its
  // prediction, so no run goes exchanged (a probe is a slow run).
  for (double exchanged_us : {100.0, 97.0}) {
    ListExchangeChooser c = exchanger();
    EXPECT_EQ(feed(c, 2000, 100, exchanged_us), std::string(2000, 'P'));
    EXPECT_EQ(c.switches(), 0);
  }
}

TEST(ListExchangeChooser, ExchangesTheListsWhileThatRunsFasterAndComesBack) {
  ListExchangeChooser c = exchanger();
  // The busier list's PU slows: placed 150 µs, exchanged 105. List 1
  // waits 45 µs beyond its prediction: after three such runs, a probe.
  std::string w = feed(c, 100, 150, 105);
  const size_t settled = w.find(std::string(2 * ListExchangeChooser::kProbe, 'X'));
  EXPECT_EQ(settled, static_cast<size_t>(ListExchangeChooser::kSkewedOf)) << w;
  EXPECT_EQ(c.switches(), 1) << w;
  EXPECT_EQ(w.find('P', settled), std::string::npos) << w;  // exchanged and even: no probes back
  // The slowdown moves to the other PU: placed is faster again, and the
  // chooser returns within a probe's backoff.
  w = feed(c, 200, 100, 150);
  const size_t back = w.find(std::string(2 * ListExchangeChooser::kProbe, 'P'));
  ASSERT_NE(back, std::string::npos) << w;
  EXPECT_LE(back, static_cast<size_t>(ListExchangeChooser::kProbeBackoff)) << w;
  EXPECT_EQ(c.switches(), 2) << w;
}

TEST(ListExchangeChooser, ProbesThatLoseBackOff) {
  // List 1 waits a fifth of each run beyond its prediction, yet the other
  // way is no faster (both PUs slow alike): every probe loses, and they
  // come less and less often, at least every kMaxBackoff runs.
  ListExchangeChooser c = exchanger();
  std::string w;
  for (int i = 0; i < 6000; ++i) {
    w += c.exchanged() ? 'X' : 'P';
    const std::vector<double> waits = {0, 0.4 * 100 + 0.2 * 100};
    c.record(100, waits);
  }
  EXPECT_EQ(c.switches(), 0) << w;
  expect_probes_back_off(w, 'X', ListExchangeChooser::kProbe, ListExchangeChooser::kMaxBackoff, 8);
}

// As RunModeChooser's: after probes that lost, runs seconds apart probe
// again 5 s after the last probe, and the faster way takes over.
TEST(ListExchangeChooser, ProbesAfterAWhileHoweverLongTheBackoff) {
  ListExchangeChooser c = exchanger();
  int64_t now = 1;
  std::string w;
  // List 1 waits a fifth of the run beyond its prediction, in the exchanged
  // way too while `both_skewed` (both PUs slow alike: its probes lose).
  const auto run = [&](double placed_us, double exchanged_us, int64_t gap_ns, bool both_skewed) {
    now += gap_ns;
    const bool x = c.exchanged();
    w += x ? 'X' : 'P';
    const double us = x ? exchanged_us : placed_us;
    const bool skew = !x || both_skewed;
    c.record(us, std::vector<double>{0, 0.4 * us + (skew ? 0.2 * us : 0)}, now);
  };
  for (int i = 0; i < 3000; ++i) run(100, 100, 1000 * 1000, true);  // 1 ms apart, both ways alike
  ASSERT_EQ(c.switches(), 0) << w;
  w.clear();
  for (int i = 0; i < 64; ++i) run(100, 60, 2 * TwoWays::kMaxProbeGapNs / 5, false);  // 2 s apart, exchanged faster
  expect_probed_and_kept(w, 'X');
  EXPECT_EQ(c.switches(), 1) << w;
}

// Feeds `n` runs the way the chooser asks: on the caller's PU they take
// `caller_us`, on the spare `spare_us`; every tenth run lost a time slice
// (50 times as long). Returns the PUs it asked for ('C' or 'S').
std::string feed(SpareCoreChooser& c, int n, double caller_us, double spare_us) {
  std::string ways;
  for (int i = 0; i < n; ++i) {
    const bool spare = c.spare();
    ways += spare ? 'S' : 'C';
    const double run = spare ? spare_us : caller_us;
    c.record(i % 10 == 9 ? 50 * run : run * (1 + 0.01 * (i % 3)));
  }
  return ways;
}

TEST(SpareCoreChooser, AnEvenHostProbesNothing) {
  // Both PUs alike, or the spare 10 % faster from the start (no slowdown
  // to see): time slices lost now and then are no slow PU, and no run
  // goes to the spare.
  for (double spare_us : {70.0, 63.0}) {
    SpareCoreChooser c;
    EXPECT_EQ(feed(c, 3000, 70, spare_us), std::string(3000, 'C'));
    EXPECT_EQ(c.switches(), 0);
  }
}

TEST(SpareCoreChooser, MovesToTheFasterPuAndBack) {
  SpareCoreChooser c;
  ASSERT_EQ(feed(c, 100, 70, 70), std::string(100, 'C'));
  // The caller's PU slows to 100 µs: once the last kWindow runs show it,
  // a probe, and the spare it is.
  std::string w = feed(c, 100, 100, 70);
  const size_t settled = w.find(std::string(2 * SpareCoreChooser::kProbe, 'S'));
  EXPECT_LE(settled, SpareCoreChooser::kWindow) << w;
  EXPECT_EQ(c.switches(), 1) << w;
  // On the spare, the caller's PU is probed now and then, and each probe
  // that loses doubles the wait: two probes of kProbe runs in these 100.
  EXPECT_EQ(std::count(w.begin() + static_cast<std::ptrdiff_t>(settled), w.end(), 'C'),
            2 * SpareCoreChooser::kProbe)
      << w;
  // Then the spare's PU slows and the caller's is back: back at the next
  // probe, which the two lost ones put 4 first backoffs after the last.
  w = feed(c, 200, 70, 100);
  const size_t back = w.find(std::string(2 * SpareCoreChooser::kProbe, 'C'));
  ASSERT_NE(back, std::string::npos) << w;
  EXPECT_LE(back, 4 * SpareCoreChooser::kProbeBackoff) << w;
  EXPECT_EQ(w.find('S', back), std::string::npos) << w;
  EXPECT_EQ(c.switches(), 2) << w;
}

TEST(SpareCoreChooser, ComesBackToTheCallersPuOnceItIsAsFast) {
  // A moment slows the caller's PU and the list moves to the spare, where
  // each run also pays a hand-off each way: 72 µs against the caller's 70,
  // never kSlow times the best. Once the caller's PU is back to 70 the
  // list returns to it within the backoff its lost probes built, for good.
  SpareCoreChooser c;
  ASSERT_EQ(feed(c, 100, 70, 72), std::string(100, 'C'));
  std::string w = feed(c, 200, 100, 72);
  ASSERT_EQ(c.switches(), 1) << w;
  EXPECT_EQ(w.back(), 'S') << w;
  w = feed(c, 400, 70, 72);
  const size_t back = w.find(std::string(4 * SpareCoreChooser::kProbe, 'C'));
  ASSERT_NE(back, std::string::npos) << w;
  EXPECT_LE(back, 8 * SpareCoreChooser::kProbeBackoff) << w;
  EXPECT_EQ(w.find('S', back), std::string::npos) << w;
  EXPECT_EQ(c.switches(), 2) << w;
}

TEST(SpareCoreChooser, APuThatStraddlesTheThresholdsProbesRarely) {
  // The caller's PU runs 66 µs and 84 µs by turns, 16 runs each, and the
  // spare 84: every probe loses, and after the first few they come at
  // most once in kMaxBackoff runs, however often the PU looks slow anew.
  SpareCoreChooser c;
  std::string w;
  for (int i = 0; i < 400; ++i) w += feed(c, 16, i % 2 == 0 ? 66 : 84, 84);
  EXPECT_EQ(c.switches(), 0) << w;
  const auto spare_runs = std::count(w.begin(), w.end(), 'S');
  EXPECT_LE(spare_runs, 12 * SpareCoreChooser::kProbe) << w;  // 6400 runs: backoff 16, 32, ..., 1024, then 1024
  EXPECT_GT(spare_runs, 0) << w;
}

// As RunModeChooser's: after probes that lost, runs seconds apart probe
// the other PU again 5 s after the last probe, and move there where it is
// faster.
TEST(SpareCoreChooser, ProbesAfterAWhileHoweverLongTheBackoff) {
  SpareCoreChooser c;
  int64_t now = 1;
  std::string w;
  const auto run = [&](double caller_us, double spare_us, int64_t gap_ns) {
    now += gap_ns;
    const bool spare = c.spare();
    w += spare ? 'S' : 'C';
    c.record(spare ? spare_us : caller_us, now);
  };
  for (int i = 0; i < 100; ++i) run(70, 70, 1000 * 1000);
  for (int i = 0; i < 4000; ++i) run(100, 100, 1000 * 1000);  // both slow alike: probes lose
  ASSERT_EQ(c.switches(), 0) << w;
  w.clear();
  for (int i = 0; i < 64; ++i) run(100, 70, 2 * TwoWays::kMaxProbeGapNs / 5);  // 2 s apart, the spare faster
  expect_probed_and_kept(w, 'S');
  EXPECT_EQ(c.switches(), 1) << w;
}

TEST(SpareCoreChooser, ProbesThatLoseBackOff) {
  // Both PUs slow alike after a fast start: every probe loses, and they
  // come less and less often, at least every kMaxBackoff runs.
  SpareCoreChooser c;
  feed(c, 100, 70, 70);
  const std::string w = feed(c, 8000, 100, 100);
  EXPECT_EQ(c.switches(), 0) << w;
  expect_probes_back_off(w, 'S', SpareCoreChooser::kProbe, SpareCoreChooser::kMaxBackoff, 7);
}

}  // namespace
}  // namespace tessera
