#include "compiler/variants.h"

#include <algorithm>
#include <cmath>

#include "compiler/program.h"

namespace tessera {

bool is_heavy_op(const std::string& op) {
  static const char* kHeavy[] = {"Conv", "ConvTranspose", "MatMul", "Gemm", "TesseraFusedConv", "TesseraFusedGemm",
                                 "TesseraFusedMatMul", "TesseraFusedElementwise", "TesseraAttention",
                                 "TesseraLstmCell", "TesseraGruCell", "TesseraRnnProj", "TesseraInvertedResidual",
                                 "TesseraBlockedConv"};
  for (const char* h : kHeavy)
    if (op == h) return true;
  return false;
}

namespace {

// The critical-path search tries alternatives for at most this many of the
// heaviest ops (each try is one scheduling pass).
constexpr size_t kMaxSearchedSteps = 48;
// An alternative is kept only if it shortens the predicted makespan by
// more than this fraction (costs are medians of noisy measurements).
constexpr double kMinGain = 0.005;
// Another rKernel than the op's default is offered only where its least
// work is this much below the default's: one algorithm against another
// measured alone is a poorer guide to a real run (other cache footprints,
// weights packed or not, an epilogue fused or not) than two tilings of one.
constexpr double kMinKernelGain = 0.10;

class Chooser {
 public:
  Chooser(Program& p, std::vector<std::vector<Variant>>& v, std::vector<double>& cost)
      : p_(p), v_(v), cost_(cost), cur_(p.steps.size(), 0) {
    cost_.resize(p.steps.size());
    for (size_t s = 0; s < p.steps.size(); ++s) cost_[s] = v_[s][0].cost_us;
  }
  size_t steps() const { return p_.steps.size(); }
  size_t count(size_t s) const { return v_[s].size(); }
  int64_t tasks(size_t s, size_t k) const { return k == cur_[s] ? p_.steps[s].op->tasks() : v_[s][k].op->tasks(); }
  double work(size_t s, size_t k) const { return static_cast<double>(tasks(s, k)) * v_[s][k].cost_us; }
  size_t current(size_t s) const { return cur_[s]; }
  std::vector<size_t> choices() const { return cur_; }

  void select(size_t s, size_t k) {
    if (k == cur_[s]) return;
    v_[s][cur_[s]].op = std::move(p_.steps[s].op);
    p_.steps[s].op = std::move(v_[s][k].op);
    p_.steps[s].kernel = v_[s][k].kernel;
    p_.steps[s].params = v_[s][k].params;
    cur_[s] = k;
    cost_[s] = v_[s][k].cost_us;
  }
  void select_all(const std::vector<size_t>& ks) {
    for (size_t s = 0; s < ks.size(); ++s) select(s, ks[s]);
  }
  // Least total work; ties go to fewer rTasks.
  size_t efficient(size_t s) const {
    size_t best = 0;
    for (size_t k = 1; k < count(s); ++k)
      if (work(s, k) < work(s, best) || (work(s, k) == work(s, best) && tasks(s, k) < tasks(s, best))) best = k;
    return best;
  }

 private:
  Program& p_;
  std::vector<std::vector<Variant>>& v_;
  std::vector<double>& cost_;
  std::vector<size_t> cur_;
};

Result<Plan> run_policy(const Program& p, const std::vector<double>& cost, const ScheduleOptions& o, Policy policy) {
  ScheduleOptions so = o;
  so.policy = policy;
  return schedule(p, cost, so);
}

// Wavefront: per BFS wave of ops, the fastest variant for an op's share of
// the vEUs when the wave cannot fill them, else the most efficient.
Result<Plan> wavefront_choice(Program& p, Chooser& c, const std::vector<double>& cost, const ScheduleOptions& o) {
  const int U = o.veus;
  // The kernels' own tilings are the baseline the choice must beat.
  c.select_all(std::vector<size_t>(c.steps(), 0));
  TESSERA_ASSIGN_OR_RETURN(Plan base, run_policy(p, cost, o, Policy::kWavefront));
  auto preds = step_predecessors(p);
  std::vector<int> level(c.steps(), 0);
  int levels = 0;
  for (size_t s = 0; s < c.steps(); ++s) {
    for (int q : preds[s]) level[s] = std::max(level[s], level[q] + 1);
    levels = std::max(levels, level[s] + 1);
  }
  std::vector<std::vector<size_t>> waves(levels);
  for (size_t s = 0; s < c.steps(); ++s) waves[level[s]].push_back(s);
  for (const auto& wave : waves) {
    int64_t eff_tasks = 0;
    double eff_work = 0;
    for (size_t s : wave) {
      eff_tasks += c.tasks(s, c.efficient(s));
      eff_work += c.work(s, c.efficient(s));
    }
    for (size_t s : wave) {
      size_t pick = c.efficient(s);
      if (eff_tasks < U && eff_work > 0) {
        double share = std::max(1.0, std::round(U * c.work(s, pick) / eff_work));
        auto latency = [&](size_t k) { return std::ceil(static_cast<double>(c.tasks(s, k)) / share) * c.work(s, k) /
                                              static_cast<double>(c.tasks(s, k)); };
        for (size_t k = 0; k < c.count(s); ++k)
          if (latency(k) < latency(pick)) pick = k;
      }
      c.select(s, pick);
    }
  }
  TESSERA_ASSIGN_OR_RETURN(Plan chosen, run_policy(p, cost, o, Policy::kWavefront));
  if (chosen.predicted_us < base.predicted_us) return chosen;
  c.select_all(std::vector<size_t>(c.steps(), 0));
  return base;
}

// Critical path: the most efficient variants, then a greedy pass over the
// heaviest ops keeping any alternative that shortens the makespan.
Result<Plan> critical_path_choice(Program& p, Chooser& c, const std::vector<double>& cost, const ScheduleOptions& o) {
  // Start from the better of the kernels' own tilings and the most
  // efficient ones, so the search never ends above the baseline.
  std::vector<size_t> cand, efficient(c.steps());
  c.select_all(std::vector<size_t>(c.steps(), 0));
  TESSERA_ASSIGN_OR_RETURN(Plan best, run_policy(p, cost, o, Policy::kCriticalPath));
  for (size_t s = 0; s < c.steps(); ++s) {
    efficient[s] = c.efficient(s);
    if (c.count(s) > 1) cand.push_back(s);
  }
  c.select_all(efficient);
  TESSERA_ASSIGN_OR_RETURN(Plan eff, run_policy(p, cost, o, Policy::kCriticalPath));
  if (eff.predicted_us < best.predicted_us) best = std::move(eff);
  else c.select_all(std::vector<size_t>(c.steps(), 0));
  std::stable_sort(cand.begin(), cand.end(),
                   [&](size_t a, size_t b) { return c.work(a, c.current(a)) > c.work(b, c.current(b)); });
  if (cand.size() > kMaxSearchedSteps) cand.resize(kMaxSearchedSteps);
  for (size_t s : cand) {
    size_t keep = c.current(s);
    for (size_t k = 0; k < c.count(s); ++k) {
      if (k == keep) continue;
      c.select(s, k);
      TESSERA_ASSIGN_OR_RETURN(Plan trial, run_policy(p, cost, o, Policy::kCriticalPath));
      if (trial.predicted_us < best.predicted_us * (1 - kMinGain)) {
        best = std::move(trial);
        keep = k;
      }
    }
    c.select(s, keep);
  }
  return best;
}

}  // namespace

void cost_variants(const Program& p, std::vector<std::vector<Variant>>& variants, const CostFn& cost_of,
                   const std::function<void(size_t, size_t)>& progress) {
  size_t total = 0, done = 0;
  for (const auto& v : variants) total += v.size();
  for (size_t s = 0; s < variants.size(); ++s)
    for (size_t k = 0; k < variants[s].size(); ++k) {
      Variant& v = variants[s][k];
      if (v.op == nullptr) {
        v.cost_us = cost_of(p.steps[s], s);
      } else {
        Step probe;
        probe.node = p.steps[s].node;
        probe.kernel = v.kernel;
        probe.params = v.params;
        probe.op = std::move(v.op);
        v.cost_us = cost_of(probe, s);
        v.op = std::move(probe.op);
      }
      if (progress) progress(++done, total);
    }
  // Other rKernels' variants that do not clearly beat the default's.
  for (size_t s = 0; s < variants.size(); ++s) {
    std::vector<Variant>& vs = variants[s];
    const RKernel* def = vs[0].kernel;
    auto work = [&](size_t k) {
      const int64_t t = k == 0 ? p.steps[s].op->tasks() : vs[k].op->tasks();
      return static_cast<double>(t) * vs[k].cost_us;
    };
    double best = work(0);
    for (size_t k = 1; k < vs.size(); ++k)
      if (vs[k].kernel == def) best = std::min(best, work(k));
    for (size_t k = vs.size(); k-- > 1;)
      if (vs[k].kernel != def && work(k) > (1 - kMinKernelGain) * best) vs.erase(vs.begin() + static_cast<long>(k));
  }
}

Result<std::vector<std::vector<Variant>>> make_variants(const Program& p, int veus, KernelTable kernels) {
  std::vector<std::vector<Variant>> out(p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    Variant cur;
    cur.kernel = st.kernel;
    cur.params = st.params;
    out[s].push_back(std::move(cur));
    if (veus < 1) continue;
    if (!is_heavy_op(st.node->op_type)) continue;
    // The step's rKernel first, so that ties keep it.
    std::vector<const RKernel*> ks = {st.kernel};
    for (const RKernel* k : kernels_for(kernels, *st.node))
      if (k != st.kernel) ks.push_back(k);
    for (const RKernel* k : ks) {
      std::vector<int64_t> seen;
      if (k == st.kernel) seen.push_back(st.op->tasks());
      for (int64_t want : {int64_t{0}, static_cast<int64_t>(veus), int64_t{1}}) {  // 0: the kernel's grain
        KernelParams kp;
        kp.tasks = want;
        TESSERA_ASSIGN_OR_RETURN(auto op, k->make(*st.node, kp));
        if (std::find(seen.begin(), seen.end(), op->tasks()) != seen.end()) continue;
        seen.push_back(op->tasks());
        Variant v;
        v.kernel = k;
        v.params = kp;
        v.op = std::move(op);
        out[s].push_back(std::move(v));
      }
    }
  }
  return out;
}

Result<Plan> schedule_with_variants(Program& p, std::vector<std::vector<Variant>>& variants,
                                    const ScheduleOptions& options, std::vector<double>* cost) {
  Chooser c(p, variants, *cost);
  Result<Plan> plan = internal_error("no policy");
  switch (options.policy) {
    case Policy::kRandom: plan = run_policy(p, *cost, options, Policy::kRandom); break;
    case Policy::kWavefront: plan = wavefront_choice(p, c, *cost, options); break;
    case Policy::kCriticalPath: plan = critical_path_choice(p, c, *cost, options); break;
    case Policy::kAuto: {
      TESSERA_ASSIGN_OR_RETURN(Plan w, wavefront_choice(p, c, *cost, options));
      std::vector<size_t> wk = c.choices();
      TESSERA_ASSIGN_OR_RETURN(Plan cp, critical_path_choice(p, c, *cost, options));
      if (w.predicted_us <= cp.predicted_us) {
        c.select_all(wk);
        plan = std::move(w);
      } else {
        plan = std::move(cp);
      }
      break;
    }
  }
  if (!plan.ok()) return plan.status();
  p.stats.rtasks = 0;
  p.max_scratch_bytes = 0;
  for (const Step& s : p.steps) {
    p.stats.rtasks += s.op->tasks();
    p.max_scratch_bytes = std::max(p.max_scratch_bytes, s.op->scratch_bytes());
  }
  return plan;
}

}  // namespace tessera
