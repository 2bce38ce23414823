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
//           than a quarter of the run is stalled, and so is one in which
//           every vEU's list ran (run less its waits) kInflated times its
//           predicted time: a host that runs the vEUs in turns on one
//           core stretches every list's rTasks alike, and the waits show
//           nothing; when kStalledOf of the
//           last kWindow plan runs were, or their mean is above the mean
//           of the last runs that went alone (a thread alone runs at its
//           speed whatever the host does to the others; a Plan whose
//           predicted timeline was traced while the host held its vEUs
//           back, Plan::alone_first, stalls by nothing it predicts), and
//           kProbeBackoff runs have gone since the last probe, the next
//           kAloneProbe runs go alone;
//   probe   if their mean beats the mean of the plan runs since the
//           oldest stalled one among the last kWindow (of all kWindow
//           where they did not stall) by 5 %, runs go alone; else back to
//           the Plan, and the next probe waits twice as long (up to
//           kMaxBackoff runs, and at most kMaxProbeGapNs of time); a first
//           run alone kHopeless slower than that mean ends the probe at
//           once;
//   alone   after kAloneBackoff runs, then every backoff runs (doubling
//           while alone keeps winning, but never more than kMaxProbeGapNs
//           apart), the Plan runs kPlanProbe times and is kept if the mean
//           of all but its first kPlanProbeWarmup (the other vEUs' threads
//           waking from their park, their caches cold) beats the last
//           kWindow alone runs' by 5 %; its first timed run kHopeless
//           slower than those ends the probe at once.
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

// Whether, in a run of `run_us` in which vEU u waited `wait_us[u]`, some
// vEU waited longer than the Plan predicts (`predicted_wait_us` scaled by
// how much slower than `predicted_us` the whole run was) by more than
// `fraction` of the run: stalled, at kStalledFraction.
inline bool run_stalled(std::span<const double> predicted_wait_us, double predicted_us, double run_us,
                        std::span<const double> wait_us, double fraction = kStalledFraction) {
  if (predicted_us <= 0 || run_us <= 0) return false;
  const double scale = run_us / predicted_us;  // a run uniformly slower waits longer too
  for (size_t u = 0; u < wait_us.size() && u < predicted_wait_us.size(); ++u)
    if (wait_us[u] - predicted_wait_us[u] * scale > fraction * run_us) return true;
  return false;
}

// Every list of a run taking this many times its predicted busy time
// (see RunModeChooser). Measured Plans come within about a fifth of their
// predictions; a host running two vEUs in turns on one core takes twice
// (ShuffleNet's 2-vEU Plan: 4.2 ms against 2.1 predicted, 3.7 alone).
inline constexpr double kInflated = 1.6;

// Whether every vEU's list in a run of `run_us`, vEU u waiting
// `wait_us[u]`, ran `factor` times its predicted busy time or more.
inline bool run_inflated(std::span<const double> predicted_wait_us, double predicted_us, double run_us,
                         std::span<const double> wait_us, double factor = kInflated) {
  if (predicted_us <= 0 || run_us <= 0 || wait_us.empty() || wait_us.size() > predicted_wait_us.size()) return false;
  for (size_t u = 0; u < wait_us.size(); ++u) {
    const double predicted_busy = predicted_us - predicted_wait_us[u];
    if (predicted_busy <= 0 || run_us - wait_us[u] < factor * predicted_busy) return false;
  }
  return true;
}

// The last kRunWindow run times of one way of running.
inline constexpr size_t kRunWindow = 8;
struct RunRing {
  std::array<double, kRunWindow> v{};
  size_t n = 0;  // pushed so far
  void push(double x) { v[n++ % kRunWindow] = x; }
  // The mean of the last k (at most kRunWindow) runs.
  double mean(size_t k) const {
    const size_t m = std::min({k, n, kRunWindow});
    double sum = 0;
    for (size_t i = 0; i < m; ++i) sum += v[(n - 1 - i) % kRunWindow];
    return m > 0 ? sum / static_cast<double>(m) : 0;
  }
  // The median of the last k (at most kRunWindow) runs.
  double median(size_t k) const {
    const size_t m = std::min({k, n, kRunWindow});
    if (m == 0) return 0;
    std::array<double, kRunWindow> last{};
    for (size_t i = 0; i < m; ++i) {  // insertion sort: at most kRunWindow values
      const double x = v[(n - 1 - i) % kRunWindow];
      size_t j = i;
      for (; j > 0 && last[j - 1] > x; --j) last[j] = last[j - 1];
      last[j] = x;
    }
    return m % 2 == 1 ? last[m / 2] : (last[m / 2 - 1] + last[m / 2]) / 2;
  }
};

// Two ways of running, one kept and the other probed now and then: the
// state the choosers below share. Outside probes runs go the kept way;
// a probe runs the other way a few times, then either takes over or, if
// it lost, makes the kept way's next probe wait twice as long, in runs,
// but never more than kMaxProbeGapNs of time: a backoff counted in runs
// lasts minutes where runs are sparse (a process serving now and then, a
// benchmark running other systems in between), long after the host state
// it backed off from (a slow state lasts 10-40 s on the hosts measured).
struct TwoWays {
  static constexpr int kProbeBackoff = 16;  // runs before the first probe, and after a switch
  static constexpr int kMaxBackoff = 1024;
  static constexpr int64_t kMaxProbeGapNs = int64_t{5} * 1000 * 1000 * 1000;
  int kept = 0;
  bool probing = false;
  RunRing ring[2];  // recent runs, per way
  int backoff[2] = {kProbeBackoff, kProbeBackoff};  // per way: runs kept before it probes the other
  int first_backoff[2] = {kProbeBackoff, kProbeBackoff};  // per way: its backoff when it takes over
  int probed = 0;
  int since_probe = 0;
  int64_t last_probe_ns = 0;  // when the last probe started (or the first run ended); 0: unknown

  // The way this run goes: the other one while probing.
  int running() const { return probing ? 1 - kept : kept; }
  // A run that ended at `end_ns` (a steady clock; 0: unknown).
  void ran(int64_t end_ns) {
    ++since_probe;
    if (last_probe_ns == 0) last_probe_ns = end_ns;
  }
  // Whether the kept way has waited out its backoff by the run that ended
  // at `end_ns`: backoff runs, or kMaxProbeGapNs and its first backoff's runs.
  bool waited(int64_t end_ns) const {
    return since_probe >= backoff[kept] || (end_ns > 0 && last_probe_ns > 0 && end_ns - last_probe_ns >= kMaxProbeGapNs &&
                                            since_probe >= first_backoff[kept]);
  }
  void start_probe(int64_t end_ns = 0) {
    probing = true;
    probed = 0;
    last_probe_ns = end_ns;
  }
  // After a probe's last run: the probed way is kept if its mean over its
  // last `probe_runs` beats the kept way's recent mean by `margin`.
  // Returns whether it took over.
  bool end_probe(size_t probe_runs, double margin) {
    return finish_probe(ring[1 - kept].mean(probe_runs) < margin * ring[kept].mean(kRunWindow));
  }
  // After a probe's last run, whether the probed way `won`: it is kept,
  // or the kept way's next probe waits twice as long. Returns `won`.
  bool finish_probe(bool won) {
    const int other = 1 - kept;
    if (won) {
      kept = other;
      backoff[kept] = first_backoff[kept];
    } else {
      backoff[kept] = std::min(2 * backoff[kept], kMaxBackoff);
    }
    probing = false;
    since_probe = 0;
    return won;
  }
};

class RunModeChooser {
 public:
  static constexpr size_t kWindow = kRunWindow;  // recent runs kept per mode
  static constexpr int kStalledOf = 3;  // stalled runs among the last kWindow plan runs that start a probe
  static constexpr int kAloneProbe = 4;
  static constexpr int kPlanProbe = 8;
  static constexpr int kPlanProbeWarmup = 2;
  static constexpr int kProbeBackoff = TwoWays::kProbeBackoff;
  // Runs alone before the Plan's first probe, from the start (alone_first)
  // or after going alone: the moments that send a session alone often end
  // within a batch, and a probe that finds the host still slow ends after
  // its first timed run (kHopeless), so probing soon costs about
  // kPlanProbeWarmup + 1 runs where waiting kProbeBackoff runs alone costs
  // the Plan's whole gain on each (MobileNetV2: 7.2 ms alone against 3.8).
  static constexpr int kAloneBackoff = 4;
  static constexpr int kMaxBackoff = TwoWays::kMaxBackoff;
  // A mode must beat the other by this factor to take over.
  static constexpr double kMargin = 0.95;
  // A probe's first timed run this much slower than the way it probes
  // against ends it (margin for a first run alone that also brings the
  // other list's data into this core's caches).
  static constexpr double kHopeless = 1.3;
  static constexpr int64_t kMaxProbeGapNs = TwoWays::kMaxProbeGapNs;

  // `predicted_wait_us[u]`: how long vEU u waits within its list in the
  // predicted timeline; `predicted_us`: its makespan. `any_pu`: a run
  // alone may go on any vEU's PU (pinned vEUs), not only the caller's.
  // `alone_first`: runs start alone (Plan::alone_first), the Plan first
  // probed after kProbeBackoff runs.
  RunModeChooser(std::vector<double> predicted_wait_us, double predicted_us, bool any_pu = false,
                 bool alone_first = false)
      : predicted_wait_us_(std::move(predicted_wait_us)), predicted_us_(predicted_us), any_pu_(any_pu),
        beyond_(predicted_wait_us_.size(), 0) {
    w_.first_backoff[kAloneMode] = w_.backoff[kAloneMode] = kAloneBackoff;
    if (alone_first) w_.kept = kAloneMode;
    else w_.since_probe = kProbeBackoff;  // the first stalls may probe at once
  }

  // Whether the next run goes on one PU alone.
  bool alone() const { return w_.running() == kAloneMode; }
  // The vEU whose PU runs it alone: 0 (the caller's), or with any_pu the
  // one whose list waited longest beyond its prediction in the plan runs
  // before the probe (it waited on the others: its PU ran fastest).
  int alone_veu() const { return alone_veu_; }

  // A finished run: its time and each vEU's waits (a run alone: empty).
  // `exchanged`: a 2-vEU Plan's lists ran on each other's PUs (list u's
  // waits at u, on PU 1 - u). `end_ns`: when it ended (a steady clock;
  // 0: unknown, the backoff counted in runs only).
  void record(double run_us, std::span<const double> wait_us, bool exchanged = false, int64_t end_ns = 0) {
    w_.ran(end_ns);
    const int ran = w_.running();
    w_.ring[ran].push(run_us);
    if (!w_.probing) {
      // Alone, the Plan is probed every backoff runs; on the Plan, alone
      // is probed only after stalls.
      if (w_.kept == kAloneMode) ++alone_runs_;
      else stalled_ = (stalled_ << 1 | (stalled(run_us, wait_us) ? 1u : 0u)) & ((1u << kWindow) - 1);
      if (w_.kept == kPlanMode && any_pu_) note_waits(run_us, wait_us, exchanged);
      const bool due = w_.kept == kAloneMode || std::popcount(stalled_) >= kStalledOf || alone_ran_faster();
      if (due && w_.waited(end_ns)) {
        if (w_.kept == kPlanMode && any_pu_)
          alone_veu_ = static_cast<int>(std::max_element(beyond_.begin(), beyond_.end()) - beyond_.begin());
        reference_us_ = w_.kept == kAloneMode ? w_.ring[kAloneMode].mean(kWindow) : plan_reference_us();
        w_.start_probe(end_ns);
      }
      return;
    }
    // A probe of the other mode: it takes over if its mean beats the
    // reference by kMargin. A first timed run slower than the reference by
    // kHopeless ends the probe at once: more such runs would only lengthen
    // the tail (ResNet-18's alone runs took 1.5x its median; a Plan probed
    // while the host still holds its vEUs back runs slower than alone).
    const int runs = ran == kAloneMode ? kAloneProbe : kPlanProbe;
    const int first_timed = ran == kAloneMode ? 0 : kPlanProbeWarmup;
    if (w_.probed == first_timed && run_us > kHopeless * reference_us_) {
      w_.finish_probe(false);
      stalled_ = 0;
      return;
    }
    if (++w_.probed < runs) return;
    w_.finish_probe(w_.ring[ran].mean(static_cast<size_t>(runs - first_timed)) < kMargin * reference_us_);
    stalled_ = 0;
  }

  // Runs that went alone outside probes (a Session that settled on it).
  int64_t settled_alone_runs() const { return alone_runs_; }

 private:
  static constexpr int kPlanMode = 0, kAloneMode = 1;
  // The last kWindow plan runs' mean above that of the last runs alone.
  bool alone_ran_faster() const {
    return w_.ring[kAloneMode].n > 0 && w_.ring[kPlanMode].n >= kWindow &&
           w_.ring[kPlanMode].mean(kWindow) > w_.ring[kAloneMode].mean(kWindow);
  }
  // What a probe of runs alone is judged against: the mean of the plan
  // runs since the oldest stalled one among the last kWindow where enough
  // stalled to start it (the host changed there: the runs before it ran
  // in another state, and would make a Plan that now stalls on every run
  // look faster than it is), else of the last kWindow.
  double plan_reference_us() const {
    const int since = std::popcount(stalled_) >= kStalledOf ? std::bit_width(stalled_) : static_cast<int>(kWindow);
    return w_.ring[kPlanMode].mean(static_cast<size_t>(since));
  }
  bool stalled(double run_us, std::span<const double> wait_us) const {
    return run_stalled(predicted_wait_us_, predicted_us_, run_us, wait_us) ||
           run_inflated(predicted_wait_us_, predicted_us_, run_us, wait_us);
  }
  // Each PU's list's wait beyond its prediction, as a fraction of the run,
  // decayed over recent plan runs (no allocation: beyond_ is sized once).
  void note_waits(double run_us, std::span<const double> wait_us, bool exchanged) {
    if (run_us <= 0 || predicted_us_ <= 0) return;
    const double scale = run_us / predicted_us_;
    for (size_t u = 0; u < wait_us.size() && u < beyond_.size(); ++u) {
      const size_t pu = exchanged && beyond_.size() == 2 ? 1 - u : u;
      const double over = (wait_us[u] - predicted_wait_us_[u] * scale) / run_us;
      beyond_[pu] = 0.75 * beyond_[pu] + over;
    }
  }

  std::vector<double> predicted_wait_us_;
  double predicted_us_;
  bool any_pu_ = false;
  std::vector<double> beyond_;  // per PU (vEU thread): note_waits
  int alone_veu_ = 0;
  double reference_us_ = 0;  // the running probe's: the kept way's mean when it started
  TwoWays w_;             // way 0 the Plan, 1 alone
  unsigned stalled_ = 0;  // bit i: the plan run i runs ago was stalled
  int64_t alone_runs_ = 0;
};

// ListExchangeChooser: whether a 2-vEU Plan's next run goes with its two
// lists on each other's PUs.
//
// A static Plan on 2 vEUs often gives one list the critical path and the
// other slack (NASNet-like's measured Plan: one list busy twice as long as
// the other). Hosts slow one vCPU at a time, for seconds or minutes
// (docs/notes/2026-11-27-uneven-vcpus-and-warm-orders.md): when it is the
// PU running the critical list, every run waits for it, where the other
// list would have absorbed the slowdown in its slack. The lists do not
// care which PU runs them (each has its own counter and scratch: the same
// bits), so the Session may exchange them at any run:
//
//   probe   when some list waited beyond its predicted waits by more than
//           kSkewFraction of the run in kSkewedOf of the last kWindow
//           runs (the other list's PU ran slow), and backoff runs have
//           gone since the last probe, the next kProbe runs go the other
//           way (on an even host nothing is probed: probes are slow runs);
//   switch  if the probe's mean, less its first kProbeWarmup runs (data
//           moving to the other PUs' caches), beats the last kWindow
//           runs' by kMargin, the other way it is, and its next probe
//           comes after kProbeBackoff runs; else the next probe waits
//           twice as long (up to kMaxBackoff runs, and
//           at most TwoWays::kMaxProbeGapNs of time).
//
// Pure arithmetic on a few doubles, like RunModeChooser: no allocation,
// lock or system call. Thread-safety: one per Session, used by its running
// thread.
class ListExchangeChooser {
 public:
  static constexpr size_t kWindow = kRunWindow;
  static constexpr int kProbe = 8;
  static constexpr int kProbeWarmup = 2;
  static constexpr int kProbeBackoff = TwoWays::kProbeBackoff;
  static constexpr int kMaxBackoff = TwoWays::kMaxBackoff;
  static constexpr int kSkewedOf = 3;
  static constexpr double kSkewFraction = 0.1;
  static constexpr double kMargin = RunModeChooser::kMargin;

  // As RunModeChooser's: each list's predicted waits and the makespan.
  ListExchangeChooser(std::vector<double> predicted_wait_us, double predicted_us)
      : predicted_wait_us_(std::move(predicted_wait_us)), predicted_us_(predicted_us) {
    w_.since_probe = kProbeBackoff;  // the first skew may probe at once
  }

  // Whether the next run of the Plan goes with its lists exchanged.
  bool exchanged() const { return w_.running() == 1; }

  // A finished run of the Plan (not one alone): its time and each list's
  // waits (list u's at u, whichever PU ran it); `end_ns` as
  // RunModeChooser::record's.
  void record(double run_us, std::span<const double> wait_us, int64_t end_ns = 0) {
    w_.ring[w_.running()].push(run_us);
    w_.ran(end_ns);
    if (!w_.probing) {
      const bool skew = run_stalled(predicted_wait_us_, predicted_us_, run_us, wait_us, kSkewFraction);
      skewed_ = (skewed_ << 1 | (skew ? 1u : 0u)) & ((1u << kWindow) - 1);
      if (std::popcount(skewed_) >= kSkewedOf && w_.waited(end_ns)) w_.start_probe(end_ns);
      return;
    }
    if (++w_.probed < kProbe) return;
    switches_ += w_.end_probe(kProbe - kProbeWarmup, kMargin) ? 1 : 0;
    skewed_ = 0;
  }

  // How often the lists changed PUs for good (outside probes).
  int64_t switches() const { return switches_; }

 private:
  std::vector<double> predicted_wait_us_;
  double predicted_us_;
  TwoWays w_;            // way 0 as placed, 1 exchanged
  unsigned skewed_ = 0;  // bit i: the run i runs ago had a list wait beyond its prediction
  int64_t switches_ = 0;
};

// SpareCoreChooser: which of a session's two PUs runs a 1-vEU Plan's list.
//
// The measured plan choice may keep one vEU of the two a session holds
// (a small model whose split costs more than it saves). Hosts slow one
// vCPU at a time: the same 1-vEU Plan runs about 70 µs on one core and
// 100 on the other for seconds, then the other way round
// (docs/notes/2026-11-27-uneven-vcpus-and-warm-orders.md). The list may
// run on either PU (the same bits), so the Session moves it to the faster
// one. One list has no waits to show skew; its run time does:
//
//   probe   when the median of the last kWindow runs is above kSlow times
//           the best such median seen (this PU slowed), and backoff runs
//           have gone since the last probe, the next kProbe runs go on the
//           other PU; on an even host nothing is probed;
//   switch  if the probe's median, less its first kProbeWarmup runs (the
//           weights moving to the other core's caches), beats the last
//           kWindow runs' by kMargin, the other PU it is; else the next
//           probe waits twice as long (up to kMaxBackoff runs, and
//           at most TwoWays::kMaxProbeGapNs of time). A PU that
//           slows again after kRecoveredRuns near its best (within
//           kRecovered) probes at once;
//   return  on the spare, the caller's PU is also probed every backoff
//           runs (counted in runs, however far apart), and wins a tie:
//           there the list runs without a hand-off each way (a run of
//           8 µs took 0.06-0.12 µs longer on the spare), and the moment
//           that sent it away passes, while the spare's runs, that
//           hand-off included, rarely come to kSlow times the best.
//
// Medians, not means: one run that lost a time slice would otherwise look
// like a slow PU, and a run of a few tens of µs loses one often. Pure
// arithmetic on a few doubles, like the choosers above.
// Thread-safety: one per Session, used by its running thread.
class SpareCoreChooser {
 public:
  static constexpr size_t kWindow = kRunWindow;
  static constexpr int kProbe = 8;
  static constexpr int kProbeWarmup = 2;
  static constexpr int kProbeBackoff = TwoWays::kProbeBackoff;
  static constexpr int kMaxBackoff = TwoWays::kMaxBackoff;
  static constexpr double kSlow = 1.15;
  static constexpr double kRecovered = 1.05;  // near its best
  static constexpr int64_t kRecoveredRuns = 256;  // that long near its best: the next slowdown is news
  static constexpr double kMargin = RunModeChooser::kMargin;

  SpareCoreChooser() { w_.since_probe = kProbeBackoff; }

  // Whether the next run goes on the spare PU.
  bool spare() const { return w_.running() == kSpare; }

  // A finished run and its time; `end_ns` as RunModeChooser::record's.
  void record(double run_us, int64_t end_ns = 0) {
    const int ran = w_.running();
    w_.ring[ran].push(run_us);
    w_.ran(end_ns);
    if (!w_.probing) {
      if (w_.ring[ran].n < kWindow) return;
      const double m = w_.ring[ran].median(kWindow);
      best_ = std::min(best_, m);
      // A slowdown after the PU ran near its best for kRecoveredRuns is
      // news: it probes without waiting out the backoff that earlier
      // losses built. (Sooner, a PU whose runs straddle the thresholds
      // would probe every few dozen runs, and every probe that loses is
      // kProbe slow runs.)
      if (m < kRecovered * best_) {
        ++recovered_;
      } else if (m > kSlow * best_) {
        if (recovered_ >= kRecoveredRuns) w_.backoff[w_.kept] = kProbeBackoff;
        recovered_ = 0;
        if (w_.waited(end_ns)) w_.start_probe(end_ns);
        return;
      }
      // On the spare, the caller's PU is probed every backoff runs, counted
      // in runs alone: the return wins back a hand-off, not a slowdown.
      if (w_.kept == kSpare && w_.since_probe >= w_.backoff[kSpare]) w_.start_probe(end_ns);
      return;
    }
    if (++w_.probed < kProbe) return;
    const double probed = w_.ring[1 - w_.kept].median(kProbe - kProbeWarmup);
    const double kept = w_.ring[w_.kept].median(kWindow);
    const bool won = w_.kept == kSpare ? probed <= kept : probed < kMargin * kept;
    switches_ += w_.finish_probe(won) ? 1 : 0;
    recovered_ = 0;
  }

  // How often the list changed PUs for good (outside probes).
  int64_t switches() const { return switches_; }

 private:
  static constexpr int kSpare = 1;
  TwoWays w_;  // way 0 the caller's PU, kSpare the spare
  double best_ = 1e300;  // the lowest median of kWindow runs outside probes
  int64_t recovered_ = 0;  // runs near its best since the kept PU last ran slow
  int64_t switches_ = 0;
};

}  // namespace tessera
