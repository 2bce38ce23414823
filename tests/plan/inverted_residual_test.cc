// The inverted residual fusion (compiler/fuse.cc, fuse_inverted_residuals;
// kernels/cpu/inverted_residual.cc) against the same graphs with the three
// convs as separate ops: geometries that cut rTasks into several strips
// (stride 1 and 2, 3x3 and 5x5, dilation, uneven padding, batch 2), a
// residual, every kind of project epilogue and both project GEMMs, on 1, 3
// and the kernel's own count of rTasks; and the forms it must leave alone.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "base/strings.h"
#include "devices/cpu/engine.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/packed_gemm.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

using testing_util::compile_zoo;
using testing_util::expect_bitwise;
using testing_util::rel_l2;
using testing_util::run_outputs;

struct Block {
  int64_t n, c, h, w, e, o, k, stride, dilation;
  std::vector<int64_t> pads;
  std::string act1, act2, act3;  // "" for none
  bool residual, biases;
};

Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

// x -> 1x1 conv -> act1 -> depthwise -> act2 -> 1x1 conv [-> + x] -> act3.
// `expand_out` / `dw_out`: also make that stage's output a graph output.
std::unique_ptr<Graph> build_block(const Block& b, uint32_t seed, bool expand_out = false, bool dw_out = false,
                                   int64_t expand_stride = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto random = [&](Shape s) {
    Tensor t(DType::kFloat32, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    return t;
  };
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", DType::kFloat32, Shape{b.n, b.c, b.h, b.w});
  auto act = [&](Value* v, const std::string& a, const std::string& name) {
    if (a.empty()) return v;
    std::vector<Value*> ins = {v};
    if (a == "Clip") {
      ins.push_back(g->add_constant(name + "_lo", Tensor::from_floats({0.f}, Shape{})));
      ins.push_back(g->add_constant(name + "_hi", Tensor::from_floats({0.8f}, Shape{})));
    }
    return g->add_node(a, name, ins, 1)->outputs[0];
  };
  auto conv = [&](Value* in, Shape w, const std::string& name) {
    std::vector<Value*> ins = {in, g->add_constant(name + "_w", random(w))};
    if (b.biases) ins.push_back(g->add_constant(name + "_b", random(Shape{w[0]})));
    return g->add_node("Conv", name, ins, 1);
  };
  Node* c1 = conv(x, Shape{b.e, b.c, 1, 1}, "expand");
  if (expand_stride != 1) c1->attrs["strides"] = ints_attr({expand_stride, expand_stride});
  Value* y1 = act(c1->outputs[0], b.act1, "act1");
  Node* c2 = conv(y1, Shape{b.e, 1, b.k, b.k}, "dw");
  Attribute group;
  group.kind = Attribute::Kind::kInt;
  group.i = b.e;
  c2->attrs["group"] = group;
  c2->attrs["strides"] = ints_attr({b.stride, b.stride});
  c2->attrs["dilations"] = ints_attr({b.dilation, b.dilation});
  c2->attrs["pads"] = ints_attr(b.pads);
  Value* y2 = act(c2->outputs[0], b.act2, "act2");
  Value* y3 = conv(y2, Shape{b.o, b.e, 1, 1}, "project")->outputs[0];
  if (b.residual) y3 = g->add_node("Add", "add", {x, y3}, 1)->outputs[0];
  g->mark_output(act(y3, b.act3, "act3"));
  if (expand_out) g->mark_output(y1);
  if (dw_out) g->mark_output(y2);
  return g;
}

// With a Plan on 2 vEUs, every op in `tasks` rTasks (0: its kernel's own
// grain).
Result<std::unique_ptr<Program>> compile_block(std::unique_ptr<Graph> g, bool blocks, int64_t tasks) {
  CompileConfig co;
  co.fuse_blocks = blocks;
  co.tasks_per_op = tasks;
  co.variants = false;
  co.build_plan = true;
  co.schedule.veus = 2;
  return compile_graph(std::move(g), co);
}

int count_blocks(const Program& p) {
  int n = 0;
  for (const Step& st : p.steps) n += st.node->op_type == "TesseraInvertedResidual";
  return n;
}

TEST(InvertedResidual, MatchesUnfusedAndEveryTiling) {
  const std::vector<Block> blocks = {
      // 112 -> 56 at stride 2 (MobileNetV2's second block, narrower): 5
      // strips of rows per rTask; a Sigmoid after the packed project.
      {1, 16, 56, 56, 96, 24, 3, 2, 1, {1, 1, 1, 1}, "Clip", "Clip", "Sigmoid", false, true},
      // Stride 1 with a residual, 2 images, rows shared between strips.
      {2, 8, 28, 64, 144, 8, 3, 1, 1, {1, 1, 1, 1}, "Clip", "Clip", "", true, true},
      // 300 expanded channels: the project takes sgemm; 5x5, no biases.
      {1, 12, 28, 13, 300, 20, 5, 1, 1, {2, 2, 2, 2}, "Relu", "", "Sigmoid", false, false},
      // Dilation 2 at stride 1, a residual and a Relu after it.
      {1, 6, 31, 17, 40, 6, 3, 1, 2, {2, 2, 2, 2}, "", "Relu", "Relu", true, true},
      // Odd map at stride 2, a Clip after the project.
      {1, 5, 29, 15, 32, 7, 3, 2, 1, {1, 1, 1, 1}, "Relu", "Relu", "Clip", false, true},
      // Padding only at the bottom and right (as TensorFlow pads stride 2).
      {1, 4, 28, 16, 24, 4, 3, 2, 1, {0, 0, 1, 1}, "Clip", "Clip", "", false, true},
  };
  int index = 0;
  for (const Block& b : blocks) {
    SCOPED_TRACE(str_cat("block ", index++));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::map<std::string, Tensor> inputs;
    Tensor x(DType::kFloat32, Shape{b.n, b.c, b.h, b.w});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    inputs["x"] = x;
    auto plain = compile_block(build_block(b, 1), false, 0);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    EXPECT_EQ(count_blocks(**plain), 0);
    const std::vector<Tensor> want = run_outputs(std::move(*plain), Executor::kSequential, inputs);
    std::vector<Tensor> first;
    for (int64_t tasks : {int64_t{1}, int64_t{3}, int64_t{0}}) {
      auto fused = compile_block(build_block(b, 1), true, tasks);
      ASSERT_TRUE(fused.ok()) << fused.status().to_string();
      ASSERT_EQ((*fused)->stats.blocks_fused, 1);
      ASSERT_EQ(count_blocks(**fused), 1);
      EXPECT_EQ((*fused)->steps.size(), 1u);
      const std::vector<Tensor> got = run_outputs(std::move(*fused), Executor::kPlan, inputs);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_LE(rel_l2(got[0], want[0]), 1e-6) << tasks << " rTasks";
      // Strips at rTask boundaries compute their shared rows again, with
      // the same arithmetic: every tiling gives the same bits. Except for a
      // project beyond the packed GEMM's reduction (kPackedGemmMaxK) with
      // AVX2 kernels: oneDNN's sgemm there sums a column in an order that
      // depends on the call's width (a strip's pixels), so tilings agree
      // to rounding only.
      const bool same_bits = b.e <= kPackedGemmMaxK || std::string(kernel_isa()) == "avx512";
      if (first.empty()) first = got;
      else if (same_bits) expect_bitwise(got, first, str_cat(tasks, " rTasks against 1"));
      else EXPECT_LE(rel_l2(got[0], first[0]), 1e-6) << tasks << " rTasks against 1";
    }
  }
}

// Not fused: an expanded or depthwise output read elsewhere too, an
// expand conv that is not a plain 1x1 (stride 2), a map too short, a
// depthwise conv with a residual of its own.
TEST(InvertedResidual, OnlyWhenEachStageIsReadOnceAndPlain) {
  const Block b{1, 8, 28, 12, 32, 8, 3, 1, 1, {1, 1, 1, 1}, "Clip", "Clip", "", true, true};
  for (int form = 0; form < 4; ++form) {
    Block nb = b;
    nb.residual = form != 2;  // a stride-2 expand halves the map: no residual fits
    if (form == 3) nb.h = kInvertedResidualMinHeight - 1;
    auto fused = compile_block(build_block(nb, 1, form == 0, form == 1, form == 2 ? 2 : 1), true, 0);
    ASSERT_TRUE(fused.ok()) << fused.status().to_string();
    EXPECT_EQ((*fused)->stats.blocks_fused, 0) << "form " << form;
    EXPECT_EQ(count_blocks(**fused), 0) << "form " << form;
  }
  // The depthwise conv with an Add of its own: the epilogue pass takes it
  // as a residual, and the block is left unfused.
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", DType::kFloat32, Shape{1, 4, 30, 6});
  Tensor w1 = Tensor::from_floats(std::vector<float>(16 * 4, 0.25f), Shape{16, 4, 1, 1});
  Tensor w2 = Tensor::from_floats(std::vector<float>(16 * 9, 0.5f), Shape{16, 1, 3, 3});
  Tensor w3 = Tensor::from_floats(std::vector<float>(4 * 16, 0.125f), Shape{4, 16, 1, 1});
  Value* y1 = g->add_node("Conv", "expand", {x, g->add_constant("w1", w1)}, 1)->outputs[0];
  Node* dw = g->add_node("Conv", "dw", {y1, g->add_constant("w2", w2)}, 1);
  Attribute group;
  group.kind = Attribute::Kind::kInt;
  group.i = 16;
  dw->attrs["group"] = group;
  dw->attrs["pads"] = ints_attr({1, 1, 1, 1});
  Value* r = g->add_input("r", DType::kFloat32, Shape{1, 16, 30, 6});
  Value* y2 = g->add_node("Add", "dw_res", {dw->outputs[0], r}, 1)->outputs[0];
  g->mark_output(g->add_node("Conv", "project", {y2, g->add_constant("w3", w3)}, 1)->outputs[0]);
  auto p = compile_block(std::move(g), true, 0);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ((*p)->stats.blocks_fused, 0);
}

// MobileNetV2: its 6 blocks with an expand conv on maps of 28 rows or
// more fused, the result within
// rounding of the three-op form on the plan executor.
TEST(InvertedResidual, MobileNetV2) {
  std::map<std::string, Tensor> inputs;
  CompileConfig co;
  co.fuse_blocks = false;
  auto plain = compile_zoo("mobilenet_v2", co, &inputs);
  co.build_plan = true;
  co.schedule.veus = 2;
  co.fuse_blocks = true;
  auto fused = compile_zoo("mobilenet_v2", co, &inputs);
  ASSERT_TRUE(plain.ok() && fused.ok());
  EXPECT_EQ((*fused)->stats.blocks_fused, 6);
  EXPECT_EQ(count_blocks(**fused), 6);
  const std::vector<Tensor> want = run_outputs(std::move(*plain), Executor::kSequential, inputs);
  const std::vector<Tensor> got = run_outputs(std::move(*fused), Executor::kPlan, inputs);
  ASSERT_EQ(got.size(), 1u);
  const double err = rel_l2(got[0], want[0]);
  EXPECT_LE(err, 1e-5);
  RecordProperty("rel_l2", std::to_string(err));
}

}  // namespace
}  // namespace tessera
