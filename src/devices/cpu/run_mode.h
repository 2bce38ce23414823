// RunModeChooser: whether a Session's next run goes on the Plan's vEUs or
// on the calling thread alone.
//
// A Plan on N vEUs is chosen when the host lets them run at once. Hosts
// stop holding that mid-process: a hypervisor runs two vCPUs in turns, or
// another program shares a vEU's core (a time slice of milliseconds, on a
// run of one). Then a 2-vEU Plan can take longer on average than one
// thread doing all of its work. The same rTasks run on the caller in an
// order the Plan's waits allow (plan_one_thread_order) give the same bits,
// so the Session may switch at any run; this decides when, from what each
// run measures (its time, and each vEU's wait against the Plan's
// predicted waits):
//
//   plan    a run in which some vEU waited longer than predicted by more
//           than a quarter of the run is stalled; when kStalledOf of the
//           last kWindow plan runs were (and kProbeBackoff runs have gone
//           since the last probe), the next kAloneProbe runs go alone;
//   probe   if their mean beats the mean of the last kWindow plan runs by
//           5 %, runs go alone; else back to the Plan, and the next probe
//           waits twice as long (up to kMaxBackoff runs);
//   alone   every backoff runs (doubling while alone keeps winning), the
//           Plan runs kPlanProbe times and is kept if its mean beats the
//           last kWindow alone runs' by 5 %.
//
// Means, not medians: a Plan whose vEU loses its core for a time slice
// every few runs has a fast median and a slow mean. Probes cost at most a
// few slower runs per backoff. Pure arithmetic on a few doubles: no
// allocation, lock or system call.
//
// Thread-safety: one per Session, used by its running thread.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tessera {

class RunModeChooser {
 public:
  static constexpr size_t kWindow = 8;  // recent runs kept per mode
  static constexpr int kStalledOf = 3;  // stalled runs among the last kWindow plan runs that start a probe
  static constexpr int kAloneProbe = 4;
  static constexpr int kPlanProbe = 8;
  static constexpr int kProbeBackoff = 16;
  static constexpr int kMaxBackoff = 1024;
  // Waiting beyond the predicted by more than this fraction of a run.
  static constexpr double kStalledFraction = 0.25;
  // A mode must beat the other by this factor to take over.
  static constexpr double kMargin = 0.95;

  // `predicted_wait_us[u]`: how long vEU u waits within its list in the
  // predicted timeline; `predicted_us`: its makespan.
  RunModeChooser(std::vector<double> predicted_wait_us, double predicted_us)
      : predicted_wait_us_(std::move(predicted_wait_us)), predicted_us_(predicted_us) {}

  // Whether the next run goes on the calling thread alone.
  bool alone() const { return state_ == State::kAlone || state_ == State::kProbeAlone; }

  // A finished run: its time and each vEU's waits (a run alone: empty).
  void record(double run_us, std::span<const double> wait_us) {
    ++since_probe_;
    switch (state_) {
      case State::kPlan:
        push(plan_, run_us);
        stalled_ = (stalled_ << 1 | (stalled(run_us, wait_us) ? 1u : 0u)) & ((1u << kWindow) - 1);
        if (std::popcount(stalled_) >= kStalledOf && since_probe_ >= plan_backoff_) begin(State::kProbeAlone);
        break;
      case State::kProbeAlone:
        push(alone_, run_us);
        if (++probed_ < kAloneProbe) break;
        if (mean(alone_, kAloneProbe) < kMargin * mean(plan_, kWindow)) {
          begin(State::kAlone);
          alone_backoff_ = kProbeBackoff;
        } else {
          begin(State::kPlan);
          plan_backoff_ = std::min(2 * plan_backoff_, kMaxBackoff);
        }
        break;
      case State::kAlone:
        ++alone_runs_;
        push(alone_, run_us);
        if (since_probe_ >= alone_backoff_) begin(State::kProbePlan);
        break;
      case State::kProbePlan:
        push(plan_, run_us);
        if (++probed_ < kPlanProbe) break;
        if (mean(plan_, kPlanProbe) < kMargin * mean(alone_, kWindow)) {
          begin(State::kPlan);
          plan_backoff_ = kProbeBackoff;
        } else {
          begin(State::kAlone);
          alone_backoff_ = std::min(2 * alone_backoff_, kMaxBackoff);
        }
        break;
    }
  }

  // Runs that went alone outside probes (a Session that settled on it).
  int64_t settled_alone_runs() const { return alone_runs_; }

 private:
  enum class State { kPlan, kProbeAlone, kAlone, kProbePlan };
  struct Ring {
    std::array<double, kWindow> v{};
    size_t n = 0;  // pushed so far
  };
  static void push(Ring& r, double x) { r.v[r.n++ % kWindow] = x; }
  // The mean of the last k (at most kWindow) runs.
  static double mean(const Ring& r, size_t k) {
    const size_t n = std::min({k, r.n, kWindow});
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += r.v[(r.n - 1 - i) % kWindow];
    return n > 0 ? sum / static_cast<double>(n) : 0;
  }
  bool stalled(double run_us, std::span<const double> wait_us) const {
    if (predicted_us_ <= 0 || run_us <= 0) return false;
    const double scale = run_us / predicted_us_;  // a run uniformly slower waits longer too
    for (size_t u = 0; u < wait_us.size() && u < predicted_wait_us_.size(); ++u)
      if (wait_us[u] - predicted_wait_us_[u] * scale > kStalledFraction * run_us) return true;
    return false;
  }
  void begin(State s) {
    state_ = s;
    probed_ = 0;
    stalled_ = 0;
    if (s == State::kPlan || s == State::kAlone) since_probe_ = 0;
  }

  std::vector<double> predicted_wait_us_;
  double predicted_us_;
  State state_ = State::kPlan;
  Ring plan_, alone_;
  unsigned stalled_ = 0;  // bit i: the plan run i runs ago was stalled
  int probed_ = 0;
  int since_probe_ = kProbeBackoff;  // the first stalls may probe at once
  int plan_backoff_ = kProbeBackoff, alone_backoff_ = kProbeBackoff;
  int64_t alone_runs_ = 0;
};

}  // namespace tessera
