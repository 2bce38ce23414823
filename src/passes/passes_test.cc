#include <gtest/gtest.h>

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
      n->outputs[0]->shape = Shape{static_cast<int64_t>(1 + rng() % 1000)};
      pool.push_back(n->outputs[0]);
    }
    g.mark_output(pool.back());
    if (rng() % 2) g.mark_output(pool[pool.size() / 2]);
    std::vector<const Node*> order;
    for (auto& n : g.nodes()) order.push_back(n.get());
    MemoryPlan plan = plan_memory(g, order);
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

}  // namespace
}  // namespace tessera
