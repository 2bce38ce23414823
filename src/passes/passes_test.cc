#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <map>
#include <random>

#include "passes/passes.h"

namespace tessera {
namespace {

// Random DAGs of elementwise-like nodes: the plan must never place two
// values whose lifetimes overlap on overlapping bytes.
TEST(MemoryPlan, NoOverlapBetweenLiveValuesOnRandomGraphs) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    Graph g;
    std::vector<Value*> pool{g.add_input("x", DType::kFloat32, Shape{static_cast<int64_t>(1 + rng() % 100)})};
    pool[0]->shape_known = true;
    int nodes = 2 + static_cast<int>(rng() % 40);
    for (int i = 0; i < nodes; ++i) {
      Value* a = pool[rng() % pool.size()];
      Value* b = pool[rng() % pool.size()];
      Node* n = g.add_node("Add", "n" + std::to_string(i), {a, b}, 1);
      n->outputs[0]->dtype = DType::kFloat32;
      // Some of 64 KB or more, which get a page offset of their own.
      n->outputs[0]->shape = Shape{static_cast<int64_t>(rng() % 4 == 0 ? 16384 + rng() % 20000 : 1 + rng() % 1000)};
      pool.push_back(n->outputs[0]);
    }
    g.mark_output(pool.back());
    if (rng() % 2) g.mark_output(pool[pool.size() / 2]);
    std::vector<const Node*> order;
    for (auto& n : g.nodes()) order.push_back(n.get());
    MemoryPlan plan = plan_memory(g, order, {});
    // Lifetimes.
    std::map<const Value*, std::pair<int, int>> life;
    int end = static_cast<int>(order.size());
    for (Value* in : g.inputs()) life[in] = {-1, end};
    for (int s = 0; s < end; ++s) {
      for (Value* v : order[s]->inputs) life[v].second = std::max(life[v].second, s);
      life[order[s]->outputs[0]] = {s, s};
    }
    for (Value* o : g.outputs()) life[o].second = end;
    for (auto& [a, la] : life)
      for (auto& [b, lb] : life) {
        if (a >= b) continue;
        bool time = la.first <= lb.second && lb.first <= la.second;
        size_t ao = plan.offset.at(a), bo = plan.offset.at(b);
        size_t ae = ao + static_cast<size_t>(a->shape.numel()) * 4, be = bo + static_cast<size_t>(b->shape.numel()) * 4;
        bool space = ao < be && bo < ae;
        ASSERT_FALSE(time && space) << "trial " << trial << ": '" << a->name << "' and '" << b->name << "' overlap";
        ASSERT_LE(ae, plan.arena_bytes);
      }
    EXPECT_LE(plan.arena_bytes, plan.naive_bytes);
  }
}

// Values of 64 KB or more start at different offsets within a 4 KB page
// (16 of them, 256 bytes apart, by index), so that rows of planes a page
// apart in different tensors do not alias; smaller values are packed.
TEST(MemoryPlan, LargeValuesGetDistinctPageOffsets) {
  Graph g;
  std::vector<const Value*> values;
  Value* x = g.add_input("x", DType::kFloat32, Shape{32, 32, 32});  // 128 KB planes
  for (int i = 0; i < 20; ++i) {
    Node* n = g.add_node("Relu", "n" + std::to_string(i), {x}, 1);
    n->outputs[0]->dtype = DType::kFloat32;
    n->outputs[0]->shape = Shape{i % 5 == 4 ? 100 : 32 * 32 * 32};
    values.push_back(n->outputs[0]);
  }
  MemoryPlan plan = place_values(values, [](size_t, size_t) { return true; });  // all live at once
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < values.size(); ++i) {
    const size_t at = plan.offset.at(values[i]);
    EXPECT_EQ(at % 64, 0u);
    spans.push_back({at, at + value_bytes(values[i])});
    for (size_t j = 0; j < i; ++j) {
      EXPECT_FALSE(spans[i].first < spans[j].second && spans[j].first < spans[i].second) << i << " overlaps " << j;
      const bool large = value_bytes(values[i]) >= 65536 && value_bytes(values[j]) >= 65536;
      if (large && i - j < 16) {
        EXPECT_NE(at % 4096, spans[j].first % 4096) << "values " << j << " and " << i;
      }
    }
  }
  EXPECT_LE(plan.arena_bytes, plan.naive_bytes);
}

// Random DAGs of Adds and Concats, run by a small interpreter twice: each
// value in its own buffer, and inside one arena at the offsets
// plan_memory gives, with the Concats that place_concats_in_place made
// TesseraConcat copying only the parts not written in place. Any value
// overwritten before its last read, or an in-place part not lying at its
// slice, changes an output.
TEST(MemoryPlan, InPlaceConcatsGiveTheSameOutputsOnRandomGraphs) {
  std::mt19937 rng(7);
  int in_place_parts = 0, copied_parts = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Graph g;
    auto size = [&] {  // mostly whole 64-byte blocks, sometimes not
      int64_t n = 16 * (1 + static_cast<int64_t>(rng() % 6));
      return rng() % 5 == 0 ? n + 1 + static_cast<int64_t>(rng() % 15) : n;
    };
    std::vector<Value*> pool{g.add_input("x", DType::kFloat32, Shape{size()})};
    int nodes = 2 + static_cast<int>(rng() % 30);
    for (int i = 0; i < nodes; ++i) {
      const std::string name = "n" + std::to_string(i);
      Node* n;
      if (rng() % 3 == 0) {
        std::vector<Value*> parts;
        int64_t total = 0;
        for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) {
          parts.push_back(pool[pool.size() - 1 - rng() % std::min<size_t>(pool.size(), 6)]);
          total += parts.back()->shape.dims[0];
        }
        n = g.add_node("Concat", name, parts, 1);
        n->outputs[0]->shape = Shape{total};
      } else {
        n = g.add_node("Add", name, {pool[rng() % pool.size()], pool[rng() % pool.size()]}, 1);
        n->outputs[0]->shape = Shape{size()};
      }
      n->outputs[0]->dtype = DType::kFloat32;
      pool.push_back(n->outputs[0]);
    }
    g.mark_output(pool.back());
    if (rng() % 2) g.mark_output(pool[pool.size() / 2]);
    place_concats_in_place(g);
    auto aliases = value_aliases(g);
    ASSERT_TRUE(aliases.ok()) << aliases.status().to_string();
    std::vector<const Node*> order;
    for (auto& n : g.nodes()) order.push_back(n.get());
    MemoryPlan plan = plan_memory(g, order, *aliases);
    EXPECT_LE(plan.arena_bytes, plan.naive_bytes);

    // at(v): v's elements in one storage or the other; in separate buffers
    // every Concat copies every part.
    auto run = [&](const std::function<float*(const Value*)>& at, bool arena_layout) {
      for (int64_t i = 0; i < pool[0]->shape.dims[0]; ++i) at(pool[0])[i] = static_cast<float>(i % 7) - 3;
      for (const Node* n : order) {
        float* out = at(n->outputs[0]);
        if (n->op_type == "Add") {
          const Value* a = n->inputs[0];
          const Value* b = n->inputs[1];
          for (int64_t i = 0; i < n->outputs[0]->shape.dims[0]; ++i)
            out[i] = at(a)[i % a->shape.dims[0]] + 0.5f * at(b)[i % b->shape.dims[0]] + 1;
        } else {
          std::vector<int64_t> in_place = n->attr_ints("in_place", std::vector<int64_t>(n->inputs.size(), 0));
          int64_t o = 0;
          for (size_t k = 0; k < n->inputs.size(); ++k) {
            const int64_t len = n->inputs[k]->shape.dims[0];
            if (in_place[k] == 0 || !arena_layout) std::copy(at(n->inputs[k]), at(n->inputs[k]) + len, out + o);
            o += len;
          }
        }
      }
    };
    std::map<const Value*, std::vector<float>> own;
    run([&](const Value* v) {
      auto& b = own[v];
      b.resize(static_cast<size_t>(v->shape.numel()));
      return b.data();
    }, false);
    std::vector<float> arena(plan.arena_bytes / 4, std::numeric_limits<float>::quiet_NaN());
    run([&](const Value* v) { return arena.data() + plan.offset.at(v) / 4; }, true);
    for (const Value* o : g.outputs())
      for (int64_t i = 0; i < o->shape.numel(); ++i)
        ASSERT_EQ(arena[plan.offset.at(o) / 4 + static_cast<size_t>(i)], own[o][static_cast<size_t>(i)])
            << "trial " << trial << ": output '" << o->name << "' element " << i;
    for (auto& n : g.nodes())
      for (int64_t f : n->attr_ints("in_place")) (f != 0 ? in_place_parts : copied_parts)++;
  }
  // Both kinds of part occur, so both paths were exercised.
  EXPECT_GT(in_place_parts, 100);
  EXPECT_GT(copied_parts, 100);
}

}  // namespace
}  // namespace tessera
