#include "devices/cpu/plan_runner.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <random>
#include <thread>

#include "base/clock.h"
#include "compiler/program.h"
#include "devices/cpu/cpu_vdevice.h"
#include "devices/cpu/engine.h"
#include "devices/cpu/run_mode.h"
#include "topology/calibrate.h"

namespace tessera {
namespace {

// Traced, untraced runs alternate for at least this long in all, so that
// what tracing adds to a run of a few µs is seen over enough of them.
constexpr double kTracedPairsUs = 2000;
constexpr int kMaxTracedPairs = 200;

Result<PlanTiming> run_plan(const Program& p, int warmup, int runs, PlanRunWay way, bool pin,
                            double expected_gflops, const std::vector<int>& slots, double expected_handoff_ns) {
  if (!p.plan) return failed_precondition("the runner needs a Program with a Plan");
  const Plan& plan = *p.plan;
  const bool trace = way == PlanRunWay::kTraced, alone = way == PlanRunWay::kAlone;
  const std::vector<std::pair<int32_t, int64_t>> order = alone ? plan_one_thread_order(plan) : decltype(order){};
  if (alone && order.empty()) return internal_error("the Plan's waits leave no order for one thread");
  void* arena = aligned_alloc_pages(p.memory.arena_bytes);  // as the Engine's (engine.cc)
  std::memset(arena, 0, p.memory.arena_bytes);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (int slot : p.input_slots) {
    const Slot& s = p.slots[static_cast<size_t>(slot)];
    if (s.value->dtype != DType::kFloat32 || s.constant) continue;
    float* x = reinterpret_cast<float*>(static_cast<char*>(arena) + s.offset);
    for (size_t i = 0; i < s.bytes / sizeof(float); ++i) x[i] = uniform(rng);
  }
  PlanTiming t;
  // Measure while every vEU's core is ours (topology/calibrate.h).
  constexpr int kQuietTries = 10;
  int tries = 0;
  const std::vector<int> used = veu_slots(slots, plan.veus);
  while (!host_quiet(cpu_topology(), used, expected_gflops, plan.veus > 1 ? expected_handoff_ns : 0) &&
         ++tries < kQuietTries)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  t.contended = tries == kQuietTries;
  {
    const ResolvedArgs args = resolve_args(p, arena);
    CpuVDevice device(plan.veus, p.max_scratch_bytes, pin, used);
    // Timed as the engine runs it by default, waiters taking rTasks; the
    // traced runs and the untraced ones they are checked against, as placed.
    PlanBalance balance = trace ? PlanBalance() : PlanBalance(plan);
    const int64_t w0 = now_ns();
    auto run_once = [&] {
      if (alone) device.run_alone(order, args.steps);
      else device.run(plan, args.steps, false, &balance);
    };
    for (int i = 0; i < warmup; ++i) run_once();
    const double warm_us = warmup > 0 ? static_cast<double>(now_ns() - w0) / 1e3 / warmup : 0;
    std::vector<std::pair<int64_t, int64_t>> spans(plan.placements.size());
    std::vector<std::vector<double>> samples(trace ? plan.placements.size() : 0);
    const std::vector<double> predicted_waits = plan_predicted_waits_us(plan);
    std::vector<double> waits(static_cast<size_t>(plan.veus), 0);
    auto timed_run = [&] {
      const int64_t t0 = now_ns();
      run_once();
      return static_cast<double>(now_ns() - t0) / 1e3;
    };
    // Traced: each traced run is followed by an untraced one, which tells
    // what tracing costs beyond its clock reads (below).
    int total = runs;
    if (trace && warm_us > 0)
      total = std::max(runs, std::min(kMaxTracedPairs, static_cast<int>(kTracedPairsUs / (2 * warm_us))));
    std::vector<double> untraced_us;
    std::vector<std::vector<double>> untraced_wait_us(static_cast<size_t>(plan.veus));
    for (int i = 0; i < total; ++i) {
      if (trace) device.set_trace(&spans);
      const double us = timed_run();
      t.run_us.push_back(us);
      for (size_t u = 0; u < waits.size(); ++u) waits[u] = static_cast<double>(device.wait_ns()[u]) / 1e3;
      if (!trace && !alone && run_stalled(predicted_waits, plan.predicted_us, us, waits)) ++t.stalled_runs;
      for (size_t k = 0; k < samples.size(); ++k)
        samples[k].push_back(static_cast<double>(spans[k].second - spans[k].first) / 1e3);
      if (trace) {
        device.set_trace(nullptr);
        untraced_us.push_back(timed_run());
        for (size_t u = 0; u < untraced_wait_us.size(); ++u)
          untraced_wait_us[u].push_back(static_cast<double>(device.wait_ns()[u]) / 1e3);
      }
    }
    device.set_trace(nullptr);
    auto med = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    for (std::vector<double>& v : samples) t.task_us.push_back(med(v));
    // A traced rTask's span is not what the rTask costs in an untraced
    // run: it holds a clock read, the reads keep the core from overlapping
    // the rTask with its neighbours (for rTasks of a few hundred ns a good
    // part of their time), and it leaves out what the executor spends
    // between rTasks. All three are about the same for every rTask. So
    // every span moves by one amount: the one that makes a vEU take, in
    // rTasks and their waits, what it took untraced (the run's median,
    // less its median wait). A vEU that ends its list before the run ends
    // idles there without waiting, so what it took untraced is
    // overstated and the amount it asks for too small: the largest
    // amount any vEU asks for is kept.
    if (trace && !untraced_us.empty()) {
      const size_t n = static_cast<size_t>(plan.veus);
      std::vector<double> work(n, 0);
      std::vector<int64_t> count(n, 0);
      for (size_t k = 0; k < plan.placements.size(); ++k) {
        work[static_cast<size_t>(plan.placements[k].veu)] += t.task_us[k];
        ++count[static_cast<size_t>(plan.placements[k].veu)];
      }
      double shift = -1e300;
      for (size_t u = 0; u < n; ++u)
        if (count[u] > 0) {
          const double busy = std::max(0.0, med(untraced_us) - med(untraced_wait_us[u]));
          shift = std::max(shift, (work[u] - busy) / static_cast<double>(count[u]));
        }
      if (shift > -1e300)
        for (double& us : t.task_us) us = std::max(0.0, us - shift);
    }
  }
  aligned_free64(arena);
  return t;
}

}  // namespace

PlanRunner cpu_plan_runner(bool pin, double expected_gflops, std::vector<int> slots, double expected_handoff_ns) {
  return [pin, expected_gflops, slots = std::move(slots), expected_handoff_ns](const Program& p, int warmup, int runs,
                                                                              PlanRunWay way) {
    return run_plan(p, warmup, runs, way, pin, expected_gflops, slots, expected_handoff_ns);
  };
}

}  // namespace tessera
