// The planner's decisions under a host map, on any host: synthetic maps
// (files, read as `--host-map` and $TESSERA_HOST_MAP read them) where
// crossing vEUs costs 5x a local read keep a chain of light ops on one vEU
// and still split a heavy op; a map where crossing is free reproduces the
// plans made without a map, on the whole zoo.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "base/strings.h"
#include "compiler/plan.h"
#include "compiler/program.h"
#include "tests/common/zoo_util.h"
#include "topology/host_map.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// An rOperator that only says how it is cut and how its rTasks read: the
// scheduler never runs it.
class ShapeOnlyOp : public ROp {
 public:
  ShapeOnlyOp(int64_t tasks, Access in, Access out) {
    tasks_ = tasks;
    set_access({in}, out);
  }
  void run(int64_t, const TaskArgs&) const override {}
};

struct Built {
  std::unique_ptr<Program> program;
  std::vector<double> cost;  // µs per rTask, per step
  std::vector<int> chain;    // steps of the chain
  int gemm = -1;             // the heavy op's step
};

// x (1 MB) -> gemm (2 rTasks of `gemm_us`, reading x whole), and beside it
// y (512 KB) -> a chain of `links` ops of 2 rTasks of `link_us` each, every
// rTask reading its input whole and writing a range of its output.
Built chain_and_gemm(int links, double link_us, double gemm_us) {
  Built b;
  b.program = std::make_unique<Program>();
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", DType::kFloat32, Shape{256, 1024});
  Value* y = g->add_input("y", DType::kFloat32, Shape{128, 1024});
  std::vector<std::pair<Node*, std::unique_ptr<ROp>>> nodes;
  Node* gemm = g->add_node("TestGemm", "gemm", {x}, 1);
  gemm->outputs[0]->shape = Shape{256, 1024};
  g->mark_output(gemm->outputs[0]);
  nodes.push_back({gemm, std::make_unique<ShapeOnlyOp>(2, Access::kWhole, Access::kRange)});
  Value* v = y;
  for (int i = 0; i < links; ++i) {
    Node* n = g->add_node("TestLink", str_cat("link", i), {v}, 1);
    n->outputs[0]->shape = Shape{128, 1024};
    v = n->outputs[0];
    nodes.push_back({n, std::make_unique<ShapeOnlyOp>(2, Access::kWhole, Access::kRange)});
  }
  g->mark_output(v);
  for (auto& [n, op] : nodes) {
    for (Value* out : n->outputs) out->dtype = DType::kFloat32;
    Step s;
    s.node = n;
    s.op = std::move(op);
    b.cost.push_back(n == gemm ? gemm_us : link_us);
    if (n != gemm) b.chain.push_back(static_cast<int>(b.program->steps.size()));
    else b.gemm = static_cast<int>(b.program->steps.size());
    b.program->steps.push_back(std::move(s));
  }
  b.program->graph = std::move(g);
  return b;
}

struct TempFile {
  explicit TempFile(const std::string& text)
      : path((fs::temp_directory_path() / str_cat("tessera_map_", ::getpid(), "_", counter++, ".json")).string()) {
    std::ofstream(path) << text;
  }
  ~TempFile() { fs::remove(path); }
  std::string path;
  static inline int counter = 0;
};

// Two PUs: local reads `local` ns per KB, cross reads `remote`, 300 ns
// hand-offs.
std::string two_pu_map(double local, double remote) {
  return str_cat(R"({"version": 1, "pus": [{"os_index": 0}, {"os_index": 1}], "read_cost": [[)", local, ", ",
                 remote, "], [", remote, ", ", local, R"(]], "handoff_ns": [[0, 300], [300, 0]]})");
}

Result<HostMap> read_map(const std::string& text) {
  TempFile f(text);
  HostMapOptions o;
  o.file = f.path;
  return host_map_obtain(o);
}

// `b` on 2 vEUs by critical path, with `map`'s crossing costs.
Result<Plan> critical_path_on_two(const Built& b, const HostMap& map) {
  ScheduleOptions o;
  o.veus = 2;
  o.policy = Policy::kCriticalPath;
  const VeuCosts c = VeuCosts::from_host_map(map, 2);
  o.costs = &c;
  return schedule(*b.program, b.cost, o);
}

std::set<int> veus_of(const Plan& plan, int step) {
  std::set<int> out;
  for (const TaskPlacement& t : plan.placements)
    if (t.step == step) out.insert(t.veu);
  return out;
}

// With crossing free the chain's ops split across both vEUs (each half is
// 10 µs of a 20 µs op); where every byte read across costs 40 ns per KB
// more, a part on the other vEU would read 256 KB of the other's half
// (+10 µs, as much as it saves): the chain stays on one vEU. The heavy op
// (2 x 2 ms) still splits: reading its 1 MB input across costs 41 µs.
TEST(Locality, ExpensiveCrossingKeepsAChainOnOneVeuAndStillSplitsAHeavyOp) {
  auto cheap = read_map(two_pu_map(10, 10));
  auto dear = read_map(two_pu_map(10, 50));
  ASSERT_TRUE(cheap.ok()) << cheap.status().to_string();
  ASSERT_TRUE(dear.ok()) << dear.status().to_string();
  for (Policy policy : {Policy::kCriticalPath, Policy::kWavefront, Policy::kAuto}) {
    SCOPED_TRACE(policy_name(policy));
    Built b = chain_and_gemm(8, 10, 2000);
    ScheduleOptions o;
    o.veus = 2;
    o.policy = policy;
    const VeuCosts free_costs = VeuCosts::from_host_map(*cheap, 2);
    o.costs = &free_costs;
    auto split = schedule(*b.program, b.cost, o);
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    ASSERT_TRUE(plan_validate(*b.program, *split).ok());
    int split_links = 0;
    for (int s : b.chain) split_links += veus_of(*split, s).size() == 2;
    EXPECT_GE(split_links, 6) << "with crossing free, the chain's ops are split";
    EXPECT_EQ(veus_of(*split, b.gemm).size(), 2u);

    const VeuCosts dear_costs = VeuCosts::from_host_map(*dear, 2);
    o.costs = &dear_costs;
    auto kept = schedule(*b.program, b.cost, o);
    ASSERT_TRUE(kept.ok()) << kept.status().to_string();
    ASSERT_TRUE(plan_validate(*b.program, *kept).ok());
    std::set<int> chain_veus;
    for (int s : b.chain)
      for (int v : veus_of(*kept, s)) chain_veus.insert(v);
    EXPECT_EQ(chain_veus.size(), 1u) << "the chain crossed vEUs where crossing costs 5x";
    EXPECT_EQ(veus_of(*kept, b.gemm).size(), 2u) << "the heavy op must still split";
  }
}

// The predicted timeline charges what crosses: an rTask on vEU 1 reading
// all of a 1 MB graph input (made on vEU 0) lasts its cost plus
// 1024 KB x 40 ns.
TEST(Locality, PredictedTimelineChargesBytesThatCross) {
  auto dear = read_map(two_pu_map(10, 50));
  ASSERT_TRUE(dear.ok());
  Built b = chain_and_gemm(0, 10, 2000);
  auto plan = critical_path_on_two(b, *dear);
  ASSERT_TRUE(plan.ok());
  for (const TaskPlacement& t : plan->placements) {
    const double expected = 2000 + (t.veu == 1 ? 1024 * 40 / 1e3 : 0);
    EXPECT_NEAR(t.end_us - t.start_us, expected, 1e-6) << "vEU " << t.veu;
  }
  const VeuCosts c = VeuCosts::from_host_map(*dear, 2);
  EXPECT_NEAR(c.crossing_us(1, 0, 1 << 20, 1 << 20), 40.96, 1e-9);
  EXPECT_DOUBLE_EQ(c.handoff(0, 1), 0.3);
}

// A few bytes from another vEU cost at least a line's latency, the
// pair's hand-off: 256 bytes at 40 ns per KB would be 0.01 µs, and are
// charged the 0.3 µs hand-off; a megabyte, its bytes. Where crossing is
// free (a map whose cross reads cost what local ones do), nothing is.
TEST(Locality, AFewBytesThatCrossCostAtLeastTheHandOff) {
  auto dear = read_map(two_pu_map(10, 50));
  auto cheap = read_map(two_pu_map(10, 10));
  ASSERT_TRUE(dear.ok() && cheap.ok());
  const VeuCosts c = VeuCosts::from_host_map(*dear, 2);
  EXPECT_DOUBLE_EQ(c.crossing_us(1, 0, 256, 256), 0.3);
  EXPECT_DOUBLE_EQ(c.crossing_us(0, 1, 64, 1 << 20), 0.3);  // a small slice of a large tensor too
  EXPECT_NEAR(c.crossing_us(1, 0, 1 << 20, 1 << 20), 40.96, 1e-9);
  EXPECT_EQ(c.crossing_us(1, 1, 256, 256), 0);
  const VeuCosts free_costs = VeuCosts::from_host_map(*cheap, 2);
  EXPECT_TRUE(free_costs.crossing_free);
  EXPECT_EQ(free_costs.crossing_us(1, 0, 256, 256), 0);
}

// An rTask that names the slice it reads (a recurrent cell's row of the
// whole sequence's projection) is charged for that slice: 8 KB of a
// 512 KB input made on the other vEU costs 8 KB x 40 ns more there, not
// 512 KB x 40 ns.
TEST(Locality, AnRTaskIsChargedForTheSliceItReads) {
  auto dear = read_map(two_pu_map(10, 50));
  ASSERT_TRUE(dear.ok());
  Built b = chain_and_gemm(1, 10, 2000);
  const int link = b.chain[0];
  b.program->steps[static_cast<size_t>(link)].op->set_input_read_bytes(0, 8 * 1024);
  TaskGraph g = task_graph(*b.program);
  ASSERT_EQ(g.ops[static_cast<size_t>(link)].inputs.size(), 1u);
  EXPECT_EQ(g.ops[static_cast<size_t>(link)].inputs[0].read_bytes, 8 * 1024);
  // The link reads graph input y (made on vEU 0): on vEU 1 it pays for
  // the 8 KB it reads, however large y is.
  auto plan = critical_path_on_two(b, *dear);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const TaskPlacement& t : plan->placements)
    if (t.step == link) {
      const double expected = 10 + (t.veu == 1 ? 8 * 40 / 1e3 : 0);
      EXPECT_NEAR(t.end_us - t.start_us, expected, 1e-6) << "vEU " << t.veu;
    }
}

// LSTM-TC's lowered cells read a step's row of the sequence's projection
// and the previous h (1 KB): where crossing costs 5x a local read they
// still split across both vEUs (each half streams 512 KB of R), as where
// it is free. Costed as profiled (12 us a cell, 6 per half) and charged
// for the whole projection (400 KB, 8 us a half), they had run on one vEU,
// twice as slow.
TEST(Locality, RecurrentCellsStillSplitWhereCrossingIsDear) {
  auto dear = read_map(two_pu_map(10, 50));
  ASSERT_TRUE(dear.ok());
  for (Policy policy : {Policy::kCriticalPath, Policy::kWavefront}) {
    SCOPED_TRACE(policy_name(policy));
    std::map<std::string, Tensor> inputs;
    CompileConfig co;
    co.build_plan = true;
    co.schedule.veus = 2;
    co.schedule.policy = policy;
    co.host_map = &*dear;
    co.task_cost = [](const Node& n, int64_t tasks) {
      return n.op_type == "TesseraLstmCell" ? 12.0 / static_cast<double>(tasks) : analytic_task_cost(n, tasks);
    };
    auto p = testing_util::compile_zoo("lstm_tc", co, &inputs);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    int cells = 0, split = 0;
    for (size_t s = 0; s < (*p)->steps.size(); ++s) {
      if ((*p)->steps[s].node->op_type != "TesseraLstmCell") continue;
      ++cells;
      split += veus_of(*(*p)->plan, static_cast<int>(s)).size() == 2;
    }
    EXPECT_EQ(cells, 1000);
    EXPECT_GE(split, cells * 9 / 10) << "cells kept on one vEU where crossing is dear";
    int64_t busiest = 0;
    for (int64_t n : (*p)->plan->tasks_per_veu) busiest = std::max(busiest, n);
    EXPECT_LE(busiest, (*p)->stats.rtasks * 6 / 10);
  }
}

// Where the map says crossing costs nothing (and hand-offs take the
// default), every zoo model gets exactly the Plan it gets without a map.
TEST(Locality, FreeCrossingReproducesThePlansMadeWithoutAMap) {
  const std::string map = str_cat(R"({"version": 1, "pus": [{"os_index": 0}, {"os_index": 1}, {"os_index": 2}],
    "read_cost": [[7, 7, 7], [7, 7, 7], [7, 7, 7]],
    "handoff_ns": [[0, 200, 200], [200, 0, 200], [200, 200, 0]]})");
  auto free_map = read_map(map);
  ASSERT_TRUE(free_map.ok()) << free_map.status().to_string();
  for (const std::string& model : testing_util::kZooModels) {
    for (int veus : {2, 3}) {
      std::map<std::string, Tensor> inputs;
      CompileConfig co;
      co.build_plan = true;
      co.schedule.veus = veus;
      auto without = testing_util::compile_zoo(model, co, &inputs);
      co.host_map = &*free_map;
      auto with = testing_util::compile_zoo(model, co, &inputs);
      ASSERT_TRUE(without.ok() && with.ok()) << model;
      const Plan &a = *(*without)->plan, &b = *(*with)->plan;
      EXPECT_EQ(a.predicted_us, b.predicted_us) << model << " veus=" << veus;
      ASSERT_EQ(a.program.size(), b.program.size());
      for (size_t u = 0; u < a.program.size(); ++u) {
        ASSERT_EQ(a.program[u].size(), b.program[u].size()) << model << " vEU " << u;
        for (size_t i = 0; i < a.program[u].size(); ++i) {
          EXPECT_EQ(a.program[u][i].kind, b.program[u][i].kind);
          EXPECT_EQ(a.program[u][i].a, b.program[u][i].a);
          EXPECT_EQ(a.program[u][i].b, b.program[u][i].b);
        }
      }
    }
  }
}

// On a real model, a map where crossing is dear moves fewer bytes between
// vEUs than one where it is free, and never predicts a Plan that the
// planner's own accounting says crosses more.
TEST(Locality, DearCrossingMovesFewerBytesOnZooModels) {
  auto cheap = read_map(two_pu_map(10, 10));
  auto dear = read_map(two_pu_map(10, 100));
  ASSERT_TRUE(cheap.ok() && dear.ok());
  for (const std::string model : {"nasnet_like", "mobilenet_v2", "bert_tiny"}) {
    std::map<std::string, Tensor> inputs;
    CompileConfig co;
    co.build_plan = true;
    co.schedule.veus = 2;
    co.schedule.policy = Policy::kCriticalPath;
    co.host_map = &*cheap;
    auto a = testing_util::compile_zoo(model, co, &inputs);
    co.host_map = &*dear;
    auto b = testing_util::compile_zoo(model, co, &inputs);
    ASSERT_TRUE(a.ok() && b.ok()) << model;
    // Cross-vEU waits stand for data handed across.
    EXPECT_LE((*b)->plan->waits, (*a)->plan->waits) << model;
  }
}

// mark_out_planes: a 1x1 conv cuts whole output planes unless a reader
// cuts pixel blocks (a dense 3x3, a 1x1 too narrow to split by planes, or
// such a reader behind a Concat that holds the conv's output in place);
// readers that take planes (a depthwise conv, a MaxPool) or that read
// every plane (a 1x1 cut by planes itself, the graph's output) keep it.
TEST(Locality, OneByOneConvsWriteThePlanesTheirReadersTake) {
  auto ints = [](std::vector<int64_t> v) {
    Attribute a;
    a.kind = Attribute::Kind::kInts;
    a.ints = std::move(v);
    return a;
  };
  auto one = [](int64_t v) {
    Attribute a;
    a.i = v;
    return a;
  };
  auto g = std::make_unique<Graph>();
  int weights = 0;
  auto conv = [&](const std::string& name, Value* x, int64_t cin, int64_t cout, int64_t k, int64_t group) {
    Tensor w = Tensor::from_floats(std::vector<float>(static_cast<size_t>(cout * cin / group * k * k), 0.01f),
                                   Shape{cout, cin / group, k, k});
    Node* n = g->add_node("Conv", name, {x, g->add_constant(str_cat("w", weights++), w)}, 1);
    n->attrs["group"] = one(group);
    n->attrs["pads"] = ints({k / 2, k / 2, k / 2, k / 2});
    return n->outputs[0];
  };
  auto concat = [&](const std::string& name, Value* a, Value* b) {
    Node* n = g->add_node("Concat", name, {a, b}, 1);
    n->attrs["axis"] = one(1);
    return n->outputs[0];
  };
  Value* x = g->add_input("x", DType::kFloat32, Shape{1, 32, 16, 16});
  Value* dw = conv("dw", conv("to_depthwise", x, 32, 32, 1, 1), 32, 32, 3, 32);
  g->mark_output(conv("dense3x3", conv("to_3x3", dw, 32, 32, 1, 1), 32, 32, 3, 1));
  g->mark_output(conv("narrow", conv("to_narrow", x, 32, 32, 1, 1), 32, 16, 1, 1));
  g->mark_output(conv("wide", conv("to_wide", x, 32, 32, 1, 1), 32, 64, 1, 1));
  Node* pool = g->add_node("MaxPool", "pool", {concat("cat_pool", conv("to_pool_a", x, 32, 32, 1, 1),
                                                      conv("to_pool_b", x, 32, 32, 1, 1))}, 1);
  pool->attrs["kernel_shape"] = ints({3, 3});
  pool->attrs["pads"] = ints({1, 1, 1, 1});
  g->mark_output(pool->outputs[0]);
  g->mark_output(conv("cat_3x3", concat("cat_conv", conv("to_cat_a", x, 32, 32, 1, 1),
                                                    conv("to_cat_b", x, 32, 32, 1, 1)), 64, 32, 3, 1));
  CompileConfig co;
  co.build_plan = false;
  auto p = compile_graph(std::move(g), co);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const std::set<std::string> want = {"to_depthwise", "to_pool_a", "to_pool_b", "to_wide", "wide"};
  std::set<std::string> marked, convs;
  for (const Step& st : (*p)->steps) {
    if (st.node->op_type != "Conv" && st.node->op_type != "TesseraFusedConv") continue;
    convs.insert(st.node->name);
    if (st.node->attr_int("out_planes", 0) == 1) marked.insert(st.node->name);
  }
  EXPECT_EQ(convs.size(), 13u);
  EXPECT_EQ(marked, want);
  EXPECT_EQ((*p)->stats.convs_by_planes, 5);
  EXPECT_EQ((*p)->stats.concats_in_place, 2);
}

}  // namespace
}  // namespace tessera
