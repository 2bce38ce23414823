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

#include "compiler/plan.h"

namespace tessera {

// How long each vEU waits within its list in a Plan's predicted timeline:
// its last end less its busy time (µs).
inline std::vector<double> plan_predicted_waits_us(const Plan& plan) {
  std::vector<double> end(static_cast<size_t>(plan.veus), 0), busy(static_cast<size_t>(plan.veus), 0);
  for (const TaskPlacement& t : plan.placements) {
    end[static_cast<size_t>(t.veu)] = std::max(end[static_cast<size_t>(t.veu)], t.end_us);
    busy[static_cast<size_t>(t.veu)] += t.end_us - t.start_us;
  }
  for (size_t u = 0; u < end.size(); ++u) end[u] = std::max(0.0, end[u] - busy[u]);
  return end;
}

// Waiting beyond the predicted by more than this fraction of a run.
inline constexpr double kStalledFraction = 0.25;

// Whether a run of `run_us` in which vEU u waited `wait_us[u]` was
// stalled: some vEU waited longer than the Plan predicts (`predicted_wait_us`
// scaled by how much slower than `predicted_us` the whole run was) by more
// than kStalledFraction of the run.
inline bool run_stalled(std::span<const double> predicted_wait_us, double predicted_us, double run_us,
                        std::span<const double> wait_us) {
  if (predicted_us <= 0 || run_us <= 0) return false;
  const double scale = run_us / predicted_us;  // a run uniformly slower waits longer too
  for (size_t u = 0; u < wait_us.size() && u < predicted_wait_us.size(); ++u)
    if (wait_us[u] - predicted_wait_us[u] * scale > kStalledFraction * run_us) return true;
  return false;
}

class RunModeChooser {
 public:
  static constexpr size_t kWindow = 8;  // recent runs kept per mode
  static constexpr int kStalledOf = 3;  // stalled runs among the last kWindow plan runs that start a probe
  static constexpr int kAloneProbe = 4;
  static constexpr int kPlanProbe = 8;
  static constexpr int kProbeBackoff = 16;
  static constexpr int kMaxBackoff = 1024;
  // A mode must beat the other by this factor to take over.
  static constexpr double kMargin = 0.95;

  // `predicted_wait_us[u]`: how long vEU u waits within its list in the
  // predicted timeline; `predicted_us`: its makespan.
  RunModeChooser(std::vector<double> predicted_wait_us, double predicted_us)
      : predicted_wait_us_(std::move(predicted_wait_us)), predicted_us_(predicted_us) {}

  // Whether the next run goes on the calling thread alone.
  bool alone() const { return running() == kAloneMode; }

  // A finished run: its time and each vEU's waits (a run alone: empty).
  void record(double run_us, std::span<const double> wait_us) {
    ++since_probe_;
    const int ran = running();
    push(ring_[ran], run_us);
    if (!probing_) {
      // Alone, the Plan is probed every backoff runs; on the Plan, alone
      // is probed only after stalls.
      if (mode_ == kAloneMode) ++alone_runs_;
      else stalled_ = (stalled_ << 1 | (stalled(run_us, wait_us) ? 1u : 0u)) & ((1u << kWindow) - 1);
      const bool due = mode_ == kAloneMode || std::popcount(stalled_) >= kStalledOf;
      if (due && since_probe_ >= backoff_[mode_]) {
        probing_ = true;
        probed_ = 0;
      }
      return;
    }
    // A probe of the other mode: it takes over if its mean beats this
    // mode's recent mean by kMargin; else this mode's next probe waits
    // twice as long.
    const int runs = ran == kAloneMode ? kAloneProbe : kPlanProbe;
    if (++probed_ < runs) return;
    if (mean(ring_[ran], static_cast<size_t>(runs)) < kMargin * mean(ring_[mode_], kWindow)) {
      mode_ = ran;
      backoff_[mode_] = kProbeBackoff;
    } else {
      backoff_[mode_] = std::min(2 * backoff_[mode_], kMaxBackoff);
    }
    probing_ = false;
    stalled_ = 0;
    since_probe_ = 0;
  }

  // Runs that went alone outside probes (a Session that settled on it).
  int64_t settled_alone_runs() const { return alone_runs_; }

 private:
  static constexpr int kPlanMode = 0, kAloneMode = 1;
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
    return run_stalled(predicted_wait_us_, predicted_us_, run_us, wait_us);
  }
  // The mode this run goes in: the other one while probing.
  int running() const { return probing_ ? 1 - mode_ : mode_; }

  std::vector<double> predicted_wait_us_;
  double predicted_us_;
  int mode_ = kPlanMode;
  bool probing_ = false;
  Ring ring_[2];          // recent runs, per mode
  int backoff_[2] = {kProbeBackoff, kProbeBackoff};  // per mode: runs in it before it probes the other
  unsigned stalled_ = 0;  // bit i: the plan run i runs ago was stalled
  int probed_ = 0;
  int since_probe_ = kProbeBackoff;  // the first stalls may probe at once
  int64_t alone_runs_ = 0;
};

}  // namespace tessera
