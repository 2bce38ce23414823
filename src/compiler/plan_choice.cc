#include "compiler/plan_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "base/paths.h"
#include "base/strings.h"
#include "compiler/profiler.h"
#include "compiler/variants.h"
#include "kernels/prepared.h"
#include "topology/host_map.h"

namespace tessera {

std::vector<int> candidate_veus(int n) {
  std::vector<int> out;
  for (int u = 1; u < n; u *= 2) out.push_back(u);
  out.push_back(n);
  if (out.size() > kMaxCandidateCounts) out.erase(out.begin() + 1, out.end() - static_cast<long>(kMaxCandidateCounts - 1));
  return out;
}

namespace {

namespace fs = std::filesystem;

// Traced runs per candidate for the in-run costs, and timed runs: rounds
// over every candidate, each about kRoundMs of runs, however short a run
// (a 20 us Plan timed 40 times a round moved by more than the tie margin).
constexpr int kTracedRuns = 3;
constexpr int kTimingRounds = 3;
constexpr double kRoundMs = kPlanChoiceRoundMs;
constexpr int kMinRuns = kPlanChoiceMinRuns, kMaxRuns = 2000;
// An in-run ratio outside these bounds is taken as noise of the clock
// around a tiny rTask.
constexpr double kMinRatio = 0.25, kMaxRatio = 8;
// The winner's timeline, predicted with its own in-run costs, must come
// within this fraction of its measured median; otherwise the traced runs
// met a host other than the timed ones did, and are taken again.
constexpr double kPredictionSlack = 0.3;
constexpr int kTraceAttempts = 3;
// A cached choice that still runs fastest keeps its Plan; where its cached
// timeline then predicts more than this fraction off the median just
// measured (the host runs faster or slower than when it was chosen), the
// Plan is traced again and its timeline and cache entry renewed, without
// timing the candidates again (its measured median stays the one it was
// chosen by, the fastest of the candidates'). Slower only once that has
// lasted, as a map's disagreement must (MapDoubt: kDoubtProcesses
// processes over kDoubtSpanS): hosts have slow states that last seconds
// to minutes, and a timeline renewed in one predicted every later
// process's runs in the host's usual state that much too slow.
constexpr double kTimelineSlack = 0.1;
// Medians within this factor are a tie, which goes to fewer vEUs; a cached
// choice stands until the other end runs faster by more.
constexpr double kStaleChoice = 1.02;
// A Plan wider than the fastest that stalled in this share of its timed
// runs (the run-mode chooser's 3 of 8, devices/cpu/run_mode.h) was timed
// while the host ran the vEUs in turns: all are timed again after a
// pause, at most kMoreSittings times, each keeping its best median.
constexpr double kStalledShare = 3.0 / 8;
constexpr int kMoreSittings = 2;
constexpr int kSittingPauseMs = 200;
// Step 4b's margin where the 1-vEU Plan won while the host held the vEUs
// back (a wider Plan still stalled after the sittings, or the host never
// was quiet): the win is the moment's, which lasts seconds, while the
// process keeps its Plan for life. A wider Plan within this alone loses at
// most that while the moment lasts, where the 1-vEU Plan would lose the
// vEUs' speed after it; and timed alone in such a moment, two Plans that
// run within 1 % of each other quietly come out a few percent apart.
constexpr double kHeldBackAlone = 1.05;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Runs per timed batch: about kRoundMs of a run that measured `run_us`.
int runs_per_round(double run_us) {
  return std::clamp(static_cast<int>(kRoundMs * 1e3 / std::max(run_us, 1.0)), kMinRuns, kMaxRuns);
}

struct Candidate {
  int veus = 1;
  Policy policy = Policy::kAuto;  // as built (kAuto: both, the better predicted)
  // 1: isolated costs; 2: with in-run ratios; 3: isolated costs, scheduled
  // as if crossing vEUs were free (predicted with the map's costs)
  int round = 1;
  std::vector<const RKernel*> kernels;
  std::vector<KernelParams> params;
  std::vector<std::unique_ptr<ROp>> ops;
  std::vector<double> cost;  // per step, µs per rTask, as scheduled
  Plan plan;
  VeuCosts veu_costs;
  std::optional<MemoryPlan> memory;
  bool same_as(const Candidate& o) const {
    if (veus != o.veus || plan.program.size() != o.plan.program.size()) return false;
    for (size_t s = 0; s < params.size(); ++s)
      if (ops[s]->tasks() != o.ops[s]->tasks() || kernels[s] != o.kernels[s]) return false;
    for (size_t u = 0; u < plan.program.size(); ++u) {
      const auto &a = plan.program[u], &b = o.plan.program[u];
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i].kind != b[i].kind || a[i].a != b[i].a || a[i].b != b[i].b) return false;
    }
    return true;
  }
  // A Plan on more than one vEU that leaves one of them without rTasks:
  // the Plans on fewer vEUs, which are candidates too, do its work
  // without starting a thread that only waits for the run to end.
  bool idles_a_veu() const {
    if (veus == 1) return false;
    for (int64_t n : plan.tasks_per_veu)
      if (n == 0) return true;
    return false;
  }
};

// What the cache keeps of a measured choice.
struct ChoiceRecord {
  int veus = 1;
  Policy policy = Policy::kWavefront;
  int round = 1;
  double measured_us = 0;  // the chosen one's median
  std::vector<Plan::Candidate> candidates;
  std::vector<double> build;     // round 2: the in-run ratios it was built with, per step
  std::vector<double> timeline;  // its own in-run ratios over its scheduled costs, per step
  bool alone_first = false;      // Plan::alone_first (measured_us: its median alone)
  std::vector<double> alone;     // alone_first: the 1-vEU Plan's in-run ratios, per step, for a run alone
};

std::string record_text(const ChoiceRecord& r) {
  std::ostringstream s;
  s.precision(17);  // round-trips every double
  s << r.veus << " " << policy_name(r.policy) << " " << r.round << " " << r.measured_us << " " << r.candidates.size();
  for (const Plan::Candidate& c : r.candidates)
    s << " " << c.veus << " " << policy_name(c.policy) << " " << c.predicted_us << " " << c.measured_us;
  for (const std::vector<double>* v : {&r.build, &r.timeline}) {
    s << " " << v->size();
    for (double x : *v) s << " " << x;
  }
  s << " " << (r.alone_first ? 1 : 0);
  if (r.alone_first) {
    s << " " << r.alone.size();
    for (double x : r.alone) s << " " << x;
  }
  return s.str();
}

bool record_parse(const std::string& text, size_t steps, ChoiceRecord* r) {
  std::istringstream s(text);
  std::string policy;
  size_t n = 0;
  if (!(s >> r->veus >> policy >> r->round >> r->measured_us >> n) || !policy_parse(policy, &r->policy) ||
      r->veus < 1 || n > 64)
    return false;
  for (size_t i = 0; i < n; ++i) {
    Plan::Candidate c;
    if (!(s >> c.veus >> policy >> c.predicted_us >> c.measured_us) || !policy_parse(policy, &c.policy)) return false;
    r->candidates.push_back(c);
  }
  for (std::vector<double>* v : {&r->build, &r->timeline}) {
    if (!(s >> n) || (n != steps && !(v == &r->build && n == 0))) return false;
    v->resize(n);
    for (double& x : *v)
      if (!(s >> x) || !(x >= kMinRatio && x <= kMaxRatio)) return false;
  }
  int alone = 0;  // absent in records written before it was
  if (s >> alone) {
    if (alone != 0 && alone != 1) return false;
    r->alone_first = alone == 1;
    if (r->alone_first) {
      if (r->veus < 2 || !(s >> n) || n != steps) return false;
      r->alone.resize(n);
      for (double& x : r->alone)
        if (!(s >> x) || !(x >= kMinRatio && x <= kMaxRatio)) return false;
    }
  }
  return ((r->round == 1 || r->round == 3) && r->build.empty()) || (r->round == 2 && r->build.size() == steps);
}

class ChoiceCache {
 public:
  ChoiceCache(const CompileConfig& o) : enabled_(o.profile_options.use_cache) {
    const std::string host = o.host_map ? o.host_map->digest() : "nomap";
    path_ = (fs::path(cache_dir(o.profile_options.cache_dir)) /
             str_cat("plans-", cpu_cache_key(), "-", host, "-k", kKernelVersion, ".tsv"))
                .string();
  }
  std::optional<std::string> get(const std::string& key) const {
    if (!enabled_) return std::nullopt;
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line))
      if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == '\t')
        return line.substr(key.size() + 1);
    return std::nullopt;
  }
  void put(const std::string& key, const std::string& value) const { replace(key, &value); }
  void erase(const std::string& key) const {
    if (get(key)) replace(key, nullptr);
  }

 private:
  // The file with `key`'s line replaced by `value` (none: removed).
  void replace(const std::string& key, const std::string* value) const {
    if (!enabled_) return;
    std::ifstream in(path_);
    std::ostringstream out;
    out << "# tessera plan choices: <program key> TAB <veus policy round candidates... ratios...>\n";
    std::string line;
    while (std::getline(in, line))
      if (!line.empty() && line[0] != '#' && line.compare(0, key.size() + 1, key + "\t") != 0) out << line << "\n";
    if (value != nullptr) out << key << "\t" << *value << "\n";
    write_file_atomic(path_, out.str());  // a cache that cannot be written is not an error
  }

  bool enabled_;
  std::string path_;
};

// The cache's line for a choice's runs found slower than its timeline
// (the choice's key + kSlowerSuffix): the streak as map_doubt_text writes it.
constexpr const char* kSlowerSuffix = "#slower";

class Planner {
 public:
  Planner(Program& p, const CompileConfig& o, Profiler* prof)
      : p_(p), o_(o), prof_(prof),
        vary_(o.variants && o.schedule.policy != Policy::kRandom) {}

  // Makes every step's ops for `veus` vEUs, chooses variants and schedules;
  // `map_free`: as if crossing vEUs were free, the timeline then predicted
  // with the map's costs.
  Result<Candidate> build(int veus, Policy policy, const std::vector<double>* ratios, bool report,
                          bool map_free = false) {
    TESSERA_RETURN_IF_ERROR(make_ops(veus));
    TESSERA_ASSIGN_OR_RETURN(auto variants, make_variants(p_, vary_ ? veus : 0, kernels_or_cpu(o_.kernels)));
    cost_variants(
        p_, variants,
        [&](const Step& s, size_t i) {
          const double c = prof_         ? prof_->cost(s)
                           : o_.task_cost ? o_.task_cost(*s.node, s.op->tasks())
                                          : analytic_task_cost(*s.node, s.op->tasks());
          return ratios ? c * (*ratios)[i] : c;
        },
        [&](size_t done, size_t total) {
          if (report && prof_ && o_.profile_options.progress) o_.profile_options.progress(done, total, false);
        });
    Candidate c;
    c.veus = veus;
    c.policy = policy;
    c.round = ratios ? 2 : map_free ? 3 : 1;
    c.veu_costs = costs_for(veus);
    const VeuCosts free_costs = VeuCosts::uniform(veus);
    ScheduleOptions so = o_.schedule;
    so.veus = veus;
    so.policy = policy;
    so.costs = map_free ? &free_costs : &c.veu_costs;
    TESSERA_ASSIGN_OR_RETURN(c.plan, schedule_with_variants(p_, variants, so, &c.cost));
    TESSERA_RETURN_IF_ERROR(plan_validate(p_, c.plan).with_context("internal: scheduler produced an invalid plan"));
    if (map_free) TESSERA_RETURN_IF_ERROR(plan_repredict(p_, c.cost, &c.veu_costs, &c.plan));
    for (Step& s : p_.steps) {
      c.kernels.push_back(s.kernel);
      c.params.push_back(s.params);
      c.ops.push_back(std::move(s.op));
    }
    return c;
  }

  // The cost of crossing between `veus` vEUs: the caller's model, the
  // host map's, or none.
  VeuCosts costs_for(int veus) const {
    const std::vector<int> slots = veu_slots(o_.slots, veus);
    return o_.costs ? o_.costs(slots) : o_.host_map ? VeuCosts::from_host_map(*o_.host_map, slots) : VeuCosts::uniform(veus);
  }
  // Whether crossing costs anything under the map: else a map-free
  // candidate is the map's own.
  bool map_charges(int veus) const { return !costs_for(veus).crossing_free; }

  // Its ops, Plan, costs, memory plan and slots into the Program.
  void install(Candidate& c) {
    p_.stats.rtasks = 0;
    p_.max_scratch_bytes = 0;
    for (size_t s = 0; s < p_.steps.size(); ++s) {
      std::swap(p_.steps[s].op, c.ops[s]);
      std::swap(p_.steps[s].kernel, c.kernels[s]);
      p_.steps[s].params = c.params[s];
      p_.stats.rtasks += p_.steps[s].op->tasks();
      p_.max_scratch_bytes = std::max(p_.max_scratch_bytes, p_.steps[s].op->scratch_bytes());
    }
    p_.plan = c.plan;
    p_.task_cost_us = c.cost;
    if (!c.memory) c.memory = plan_memory_parallel(p_, c.plan);
    p_.memory = *c.memory;
    p_.slots.clear();
    p_.input_slots.clear();
    p_.output_slots.clear();
    for (Step& s : p_.steps) {
      s.inputs.clear();
      s.outputs.clear();
    }
    assign_slots(p_);
  }
  // Its ops back out of the Program.
  void uninstall(Candidate& c) {
    for (size_t s = 0; s < p_.steps.size(); ++s) {
      std::swap(p_.steps[s].op, c.ops[s]);
      std::swap(p_.steps[s].kernel, c.kernels[s]);
    }
  }

  // Per step, the median in-run time of its rTasks, less the crossing the
  // model charged them, over the cost the schedule used.
  std::vector<double> in_run_ratios(const Candidate& c, const PlanTiming& t) const {
    std::vector<std::vector<double>> seen(p_.steps.size());
    for (size_t i = 0; i < c.plan.placements.size() && i < t.task_us.size(); ++i) {
      const TaskPlacement& pl = c.plan.placements[i];
      const double charged = pl.end_us - pl.start_us - c.cost[static_cast<size_t>(pl.step)];
      seen[static_cast<size_t>(pl.step)].push_back(t.task_us[i] - std::max(0.0, charged));
    }
    std::vector<double> r(p_.steps.size(), 1.0);
    for (size_t s = 0; s < r.size(); ++s)
      if (!seen[s].empty() && c.cost[s] > 0) r[s] = std::clamp(median(seen[s]) / c.cost[s], kMinRatio, kMaxRatio);
    return r;
  }

  // Installs `c` for good, its timeline predicted with costs corrected by
  // `ratios` when it was built without them.
  // The makespan of `c` predicted with its scheduled costs times
  // `timeline` (its own in-run ratios).
  Result<double> predict(Candidate& c, const std::vector<double>& timeline) {
    install(c);
    std::vector<double> cost = c.cost;
    for (size_t s = 0; s < cost.size(); ++s) cost[s] *= timeline[s];
    Plan plan = c.plan;
    Status st = plan_repredict(p_, cost, &c.veu_costs, &plan);
    uninstall(c);
    TESSERA_RETURN_IF_ERROR(st);
    return plan.predicted_us;
  }

  // Installs `c` for good, its timeline predicted with its costs times
  // `timeline`; `alone` (null: runs start on the vEUs): Plan::alone_first,
  // a run alone predicted with these in-run ratios.
  Status finish(Candidate& c, const std::vector<double>& timeline, int requested, double measured_us,
                std::vector<Plan::Candidate> timed, const std::vector<double>* alone) {
    install(c);
    for (size_t s = 0; s < p_.task_cost_us.size(); ++s) p_.task_cost_us[s] *= timeline[s];
    TESSERA_RETURN_IF_ERROR(plan_repredict(p_, p_.task_cost_us, &c.veu_costs, &*p_.plan));
    p_.plan->requested_veus = requested;
    p_.plan->measured_us = measured_us;
    p_.plan->candidates = std::move(timed);
    p_.plan->alone_first = alone != nullptr;
    p_.plan->alone_predicted_us = alone ? alone_us(c, *alone) : 0;
    return Status();
  }
  // A run of `c` alone, predicted: its rTasks' scheduled costs times
  // `ratios` (the 1-vEU Plan's in-run ratios: one thread, the other PUs
  // idle), added up.
  double alone_us(const Candidate& c, const std::vector<double>& ratios) const {
    double us = 0;
    for (const TaskPlacement& t : c.plan.placements)
      us += c.cost[static_cast<size_t>(t.step)] * ratios[static_cast<size_t>(t.step)];
    return us;
  }

  // The program's structure and the compile options that shape its Plan.
  std::string key(int requested) const {
    std::ostringstream k;
    // v3: an alone-first record's timeline is the 1-vEU Plan's in-run ratios.
    k << "v3|veus=" << requested << "|tasks=" << o_.tasks_per_op << "|variants=" << vary_
      << "|profiled=" << (prof_ != nullptr) << "|policy=" << policy_name(o_.schedule.policy);
    const auto preds = step_predecessors(p_);
    for (size_t s = 0; s < p_.steps.size(); ++s) {
      const Node& n = *p_.steps[s].node;
      k << "|" << n.op_type << ":" << n.opset;
      for (const auto& [name, a] : n.attrs) k << "," << name << "=" << a.i << "/" << a.f << "/" << a.s << "/" << str_join(a.ints, ".");
      for (const Value* v : n.inputs) k << ",<" << (v ? v->shape.to_string() : "-") << (v && v->is_constant() ? "c" : "");
      for (const Value* v : n.outputs) k << ",>" << v->shape.to_string();
      k << ",p" << str_join(preds[s], ".");
    }
    // FNV-1a, 64 bits, twice with different seeds: a 128-bit key.
    const std::string text = k.str();
    auto fnv = [&](uint64_t h) {
      for (char ch : text) {
        h ^= static_cast<unsigned char>(ch);
        h *= 1099511628211ull;
      }
      return h;
    };
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(fnv(1469598103934665603ull)),
                  static_cast<unsigned long long>(fnv(0x9e3779b97f4a7c15ull)));
    return buf;
  }

 private:
  Status make_ops(int veus) {
    for (Step& s : p_.steps) {
      // Each candidate starts from the default rKernel (an earlier one may
      // have chosen another).
      s.kernel = kernel_for(kernels_or_cpu(o_.kernels), *s.node);
      s.params = KernelParams{};
      s.params.tasks = o_.tasks_per_op;
      TESSERA_ASSIGN_OR_RETURN(s.op, s.kernel->make(*s.node, s.params));
      // With variants, an op its kernel would cut into more rTasks than
      // there are vEUs starts as one rTask per vEU (docs/architecture.md,
      // "Variants").
      if (vary_ && o_.tasks_per_op == 0 && s.op->tasks() > veus) {
        s.params.tasks = veus;
        TESSERA_ASSIGN_OR_RETURN(s.op, s.kernel->make(*s.node, s.params));
      }
    }
    return Status();
  }

  Program& p_;
  const CompileConfig& o_;
  Profiler* prof_;
  const bool vary_;
};

// Times the median of `runs` runs of each candidate, in `rounds`
// interleaved rounds, each run the way `ways` says (empty: every one on
// its vEUs); *contended when the host never was quiet; into `stalled`
// (when given) the share of each one's runs that stalled.
Result<std::vector<double>> time_interleaved(Planner& planner, Program& p, const CompileConfig& o,
                                             std::vector<Candidate*> cands, int rounds, int runs, bool* contended,
                                             std::vector<double>* stalled = nullptr,
                                             const std::vector<PlanRunWay>& ways = {}) {
  std::vector<std::vector<double>> timed(cands.size());
  std::vector<int> stalls(cands.size(), 0);
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < cands.size(); ++i) {
      planner.install(*cands[i]);
      Result<PlanTiming> t = o.plan_runner(p, 1, runs, i < ways.size() ? ways[i] : PlanRunWay::kPlan);
      planner.uninstall(*cands[i]);
      if (!t.ok()) return t.status().with_context("timing candidate Plans");
      *contended = *contended || t->contended;
      timed[i].insert(timed[i].end(), t->run_us.begin(), t->run_us.end());
      stalls[i] += t->stalled_runs;
    }
  if (stalled != nullptr) {
    stalled->clear();
    for (size_t i = 0; i < cands.size(); ++i)
      stalled->push_back(timed[i].empty() ? 0 : static_cast<double>(stalls[i]) / static_cast<double>(timed[i].size()));
  }
  std::vector<double> medians;
  for (const auto& v : timed) medians.push_back(median(v));
  return medians;
}

// A cached choice, checked against the other end (the 1-vEU Plan, or for a
// cached 1-vEU choice the Plan on all n). A choice that runs alone first
// is checked against the 1-vEU Plan both ways: alone it must still run as
// fast, and on its vEUs not faster (else it should run there from the
// start). A 1-vEU choice is also timed against the Plan on all n alone:
// where that runs as fast (within kStaleChoice, 4b's margin), the choice
// is measured again, and step 4b of choose_measured keeps a wider Plan
// starting alone.
struct Check {
  bool holds = false;    // the other end is not faster by more than kStaleChoice, and the host was not busy
  bool contended = false;  // the host was not as its map describes throughout some timed batch
  double median_us = 0;  // the choice's Plan's median in this check, on its vEUs
  double predicted_us = 0;  // with its cached in-run ratios
  double alone_us = 0;      // an alone-first choice's median alone in this check
};
Result<Check> still_holds(Planner& planner, Program& p, const CompileConfig& o, Candidate& chosen,
                          const std::vector<double>& timeline, int n, bool alone_first) {
  TESSERA_ASSIGN_OR_RETURN(Candidate other, planner.build(chosen.veus > 1 ? 1 : n, Policy::kAuto, nullptr, false));
  bool contended = false;
  planner.install(chosen);
  Result<PlanTiming> probe = o.plan_runner(p, 1, kMinRuns, PlanRunWay::kPlan);
  planner.uninstall(chosen);
  if (!probe.ok()) return probe.status().with_context("timing the cached Plan");
  const int runs = runs_per_round(median(probe->run_us));
  std::vector<Candidate*> timed = {&chosen};
  std::vector<PlanRunWay> ways = {PlanRunWay::kPlan};
  if (!other.idles_a_veu()) {  // else the 1-vEU Plan's work on more threads
    timed.push_back(&other);
    ways.push_back(PlanRunWay::kPlan);
  }
  if (alone_first) {
    timed.push_back(&chosen);
    ways.push_back(PlanRunWay::kAlone);
  } else if (chosen.veus == 1 && timed.size() == 2 && !plan_one_thread_order(other.plan).empty()) {
    timed.push_back(&other);
    ways.push_back(PlanRunWay::kAlone);
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> m,
                           time_interleaved(planner, p, o, timed, 2, runs, &contended, nullptr, ways));
  Check c;
  if (alone_first)  // m: on its vEUs, the 1-vEU Plan (which never idles a vEU), alone
    c.holds = !contended && m.size() == 3 && m[2] <= kStaleChoice * m[1] && kStaleChoice * m[0] >= m[1];
  else  // a 1-vEU choice, m[2]: the Plan on all n alone (as 4b times it)
    c.holds = !contended && (m.size() == 1 || m[0] <= kStaleChoice * m[1]) &&
              (m.size() < 3 || m[2] > kStaleChoice * m[0]);
  c.contended = contended;
  c.median_us = m[0];
  if (alone_first && m.size() == 3) c.alone_us = m[2];
  TESSERA_ASSIGN_OR_RETURN(c.predicted_us, planner.predict(chosen, timeline));
  return c;
}

// The winner's own in-run ratios from traced runs, and its makespan
// predicted with them.
Result<std::pair<std::vector<double>, double>> trace_timeline(Planner& planner, Program& p, const CompileConfig& o,
                                                              Candidate& w, bool* contended) {
  planner.install(w);
  Result<PlanTiming> t = o.plan_runner(p, 1, kTracedRuns, PlanRunWay::kTraced);
  planner.uninstall(w);
  if (!t.ok()) return t.status().with_context("measuring the chosen Plan");
  *contended = *contended || t->contended;
  std::vector<double> timeline = planner.in_run_ratios(w, *t);
  TESSERA_ASSIGN_OR_RETURN(double predicted, planner.predict(w, timeline));
  return std::make_pair(std::move(timeline), predicted);
}

Status choose_measured(Planner& planner, Program& p, const CompileConfig& o) {
  const int n = o.schedule.veus;
  const std::vector<int> counts = candidate_veus(n);
  ChoiceCache cache(o);
  const std::string key = planner.key(n);
  if (auto text = cache.get(key)) {
    ChoiceRecord r;
    if (record_parse(*text, p.steps.size(), &r) && r.veus <= n) {
      TESSERA_ASSIGN_OR_RETURN(
          Candidate c, planner.build(r.veus, r.policy, r.round == 2 ? &r.build : nullptr, true, r.round == 3));
      // An alone-first choice's timeline is its rTasks as they ran on one
      // thread (step 5): checked by its runs alone, which a host holding
      // the vEUs back does not slow, never traced again on its vEUs.
      TESSERA_ASSIGN_OR_RETURN(Check check, still_holds(planner, p, o, c, r.timeline, n, r.alone_first));
      // Checked while the host was not as its map describes (busy, or
      // delaying hand-offs): the check tells about that moment, not about
      // the choice, which was made and cached while the host was (a choice
      // made in such a moment is not cached). Kept as cached: measured
      // again now, a process would keep that moment's Plan for life.
      if (check.contended) {
        log_info("the host was not as its map describes while the cached plan choice (", r.veus, " of ", n,
                 " vEUs) was checked: kept as cached");
        return planner.finish(c, r.timeline, n, r.measured_us, r.candidates, r.alone_first ? &r.alone : nullptr);
      }
      auto off = [&](double predicted) { return std::abs(predicted / check.median_us - 1); };
      double error = r.alone_first && check.alone_us > 0
                         ? std::abs(planner.alone_us(c, r.alone) / check.alone_us - 1)
                         : off(check.predicted_us);
      const std::string slower_key = key + kSlowerSuffix;
      if (!r.alone_first && check.holds) {
        if (check.median_us <= (1 + kTimelineSlack) * check.predicted_us) {
          cache.erase(slower_key);  // as fast as predicted, or faster: a streak of slower ones ends
        } else {
          MapDoubt d = map_doubt_parse(cache.get(slower_key).value_or(""));
          if (!map_doubt_settles(&d, static_cast<int64_t>(std::time(nullptr)))) {
            cache.put(slower_key, map_doubt_text(d));
            log_info("the cached plan choice (", r.veus, " of ", n, " vEUs) ran ",
                     str_fixed(check.median_us / check.predicted_us, 2),
                     " times as long as its timeline predicts: kept as cached until ", kDoubtProcesses,
                     " processes over ", kDoubtSpanS / 60, " minutes find it so (", d.count, " so far)");
            return planner.finish(c, r.timeline, n, r.measured_us, r.candidates, nullptr);
          }
          cache.erase(slower_key);
        }
      }
      if (!r.alone_first && check.holds && error > kTimelineSlack) {
        // The same Plan on a host running faster or slower than when it
        // was chosen: its timeline traced again, kept where it predicts
        // this median better.
        bool contended = false;
        TESSERA_ASSIGN_OR_RETURN(auto traced, trace_timeline(planner, p, o, c, &contended));
        log_debug("the cached plan choice's timeline predicted ", check.predicted_us, " us against a median of ",
                  check.median_us, ": traced again, ", traced.second, contended ? " (the host not as mapped)" : "");
        if (!contended && off(traced.second) < error) {
          error = off(traced.second);
          r.timeline = std::move(traced.first);
          if (error <= kPredictionSlack) cache.put(key, record_text(r));
        }
      }
      if (check.holds && error <= kPredictionSlack)
        return planner.finish(c, r.timeline, n, r.measured_us, r.candidates, r.alone_first ? &r.alone : nullptr);
      log_info("the cached plan choice (", r.veus, " of ", n, " vEUs", r.alone_first ? ", alone first" : "",
               ") no longer ran fastest or as predicted: measuring again");
    }
  }
  // 1. A candidate per vEU count, run traced: its in-run ratios.
  std::vector<Candidate> cands;
  std::map<int, std::vector<double>> ratios;
  std::vector<double> traced_us;  // each one's median traced run
  bool contended = false;
  for (int u : counts) {
    TESSERA_ASSIGN_OR_RETURN(Candidate c, planner.build(u, Policy::kAuto, nullptr, cands.empty()));
    if (c.idles_a_veu()) continue;
    planner.install(c);
    Result<PlanTiming> t = o.plan_runner(p, 2, kTracedRuns, PlanRunWay::kTraced);
    planner.uninstall(c);
    if (!t.ok()) return t.status().with_context("measuring candidate Plans");
    contended = contended || t->contended;
    ratios[u] = planner.in_run_ratios(c, *t);
    traced_us.push_back(median(t->run_us));
    cands.push_back(std::move(c));
  }
  // 2. Planned again with the in-run costs; and, where the map charges
  // for crossing, as if it did not: a map measured in a moment the host
  // did not hold (a stalled vCPU makes crossing look dear) cannot keep
  // the Plans it would have ruled out from being timed.
  auto add = [&](Candidate c) {
    if (c.idles_a_veu()) return;
    for (const Candidate& x : cands)
      if (x.same_as(c)) return;
    cands.push_back(std::move(c));
  };
  for (const auto& [u, r] : ratios) {
    TESSERA_ASSIGN_OR_RETURN(Candidate c, planner.build(u, Policy::kAuto, &r, false));
    add(std::move(c));
  }
  for (int u : counts)
    if (u > 1 && planner.map_charges(u)) {
      TESSERA_ASSIGN_OR_RETURN(Candidate c, planner.build(u, Policy::kAuto, nullptr, false, true));
      add(std::move(c));
    }
  // 3. Timed in interleaved rounds.
  double fastest_us = 1e300;
  for (const double us : traced_us) fastest_us = std::min(fastest_us, us);
  const int runs = runs_per_round(fastest_us);
  std::vector<Candidate*> all;
  for (Candidate& c : cands) all.push_back(&c);
  std::vector<double> stalled;
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> medians,
                           time_interleaved(planner, p, o, all, kTimingRounds, runs, &contended, &stalled));
  // 4. The fastest median; then the fewest vEUs within kStaleChoice of it
  // (a tie within the noise goes to the Plan that uses less of the
  // machine, and a cached choice changes only past that margin). Where a
  // wider Plan stalled, the host ran the vEUs in turns for a moment: timed
  // again after a pause, each candidate keeping its best median, since a
  // moment only slows a Plan down.
  size_t best = 0;
  for (int sitting = 0;; ++sitting) {
    best = 0;
    for (size_t i = 1; i < cands.size(); ++i)
      if (medians[i] < medians[best]) best = i;
    const double fastest = medians[best];
    for (size_t i = 0; i < cands.size(); ++i)
      if (medians[i] <= kStaleChoice * fastest &&
          (cands[i].veus < cands[best].veus || (cands[i].veus == cands[best].veus && medians[i] < medians[best])))
        best = i;
    size_t stall = cands.size();
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i].veus > cands[best].veus && stalled[i] >= kStalledShare) stall = i;
    if (stall == cands.size()) break;
    // Still stalled after the pauses: how this Plan runs here, not a
    // moment (a cached choice is checked again at its next use).
    if (sitting == kMoreSittings) break;
    log_info("the ", cands[stall].veus, "-vEU Plan stalled in ", static_cast<int>(stalled[stall] * 100 + 0.5),
             "% of its timed runs (the host ran the vEUs in turns): timing the candidates again");
    std::this_thread::sleep_for(std::chrono::milliseconds(kSittingPauseMs));
    TESSERA_ASSIGN_OR_RETURN(std::vector<double> again,
                             time_interleaved(planner, p, o, all, kTimingRounds, runs, &contended, &stalled));
    for (size_t i = 0; i < cands.size(); ++i) medians[i] = std::min(medians[i], again[i]);
  }
  // 4b. The 1-vEU Plan won: a wider Plan's rTasks on one thread
  // are timed against it. Where they run as fast (within kStaleChoice;
  // kHeldBackAlone where the host held the vEUs back while the candidates
  // were timed), the wider Plan is kept and its runs start alone: the run-mode chooser
  // tries its vEUs now and then, so a choice timed while the host held
  // them back (ran them in turns, or on one core) does not keep one vEU
  // for the rest of the process once the host lets them run at once.
  // Which wider Plan: the one predicted fastest on its vEUs with its
  // rTasks' costs as they ran on one thread (the timeline it is kept
  // with), not the fastest while the host held them back: such a moment
  // favours the Plan that waits least, which can run far slower once the
  // vEUs run at once (a Transformer encoder: 67 us on its vEUs, where the
  // Plan predicted fastest ran 45-53).
  ChoiceRecord r;
  r.measured_us = medians[best];
  size_t chosen = best;
  bool held_back = contended;
  for (size_t i = 0; i < cands.size(); ++i)
    if (cands[i].veus > 1 && stalled[i] >= kStalledShare) held_back = true;
  if (cands[best].veus == 1) {
    // Its ratios for the 1-vEU Plan's in-run costs: a round-2 Plan's costs
    // carry its own in-run ratios, taken out.
    const auto alone_ratios = [&](const Candidate& c) {
      std::vector<double> a = ratios[1];
      if (c.round == 2)
        for (size_t s = 0; s < a.size(); ++s) a[s] = std::clamp(a[s] / ratios[c.veus][s], kMinRatio, kMaxRatio);
      return a;
    };
    size_t wide = cands.size();
    double wide_us = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (cands[i].veus == 1 || plan_one_thread_order(cands[i].plan).empty()) continue;
      TESSERA_ASSIGN_OR_RETURN(double us, planner.predict(cands[i], alone_ratios(cands[i])));
      if (wide == cands.size() || us < wide_us) wide = i, wide_us = us;
    }
    if (wide < cands.size()) {
      TESSERA_ASSIGN_OR_RETURN(
          std::vector<double> m,
          time_interleaved(planner, p, o, {&cands[best], &cands[wide]}, kTimingRounds, runs, &contended, nullptr,
                           {PlanRunWay::kPlan, PlanRunWay::kAlone}));
      if (m[1] <= (held_back ? kHeldBackAlone : kStaleChoice) * m[0]) {
        chosen = wide;
        r.alone_first = true;
        r.measured_us = m[1];
        // Its scheduled costs carry the in-run ratios it was built with
        // (round 2): taken out, the 1-vEU Plan's put in.
        r.alone = alone_ratios(cands[wide]);
      }
    }
  }
  // 5. The winner's own in-run costs, for its predicted timeline; traced
  // again, up to kTraceAttempts times, while that prediction misses its
  // median (on its vEUs) by more than kTimelineSlack, the best kept (a
  // trace that met a moment of the host would otherwise stay in the cache:
  // later compiles trace again only while the host is as mapped). A Plan
  // starting alone was timed while the host held its vEUs back: traced on
  // them, it would predict that moment (char-LM: 0.051 ms, where it runs
  // 0.029 once they run at once). Its timeline is its rTasks as they ran
  // on one thread instead, placed as on its vEUs.
  Candidate& w = cands[chosen];
  const double plan_us = medians[chosen];
  if (r.alone_first) r.timeline = r.alone;
  double best_off = 1e300;
  for (int attempt = 0; !r.alone_first && attempt < kTraceAttempts && best_off > kTimelineSlack; ++attempt) {
    TESSERA_ASSIGN_OR_RETURN(auto traced, trace_timeline(planner, p, o, w, &contended));
    const double off = std::abs(traced.second / plan_us - 1);
    if (off < best_off) {
      best_off = off;
      r.timeline = std::move(traced.first);
    }
  }
  // Every trace met a moment (a tiny model's traced runs all fall in
  // one): the Plan as built, on the costs of step 3, predicts instead
  // where that comes closer to its median.
  if (!r.alone_first && best_off > kTimelineSlack) {
    std::vector<double> as_built(p.steps.size(), 1.0);
    TESSERA_ASSIGN_OR_RETURN(double us, planner.predict(w, as_built));
    const double off = std::abs(us / plan_us - 1);
    if (off < best_off) {
      best_off = off;
      r.timeline = std::move(as_built);
    }
  }
  if (!r.alone_first && best_off > kPredictionSlack) contended = true;  // the host did not hold still long enough
  r.veus = w.veus;
  r.policy = w.plan.policy;
  r.round = w.round;
  if (w.round == 2) r.build = ratios[w.veus];
  for (size_t i = 0; i < cands.size(); ++i)
    r.candidates.push_back({cands[i].veus, cands[i].plan.policy, cands[i].plan.predicted_us, medians[i]});
  // A choice made while the host shared our cores is used, not kept.
  if (contended)
    log_warning("the host kept other work on this process's cores while Plans were timed: the choice (", w.veus,
                " vEUs) is not cached, the next compile measures again");
  else
    cache.put(key, record_text(r));
  return planner.finish(w, r.timeline, n, r.measured_us, r.candidates, r.alone_first ? &r.alone : nullptr);
}

}  // namespace

Status build_plan(Program& p, const CompileConfig& o, Profiler* prof) {
  // Every candidate's tilings share what the kernels prepare from the
  // weights (kernels/prepared.h): the graph holds still until we return.
  PreparedScope prepared;
  Planner planner(p, o, prof);
  const bool measure = o.plan_runner && o.schedule.policy == Policy::kAuto && o.schedule.veus > 1;
  if (measure) return choose_measured(planner, p, o);
  TESSERA_ASSIGN_OR_RETURN(Candidate c, planner.build(o.schedule.veus, o.schedule.policy, nullptr, true));
  planner.install(c);
  p.plan->requested_veus = o.schedule.veus;
  return Status();
}

}  // namespace tessera
