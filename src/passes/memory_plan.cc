#include <algorithm>
#include <functional>
#include <limits>

#include "passes/passes.h"

namespace tessera {

size_t value_bytes(const Value* v) {
  return (static_cast<size_t>(v->shape.numel()) * dtype_size(v->dtype) + 63) / 64 * 64;
}

MemoryPlan place_values(const std::vector<const Value*>& values, const std::function<bool(size_t, size_t)>& conflict) {
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return value_bytes(values[a]) > value_bytes(values[b]); });
  MemoryPlan plan;
  std::vector<size_t> offset(values.size(), 0);
  std::vector<size_t> placed;
  placed.reserve(values.size());
  std::vector<std::pair<size_t, size_t>> busy;
  for (size_t i : order) {
    size_t bytes = value_bytes(values[i]);
    plan.naive_bytes += bytes;
    busy.clear();
    for (size_t j : placed)
      if (conflict(i, j)) busy.push_back({offset[j], offset[j] + value_bytes(values[j])});
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (auto& [b, e] : busy) {
      if (at + bytes <= b) break;
      at = std::max(at, e);
    }
    offset[i] = at;
    placed.push_back(i);
    plan.arena_bytes = std::max(plan.arena_bytes, at + bytes);
    plan.offset[values[i]] = at;
  }
  return plan;
}

// Sequential order: a value lives from the step that writes it to the last
// step that reads it; two values conflict when those intervals overlap.
MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& order) {
  const int end = static_cast<int>(order.size());
  std::unordered_map<const Value*, std::pair<int, int>> live;
  std::vector<const Value*> values;
  auto touch = [&](const Value* v, int step) {
    if (v == nullptr || v->is_constant()) return;
    auto [it, inserted] = live.try_emplace(v, step, step);
    if (inserted) values.push_back(v);
    it->second.first = std::min(it->second.first, step);
    it->second.second = std::max(it->second.second, step);
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
  std::vector<std::pair<int, int>> iv;
  iv.reserve(values.size());
  for (const Value* v : values) iv.push_back(live[v]);
  return place_values(values, [&](size_t a, size_t b) {
    return iv[a].first <= iv[b].second && iv[b].first <= iv[a].second;
  });
}

}  // namespace tessera
