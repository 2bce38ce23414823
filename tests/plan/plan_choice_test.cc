// The measured plan choice (compiler/plan_choice.h) with a runner that
// reports made-up timings, so that what it decides depends on nothing of
// the host: the fastest candidate wins and the 1-vEU Plan is always one;
// in-run ratios correct the prediction; the choice is cached, rebuilt
// without measuring, checked against the other end and measured again when
// that runs faster; a busy host's choice is not kept; another host map is
// another cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/strings.h"
#include "compiler/plan_choice.h"
#include "kernels/cpu/kernel.h"
#include "tests/common/zoo_util.h"
#include "topology/host_map.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A runner of made-up timings: a Plan's run takes its timeline under the
// analytic costs times `task_factor`, times `slow[veus]` (a host where
// that many vEUs are slow), and its traced rTasks as long as in that
// timeline; a run alone, its rTasks' costs added up, times `task_factor`
// and `alone_factor`. The first `stalls` timed calls of Plans on more than
// one vEU are stalled (every run), and `stall_slow` times slower: a host
// that ran the vEUs in turns for a moment. Where `slow` holds a Plan's
// vEUs, every third step (index % 3 == 0) also takes `uneven` times as
// long, and a timed run `held_wait_us` more per wait of the Plan (vEUs
// taking turns pay a slice at a wait): a moment that slows some ops more
// than others, and Plans that wait more. Counts its calls.
struct FakeRunner {
  double task_factor = 1;
  double alone_factor = 1;
  std::map<int, double> slow;
  double uneven = 1;
  double held_wait_us = 0;
  bool contended = false;
  int stalls = 0;
  double stall_slow = 1;
  int slow_traces = 0;  // the first traced calls' rTasks take trace_slow times as long
  int slow_traces_from = 1 << 30;  // and so do the traced calls from this one on
  double trace_slow = 1;
  int traced_calls = 0;
  int calls = 0, stalled_calls = 0, alone_calls = 0;
  std::set<int> veus_run;  // the vEU counts of the Plans it ran
  std::vector<std::pair<int, double>> timed_batches;  // untraced calls: runs, one run's µs
  PlanRunner runner() {
    return [this](const Program& p, int, int runs, PlanRunWay way) -> Result<PlanTiming> {
      ++calls;
      veus_run.insert(p.plan->veus);
      const bool trace = way == PlanRunWay::kTraced;
      if (way == PlanRunWay::kAlone) {
        ++alone_calls;
        const std::vector<double> cost = analytic_task_costs(p);
        double us = 0;
        for (const TaskPlacement& pl : p.plan->placements) us += cost[static_cast<size_t>(pl.step)];
        PlanTiming t;
        t.run_us.assign(static_cast<size_t>(runs), us * task_factor * alone_factor);
        timed_batches.emplace_back(runs, t.run_us[0]);
        t.contended = contended;
        return t;
      }
      double s = slow.count(p.plan->veus) ? slow.at(p.plan->veus) : 1.0;
      const bool stalled = !trace && p.plan->veus > 1 && stalled_calls < stalls;
      if (stalled) {
        ++stalled_calls;
        s *= stall_slow;
      }
      std::vector<double> cost = analytic_task_costs(p);
      for (double& c : cost) c *= task_factor * s;
      if (slow.count(p.plan->veus))
        for (size_t i = 0; i < cost.size(); i += 3) cost[i] *= uneven;
      Plan truth = *p.plan;
      TESSERA_RETURN_IF_ERROR(plan_repredict(p, cost, nullptr, &truth));
      PlanTiming t;
      if (!trace && slow.count(p.plan->veus)) truth.predicted_us += held_wait_us * static_cast<double>(p.plan->waits);
      t.run_us.assign(static_cast<size_t>(runs), truth.predicted_us);
      if (!trace) timed_batches.emplace_back(runs, truth.predicted_us);
      if (trace) {
        const bool slowed = traced_calls < slow_traces || traced_calls >= slow_traces_from;
        ++traced_calls;
        const double f = slowed ? trace_slow : 1.0;
        for (const TaskPlacement& pl : truth.placements) t.task_us.push_back(f * (pl.end_us - pl.start_us));
      }
      t.contended = contended;
      t.stalled_runs = stalled ? runs : 0;
      return t;
    };
  }
};

double measured_for(const Plan& plan, int veus) {
  double best = 1e300;
  for (const Plan::Candidate& c : plan.candidates)
    if (c.veus == veus) best = std::min(best, c.measured_us);
  return best;
}

class PlanChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / str_cat("tessera_choice_", ::getpid())).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Result<std::unique_ptr<Program>> compile(FakeRunner& fake, const HostMap* map = nullptr, int veus = 2,
                                           const char* model = "nasnet_like") {
    CompileConfig co;
    co.build_plan = true;
    co.schedule.veus = veus;
    co.profile = false;  // analytic costs: nothing measured on this host
    co.profile_options.cache_dir = dir_;
    co.host_map = map;
    co.plan_runner = fake.runner();
    std::map<std::string, Tensor> inputs;
    return testing_util::compile_zoo(model, co, &inputs);
  }
  std::string dir_;
};

TEST_F(PlanChoice, CandidateVeuCountsIncludeOneAndAllAndPowersOfTwo) {
  EXPECT_EQ(candidate_veus(1), std::vector<int>({1}));
  EXPECT_EQ(candidate_veus(2), std::vector<int>({1, 2}));
  EXPECT_EQ(candidate_veus(6), std::vector<int>({1, 2, 4, 6}));
  EXPECT_EQ(candidate_veus(64), std::vector<int>({1, 8, 16, 32, 64}));  // at most 5, the largest kept
}

TEST_F(PlanChoice, FastestWinsIsCachedAndRebuiltWithoutMeasuring) {
  FakeRunner fake;
  auto p = compile(fake);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const Plan& plan = *(*p)->plan;
  EXPECT_EQ(plan.veus, 2);
  EXPECT_EQ(plan.requested_veus, 2);
  EXPECT_LT(measured_for(plan, 2), measured_for(plan, 1)) << "the 1-vEU Plan and the 2-vEU Plan are both timed";
  EXPECT_EQ(plan.measured_us, measured_for(plan, 2));
  EXPECT_NEAR(plan.predicted_us, plan.measured_us, 0.02 * plan.measured_us);
  const int first_calls = fake.calls;
  EXPECT_GE(first_calls, 2 + 3 * 2 + 1);  // traced once each, three rounds, the winner traced

  // Cached: the same Plan again, with only the check against the 1-vEU Plan.
  auto again = compile(fake);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->plan->veus, 2);
  EXPECT_EQ((*again)->plan->measured_us, plan.measured_us);
  EXPECT_EQ((*again)->plan->predicted_us, plan.predicted_us);
  EXPECT_EQ(fake.calls - first_calls, 5);  // a probe of the choice, two rounds of it and the 1-vEU Plan
  ASSERT_EQ((*again)->plan->program.size(), plan.program.size());
  for (size_t u = 0; u < plan.program.size(); ++u) EXPECT_EQ((*again)->plan->program[u].size(), plan.program[u].size());
}

// The streak of slower checks in the plan-choice cache (the line whose
// key ends in "#slower"): its first and last times and count, moved
// `back_s` seconds into the past where asked. None: {-1, -1, 0}.
std::vector<int64_t> slower_streak(const std::string& dir, int64_t back_s = 0) {
  std::vector<int64_t> got = {-1, -1, 0};
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("plans-", 0) != 0) continue;
    std::ifstream in(e.path());
    std::ostringstream out;
    std::string line;
    while (std::getline(in, line)) {
      const size_t tab = line.find('\t');
      if (tab != std::string::npos && tab >= 7 && line.compare(tab - 7, 7, "#slower") == 0) {
        MapDoubt d = map_doubt_parse(line.substr(tab + 1));
        d.first_s -= back_s, d.last_s -= back_s;
        got = {d.first_s, d.last_s, d.count};
        line = line.substr(0, tab + 1) + map_doubt_text(d);
      }
      out << line << "\n";
    }
    in.close();
    if (back_s != 0) std::ofstream(e.path()) << out.str();
  }
  return got;
}

// A host that runs everything a quarter slower than when the choice was
// made: the cached choice still runs fastest, so it stays, as cached (one
// check, no trace) while that may be a moment of the host; once
// kDoubtProcesses processes over kDoubtSpanS have found it so, its
// timeline is traced again (one call more) to predict what runs now, and
// the renewed entry then needs nothing more. A check as fast as predicted
// ends a streak; a host running faster renews the timeline at once.
TEST_F(PlanChoice, ACachedChoiceOnAHostRunningSlowerIsTracedAgainOnceThatLasts) {
  FakeRunner fake;
  auto p = compile(fake);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const double before = (*p)->plan->measured_us, predicted = (*p)->plan->predicted_us;
  EXPECT_EQ(slower_streak(dir_)[2], 0);

  fake.task_factor = 1.25;
  for (int k = 1; k <= kDoubtProcesses; ++k) {
    const int calls = fake.calls;
    auto kept = compile(fake);
    ASSERT_TRUE(kept.ok()) << kept.status().to_string();
    EXPECT_EQ((*kept)->plan->veus, 2);
    EXPECT_EQ((*kept)->plan->predicted_us, predicted) << "process " << k << ": a moment, so far";
    EXPECT_EQ(fake.calls - calls, 5) << "the check only";
    EXPECT_EQ(slower_streak(dir_)[2], k);
  }

  // As fast as predicted: the streak ends; slower again, a new one begins.
  fake.task_factor = 1;
  ASSERT_TRUE(compile(fake).ok());
  EXPECT_EQ(slower_streak(dir_)[2], 0);
  fake.task_factor = 1.25;
  ASSERT_TRUE(compile(fake).ok());
  ASSERT_TRUE(compile(fake).ok());
  EXPECT_EQ(slower_streak(dir_)[2], 2);

  // The streak began longer ago than kDoubtSpanS: the third process renews.
  slower_streak(dir_, kDoubtSpanS + 1);
  const int first_calls = fake.calls;
  auto slower = compile(fake);
  ASSERT_TRUE(slower.ok()) << slower.status().to_string();
  const Plan& plan = *(*slower)->plan;
  EXPECT_EQ(plan.veus, 2);
  EXPECT_EQ(plan.measured_us, before) << "the median it was chosen by";
  EXPECT_NEAR(plan.predicted_us, 1.25 * before, 0.02 * before) << "what runs now";
  EXPECT_EQ(fake.calls - first_calls, 5 + 1) << "the check of the choice, then one traced call";
  EXPECT_EQ(slower_streak(dir_)[2], 0);

  const int second_calls = fake.calls;
  auto again = compile(fake);
  ASSERT_TRUE(again.ok());
  EXPECT_NEAR((*again)->plan->predicted_us, plan.predicted_us, 1e-6 * plan.predicted_us);
  EXPECT_EQ(fake.calls - second_calls, 5) << "the renewed entry holds as it is";

  // Faster than the renewed timeline: traced again at once.
  fake.task_factor = 1;
  const int third_calls = fake.calls;
  auto faster = compile(fake);
  ASSERT_TRUE(faster.ok());
  EXPECT_NEAR((*faster)->plan->predicted_us, before, 0.02 * before);
  EXPECT_EQ(fake.calls - third_calls, 5 + 1);
}

// Candidates may compute an op with different rKernels (a 3x3 conv by
// Winograd in one, im2col + sgemm in another): the chosen one's rKernels
// come with its ops, so every step's op is the one its rKernel makes with
// its parameters (what an Executable records and its loader remakes).
TEST_F(PlanChoice, ChosenPlanKeepsEachOpWithItsRKernel) {
  FakeRunner fake;
  fake.slow = {{2, 0.5}};
  CompileConfig co;
  co.build_plan = true;
  co.schedule.veus = 2;
  co.profile = true;  // measured costs: the rKernels of an op differ
  co.profile_options.cache_dir = dir_;
  co.profile_options.min_ms_per_op = 0.2;
  co.profile_options.min_samples = 3;
  co.plan_runner = fake.runner();
  std::map<std::string, Tensor> inputs;
  auto p = testing_util::compile_zoo("mobilenet_v2", co, &inputs);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int alternatives = 0;
  for (const Step& s : (*p)->steps) {
    alternatives += s.kernel != kernel_for(cpu_kernels(), *s.node);
    auto remade = s.kernel->make(*s.node, s.params);
    ASSERT_TRUE(remade.ok()) << s.node->label() << ": " << remade.status().to_string();
    EXPECT_EQ((*remade)->tasks(), s.op->tasks()) << s.node->label() << " (" << s.kernel->name << ")";
    EXPECT_EQ((*remade)->path(), s.op->path()) << s.node->label() << " (" << s.kernel->name << ")";
  }
  RecordProperty("steps_on_another_rkernel", alternatives);
}

// "Never ship a Plan measured slower than the 1-vEU Plan": when the 1-vEU
// Plan runs faster (and the 2-vEU Plan's rTasks on one thread do not run
// as fast) it is kept on a request for 2, and a cached 2-vEU choice that
// stopped holding is measured again.
TEST_F(PlanChoice, OneVeuWinsWhenFasterAndAStaleChoiceIsMeasuredAgain) {
  FakeRunner fake;
  fake.alone_factor = 1.1;
  auto first = compile(fake);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ((*first)->plan->veus, 2);
  EXPECT_FALSE((*first)->plan->alone_first);
  EXPECT_EQ(fake.alone_calls, 0) << "nothing runs alone where the 1-vEU Plan lost";
  fake.slow = {{2, 3.0}};  // the host changed: 2 vEUs run three times slower
  auto p = compile(fake);
  ASSERT_TRUE(p.ok());
  const Plan& plan = *(*p)->plan;
  EXPECT_EQ(plan.veus, 1);
  EXPECT_EQ(plan.requested_veus, 2);
  EXPECT_FALSE(plan.alone_first);
  EXPECT_GT(fake.alone_calls, 0) << "the 2-vEU Plan's rTasks were timed alone";
  EXPECT_EQ(plan.measured_us, measured_for(plan, 1));
  EXPECT_GT(measured_for(plan, 2), plan.measured_us);
}

// The host held 2 vEUs back (three times slower) while the candidates were
// timed, so the 1-vEU Plan won; but the 2-vEU Plan's rTasks on one thread
// ran as fast. That Plan is kept with its runs starting alone (measured_us
// the median alone; a run alone, and its timeline on its vEUs, predicted
// from the 1-vEU Plan's in-run costs), and cached as such. Once the host lets both vEUs run at once,
// the cached choice runs faster on its vEUs than the 1-vEU Plan: it no
// longer holds, and the measured choice is the 2-vEU Plan from the start.
TEST_F(PlanChoice, AWiderPlanAsFastAloneIsKeptStartingAlone) {
  FakeRunner fake;
  fake.slow = {{2, 3.0}};
  auto p = compile(fake);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const Plan& plan = *(*p)->plan;
  EXPECT_EQ(plan.veus, 2);
  EXPECT_EQ(plan.requested_veus, 2);
  EXPECT_TRUE(plan.alone_first);
  EXPECT_LE(plan.measured_us, 1.02 * measured_for(plan, 1)) << "alone, as fast as the 1-vEU Plan";
  EXPECT_GT(measured_for(plan, 2), 1.2 * measured_for(plan, 1)) << "on its vEUs, held back";
  EXPECT_NEAR(plan.alone_predicted_us, plan.measured_us, 0.02 * plan.measured_us);
  // Its timeline: its rTasks as they ran on one thread, placed on its
  // vEUs; not the moment that held them back (3x slower).
  const double free_us = measured_for(plan, 2) / 3;
  EXPECT_NEAR(plan.predicted_us, free_us, 0.05 * free_us) << "as its vEUs run once the host lets them";

  // Cached: rebuilt as it was, checked alone and on its vEUs against the
  // 1-vEU Plan (a probe, two rounds of three).
  const int first_calls = fake.calls, first_alone = fake.alone_calls;
  auto again = compile(fake);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE((*again)->plan->alone_first);
  EXPECT_EQ((*again)->plan->veus, 2);
  EXPECT_EQ((*again)->plan->measured_us, plan.measured_us);
  EXPECT_NEAR((*again)->plan->alone_predicted_us, plan.alone_predicted_us, 1e-6 * plan.alone_predicted_us);
  EXPECT_NEAR((*again)->plan->predicted_us, plan.predicted_us, 1e-6 * plan.predicted_us) << "not traced again";
  EXPECT_EQ(fake.alone_calls - first_alone, 2);
  EXPECT_GE(fake.calls - first_calls, 7);

  // The host lets both vEUs run at once again.
  fake.slow.clear();
  auto freed = compile(fake);
  ASSERT_TRUE(freed.ok()) << freed.status().to_string();
  EXPECT_EQ((*freed)->plan->veus, 2);
  EXPECT_FALSE((*freed)->plan->alone_first) << "measured again: the Plan runs on its vEUs from the start";
  EXPECT_LT((*freed)->plan->measured_us, 0.9 * measured_for(*(*freed)->plan, 1));
}

// The host held 2 vEUs back, slowed some ops more than others and made
// every wait dear: the Plan built for that moment's in-run costs ran
// fastest of the 2-vEU Plans then. The one kept to start alone is the 2-vEU Plan predicted
// fastest with the rTasks' costs as they ran on one thread: the Plan built
// from the profile alone, as without measuring.
TEST_F(PlanChoice, TheWiderPlanKeptStartingAloneIsNotTheHeldBackMomentsFastest) {
  FakeRunner fake;
  fake.slow = {{2, 3.0}};
  fake.uneven = 6;
  fake.held_wait_us = 200;
  auto p = compile(fake);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const Plan& plan = *(*p)->plan;
  ASSERT_TRUE(plan.alone_first);
  // Two 2-vEU Plans were timed: the one the moment's in-run costs built
  // ran faster held back.
  double held_fastest = 1e300, held_slowest = 0;
  int wide = 0;
  for (const Plan::Candidate& c : plan.candidates)
    if (c.veus == 2) {
      ++wide;
      held_fastest = std::min(held_fastest, c.measured_us);
      held_slowest = std::max(held_slowest, c.measured_us);
    }
  ASSERT_EQ(wide, 2);
  ASSERT_LT(held_fastest, 0.95 * held_slowest);
  CompileConfig co;
  co.build_plan = true;
  co.schedule.veus = 2;
  co.profile = false;
  co.profile_options.cache_dir = dir_;
  std::map<std::string, Tensor> inputs;
  auto unmeasured = testing_util::compile_zoo("nasnet_like", co, &inputs);
  ASSERT_TRUE(unmeasured.ok()) << unmeasured.status().to_string();
  EXPECT_NEAR(plan.predicted_us, (*unmeasured)->plan->predicted_us, 1e-6 * plan.predicted_us)
      << "kept: the Plan predicted fastest on its vEUs, not the one that ran fastest held back";
}

// A cached 1-vEU choice is checked against the 2-vEU Plan on its vEUs and
// alone (a probe, two rounds of three); it holds while both run slower,
// and is measured again once the 2-vEU Plan's rTasks run alone as fast
// (within the tie margin): the choice is then that Plan, starting alone.
TEST_F(PlanChoice, ACachedOneVeuChoiceIsMeasuredAgainWhereTheWiderPlanRunsAsFastAlone) {
  FakeRunner fake;
  fake.slow = {{2, 3.0}};
  fake.alone_factor = 1.1;
  auto p = compile(fake);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ((*p)->plan->veus, 1);
  ASSERT_FALSE((*p)->plan->alone_first);
  const int before = fake.calls, before_alone = fake.alone_calls;
  auto held = compile(fake);
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ((*held)->plan->veus, 1);
  EXPECT_EQ(fake.calls - before, 1 + 2 * 3);
  EXPECT_EQ(fake.alone_calls - before_alone, 2);

  fake.alone_factor = 1.0;
  auto now = compile(fake);
  ASSERT_TRUE(now.ok()) << now.status().to_string();
  EXPECT_EQ((*now)->plan->veus, 2);
  EXPECT_TRUE((*now)->plan->alone_first);
}

// A chain of small ops: the Plan on 2 vEUs puts every rTask on one of
// them, so it is no candidate (it would start a thread that only waits);
// the 1-vEU Plan is chosen without a 2-vEU Plan ever running.
TEST_F(PlanChoice, PlanThatIdlesAVeuIsNoCandidate) {
  FakeRunner fake;
  auto p = compile(fake, nullptr, 2, "add_chain");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const Plan& plan = *(*p)->plan;
  EXPECT_EQ(plan.veus, 1);
  EXPECT_EQ(plan.requested_veus, 2);
  ASSERT_EQ(plan.candidates.size(), 1u);
  EXPECT_EQ(plan.candidates[0].veus, 1);
  EXPECT_EQ(fake.veus_run, std::set<int>({1}));
  // A cached 1-vEU choice is checked without running the idle 2-vEU Plan.
  auto again = compile(fake, nullptr, 2, "add_chain");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->plan->veus, 1);
  EXPECT_EQ(fake.veus_run, std::set<int>({1}));
}

// A 2-vEU Plan only 1 % faster than the 1-vEU Plan is a tie within the
// noise: the 1-vEU Plan is kept; 5 % faster, the 2-vEU Plan.
TEST_F(PlanChoice, TieWithinTwoPercentGoesToFewerVeus) {
  FakeRunner fake;
  fake.alone_factor = 1.1;  // the 2-vEU Plan's rTasks on one thread: slower than the 1-vEU Plan
  auto first = compile(fake);
  ASSERT_TRUE(first.ok());
  const double one = measured_for(*(*first)->plan, 1), two = measured_for(*(*first)->plan, 2);
  for (auto [faster, veus] : {std::pair{0.99, 1}, std::pair{0.95, 2}}) {
    fs::remove_all(dir_);
    fake.slow = {{2, one / two * faster}};
    auto p = compile(fake);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((*p)->plan->veus, veus) << "2 vEUs at " << faster << " of the 1-vEU time";
    EXPECT_FALSE((*p)->plan->alone_first);
  }
}

// Runs twice as long as predicted: the winner's timeline is predicted with
// the in-run costs, about twice the first prediction, and matches them.
TEST_F(PlanChoice, InRunRatiosCorrectThePrediction) {
  FakeRunner plain, doubled;
  doubled.task_factor = 2;
  auto a = compile(plain);
  fs::remove_all(dir_);
  auto b = compile(doubled);
  ASSERT_TRUE(a.ok() && b.ok());
  const double ratio = (*b)->plan->predicted_us / (*a)->plan->predicted_us;
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.2);
  EXPECT_NEAR((*b)->plan->predicted_us, (*b)->plan->measured_us, 0.02 * (*b)->plan->measured_us);
}

// Runs six times as long as the profile predicts (a sanitized build, a
// slower host): the timed batches are sized from the measured runs, so
// each lasts about a round, not six; so does the check of a cached
// choice.
TEST_F(PlanChoice, TimedBatchesAreSizedFromMeasuredRuns) {
  FakeRunner slow;
  slow.task_factor = 6;
  ASSERT_TRUE(compile(slow, nullptr, 2, "mlp").ok());
  const size_t first = slow.timed_batches.size();
  ASSERT_TRUE(compile(slow, nullptr, 2, "mlp").ok());
  ASSERT_GT(slow.timed_batches.size(), first) << "the cached choice is checked in timed runs";
  for (const auto& [runs, run_us] : slow.timed_batches) {
    ASSERT_LT(run_us, 1e3 * kPlanChoiceRoundMs / 10) << "runs this long would all be clamped to the minimum";
    EXPECT_TRUE(runs == kPlanChoiceMinRuns || runs * run_us <= 2 * 1e3 * kPlanChoiceRoundMs)
        << runs << " runs of " << run_us << " µs in a round of " << kPlanChoiceRoundMs << " ms";
  }
}

TEST_F(PlanChoice, BusyHostChoiceIsUsedButNotCached) {
  FakeRunner fake;
  fake.contended = true;
  ASSERT_TRUE(compile(fake).ok());
  const int first = fake.calls;
  ASSERT_TRUE(compile(fake).ok());
  EXPECT_EQ(fake.calls, 2 * first) << "nothing was cached, so everything was measured again";
}

// The winner's first trace met a moment that made its rTasks 25 % slower:
// its timeline is traced again and the one that predicts the median kept.
// Where every trace is so (within kPredictionSlack of the median, but not
// kTimelineSlack), the best of three is kept, and cached.
TEST_F(PlanChoice, AWinnersTimelineOffByMoreThanATenthIsTracedAgain) {
  FakeRunner calm;
  auto base = compile(calm);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  fs::remove_all(dir_);
  FakeRunner once;
  once.slow_traces = calm.traced_calls;  // every trace of step 1 and the winner's first
  once.trace_slow = 1.25;
  auto p = compile(once);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(once.traced_calls, calm.traced_calls + 1);
  EXPECT_NEAR((*p)->plan->predicted_us, (*base)->plan->predicted_us, 0.02 * (*base)->plan->predicted_us);
  fs::remove_all(dir_);
  FakeRunner always;
  always.slow_traces = 1 << 20;
  always.trace_slow = 1.25;
  auto q = compile(always);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(always.traced_calls, calm.traced_calls + 2) << "three traces of the winner";
  const int calls = always.calls;
  ASSERT_TRUE(compile(always).ok());
  EXPECT_LT(always.calls - calls, calls / 2) << "cached: only checked";
}

// Every trace of the winner met a moment that made its rTasks twice as
// long (the traces of a model of a few µs all fall in one): the Plan as
// built in step 3, on the first traces' costs, predicts its median, and
// the choice is cached. Kept to the traces, it would predict twice its
// median and, off by more than kPredictionSlack, not be cached.
TEST_F(PlanChoice, AWinnerTracedOnlyInAMomentKeepsThePredictionItWasBuiltWith) {
  FakeRunner calm;
  auto base = compile(calm);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  const int first_traces = calm.traced_calls - 1;  // step 1's, before the winner's
  fs::remove_all(dir_);
  FakeRunner moment;
  moment.slow_traces_from = first_traces;
  moment.trace_slow = 2;
  auto p = compile(moment);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(moment.traced_calls, first_traces + 3) << "three traces of the winner";
  EXPECT_NEAR((*p)->plan->predicted_us, (*p)->plan->measured_us, 0.1 * (*p)->plan->measured_us);
  const int calls = moment.calls;
  ASSERT_TRUE(compile(moment).ok());
  EXPECT_LT(moment.calls - calls, calls / 2) << "cached: only checked";
}

// A cached choice checked while the host is not as its map describes (and
// runs 2 vEUs three times slower then) is kept as cached: the check
// tells about the moment, and measured again the process would keep the
// moment's 1-vEU Plan. Once the host is as mapped, the check counts again.
TEST_F(PlanChoice, ACachedChoiceCheckedOnABusyHostIsKept) {
  FakeRunner calm;
  auto first = compile(calm);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ((*first)->plan->veus, 2);
  FakeRunner busy;
  busy.contended = true;
  busy.slow = {{2, 3.0}};
  auto kept = compile(busy);
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_EQ((*kept)->plan->veus, 2);
  EXPECT_FALSE((*kept)->plan->alone_first);
  EXPECT_EQ((*kept)->plan->measured_us, (*first)->plan->measured_us);
  EXPECT_NEAR((*kept)->plan->predicted_us, (*first)->plan->predicted_us, 1e-6 * (*first)->plan->predicted_us)
      << "its timeline as cached, not traced again in the moment";
  EXPECT_LT(busy.calls, calm.calls) << "only the check ran";
  FakeRunner changed;  // as mapped, and 2 vEUs three times slower: measured again
  changed.slow = {{2, 3.0}};
  auto again = compile(changed);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ((*again)->plan->veus, 2);
  EXPECT_TRUE((*again)->plan->alone_first) << "the 2-vEU Plan, as fast alone, starts alone";
}

// A map that makes crossing dear on a host where it is free (the fake
// runner's timings charge nothing for it) cannot keep the Plan it rules
// out from being timed: a candidate scheduled as if crossing were free
// runs, and wins, as fast as the choice made without a map; cached, it is
// rebuilt as it was built.
TEST_F(PlanChoice, AWrongMapCannotKeepTheFastestPlanFromBeingTimed) {
  FakeRunner fake;
  auto without = compile(fake);
  ASSERT_TRUE(without.ok()) << without.status().to_string();
  const HostMap dear = host_map_uniform(2, 10, 2000, 300);
  auto with = compile(fake, &dear);
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  const Plan& plan = *(*with)->plan;
  // The map's own 2-vEU Plan leaves a vEU idle (no candidate), so without
  // the map-free one the choice would be the 1-vEU Plan, twice as slow.
  EXPECT_GT(measured_for(plan, 1), 1.5 * plan.measured_us);
  EXPECT_LE(plan.measured_us, (*without)->plan->measured_us * 1.0001);
  EXPECT_EQ(plan.veus, 2);
  // Cached, it is rebuilt the same way.
  auto again = compile(fake, &dear);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->plan->measured_us, plan.measured_us);
  EXPECT_EQ((*again)->plan->predicted_us, plan.predicted_us);
}

// A moment in which the host ran the vEUs in turns made the 2-vEU Plan
// three times slower while it was timed: it stalled, so every candidate
// is timed again after a pause, and the 2-vEU Plan wins on its best
// median. Where it stalls at every sitting, the 1-vEU Plan wins after two
// more (its rTasks alone slower than the 1-vEU Plan: three rounds more,
// of the two).
TEST_F(PlanChoice, AStalledMomentIsTimedAgain) {
  FakeRunner calm;
  auto base = compile(calm);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  ASSERT_EQ((*base)->plan->veus, 2);
  const int calm_calls = calm.calls;
  fs::remove_all(dir_);

  FakeRunner moment;
  moment.stalls = 3;  // three timed calls: one sitting of one 2-vEU candidate
  moment.stall_slow = 3;
  auto p = compile(moment);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p.value()->plan->veus, 2);
  EXPECT_EQ(p.value()->plan->measured_us, (*base)->plan->measured_us);
  EXPECT_GT(moment.calls, calm_calls) << "timed again";
  fs::remove_all(dir_);

  FakeRunner always;
  always.stalls = 1 << 20;
  always.stall_slow = 3;
  always.alone_factor = 1.1;
  auto q = compile(always);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q.value()->plan->veus, 1);
  const int candidates = static_cast<int>(q.value()->plan->candidates.size());
  EXPECT_EQ(always.calls - calm_calls, 2 * 3 * candidates + 3 * 2) << "two more sittings of three rounds, then no more";
}

// The 1-vEU Plan won while the host held the vEUs back (every timed call of
// a 2-vEU Plan stalled): the 2-vEU Plan's rTasks, 4 % slower alone, are
// close enough for a choice about a moment; the Plan is kept starting
// alone. Where the 2-vEU Plan ran slower without stalling (the host as it
// is, not a moment), the same 4 % keeps the 1-vEU Plan.
TEST_F(PlanChoice, AChoiceHeldBackByTheHostKeepsAWiderPlanAlmostAsFastAlone) {
  FakeRunner held;
  held.stalls = 1 << 20;
  held.stall_slow = 3;
  held.alone_factor = 1.04;
  auto p = compile(held);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const Plan& plan = *(*p)->plan;
  EXPECT_EQ(plan.veus, 2);
  EXPECT_TRUE(plan.alone_first);
  EXPECT_GT(plan.measured_us, 1.03 * measured_for(plan, 1)) << "alone, 4 % slower than the 1-vEU Plan";
  fs::remove_all(dir_);

  FakeRunner slower;
  slower.slow = {{2, 3.0}};
  slower.alone_factor = 1.04;
  auto q = compile(slower);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ((*q)->plan->veus, 1);
  EXPECT_FALSE((*q)->plan->alone_first);
  EXPECT_GT(slower.alone_calls, 0) << "the 2-vEU Plan's rTasks were timed alone";
}

// The cache is per host map digest: a map where crossing is dear is
// another host, measured anew; a file of choices the planner cannot parse
// is ignored.
TEST_F(PlanChoice, CacheIsKeyedByHostDigestAndIgnoresGarbage) {
  FakeRunner fake;
  const HostMap near_map = host_map_uniform(2, 10, 12, 50);
  const HostMap far_map = host_map_uniform(2, 10, 50, 300);
  ASSERT_NE(near_map.digest(), far_map.digest());
  ASSERT_TRUE(compile(fake, &near_map).ok());
  const int first = fake.calls;
  ASSERT_TRUE(compile(fake, &far_map).ok());
  EXPECT_GE(fake.calls, 2 * first) << "the far map's choice was measured from the start";
  const int before = fake.calls;
  ASSERT_TRUE(compile(fake, &near_map).ok());
  EXPECT_EQ(fake.calls - before, 5) << "the near map's choice was still cached";
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind("plans-", 0) == 0) {
      std::ifstream in(e.path());
      std::string text((std::istreambuf_iterator<char>(in)), {});
      in.close();
      for (char& c : text)
        if (c == '\t') c = ' ';  // every record unreadable
      std::ofstream(e.path()) << text;
    }
  const int garbage = fake.calls;
  ASSERT_TRUE(compile(fake, &near_map).ok());
  EXPECT_EQ(fake.calls - garbage, first);
}

}  // namespace
}  // namespace tessera
