#include "compiler/plan.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <random>
#include <tuple>
#include <unordered_map>

#include "base/check.h"
#include "base/strings.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"
#include "topology/host_map.h"

namespace tessera {

std::string_view policy_name(Policy p) {
  switch (p) {
    case Policy::kAuto: return "auto";
    case Policy::kWavefront: return "wavefront";
    case Policy::kCriticalPath: return "critical-path";
    case Policy::kRandom: return "random";
  }
  return "?";
}

bool policy_parse(std::string_view name, Policy* out) {
  for (Policy p : {Policy::kAuto, Policy::kWavefront, Policy::kCriticalPath, Policy::kRandom})
    if (policy_name(p) == name) {
      *out = p;
      return true;
    }
  return false;
}

bool Plan::happens_before(int a, int b) const {
  const int32_t* d = &done[static_cast<size_t>(a) * veus];
  const int32_t* s = &seen[static_cast<size_t>(b) * veus];
  for (int v = 0; v < veus; ++v)
    if (s[v] < d[v]) return false;
  return true;
}

VeuCosts VeuCosts::uniform(int veus, double handoff) {
  VeuCosts c;
  c.veus = veus;
  c.handoff_us.assign(static_cast<size_t>(veus) * static_cast<size_t>(veus), handoff);
  for (int u = 0; u < veus; ++u) c.handoff_us[static_cast<size_t>(u * veus + u)] = 0;
  c.sizes_kb = {HostMap::kTypicalKb};
  c.crossing_us_per_kb.assign(1, std::vector<double>(static_cast<size_t>(veus) * static_cast<size_t>(veus), 0.0));
  c.crossing_free = true;
  return c;
}

std::vector<int> veu_slots(const std::vector<int>& slots, int veus) {
  std::vector<int> out(static_cast<size_t>(veus));
  for (int u = 0; u < veus; ++u)
    out[static_cast<size_t>(u)] = static_cast<size_t>(u) < slots.size() ? slots[static_cast<size_t>(u)]
                                  : slots.empty()                      ? u
                                                                       : slots.back() + (u - static_cast<int>(slots.size()) + 1);
  return out;
}

VeuCosts VeuCosts::from_host_map(const HostMap& m, int veus) { return from_host_map(m, veu_slots({}, veus)); }

VeuCosts VeuCosts::from_host_map(const HostMap& m, const std::vector<int>& slots) {
  const int veus = static_cast<int>(slots.size());
  VeuCosts c = uniform(veus);
  const int n = m.size();
  c.sizes_kb = m.sizes_kb;
  c.crossing_us_per_kb.assign(m.sizes_kb.size(), std::vector<double>(static_cast<size_t>(veus) * static_cast<size_t>(veus), 0.0));
  c.crossing_free = true;
  for (int u = 0; u < veus; ++u)
    for (int v = 0; v < veus; ++v) {
      if (u == v) continue;
      const int a = slots[static_cast<size_t>(u)] % n, b = slots[static_cast<size_t>(v)] % n;
      const size_t i = static_cast<size_t>(u * veus + v);
      if (a != b) c.handoff_us[i] = m.handoff_us(a, b);
      for (size_t s = 0; s < m.sizes_kb.size(); ++s) {
        c.crossing_us_per_kb[s][i] = m.crossing_ns_per_kb(a, b, m.sizes_kb[s]) / 1e3;
        if (c.crossing_us_per_kb[s][i] > 0) c.crossing_free = false;
      }
    }
  return c;
}

double VeuCosts::crossing_us(int reader, int writer, double bytes, double tensor_bytes) const {
  if (crossing_free || reader == writer || bytes <= 0) return 0;
  const size_t i = static_cast<size_t>(reader * veus + writer);
  const double kb = tensor_bytes / 1024;
  double per_kb;
  if (sizes_kb.size() == 1 || kb <= sizes_kb.front()) {
    per_kb = crossing_us_per_kb.front()[i];
  } else if (kb >= sizes_kb.back()) {
    per_kb = crossing_us_per_kb.back()[i];
  } else {
    size_t s = 1;
    while (sizes_kb[s] < kb) ++s;
    const double f = std::log(kb / sizes_kb[s - 1]) / std::log(sizes_kb[s] / sizes_kb[s - 1]);
    per_kb = crossing_us_per_kb[s - 1][i] * (1 - f) + crossing_us_per_kb[s][i] * f;
  }
  // However few the bytes, their first line comes from the writer's core:
  // the latency of one line crossing, what the hand-off measures.
  return std::max(per_kb * bytes / 1024, handoff(writer, reader));
}

namespace {

// Fixed cost of dispatching one rTask.
constexpr double kTaskOverheadUs = 0.03;
// Writing a cache line another core has read since it was last written
// costs that core's copy an invalidation: 6-9 GB/s here against 50-80 GB/s
// for lines the writer holds alone (a 256 KB buffer written back and forth
// between two pinned threads). rTask t of a split op writes the same part
// of its outputs every run, and the rTasks of the ops around it cut their
// data the same way more often than not (an LSTM's projection and its
// cells by panels, elementwise chains by ranges). So once a policy has
// chosen the vEU for one of an op's rTasks (all cost the same), the rTask
// it runs there is the lowest-numbered one left whose part belongs to that
// vEU: part t of T to vEU t*U/T. The predicted timeline is unchanged.
class Parts {
 public:
  Parts(int64_t tasks, int veus) : used_(static_cast<size_t>(tasks), 0), T_(tasks), U_(veus), next_(veus) {
    for (int u = 0; u < veus; ++u) next_[static_cast<size_t>(u)] = first_of(u);
  }
  // The part take(veu) would return: the lowest unused part of the vEU's
  // own, else the lowest unused part at all. Cursors only move forward
  // past parts taken, so an op's T rTasks over U vEUs cost O(T + U).
  int64_t peek(int veu) const {
    int64_t& c = next_[static_cast<size_t>(veu)];
    const int64_t end = first_of(veu + 1);
    while (c < end && used_[static_cast<size_t>(c)]) ++c;
    if (c < end) return c;
    while (any_ < T_ && used_[static_cast<size_t>(any_)]) ++any_;
    return any_ < T_ ? any_ : -1;
  }
  int64_t take(int veu) {
    const int64_t t = peek(veu);
    used_[static_cast<size_t>(t)] = 1;
    return t;
  }

 private:
  // The lowest part t with t * U / T == u (T for u == U).
  int64_t first_of(int u) const { return (static_cast<int64_t>(u) * T_ + U_ - 1) / U_; }
  std::vector<uint8_t> used_;
  int64_t T_;
  int U_;
  mutable std::vector<int64_t> next_;
  mutable int64_t any_ = 0;
};

struct TaskRef {
  int32_t step;
  int64_t task;
};

// The per-vEU orders a policy produces, and the global order in which it
// placed tasks (a topological order: a task is placed after all its
// predecessors).
struct Orders {
  std::vector<std::vector<TaskRef>> per_veu;
  std::vector<std::pair<int32_t, int32_t>> global;  // (veu, index)
};

// Where each part of each step runs, and what an rTask pays to read the
// parts of its inputs made on other vEUs (VeuCosts). Graph inputs count
// as made on vEU 0, whose thread copies them in.
class DataModel {
 public:
  DataModel(const TaskGraph& g, const VeuCosts& c) : c_(c), U_(c.veus) {
    const size_t n = g.size();
    in_.resize(n);
    tasks_.resize(n);
    out_.resize(n);
    part_veu_.resize(n);
    on_.assign(n * static_cast<size_t>(U_), 0);
    if (c_.crossing_free) return;  // nothing to charge: skip the bookkeeping
    for (size_t s = 0; s < n; ++s) {
      const TaskGraph::Op& op = g.ops[s];
      tasks_[s] = op.tasks;
      out_[s] = op.output;
      part_veu_[s].assign(static_cast<size_t>(tasks_[s]), -1);
      for (const TaskGraph::Input& in : op.inputs) in_[s].push_back({in.producer, in.bytes, in.access, in.read_bytes});
    }
  }

  void place(int s, int64_t t, int u) {
    if (c_.crossing_free) return;
    part_veu_[static_cast<size_t>(s)][static_cast<size_t>(t)] = u;
    ++on_[static_cast<size_t>(s) * U_ + u];
  }

  // µs that part t of step s pays on vEU u for its inputs made elsewhere.
  double comm(int s, int64_t t, int u) const {
    if (c_.crossing_free) return 0;
    const double Ts = static_cast<double>(tasks_[static_cast<size_t>(s)]);
    double us = 0;
    for (const In& in : in_[static_cast<size_t>(s)]) {
      // Bytes one rTask reads: a slice it names, else as its access says.
      const double read = in.read_bytes > 0 ? std::min(in.read_bytes, in.bytes)
                          : in.access == Access::kWhole ? in.bytes
                                                        : in.bytes / Ts;
      if (in.producer < 0) {
        us += c_.crossing_us(u, 0, read, in.bytes);
        continue;
      }
      const size_t q = static_cast<size_t>(in.producer);
      const int64_t Tq = tasks_[q];
      if (in.read_bytes <= 0 && in.access == Access::kRange && out_[q] == Access::kRange) {
        // Producer parts overlapping [t, t + 1) / Ts, in units of 1 / Tq.
        const double lo = static_cast<double>(t) * static_cast<double>(Tq) / Ts;
        const double hi = static_cast<double>(t + 1) * static_cast<double>(Tq) / Ts;
        for (int64_t pp = static_cast<int64_t>(lo); pp < Tq && static_cast<double>(pp) < hi; ++pp) {
          const double overlap = std::min(hi, static_cast<double>(pp + 1)) - std::max(lo, static_cast<double>(pp));
          const int v = part_veu_[q][static_cast<size_t>(pp)];
          if (overlap > 0 && v >= 0 && v != u)
            us += c_.crossing_us(u, v, overlap / static_cast<double>(Tq) * in.bytes, in.bytes);
        }
        continue;
      }
      for (int v = 0; v < U_; ++v) {
        const int32_t k = on_[q * U_ + v];
        if (v != u && k > 0) us += c_.crossing_us(u, v, read * k / static_cast<double>(Tq), in.bytes);
      }
    }
    return us;
  }

 private:
  struct In {
    int producer;  // step; -1: a graph input
    double bytes;
    Access access;
    double read_bytes;  // per rTask, where named
  };
  const VeuCosts& c_;
  const int U_;
  std::vector<std::vector<In>> in_;
  std::vector<int64_t> tasks_;
  std::vector<Access> out_;
  std::vector<std::vector<int32_t>> part_veu_;
  std::vector<int32_t> on_;  // [step * U + vEU]: parts placed there
};

// ------------------------------------------------------------- policies ---

// Rammer's wavefront: BFS levels of ops; each wave's rTasks, longest
// first, go to the vEU where they end first (the one that frees up first
// when crossing vEUs is free).
Orders wavefront(const TaskGraph& g, const std::vector<std::vector<int>>& preds, const std::vector<double>& cost,
                 DataModel& data, int U) {
  const int n = static_cast<int>(g.size());
  std::vector<int> level(n, 0);
  int max_level = 0;
  for (int s = 0; s < n; ++s) {
    for (int q : preds[s]) level[s] = std::max(level[s], level[q] + 1);
    max_level = std::max(max_level, level[s]);
  }
  std::vector<std::vector<int>> waves(max_level + 1);
  for (int s = 0; s < n; ++s) waves[level[s]].push_back(s);
  Orders o;
  o.per_veu.resize(U);
  std::vector<double> free_at(U, 0.0);
  for (auto& wave : waves) {
    std::vector<TaskRef> tasks;
    for (int s : wave)
      for (int64_t t = 0; t < g.ops[s].tasks; ++t) tasks.push_back({s, t});
    std::stable_sort(tasks.begin(), tasks.end(),
                     [&](const TaskRef& a, const TaskRef& b) { return cost[a.step] > cost[b.step]; });
    // A wave starts when the previous one has ended everywhere.
    double start = *std::max_element(free_at.begin(), free_at.end());
    std::fill(free_at.begin(), free_at.end(), start);
    std::unordered_map<int32_t, Parts> parts;
    for (TaskRef t : tasks) {
      Parts& part = parts.try_emplace(t.step, g.ops[t.step].tasks, U).first->second;
      int u = 0;
      double best = 1e300;
      for (int v = 0; v < U; ++v) {
        const double end = free_at[v] + data.comm(t.step, part.peek(v), v);
        if (end < best) {
          best = end;
          u = v;
        }
      }
      t.task = part.take(u);
      data.place(t.step, t.task, u);
      free_at[u] = best + cost[t.step];
      o.global.push_back({u, static_cast<int32_t>(o.per_veu[u].size())});
      o.per_veu[u].push_back(t);
    }
  }
  return o;
}

// Each step's successors, from its predecessors.
std::vector<std::vector<int>> succs_of(const std::vector<std::vector<int>>& preds) {
  std::vector<std::vector<int>> succs(preds.size());
  for (size_t s = 0; s < preds.size(); ++s)
    for (int q : preds[s]) succs[static_cast<size_t>(q)].push_back(static_cast<int>(s));
  return succs;
}

// Each step's longest path to the exit: its cost plus its successors' longest.
std::vector<double> path_ranks(const std::vector<std::vector<int>>& succs, const std::vector<double>& cost) {
  std::vector<double> rank(succs.size(), 0.0);
  for (size_t s = succs.size(); s-- > 0;) {
    double best = 0;
    for (int q : succs[s]) best = std::max(best, rank[static_cast<size_t>(q)]);
    rank[s] = cost[s] + best;
  }
  return rank;
}

// Critical path (HEFT-like list scheduling): among ready rTasks, the one with
// the longest path to the exit goes first, onto the vEU where it finishes
// earliest given when its inputs are ready there (a hand-off later on
// another vEU) and what reading them there costs.
Orders critical_path(const TaskGraph& g, const std::vector<std::vector<int>>& preds, const std::vector<double>& cost,
                     const VeuCosts& vc, DataModel& data, int U) {
  const int n = static_cast<int>(g.size());
  const std::vector<std::vector<int>> succs = succs_of(preds);
  const std::vector<double> rank = path_ranks(succs, cost);
  // end_on[s][u]: latest end of step s's rTasks placed on vEU u.
  std::vector<std::vector<double>> end_on(n, std::vector<double>(U, -1.0));
  std::vector<int> missing(n);
  std::vector<int64_t> placed(n, 0);
  for (int s = 0; s < n; ++s) missing[s] = static_cast<int>(preds[s].size());
  using Item = std::pair<double, int>;  // (rank, -step) max-heap
  std::priority_queue<Item> ready;
  for (int s = 0; s < n; ++s)
    if (missing[s] == 0) ready.push({rank[s], -s});
  Orders o;
  o.per_veu.resize(U);
  std::vector<double> free_at(U, 0.0);
  std::vector<double> data_ready(U);
  while (!ready.empty()) {
    int s = -ready.top().second;
    ready.pop();
    // When step s's inputs are available on each vEU.
    std::vector<double> pred_end(U, 0.0);
    for (int q : preds[s])
      for (int u = 0; u < U; ++u) pred_end[u] = std::max(pred_end[u], end_on[q][u]);
    for (int u = 0; u < U; ++u) {
      double r = 0;
      for (int v = 0; v < U; ++v) r = std::max(r, pred_end[v] + (v == u ? 0.0 : (pred_end[v] > 0 ? vc.handoff(v, u) : 0.0)));
      data_ready[u] = r;
    }
    const int64_t T = g.ops[s].tasks;
    Parts parts(T, U);
    for (int64_t i = 0; i < T; ++i) {
      int best = 0;
      double best_end = 1e300;
      for (int u = 0; u < U; ++u) {
        double e = std::max(free_at[u], data_ready[u]) + cost[s] + data.comm(s, parts.peek(u), u);
        if (e < best_end - 1e-12) {
          best_end = e;
          best = u;
        }
      }
      const int64_t t = parts.take(best);
      data.place(s, t, best);
      free_at[best] = best_end;
      end_on[s][best] = std::max(end_on[s][best], best_end);
      o.global.push_back({best, static_cast<int32_t>(o.per_veu[best].size())});
      o.per_veu[best].push_back({s, t});
    }
    for (int q : succs[s])
      if (--missing[q] == 0) ready.push({rank[q], -q});
  }
  return o;
}

// One vEU: every order of the rTasks predicts the same makespan, so the
// order is chosen for the caches. Next is the ready op whose newest input
// was made last (its producer's data most likely still in the L1 or L2),
// ties to the longer path to the end, then the earlier step: a branch
// runs through while its data is warm instead of every branch advancing
// a level at a time, and fewer values are alive at once (a smaller arena).
Orders locality_order(const TaskGraph& g, const std::vector<std::vector<int>>& preds, const std::vector<double>& cost) {
  const int n = static_cast<int>(g.size());
  const std::vector<std::vector<int>> succs = succs_of(preds);
  const std::vector<double> rank = path_ranks(succs, cost);
  // (position of its newest input's producer, rank, -step): a max-heap.
  using Item = std::tuple<int, double, int>;
  std::priority_queue<Item> ready;
  std::vector<int> missing(n), placed_at(n, -1);
  for (int s = 0; s < n; ++s) {
    missing[s] = static_cast<int>(preds[s].size());
    if (missing[s] == 0) ready.push({-1, rank[s], -s});
  }
  Orders o;
  o.per_veu.resize(1);
  int position = 0;
  while (!ready.empty()) {
    const int s = -std::get<2>(ready.top());
    ready.pop();
    placed_at[s] = position++;
    for (int64_t t = 0; t < g.ops[s].tasks; ++t) {
      o.global.push_back({0, static_cast<int32_t>(o.per_veu[0].size())});
      o.per_veu[0].push_back({s, t});
    }
    for (int q : succs[s])
      if (--missing[q] == 0) ready.push({placed_at[s], rank[q], -q});
  }
  return o;
}

// A random valid schedule: a random ready rTask onto a random vEU. Only for
// stress tests of waits and memory reuse.
Orders random_schedule(const TaskGraph& g, const std::vector<std::vector<int>>& preds, int U, uint64_t seed) {
  const int n = static_cast<int>(g.size());
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<int>> succs = succs_of(preds);
  std::vector<int> missing(n);
  std::vector<int64_t> left(n);
  std::vector<TaskRef> ready;
  for (int s = 0; s < n; ++s) {
    missing[s] = static_cast<int>(preds[s].size());
    left[s] = g.ops[s].tasks;
    if (missing[s] == 0)
      for (int64_t t = 0; t < left[s]; ++t) ready.push_back({s, t});
  }
  Orders o;
  o.per_veu.resize(U);
  while (!ready.empty()) {
    size_t k = rng() % ready.size();
    TaskRef t = ready[k];
    ready[k] = ready.back();
    ready.pop_back();
    int u = static_cast<int>(rng() % static_cast<uint64_t>(U));
    o.global.push_back({u, static_cast<int32_t>(o.per_veu[u].size())});
    o.per_veu[u].push_back(t);
    if (--left[t.step] == 0)
      for (int q : succs[t.step])
        if (--missing[q] == 0)
          for (int64_t i = 0; i < left[q]; ++i) ready.push_back({q, i});
  }
  return o;
}

// ------------------------------------------------------------- finalize ---

// Turns per-vEU orders into a Plan: waits (transitively reduced with vector
// clocks), signals, predicted timeline, happens-before summaries.
Plan finalize(const TaskGraph& g, const std::vector<std::vector<int>>& preds, const std::vector<double>& cost,
              const VeuCosts& vc, const Orders& o, int U, Policy policy) {
  DataModel data(g, vc);  // placements from the final orders
  for (int u = 0; u < U; ++u)
    for (const TaskRef& t : o.per_veu[u]) data.place(t.step, t.task, u);
  const int n = static_cast<int>(g.size());
  Plan plan;
  plan.veus = U;
  plan.policy = policy;
  plan.steps = n;
  plan.program.assign(U, {});
  plan.tasks_per_veu.assign(U, 0);
  for (int u = 0; u < U; ++u) plan.tasks_per_veu[u] = static_cast<int64_t>(o.per_veu[u].size());
  // done[s][v]: 1 + the highest index of s's rTasks on v.
  plan.done.assign(static_cast<size_t>(n) * U, 0);
  plan.seen.assign(static_cast<size_t>(n) * U, INT32_MAX);
  for (int u = 0; u < U; ++u)
    for (size_t i = 0; i < o.per_veu[u].size(); ++i) {
      int32_t& d = plan.done[static_cast<size_t>(o.per_veu[u][i].step) * U + u];
      d = std::max(d, static_cast<int32_t>(i + 1));
    }
  // Global position of each (vEU, index), for ordering waits.
  std::vector<std::vector<int64_t>> gpos(U);
  for (int u = 0; u < U; ++u) gpos[u].resize(o.per_veu[u].size());
  for (size_t k = 0; k < o.global.size(); ++k) gpos[o.global[k].first][o.global[k].second] = static_cast<int64_t>(k);
  // End-of-task clocks, and the running clock per vEU.
  std::vector<std::vector<std::vector<int32_t>>> end_clock(U);
  for (int u = 0; u < U; ++u) end_clock[u].resize(o.per_veu[u].size());
  std::vector<std::vector<int32_t>> clock(U, std::vector<int32_t>(U, 0));
  std::vector<std::vector<std::vector<std::pair<int32_t, int64_t>>>> waits(U);
  for (int u = 0; u < U; ++u) waits[u].resize(o.per_veu[u].size());
  std::vector<std::vector<bool>> signal_after(U);
  for (int u = 0; u < U; ++u) signal_after[u].assign(o.per_veu[u].size(), false);
  std::vector<std::vector<double>> end_time(U);
  for (int u = 0; u < U; ++u) end_time[u].resize(o.per_veu[u].size());
  std::vector<double> free_at(U, 0.0);
  plan.placements.reserve(o.global.size());
  // Per step, from its predecessors (all placed before any of its rTasks,
  // the global order being topological): the count it needs on each vEU,
  // and when the last of those rTasks ends there (-1: none).
  int32_t step_at = -1;
  std::vector<int32_t> need_all(U, 0);
  std::vector<double> pred_end(U, -1.0);
  std::vector<int32_t> need(U, 0);
  std::vector<int> order;
  for (const auto& [u, i] : o.global) {
    const TaskRef& t = o.per_veu[u][i];
    std::vector<int32_t>& c = clock[u];
    if (t.step != step_at) {
      step_at = t.step;
      std::fill(need_all.begin(), need_all.end(), 0);
      for (int q : preds[t.step])
        for (int v = 0; v < U; ++v) need_all[v] = std::max(need_all[v], plan.done[static_cast<size_t>(q) * U + v]);
      for (int v = 0; v < U; ++v) pred_end[v] = need_all[v] > 0 ? end_time[v][need_all[v] - 1] : -1.0;
    }
    // Required counts on other vEUs.
    need = need_all;
    need[u] = 0;
    order.clear();
    for (int v = 0; v < U; ++v)
      if (need[v] > c[v]) order.push_back(v);
    // Latest-placed first: its clock implies the most.
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return gpos[a][need[a] - 1] > gpos[b][need[b] - 1]; });
    for (int v : order) {
      if (c[v] >= need[v]) continue;  // implied by an earlier wait
      waits[u][i].push_back({v, need[v]});
      signal_after[v][need[v] - 1] = true;
      const auto& ec = end_clock[v][need[v] - 1];
      for (int w = 0; w < U; ++w) c[w] = std::max(c[w], ec[w]);
    }
    c[u] = i;  // tasks completed on u before this one
    int32_t* seen = &plan.seen[static_cast<size_t>(t.step) * U];
    for (int v = 0; v < U; ++v) seen[v] = std::min(seen[v], c[v]);
    // Predicted timing: after the vEU is free and every input is produced.
    double start = free_at[u];
    for (int v = 0; v < U; ++v)
      if (pred_end[v] >= 0) start = std::max(start, pred_end[v] + (v == u ? 0.0 : vc.handoff(v, u)));
    double end = start + cost[t.step] + data.comm(t.step, t.task, u);
    end_time[u][i] = end;
    free_at[u] = end;
    c[u] = i + 1;
    end_clock[u][i] = c;
    plan.placements.push_back({t.step, t.task, u, i, start, end});
    plan.predicted_us = std::max(plan.predicted_us, end);
  }
  // Emit instruction lists.
  for (int u = 0; u < U; ++u) {
    auto& prog = plan.program[u];
    for (size_t i = 0; i < o.per_veu[u].size(); ++i) {
      for (const auto& [v, k] : waits[u][i]) {
        prog.push_back({Instr::Kind::kWait, v, k});
        ++plan.waits;
      }
      prog.push_back({Instr::Kind::kRun, o.per_veu[u][i].step, o.per_veu[u][i].task});
      if (signal_after[u][i] && i + 1 < o.per_veu[u].size()) {  // the last count is published at the end anyway
        prog.push_back({Instr::Kind::kSignal, 0, static_cast<int64_t>(i + 1)});
        ++plan.signals;
      }
    }
  }
  return plan;
}

}  // namespace

std::vector<std::vector<int>> step_predecessors(const Program& p) {
  std::unordered_map<const Value*, int> producer;
  for (size_t i = 0; i < p.steps.size(); ++i)
    for (const Value* v : p.steps[i].node->outputs) producer[v] = static_cast<int>(i);
  std::vector<std::vector<int>> preds(p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) {
    for (const Value* v : p.steps[i].node->inputs) {
      if (v == nullptr) continue;
      auto it = producer.find(v);
      if (it != producer.end() && std::find(preds[i].begin(), preds[i].end(), it->second) == preds[i].end())
        preds[i].push_back(it->second);
    }
  }
  return preds;
}

double analytic_task_cost(const Node& n, int64_t tasks) {
  // Effective single-vEU rates on the development machine: GEMM-like work
  // reaches ~150 GFLOP/s inside tiles, everything streams at ~10 GB/s.
  constexpr double kFlopsPerUs = 150e3;
  constexpr double kBytesPerUs = 10e3;
  auto size = [](const Value* v) { return static_cast<double>(v->shape.numel() * static_cast<int64_t>(dtype_size(v->dtype))); };
  double bytes = 0;
  if (n.op_type == "TesseraConcat") {  // reads and writes only the parts it copies
    const std::vector<int64_t> in_place = n.attr_ints("in_place");
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (i >= in_place.size() || in_place[i] == 0) bytes += 2 * size(n.inputs[i]);
  } else {
    for (const Value* v : n.inputs)
      if (v) bytes += size(v);
    for (const Value* v : n.outputs) bytes += size(v);
  }
  return std::max(op_flops(n) / kFlopsPerUs, bytes / kBytesPerUs) / static_cast<double>(tasks) + kTaskOverheadUs;
}

std::vector<double> analytic_task_costs(const Program& p) {
  std::vector<double> cost;
  cost.reserve(p.steps.size());
  for (const Step& s : p.steps) cost.push_back(analytic_task_cost(*s.node, s.op->tasks()));
  return cost;
}

namespace {

std::vector<std::vector<int>> preds_of(const TaskGraph& g) {
  std::vector<std::vector<int>> preds(g.size());
  for (size_t s = 0; s < g.size(); ++s) preds[s] = g.ops[s].preds;
  return preds;
}

}  // namespace

Status TaskGraph::validate() const {
  for (size_t s = 0; s < ops.size(); ++s) {
    const Op& op = ops[s];
    if (op.tasks < 1) return internal_error(str_cat("task graph: op ", s, " has ", op.tasks, " rTasks"));
    for (int q : op.preds)
      if (q < 0 || static_cast<size_t>(q) >= s)
        return internal_error(str_cat("task graph: op ", s, " waits for op ", q, ", which is not an earlier op"));
    for (const Input& in : op.inputs)
      if (in.producer >= static_cast<int>(s) || in.producer < -1 || in.bytes < 0)
        return internal_error(str_cat("task graph: op ", s, " reads from op ", in.producer, ", which is not an earlier op"));
  }
  return Status();
}

TaskGraph task_graph(const Program& p) {
  TaskGraph g;
  g.ops.resize(p.steps.size());
  std::vector<std::vector<int>> preds = step_predecessors(p);
  for (size_t s = 0; s < p.steps.size(); ++s) g.ops[s].preds = std::move(preds[s]);
  std::unordered_map<const Value*, int> producer;
  for (size_t s = 0; s < p.steps.size(); ++s)
    for (const Value* v : p.steps[s].node->outputs) producer[v] = static_cast<int>(s);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    TaskGraph::Op& op = g.ops[s];
    op.tasks = st.op->tasks();
    op.output = st.op->output_access();
    for (size_t i = 0; i < st.node->inputs.size(); ++i) {
      const Value* v = st.node->inputs[i];
      if (v == nullptr) continue;
      auto it = producer.find(v);
      const int q = it == producer.end() ? -1 : it->second;
      if (v->is_constant()) continue;
      const double bytes = static_cast<double>(v->shape.numel()) * static_cast<double>(dtype_size(v->dtype));
      op.inputs.push_back({q, bytes, st.op->input_access(i), st.op->input_read_bytes(i)});
    }
  }
  return g;
}

Result<Plan> schedule(const Program& p, const std::vector<double>& cost, const ScheduleOptions& options) {
  return schedule(task_graph(p), cost, options);
}

Result<Plan> schedule(const TaskGraph& g, const std::vector<double>& cost, const ScheduleOptions& options) {
  if (options.veus < 1 || options.veus > 256)
    return invalid_argument(str_cat("vEU count ", options.veus, " is out of range (1 to 256)"));
  if (cost.size() != g.size()) return internal_error("one cost per step is needed");
  const int U = options.veus;
  const VeuCosts uniform = options.costs ? VeuCosts() : VeuCosts::uniform(U);
  const VeuCosts& vc = options.costs ? *options.costs : uniform;
  if (vc.veus != U) return internal_error(str_cat("a cost model for ", vc.veus, " vEUs cannot schedule ", U));
  const auto preds = preds_of(g);
  // On one vEU both policies take the order that keeps data warm.
  auto wave = [&] {
    if (U == 1) return finalize(g, preds, cost, vc, locality_order(g, preds, cost), U, Policy::kWavefront);
    DataModel data(g, vc);
    return finalize(g, preds, cost, vc, wavefront(g, preds, cost, data, U), U, Policy::kWavefront);
  };
  auto cp = [&] {
    if (U == 1) return finalize(g, preds, cost, vc, locality_order(g, preds, cost), U, Policy::kCriticalPath);
    DataModel data(g, vc);
    return finalize(g, preds, cost, vc, critical_path(g, preds, cost, vc, data, U), U, Policy::kCriticalPath);
  };
  switch (options.policy) {
    case Policy::kWavefront: return wave();
    case Policy::kCriticalPath: return cp();
    case Policy::kRandom:
      return finalize(g, preds, cost, vc, random_schedule(g, preds, U, options.seed), U, Policy::kRandom);
    case Policy::kAuto: {
      Plan a = wave();
      Plan b = cp();
      return b.predicted_us < a.predicted_us ? b : a;
    }
  }
  return internal_error("unknown policy");
}

std::vector<std::pair<int32_t, int64_t>> plan_one_thread_order(const Plan& plan) {
  const int U = plan.veus;
  std::vector<std::pair<int32_t, int64_t>> order;
  std::vector<size_t> pc(static_cast<size_t>(U), 0);
  std::vector<int64_t> published(static_cast<size_t>(U), 0);
  size_t left = 0;
  for (const auto& prog : plan.program) left += prog.size();
  order.reserve(plan.placements.size());
  // Round robin: each vEU runs until a wait its producer has not yet
  // published; a list's end publishes its final count.
  while (left > 0) {
    bool moved = false;
    for (int u = 0; u < U; ++u) {
      const std::vector<Instr>& prog = plan.program[static_cast<size_t>(u)];
      size_t& i = pc[static_cast<size_t>(u)];
      for (; i < prog.size(); ++i, --left, moved = true) {
        const Instr& in = prog[i];
        if (in.kind == Instr::Kind::kWait && published[static_cast<size_t>(in.a)] < in.b) break;
        if (in.kind == Instr::Kind::kSignal) published[static_cast<size_t>(u)] = in.b;
        if (in.kind == Instr::Kind::kRun) order.emplace_back(in.a, in.b);
      }
      if (i == prog.size()) published[static_cast<size_t>(u)] = plan.tasks_per_veu[static_cast<size_t>(u)];
    }
    if (!moved) return {};
  }
  return order;
}

Status plan_repredict(const Program& p, const std::vector<double>& cost, const VeuCosts* costs, Plan* plan) {
  return plan_repredict(task_graph(p), cost, costs, plan);
}

Status plan_repredict(const TaskGraph& g, const std::vector<double>& cost, const VeuCosts* costs, Plan* plan) {
  const int U = plan->veus;
  if (cost.size() != g.size()) return internal_error("one cost per step is needed");
  const VeuCosts uniform = costs ? VeuCosts() : VeuCosts::uniform(U);
  const VeuCosts& vc = costs ? *costs : uniform;
  if (vc.veus != U) return internal_error(str_cat("a cost model for ", vc.veus, " vEUs cannot time a Plan for ", U));
  Orders o;
  o.per_veu.resize(U);
  for (const TaskPlacement& t : plan->placements) {
    if (t.veu < 0 || t.veu >= U || t.index != static_cast<int32_t>(o.per_veu[t.veu].size()))
      return internal_error("plan_repredict: placements out of order");
    o.global.push_back({t.veu, t.index});
    o.per_veu[t.veu].push_back({t.step, t.task});
  }
  Plan timed = finalize(g, preds_of(g), cost, vc, o, U, plan->policy);
  plan->placements = std::move(timed.placements);
  plan->predicted_us = timed.predicted_us;
  return Status();
}

namespace {

// plan_validate; with `clocks`, also fills its done/seen summaries.
Status validate(const TaskGraph& g, const Plan& plan, Plan* clocks) {
  const int U = plan.veus;
  if (U < 1 || static_cast<int>(plan.program.size()) != U || static_cast<int>(plan.tasks_per_veu.size()) != U)
    return invalid_argument("plan: vEU count does not match its instruction lists");
  std::vector<std::vector<uint8_t>> seen(g.size());
  for (size_t s = 0; s < g.size(); ++s) seen[s].assign(static_cast<size_t>(g.ops[s].tasks), 0);
  // Per vEU: where each rTask sits, to check dependencies below.
  for (int u = 0; u < U; ++u) {
    int64_t runs = 0;
    for (const Instr& in : plan.program[u]) {
      switch (in.kind) {
        case Instr::Kind::kRun:
          if (in.a < 0 || in.a >= static_cast<int32_t>(g.size()) || in.b < 0 || in.b >= g.ops[in.a].tasks)
            return invalid_argument(str_cat("plan: vEU ", u, " runs a task that does not exist (step ", in.a,
                                            ", task ", in.b, ")"));
          if (seen[in.a][in.b]++) return invalid_argument(str_cat("plan: step ", in.a, " task ", in.b, " runs twice"));
          ++runs;
          break;
        case Instr::Kind::kSignal:
          if (in.b != runs) return invalid_argument(str_cat("plan: vEU ", u, " signals ", in.b, " after ", runs, " tasks"));
          break;
        case Instr::Kind::kWait:
          if (in.a < 0 || in.a >= U || in.a == u || in.b < 1 || in.b > plan.tasks_per_veu[in.a])
            return invalid_argument(str_cat("plan: vEU ", u, " waits for a count vEU ", in.a, " never reaches"));
          break;
      }
    }
    if (runs != plan.tasks_per_veu[u]) return invalid_argument(str_cat("plan: vEU ", u, " task count mismatch"));
  }
  for (size_t s = 0; s < seen.size(); ++s)
    for (size_t t = 0; t < seen[s].size(); ++t)
      if (!seen[s][t]) return invalid_argument(str_cat("plan: step ", s, " task ", t, " never runs"));
  // Simulate: each vEU advances while it can, a wait passing once the vEU it
  // names has published the count (a signal, or the end of its list). Along
  // the way, vector clocks check that every dependency is guaranteed by the
  // waits (not merely satisfied by this interleaving), and the simulation
  // must finish: no wait cycle.
  const auto preds = preds_of(g);
  std::vector<int32_t> done(g.size() * static_cast<size_t>(U), 0);
  for (int u = 0; u < U; ++u) {
    int32_t i = 0;
    for (const Instr& in : plan.program[u])
      if (in.kind == Instr::Kind::kRun) {
        int32_t& d = done[static_cast<size_t>(in.a) * U + u];
        d = std::max(d, ++i);
      }
  }
  std::vector<int32_t> seen_at(clocks ? g.size() * static_cast<size_t>(U) : 0, INT32_MAX);
  std::vector<size_t> pc(U, 0);
  std::vector<int64_t> published(U, 0), completed(U, 0);
  std::vector<std::vector<int32_t>> clock(U, std::vector<int32_t>(U, 0));
  std::vector<std::vector<std::vector<int32_t>>> end_clock(U);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int u = 0; u < U; ++u) {
      while (pc[u] < plan.program[u].size()) {
        const Instr& in = plan.program[u][pc[u]];
        if (in.kind == Instr::Kind::kWait) {
          if (published[in.a] < in.b) break;
          const auto& ec = end_clock[in.a][in.b - 1];
          for (int w = 0; w < U; ++w) clock[u][w] = std::max(clock[u][w], ec[w]);
        } else if (in.kind == Instr::Kind::kSignal) {
          published[u] = in.b;
        } else {
          for (int q : preds[in.a])
            for (int v = 0; v < U; ++v) {
              int32_t need = done[static_cast<size_t>(q) * U + v];
              int32_t have = v == u ? static_cast<int32_t>(completed[u]) : clock[u][v];
              if (have < need)
                return invalid_argument(str_cat("plan: vEU ", u, " may run step ", in.a, " before step ", q,
                                                " has finished on vEU ", v, " (a wait is missing)"));
            }
          if (clocks)
            for (int v = 0; v < U; ++v) {
              int32_t have = v == u ? static_cast<int32_t>(completed[u]) : clock[u][v];
              int32_t& m = seen_at[static_cast<size_t>(in.a) * U + v];
              m = std::min(m, have);
            }
          ++completed[u];
          clock[u][u] = static_cast<int32_t>(completed[u]);
          end_clock[u].push_back(clock[u]);
        }
        ++pc[u];
        progress = true;
      }
      if (pc[u] == plan.program[u].size() && published[u] != completed[u]) {
        published[u] = completed[u];
        progress = true;
      }
    }
  }
  for (int u = 0; u < U; ++u)
    if (pc[u] != plan.program[u].size())
      return invalid_argument(str_cat("plan: vEU ", u, " deadlocks at instruction ", pc[u]));
  if (clocks) {
    clocks->steps = static_cast<int>(g.size());
    clocks->done = std::move(done);
    clocks->seen = std::move(seen_at);
  }
  return Status();
}

}  // namespace

Status plan_validate(const TaskGraph& g, const Plan& plan) { return validate(g, plan, nullptr); }
Status plan_validate(const Program& p, const Plan& plan) { return validate(task_graph(p), plan, nullptr); }

Status plan_derive_clocks(const TaskGraph& g, Plan* plan) { return validate(g, *plan, plan); }
Status plan_derive_clocks(const Program& p, Plan* plan) { return validate(task_graph(p), *plan, plan); }

}  // namespace tessera
