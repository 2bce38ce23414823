#include <algorithm>
#include <limits>

#include "passes/passes.h"

namespace tessera {

namespace {
struct Interval {
  const Value* v;
  size_t bytes;
  int first, last;  // steps, inclusive
  size_t offset = 0;
};
}  // namespace

// Greedy by size (largest first), each buffer at the lowest offset that no
// placed buffer with an overlapping lifetime occupies. Simple and close to
// optimal for inference graphs; the parallel-schedule-aware version builds
// on the same intervals.
MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& order) {
  const int end = static_cast<int>(order.size());
  std::unordered_map<const Value*, Interval> live;
  auto touch = [&](const Value* v, int step) {
    if (v == nullptr || v->is_constant()) return;
    auto [it, inserted] = live.try_emplace(v, Interval{v, 0, step, step});
    if (inserted) it->second.bytes = (static_cast<size_t>(v->shape.numel()) * dtype_size(v->dtype) + 63) / 64 * 64;
    it->second.first = std::min(it->second.first, step);
    it->second.last = std::max(it->second.last, step);
  };
  // Graph inputs are bound once and read by every run, so they live from
  // before the first step to after the last: nothing may reuse their bytes.
  for (const Value* v : g.inputs()) {
    touch(v, -1);
    touch(v, end);
  }
  for (int s = 0; s < end; ++s) {
    for (const Value* v : order[s]->inputs) touch(v, s);
    for (const Value* v : order[s]->outputs) touch(v, s);
  }
  for (const Value* v : g.outputs()) touch(v, end);
  std::vector<Interval> items;
  items.reserve(live.size());
  for (auto& [v, iv] : live) items.push_back(iv);
  std::sort(items.begin(), items.end(), [](const Interval& a, const Interval& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.first < b.first;
  });
  MemoryPlan plan;
  std::vector<const Interval*> placed;
  for (auto& it : items) {
    plan.naive_bytes += it.bytes;
    // Collect occupied ranges that overlap in time, then take the first gap.
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Interval* p : placed)
      if (p->first <= it.last && it.first <= p->last) busy.push_back({p->offset, p->offset + p->bytes});
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (auto& [b, e] : busy) {
      if (offset + it.bytes <= b) break;
      offset = std::max(offset, e);
    }
    it.offset = offset;
    placed.push_back(&it);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + it.bytes);
    plan.offset[it.v] = offset;
  }
  return plan;
}

}  // namespace tessera
