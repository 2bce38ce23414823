#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <unordered_set>

#include "base/strings.h"
#include "passes/passes.h"

namespace tessera {

namespace {

// Values of kColorMinBytes or more start at one of kColors offsets within a
// 4 KB page, kColorStep apart, chosen by the value's index. Planes whose
// rows are a multiple of 4 KB apart (32 x 32 floats) otherwise all start at
// the same page offset, and a kernel storing rows of its output while
// loading rows of its input or residual at the same offset within a page
// waits on false store-to-load dependencies (4K aliasing): a 32 x 32 by
// 32 x 1024 product with a residual took 11.8 us at equal offsets, 10.5
// apart. The padding costs at most 1/16 of a coloured value's size.
constexpr size_t kPage = 4096, kColors = 16, kColorStep = kPage / kColors, kColorMinBytes = 16 * kPage;
constexpr size_t kNoColor = SIZE_MAX;

size_t color_of(size_t index, size_t bytes) {
  return bytes < kColorMinBytes ? kNoColor : index % kColors * kColorStep;
}

// The smallest offset >= at whose position in its page is `color` (any
// offset for kNoColor).
size_t with_color(size_t at, size_t color) {
  if (color == kNoColor) return at;
  const size_t base = at / kPage * kPage + color;
  return base >= at ? base : base + kPage;
}

}  // namespace

size_t value_bytes(const Value* v) {
  return (static_cast<size_t>(v->shape.numel()) * dtype_size(v->dtype) + 63) / 64 * 64;
}

size_t value_slot_bytes(const Value* v) {
  const size_t bytes = value_bytes(v);
  return bytes >= kColorMinBytes ? bytes + kPage : bytes;
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
    plan.naive_bytes += value_slot_bytes(values[i]);
    busy.clear();
    for (size_t j : placed)
      if (conflict(i, j)) busy.push_back({offset[j], offset[j] + value_bytes(values[j])});
    std::sort(busy.begin(), busy.end());
    const size_t color = color_of(i, bytes);
    size_t at = with_color(0, color);
    for (auto& [b, e] : busy) {
      if (at + bytes <= b) break;
      at = std::max(at, with_color(e, color));
    }
    offset[i] = at;
    placed.push_back(i);
    plan.arena_bytes = std::max(plan.arena_bytes, at + bytes);
    plan.offset[values[i]] = at;
  }
  return plan;
}

void place_aliases(MemoryPlan* plan, const AliasMap& aliases) {
  for (const auto& [v, a] : aliases) {
    plan->offset[v] = plan->offset.at(a.base) + a.offset;
    plan->naive_bytes += value_bytes(v);
  }
}

// Sequential order: a value lives from the step that writes it to the last
// step that reads it; two values conflict when those intervals overlap. An
// in-place Concat part counts as an access to the Concat's output.
MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& order, const AliasMap& aliases) {
  const int end = static_cast<int>(order.size());
  std::unordered_map<const Value*, std::pair<int, int>> live;
  std::vector<const Value*> values;
  auto touch = [&](const Value* v, int step) {
    if (v == nullptr || v->is_constant()) return;
    if (auto a = aliases.find(v); a != aliases.end()) v = a->second.base;
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
  MemoryPlan plan = place_values(values, [&](size_t a, size_t b) {
    return iv[a].first <= iv[b].second && iv[b].first <= iv[a].second;
  });
  place_aliases(&plan, aliases);
  return plan;
}

int64_t concat_part_offset(const Node& n, size_t i) {
  if (n.outputs.size() != 1 || i >= n.inputs.size() || n.inputs[i] == nullptr) return -1;
  const Value* y = n.outputs[0];
  const Shape& out = y->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", 0), out.rank(), &axis) || dims_product(out.dims, 0, axis) != 1) return -1;
  const int64_t inner = dims_product(out.dims, axis + 1, out.rank()) * static_cast<int64_t>(dtype_size(y->dtype));
  int64_t offset = 0;
  for (size_t k = 0; k < i; ++k) {
    if (n.inputs[k] == nullptr || n.inputs[k]->shape.rank() != out.rank()) return -1;
    offset += n.inputs[k]->shape.dims[axis] * inner;
  }
  const Value* x = n.inputs[i];
  if (x->dtype != y->dtype || x->shape.rank() != out.rank()) return -1;
  const int64_t bytes = x->shape.dims[axis] * inner;
  if (bytes <= 0 || bytes % 64 != 0 || offset % 64 != 0 || offset + bytes > out.numel() * static_cast<int64_t>(dtype_size(y->dtype)))
    return -1;
  return offset;
}

namespace {

// Whether `x`, input i of Concat-like `n`, is a value that may live inside
// n's output: made by a node, read by n once, and not a graph output.
bool part_may_alias(const Node& n, size_t i) {
  const Value* x = n.inputs[i];
  if (x == nullptr || x->is_constant() || x->is_input || x->is_output || n.outputs[0]->is_constant()) return false;
  return std::count(n.inputs.begin(), n.inputs.end(), x) == 1;
}

bool holds_in_place_parts(const Node* n) {
  if (n == nullptr || n->op_type != "TesseraConcat") return false;
  for (int64_t f : n->attr_ints("in_place"))
    if (f != 0) return true;
  return false;
}

}  // namespace

int place_concats_in_place(Graph& g) {
  // Each value's live producer, from the node list (earlier passes do not
  // keep Value::producer up to date).
  std::unordered_map<const Value*, const Node*> producer;
  for (auto& np : g.nodes())
    if (!np->dead)
      for (const Value* o : np->outputs) producer[o] = np.get();
  std::unordered_set<const Value*> aliased;
  int changed = 0;
  // Nodes are in topological order, so a Concat feeding another is
  // decided first and the no-nesting rule sees its result.
  for (auto& np : g.nodes()) {
    Node& n = *np;
    if (n.dead || n.op_type != "Concat" || n.outputs.size() != 1) continue;
    std::vector<int64_t> flags(n.inputs.size(), 0);
    bool any = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value* x = n.inputs[i];
      if (concat_part_offset(n, i) < 0 || !part_may_alias(n, i) || aliased.count(x) != 0) continue;
      auto made = producer.find(x);
      if (made == producer.end() || holds_in_place_parts(made->second)) continue;
      flags[i] = 1;
      aliased.insert(x);
      any = true;
    }
    if (!any) continue;
    n.op_type = "TesseraConcat";
    Attribute a;
    a.kind = Attribute::Kind::kInts;
    a.ints = flags;
    n.attrs["in_place"] = a;
    ++changed;
  }
  return changed;
}

Result<AliasMap> value_aliases(const Graph& g) {
  AliasMap aliases;
  std::unordered_map<const Value*, const Node*> producer;
  for (auto& np : g.nodes())
    for (const Value* o : np->outputs) producer[o] = np.get();
  for (auto& np : g.nodes()) {
    const Node& n = *np;
    if (n.op_type != "TesseraConcat") continue;
    const std::vector<int64_t> flags = n.attr_ints("in_place");
    if (flags.size() != n.inputs.size() || n.outputs.size() != 1)
      return invalid_argument(str_cat(n.label(), ": attribute 'in_place' needs one entry per input"));
    for (size_t i = 0; i < flags.size(); ++i) {
      if (flags[i] == 0) continue;
      const Value* x = n.inputs[i];
      const int64_t offset = concat_part_offset(n, i);
      if (flags[i] != 1 || offset < 0 || !part_may_alias(n, i) || producer.count(x) == 0)
        return invalid_argument(str_cat(n.label(), ": input ", i, " cannot be written in place"));
      if (!aliases.try_emplace(x, Alias{n.outputs[0], static_cast<size_t>(offset)}).second)
        return invalid_argument(str_cat(n.label(), ": input '", x->name, "' is in place in two Concats"));
    }
  }
  for (const auto& [x, a] : aliases)  // no nesting
    if (aliases.count(a.base) != 0)
      return invalid_argument(str_cat("value '", a.base->name, "' holds in-place parts and is itself in place"));
  return aliases;
}

}  // namespace tessera
