#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/npy.h"
#include "ir/ops/op_registry.h"

namespace tessera {
namespace {

TEST(DType, HalfRoundTripsEveryValue) {
  // Every finite half converts to float and back exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf/NaN
    float f = half_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(float_to_half(f), h) << std::hex << h;
  }
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(float_to_half(65520.f), 0x7c00);          // rounds to inf
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 4096), 0x3c00);  // ties to even
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.5f)), 1.5f);
  EXPECT_EQ(float_to_bfloat16(1.00390625f), 0x3f80);  // tie rounds to even
}

TEST(Graph, TopologicalSortAndCycleDetection) {
  Graph g;
  Value* x = g.add_input("x", DType::kFloat32, Shape{2});
  Node* b = g.add_node("Relu", "b", {nullptr}, 1);
  Node* a = g.add_node("Relu", "a", {x}, 1);
  g.set_input(b, 0, a->outputs[0]);  // b reads a, but comes first
  g.mark_output(b->outputs[0]);
  EXPECT_FALSE(verify_graph(g).ok());
  ASSERT_TRUE(g.sort_topologically().ok());
  EXPECT_EQ(g.nodes()[0]->name, "a");
  EXPECT_TRUE(verify_graph(g).ok());
  g.set_input(a, 0, b->outputs[0]);  // a <-> b
  Status st = g.sort_topologically();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cycle"), std::string::npos);
}

// Every read is on its value's use list, through every way a node's inputs
// change; verify_graph catches a change made behind the Graph's back.
TEST(Graph, UseListsFollowEveryChange) {
  Graph g;
  Value* x = g.add_input("x", DType::kFloat32, Shape{2});
  Value* y = g.add_input("y", DType::kFloat32, Shape{2});
  Node* sq = g.add_node("Mul", "sq", {x, x}, 1);
  Node* r = g.add_node("Relu", "r", {sq->outputs[0]}, 1);
  g.mark_output(r->outputs[0]);
  EXPECT_EQ(g.use_count(x), 2);
  EXPECT_EQ(g.sole_consumer(x), nullptr);  // read twice
  EXPECT_EQ(g.sole_consumer(sq->outputs[0]), r);
  EXPECT_EQ(g.sole_consumer(r->outputs[0]), nullptr);  // a graph output
  g.set_input(sq, 1, y);
  EXPECT_EQ(g.use_count(x), 1);
  EXPECT_EQ(g.sole_consumer(x), sq);
  EXPECT_EQ(g.use_count(y), 1);
  g.replace_uses(x, y);
  EXPECT_EQ(g.use_count(x), 0);
  EXPECT_EQ(g.use_count(y), 2);
  g.add_input(r, x);
  EXPECT_EQ(g.sole_consumer(x), r);
  EXPECT_TRUE(verify_graph(g).ok()) << verify_graph(g).to_string();
  Node* d = g.add_node("Neg", "d", {x, sq->outputs[0]}, 1);
  EXPECT_EQ(g.use_count(x), 2);
  d->dead = true;  // a dead reader does not count, and goes at compact()
  EXPECT_EQ(g.use_count(x), 1);
  EXPECT_EQ(g.sole_consumer(sq->outputs[0]), r);
  EXPECT_EQ(x->uses.size(), 2u);
  g.compact();
  EXPECT_EQ(x->uses, std::vector<Node*>({r}));
  EXPECT_EQ(sq->outputs[0]->uses, std::vector<Node*>({r}));
  EXPECT_EQ(y->uses.size(), 2u);
  // Behind the Graph's back:
  sq->inputs[0] = sq->inputs[1] = x;
  const Status st = verify_graph(g);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("use list"), std::string::npos) << st.to_string();
}

TEST(Graph, DeepChainSortsWithoutRecursion) {
  Graph g;
  Value* v = g.add_input("x", DType::kFloat32, Shape{1});
  std::vector<Node*> nodes;
  for (int i = 0; i < 100000; ++i) {
    Node* n = g.add_node("Relu", "n" + std::to_string(i), {v}, 1);
    v = n->outputs[0];
  }
  g.mark_output(v);
  EXPECT_TRUE(g.sort_topologically().ok());
  EXPECT_TRUE(verify_graph(g).ok());
}

TEST(Npy, RoundTripsAndRejectsMalformed) {
  auto dir = std::filesystem::temp_directory_path();
  std::string path = (dir / "tessera_npy_test.npy").string();
  Tensor t = Tensor::from_floats({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  ASSERT_TRUE(npy_write(path, t).ok());
  auto r = npy_read(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(shape_string(r->shape()), "2x3");
  EXPECT_EQ(std::memcmp(r->raw(), t.raw(), 24), 0);
  Tensor i = Tensor::from_int64s({7}, Shape{});
  ASSERT_TRUE(npy_write(path, i).ok());
  EXPECT_EQ(npy_read(path)->rank(), 0);
  EXPECT_FALSE(npy_parse("\x93NUMPY\x01\x00", "x").ok());
  EXPECT_FALSE(npy_parse("garbage", "x").ok());
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + std::string(1, static_cast<char>(header.size())) +
                      std::string(1, '\0') + header + std::string(8, '\0');  // 2 of 4 floats
  auto short_data = npy_parse(bytes, "short.npy");
  ASSERT_FALSE(short_data.ok());
  EXPECT_NE(short_data.status().message().find("short.npy"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(Ops, BroadcastAndWindowGeometry) {
  EXPECT_EQ(broadcast_shapes(Shape{2, 1, 4}, Shape{3, 1})->to_string(), "2x3x4");
  EXPECT_FALSE(broadcast_shapes(Shape{2, 3}, Shape{4}).ok());
  Graph g;
  Node* n = g.add_node("MaxPool", "p", {}, 1);
  n->attrs["strides"].kind = Attribute::Kind::kInts;
  n->attrs["strides"].ints = {2, 2};
  n->attrs["ceil_mode"].i = 1;
  auto geo = window_geometry(*n, Shape{1, 1, 112, 112}, {3, 3});
  ASSERT_TRUE(geo.ok());
  EXPECT_EQ(geo->out[0], 56);  // (112 - 3) / 2 + 1 = 55.5 -> 56 with ceil
}

// A variadic op with an input left empty (a forged Executable can say so)
// is refused by name, not read through a null pointer (the Einsum case was
// found by fuzz_executable_load).
TEST(Ops, VariadicOpsRefuseAnEmptyInput) {
  for (const char* type : {"Einsum", "Concat", "TesseraConcat", "Max", "Min", "TesseraFusedElementwise"}) {
    Graph g;
    Value* x = g.add_input("x", DType::kFloat32, Shape{2, 3});
    Node* n = g.add_node(type, "v", {x, nullptr}, 1);
    n->attrs["equation"].kind = Attribute::Kind::kString;
    n->attrs["equation"].s = "ij,jk->ik";
    n->attrs["axis"].i = 0;
    Status st = op_infer(*n);
    ASSERT_FALSE(st.ok()) << type;
    EXPECT_NE(st.message().find("required input 1 is missing"), std::string::npos) << type << ": " << st.message();
  }
}

}  // namespace
}  // namespace tessera
