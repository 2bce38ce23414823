// The fusion passes (src/compiler/fuse.cc) against the unfused graph:
// epilogues (residual, every activation, GELU, SiLU, LayerNorm, Split) after
// Conv, Gemm and MatMul, elementwise chains, activations moved before a
// Concat, and attention, bitwise equal where the arithmetic is unchanged,
// and each fusion taken only in the forms it handles.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "base/strings.h"
#include "devices/cpu/engine.h"
#include "kernels/cpu/kernel.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

using testing_util::compile_zoo;
using testing_util::expect_bitwise;
using testing_util::kZooModels;
using testing_util::rel_l2;
using testing_util::run_outputs;

// Fusing Conv/Gemm with their residual Add and activation does the same
// arithmetic in the same order: bitwise equal to the unfused graph, and
// not vacuous (ResNet-18's blocks, MobileNetV2's ReLU6s, the MLP's ReLUs).
TEST(Fusion, BitwiseEqualToUnfusedOnTheZoo) {
  int total = 0;
  for (const std::string& model : kZooModels) {
    std::map<std::string, Tensor> inputs;
    CompileConfig co;
    co.fuse = false;
    auto plain = compile_zoo(model, co, &inputs);
    co.fuse = true;
    co.fuse_blocks = false;  // the default; not bitwise: inverted_residual_test.cc
    co.channel_blocks = false;  // not bitwise where an NCHW 1x1 calls sgemm: ChannelBlocks.* below
    auto fused = compile_zoo(model, co, &inputs);
    ASSERT_TRUE(plain.ok() && fused.ok());
    const int n = (*fused)->stats.fused + (*fused)->stats.chains_fused + (*fused)->stats.attention_fused;
    if (model == "bert_tiny") {
      EXPECT_EQ((*fused)->stats.attention_fused, 2);  // one per layer
      int norms = 0;
      for (const Step& st : (*fused)->steps) norms += st.node->op_type == "TesseraFusedMatMul" && st.node->input(4);
      EXPECT_EQ(norms, 4);  // the LayerNorms after each layer's out and ff2 projections
      for (const Step& st : (*fused)->steps) {  // the heads read and written in place of their layout ops
        if (st.node->op_type == "TesseraAttention") {
          EXPECT_EQ(st.node->attr_int("heads", 0), 2);
        }
      }
    }
    total += n;
    if (model == "resnet18" || model == "mobilenet_v2" || model == "mlp") {
      EXPECT_GT(n, 0) << model;
    }
    // Each fused op replaces itself plus the Add and/or activation it took;
    // a fused chain of k ops replaces k.
    size_t absorbed = 0;
    for (const Step& st : (*fused)->steps) {
      if (st.node->op_type == "TesseraFusedElementwise")
        absorbed += st.node->attrs.at("ops").strings.size() - 1;
      else if (st.node->op_type == "TesseraAttention")  // + scale, mask, Softmax, second MatMul
        absorbed += 2 + (st.node->input(3) != nullptr) + (st.node->input(4) != nullptr) +
                    (st.node->attr_int("heads", 0) > 0 ? 8 : 0);  // a Reshape and a Transpose per Q, K, V, Y
      else if (st.node->op_type.rfind("TesseraFused", 0) == 0)
        absorbed += (st.node->input(3) != nullptr) +
                    (st.node->attr_string("activation", "none") == "Gelu"   ? 5  // Div, Erf, Add, Mul, Mul
                     : st.node->attr_string("activation", "none") == "Silu" ? 2  // Sigmoid, Mul
                     : st.node->attr_string("activation", "none") != "none") +
                    (st.node->op_type == "TesseraFusedMatMul" && st.node->input(2) != nullptr) +  // its bias Add
                    (st.node->input(4) != nullptr) +  // a LayerNormalization
                    st.node->has_attr("split");       // a Split
    }
    // An activation moved before a Concat of k inputs became k of them.
    absorbed -= static_cast<size_t>((*fused)->stats.activation_copies - (*fused)->stats.activations_pushed);
    if (model == "nasnet_like") {
      EXPECT_EQ((*fused)->stats.activations_pushed, 6) << "one Relu after each cell's Concat";
    }
    EXPECT_EQ((*plain)->steps.size() - (*fused)->steps.size(), absorbed) << model;
    expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                   run_outputs(std::move(*plain), Executor::kSequential, inputs), model + " fused vs unfused");
  }
  std::printf("fused epilogues and chains across the zoo: %d\n", total);
}

// A float tensor of shape `s`, uniform in [lo, hi).
Tensor uniform_tensor(std::mt19937& rng, float lo, float hi, Shape s) {
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t(DType::kFloat32, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// The graph `build` makes, compiled with fusion off and then on (each from
// a fresh graph), with `tasks_per_op` rTasks per op (0: the kernels' grain).
std::pair<Result<std::unique_ptr<Program>>, Result<std::unique_ptr<Program>>> compile_unfused_and_fused(
    const std::function<std::unique_ptr<Graph>()>& build, int64_t tasks_per_op = 0) {
  CompileConfig co;
  co.tasks_per_op = tasks_per_op;
  co.fuse = false;
  auto plain = compile_graph(build(), co);
  co.fuse = true;
  return {std::move(plain), compile_graph(build(), co)};
}

// Every activation the epilogue implements, after a Conv (with and without
// a residual), a Gemm with a residual and a MatMul with bias and residual:
// fused bitwise equal to unfused.
TEST(Fusion, EveryActivationBitwiseEqual) {
  std::mt19937 rng(7);
  auto random = [&](Shape s) { return uniform_tensor(rng, -2.f, 2.f, std::move(s)); };
  auto fattr = [](float v) {
    Attribute a;
    a.kind = Attribute::Kind::kFloat;
    a.f = v;
    return a;
  };
  for (const char* act : {"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu", "Silu"}) {
    // conv (im2col), conv + residual (8 channels: Winograd), gemm +
    // residual, matmul + bias + residual, and depthwise convs wide enough
    // for the by-rows path (stride 1 and 2), and a 3-channel stride-2 conv
    // (the direct path) without and with a residual, whose inputs hold a
    // NaN: the fused clamp must treat it as the unfused activation does;
    // then 1x1 convs (packed weights, the epilogue in registers: 20
    // output channels, partial blocks of 8; 70 pixels, a partial block of
    // columns, without a residual; 49 with one, the 49th taken along in
    // the pass over the first 48 with AVX-512), their input holding a NaN
    // too; then a grouped 3x3 conv
    // at stride 2 (16 channels per group: the grouped direct path, a
    // partial last tile of pixels) without and with a residual, with a NaN.
    for (int variant = 0; variant < 12; ++variant) {
      const bool dw = variant == 4 || variant == 5, stem = variant == 6 || variant == 7;
      const bool pw = variant == 8 || variant == 9, gc = variant >= 10;
      const bool residual = (variant >= 1 && variant <= 3) || variant == 7 || variant == 9 || variant == 11;
      const int64_t cin = variant == 1 ? 8 : stem ? 3 : pw ? 12 : gc ? 32 : 4;
      const Shape rs = variant == 2 ? Shape{5, 10} : variant == 3 ? Shape{2, 5, 10} : stem ? Shape{1, 8, 5, 20}
                                                   : pw ? Shape{1, 20, 7, variant == 9 ? 7 : 10}
                                                   : gc ? Shape{1, 32, 5, 7}
                                                                                : Shape{1, 8, 9, 7};
      const Shape xs = variant == 2 ? Shape{5, 12} : variant == 3 ? Shape{2, 5, 12} : dw || stem ? Shape{1, cin, 9, 40}
                                                   : pw ? Shape{1, cin, 7, variant == 9 ? 7 : 10}
                                                   : gc ? Shape{1, cin, 9, 13}
                                                                                : Shape{1, cin, 9, 7};
      auto build = [&](uint32_t seed) {
        rng.seed(seed);
        auto g = std::make_unique<Graph>();
        Value* x = g->add_input("x", DType::kFloat32, xs);
        Node* op;
        if (variant == 3) {
          op = g->add_node("MatMul", "matmul", {x, g->add_constant("w", random(Shape{12, 10}))}, 1);
          op = g->add_node("Add", "bias", {g->add_constant("b", random(Shape{10})), op->outputs[0]}, 1);
        } else if (variant == 2) {
          op = g->add_node("Gemm", "gemm", {x, g->add_constant("w", random(Shape{12, 10})),
                                            g->add_constant("b", random(Shape{10}))}, 1);
        } else {
          const int64_t m = dw ? 4 : variant == 1 || stem ? 8 : pw ? 20 : gc ? 32 : 6, k = pw ? 1 : 3;
          op = g->add_node("Conv", "conv", {x, g->add_constant("w", random(Shape{m, dw ? 1 : gc ? cin / 2 : cin, k, k})),
                                            g->add_constant("b", random(Shape{m}))}, 1);
          Attribute ints;
          ints.kind = Attribute::Kind::kInts;
          ints.ints = {k / 2, k / 2, k / 2, k / 2};
          op->attrs["pads"] = ints;
          if (dw) {
            Attribute group;
            group.kind = Attribute::Kind::kInt;
            group.i = 4;
            op->attrs["group"] = group;
            ints.ints = {variant - 3, variant - 3};
            op->attrs["strides"] = ints;
          }
          if (gc) {
            Attribute group;
            group.kind = Attribute::Kind::kInt;
            group.i = 2;
            op->attrs["group"] = group;
          }
          if (stem || gc) {
            ints.ints = {2, 2};
            op->attrs["strides"] = ints;
          }
        }
        Value* y = op->outputs[0];
        if (residual) {
          Value* r = g->add_input("r", DType::kFloat32, rs);
          y = g->add_node("Add", "add", {r, y}, 1)->outputs[0];
        }
        if (std::string(act) == "Gelu") {  // as PyTorch exports it: (y * (erf(y / sqrt 2) + 1)) * 0.5
          Value* d = g->add_node("Div", "div", {y, g->add_constant("c", Tensor::from_floats({1.4142135f}, Shape{}))}, 1)
                         ->outputs[0];
          Value* e = g->add_node("Erf", "erf", {d}, 1)->outputs[0];
          Value* u = g->add_node("Add", "add1", {e, g->add_constant("one", Tensor::from_floats({1.f}, Shape{}))}, 1)
                         ->outputs[0];
          Value* v = g->add_node("Mul", "mul", {y, u}, 1)->outputs[0];
          Node* h = g->add_node("Mul", "half", {v, g->add_constant("h", Tensor::from_floats({0.5f}, Shape{}))}, 1);
          g->mark_output(h->outputs[0]);
          return g;
        }
        if (std::string(act) == "Silu") {  // as PyTorch exports it: y * Sigmoid(y), the Mul's operands either way
          Value* s = g->add_node("Sigmoid", "sigmoid", {y}, 1)->outputs[0];
          Node* m = g->add_node("Mul", "mul", variant % 2 == 0 ? std::vector<Value*>{y, s} : std::vector<Value*>{s, y}, 1);
          g->mark_output(m->outputs[0]);
          return g;
        }
        std::vector<Value*> ins = {y};
        if (std::string(act) == "Clip") {
          ins.push_back(g->add_constant("lo", Tensor::from_floats({-0.5f}, Shape{})));
          ins.push_back(g->add_constant("hi", Tensor::from_floats({0.75f}, Shape{})));
        }
        Node* a = g->add_node(act, "act", ins, 1);
        if (std::string(act) == "LeakyRelu") a->attrs["alpha"] = fattr(0.3f);
        if (std::string(act) == "HardSigmoid") a->attrs["alpha"] = fattr(0.25f);
        g->mark_output(a->outputs[0]);
        return g;
      };
      std::map<std::string, Tensor> inputs;
      rng.seed(99);
      inputs["x"] = random(xs);
      if (dw || stem || pw || gc) inputs["x"].data<float>()[2 * 40 + 17] = std::numeric_limits<float>::quiet_NaN();
      inputs["r"] = random(rs);
      if (!residual) inputs.erase("r");
      auto [plain, fused] = compile_unfused_and_fused([&] { return build(1); });
      ASSERT_TRUE(plain.ok() && fused.ok()) << act;
      ASSERT_EQ((*fused)->stats.fused, 1) << act << " variant " << variant;
      ASSERT_EQ((*fused)->steps.size(), 1u) << act;
      expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                     run_outputs(std::move(*plain), Executor::kSequential, inputs),
                     std::string(act) + " variant " + std::to_string(variant));
    }
  }
}

// GELU goes into the epilogue only in the exact form PyTorch exports: not
// with another constant in its Add, nor when the MatMul's output is read
// elsewhere too. Either way the result equals the unfused graph's.
TEST(Fusion, GeluEpilogueOnlyInItsExactForm) {
  std::mt19937 rng(11);
  for (int form = 0; form < 3; ++form) {  // 0: exact; 1: Add of 2; 2: y also an output
    auto build = [&] {
      rng.seed(5);
      auto g = std::make_unique<Graph>();
      Value* x = g->add_input("x", DType::kFloat32, Shape{6, 12});
      Value* y = g->add_node("MatMul", "mm", {x, g->add_constant("w", uniform_tensor(rng, -1, 1, Shape{12, 40}))}, 1)
                     ->outputs[0];
      Value* d = g->add_node("Div", "div", {y, g->add_constant("c", Tensor::from_floats({1.4142135f}, Shape{}))}, 1)
                     ->outputs[0];
      Value* e = g->add_node("Erf", "erf", {d}, 1)->outputs[0];
      Value* one = g->add_constant("one", Tensor::from_floats({form == 1 ? 2.f : 1.f}, Shape{}));
      Value* u = g->add_node("Add", "add1", {one, e}, 1)->outputs[0];
      Value* v = g->add_node("Mul", "mul", {u, y}, 1)->outputs[0];
      Node* h = g->add_node("Mul", "half", {g->add_constant("h", Tensor::from_floats({0.5f}, Shape{})), v}, 1);
      g->mark_output(h->outputs[0]);
      if (form == 2) g->mark_output(y);
      return g;
    };
    std::map<std::string, Tensor> inputs = {{"x", uniform_tensor(rng, -3, 3, Shape{6, 12})}};
    auto [plain, fused] = compile_unfused_and_fused(build);
    ASSERT_TRUE(plain.ok() && fused.ok());
    int gelu = 0;
    for (const Step& st : (*fused)->steps) gelu += st.node->attr_string("activation", "none") == "Gelu";
    EXPECT_EQ(gelu, form == 0 ? 1 : 0) << "form " << form;
    if (form == 0) {
      EXPECT_EQ((*fused)->steps.size(), 1u);
    }
    expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                   run_outputs(std::move(*plain), Executor::kSequential, inputs), "form " + std::to_string(form));
  }
}

// SiLU goes into the epilogue only as Sigmoid(y) and Mul(y, .): not when
// the Sigmoid's result or y is read elsewhere too, nor when the Mul takes
// something else. Either way the result equals the unfused graph's.
TEST(Fusion, SiluEpilogueOnlyInItsExactForm) {
  std::mt19937 rng(13);
  // 0: exact; 1: the Sigmoid's result also an output; 2: y also an output;
  // 3: Mul(Sigmoid(y), x)
  for (int form = 0; form < 4; ++form) {
    auto build = [&] {
      rng.seed(5);
      auto g = std::make_unique<Graph>();
      Value* x = g->add_input("x", DType::kFloat32, Shape{6, 40});
      Value* y = g->add_node("MatMul", "mm", {x, g->add_constant("w", uniform_tensor(rng, -1, 1, Shape{40, 40}))}, 1)
                     ->outputs[0];
      Value* s = g->add_node("Sigmoid", "sigmoid", {y}, 1)->outputs[0];
      Node* m = g->add_node("Mul", "mul", {s, form == 3 ? x : y}, 1);
      g->mark_output(m->outputs[0]);
      if (form == 1) g->mark_output(s);
      if (form == 2) g->mark_output(y);
      return g;
    };
    std::map<std::string, Tensor> inputs = {{"x", uniform_tensor(rng, -3, 3, Shape{6, 40})}};
    auto [plain, fused] = compile_unfused_and_fused(build);
    ASSERT_TRUE(plain.ok() && fused.ok());
    int silu = 0;
    for (const Step& st : (*fused)->steps) silu += st.node->attr_string("activation", "none") == "Silu";
    EXPECT_EQ(silu, form == 0 ? 1 : 0) << "form " << form;
    if (form == 0) {
      EXPECT_EQ((*fused)->steps.size(), 1u);
    }
    expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                   run_outputs(std::move(*plain), Executor::kSequential, inputs), "form " + std::to_string(form));
  }
}

// A LayerNormalization over the last axis of a MatMul's output goes into
// the MatMul's epilogue (after its bias, residual or activation, or none
// of them), whose tiles then keep whole rows, with any number of rTasks:
// bitwise equal to the unfused graph. Not when it normalizes more than the
// last axis, when the MatMul's output is read elsewhere too, or when it
// also writes its mean.
TEST(Fusion, LayerNormAfterMatMulOnWholeRows) {
  std::mt19937 rng(13);
  // 0: bias + residual; 1: nothing else; 2: bias + Relu, no LN bias;
  // 3: axis -2 (not fused); 4: MatMul output also an output (not fused);
  // 5: Mean output too (not fused).
  for (int form = 0; form < 6; ++form) {
    const Shape xs{2, 20, 12}, ys{2, 20, 48};
    auto build = [&] {
      rng.seed(3);
      auto g = std::make_unique<Graph>();
      Value* x = g->add_input("x", DType::kFloat32, xs);
      Value* y = g->add_node("MatMul", "mm", {x, g->add_constant("w", uniform_tensor(rng, -1, 1, Shape{12, 48}))}, 1)
                     ->outputs[0];
      Value* mm = y;
      if (form == 0 || form == 2)
        y = g->add_node("Add", "bias", {y, g->add_constant("b", uniform_tensor(rng, -1, 1, Shape{48}))}, 1)->outputs[0];
      if (form == 0) y = g->add_node("Add", "res", {g->add_input("r", DType::kFloat32, ys), y}, 1)->outputs[0];
      if (form == 2) y = g->add_node("Relu", "relu", {y}, 1)->outputs[0];
      const Shape ps = form == 3 ? Shape{20, 48} : Shape{48};
      std::vector<Value*> ins = {y, g->add_constant("scale", uniform_tensor(rng, 0.5f, 2, ps))};
      if (form != 2) ins.push_back(g->add_constant("shift", uniform_tensor(rng, -1, 1, ps)));
      Node* ln = g->add_node("LayerNormalization", "ln", ins, form == 5 ? 2 : 1);
      Attribute a;
      a.kind = Attribute::Kind::kInt;
      a.i = form == 3 ? -2 : -1;
      ln->attrs["axis"] = a;
      Attribute e;
      e.kind = Attribute::Kind::kFloat;
      e.f = 1e-3f;
      ln->attrs["epsilon"] = e;
      for (Value* o : ln->outputs) g->mark_output(o);
      if (form == 4) g->mark_output(mm);
      return g;
    };
    std::map<std::string, Tensor> inputs = {{"x", uniform_tensor(rng, -3, 3, xs)}};
    if (form == 0) inputs["r"] = uniform_tensor(rng, -3, 3, ys);
    for (int64_t tasks : {0, 1, 3, 7}) {
      auto [plain, fused] = compile_unfused_and_fused(build, tasks);
      ASSERT_TRUE(plain.ok() && fused.ok()) << form;
      int norms = 0, lns = 0;
      for (const Step& st : (*fused)->steps) {
        norms += st.node->input(4) != nullptr;
        lns += st.node->op_type == "LayerNormalization";
      }
      EXPECT_EQ(norms, form <= 2 ? 1 : 0) << "form " << form;
      EXPECT_EQ(lns, form <= 2 ? 0 : 1) << "form " << form;
      if (form <= 2) {
        EXPECT_EQ((*fused)->steps.size(), 1u) << "form " << form;
      }
      expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                     run_outputs(std::move(*plain), Executor::kSequential, inputs),
                     "form " + std::to_string(form) + " tasks " + std::to_string(tasks));
    }
  }
}

// A Split of a MatMul's last axis (a fused QKV projection's q, k, v):
// the MatMul writes each section to its own output, with or without its
// bias, and with tiles that straddle sections: bitwise equal to the unfused
// graph. Not with a residual Add (which needs the whole rows), not on
// another axis, not when the MatMul's output is read elsewhere.
TEST(Fusion, SplitOfMatMulColumnsWrittenInPlace) {
  std::mt19937 rng(17);
  // 0: bias, split input; 1: no bias, split attribute; 2: equal parts (no
  // sizes); 3: residual (Split not fused); 4: axis 1 (not fused); 5: the
  // MatMul's output also an output (not fused).
  for (int form = 0; form < 6; ++form) {
    const Shape xs{2, 20, 12}, ys{2, 20, 96};
    auto build = [&] {
      rng.seed(3);
      auto g = std::make_unique<Graph>();
      Value* x = g->add_input("x", DType::kFloat32, xs);
      Value* y = g->add_node("MatMul", "mm", {x, g->add_constant("w", uniform_tensor(rng, -1, 1, Shape{12, 96}))}, 1)
                     ->outputs[0];
      Value* mm = y;
      if (form != 1)
        y = g->add_node("Add", "bias", {y, g->add_constant("b", uniform_tensor(rng, -1, 1, Shape{96}))}, 1)->outputs[0];
      if (form == 3) y = g->add_node("Add", "res", {g->add_input("r", DType::kFloat32, ys), y}, 1)->outputs[0];
      std::vector<Value*> ins = {y};
      const std::vector<int64_t> sizes = form == 4 ? std::vector<int64_t>{5, 15} : std::vector<int64_t>{5, 27, 64};
      if (form == 0 || form >= 3)
        ins.push_back(g->add_constant("sizes", Tensor::from_int64s(sizes, Shape{static_cast<int64_t>(sizes.size())})));
      Node* split = g->add_node("Split", "split", ins, form == 2 ? 4 : sizes.size());
      split->opset = 13;
      Attribute a;
      a.kind = Attribute::Kind::kInt;
      a.i = form == 4 ? 1 : -1;
      split->attrs["axis"] = a;
      if (form == 1) {
        Attribute w;
        w.kind = Attribute::Kind::kInts;
        w.ints = sizes;
        split->attrs["split"] = w;
      }
      for (Value* o : split->outputs) g->mark_output(o);
      if (form == 5) g->mark_output(mm);
      return g;
    };
    std::map<std::string, Tensor> inputs = {{"x", uniform_tensor(rng, -3, 3, xs)}};
    if (form == 3) inputs["r"] = uniform_tensor(rng, -3, 3, ys);
    for (int64_t tasks : {0, 1, 3, 7}) {
      auto [plain, fused] = compile_unfused_and_fused(build, tasks);
      ASSERT_TRUE(plain.ok() && fused.ok()) << form;
      int splits = 0, written = 0;
      for (const Step& st : (*fused)->steps) {
        splits += st.node->op_type == "Split";
        written += st.node->op_type == "TesseraFusedMatMul" && st.node->outputs.size() > 1;
      }
      EXPECT_EQ(written, form <= 2 ? 1 : 0) << "form " << form;
      EXPECT_EQ(splits, form <= 2 ? 0 : 1) << "form " << form;
      expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                     run_outputs(std::move(*plain), Executor::kSequential, inputs),
                     "form " + std::to_string(form) + " tasks " + std::to_string(tasks));
    }
  }
}

// Random chains of elementwise ops (every fusible op, side operands of the
// full shape, broadcast rows and columns, scalars, constants, the running
// value on either side): fused into one rOperator, bitwise equal to the
// unfused chain.
TEST(Fusion, RandomElementwiseChainsBitwiseEqual) {
  const std::vector<std::string> unary = {"Abs", "Neg", "Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Tanh", "Sigmoid",
                                          "Relu", "LeakyRelu", "Elu", "HardSigmoid", "HardSwish", "Softplus", "Clip"};
  const std::vector<std::string> binary = {"Add", "Sub", "Mul", "Div", "Min", "Max"};
  const std::vector<Shape> sides = {Shape{6, 37}, Shape{37}, Shape{6, 1}, Shape{}, Shape{1, 37}};
  int fused_ops = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    auto build = [&](std::map<std::string, Tensor>* inputs) {
      std::mt19937 rng(seed);
      std::uniform_real_distribution<float> u(0.1f, 2.f);
      auto random = [&](Shape s) {
        Tensor t(DType::kFloat32, s);
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (rng() % 3 == 0 ? -1.f : 1.f) * u(rng);
        return t;
      };
      auto g = std::make_unique<Graph>();
      Value* y = g->add_input("x", DType::kFloat32, Shape{6, 37});
      (*inputs)["x"] = random(Shape{6, 37});
      int len = 2 + static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) {
        std::string name = "n" + std::to_string(k);
        if (rng() % 2 == 0) {
          const std::string& op = unary[rng() % unary.size()];
          std::vector<Value*> ins = {y};
          if (op == "Clip") {
            ins.push_back(g->add_constant(name + "_lo", Tensor::from_floats({-0.7f}, Shape{})));
            ins.push_back(g->add_constant(name + "_hi", Tensor::from_floats({1.3f}, Shape{})));
          }
          y = g->add_node(op, name, ins, 1)->outputs[0];
        } else {
          const std::string& op = binary[rng() % binary.size()];
          Shape s = sides[rng() % sides.size()];
          Value* side;
          if (rng() % 2 == 0) {
            side = g->add_constant(name + "_c", random(s));
          } else {
            side = g->add_input(name + "_in", DType::kFloat32, s);
            (*inputs)[name + "_in"] = random(s);
          }
          bool running_left = rng() % 2 == 0;
          y = g->add_node(op, name, running_left ? std::vector<Value*>{y, side} : std::vector<Value*>{side, y}, 1)
                  ->outputs[0];
        }
      }
      g->mark_output(y);
      return g;
    };
    std::map<std::string, Tensor> inputs;
    auto [plain, fused] = compile_unfused_and_fused([&] { return build(&inputs); });
    ASSERT_TRUE(plain.ok() && fused.ok()) << seed;
    fused_ops += (*fused)->stats.chains_fused;
    EXPECT_LT((*fused)->steps.size(), (*plain)->steps.size()) << "seed " << seed;
    expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                   run_outputs(std::move(*plain), Executor::kSequential, inputs), "chain seed " + std::to_string(seed));
  }
  EXPECT_GT(fused_ops, 30);
}

// An activation after a Concat moves onto the Concat's inputs when each
// is read only by the Concat and made by an op that absorbs it (a conv
// epilogue with a residual, an elementwise chain): then no separate pass
// over the concatenated tensor is left, and the result is bitwise the
// unfused one. When an input has another reader, nothing moves.
// MaxPool and AveragePool (stride 1 and 2) followed by a residual Add (the
// pool's output on either side) and a Relu or Clip, the input holding a NaN
// and an infinity: one TesseraFusedPool, bitwise equal to the unfused ops.
// A broadcast Add stays separate.
TEST(Fusion, PoolEpilogueBitwiseEqual) {
  std::mt19937 rng(13);
  auto random = [&](Shape s) { return uniform_tensor(rng, -2.f, 2.f, std::move(s)); };
  auto ints = [](std::vector<int64_t> v) {
    Attribute a;
    a.kind = Attribute::Kind::kInts;
    a.ints = std::move(v);
    return a;
  };
  for (const char* pool : {"MaxPool", "AveragePool"})
    for (int64_t stride : {1, 2})
      for (int form = 0; form < 3; ++form) {  // residual right, residual left + Clip, broadcast Add
        const int64_t out = stride == 1 ? 20 : 10;
        auto build = [&] {
          auto g = std::make_unique<Graph>();
          Value* x = g->add_input("x", DType::kFloat32, Shape{1, 3, 20, 20});
          Value* r = g->add_input("r", DType::kFloat32, form == 2 ? Shape{1, 3, 1, out} : Shape{1, 3, out, out});
          Node* p = g->add_node(pool, "pool", {x}, 1);
          p->attrs["kernel_shape"] = ints({3, 3});
          p->attrs["strides"] = ints({stride, stride});
          p->attrs["pads"] = ints({1, 1, 1, 1});
          Node* add = form == 1 ? g->add_node("Add", "add", {r, p->outputs[0]}, 1)
                                : g->add_node("Add", "add", {p->outputs[0], r}, 1);
          Node* act = form == 1 ? g->add_node("Clip", "clip", {add->outputs[0],
                                                               g->add_constant("lo", Tensor::from_floats({-0.5f}, Shape{})),
                                                               g->add_constant("hi", Tensor::from_floats({1.f}, Shape{}))},
                                              1)
                                : g->add_node("Relu", "relu", {add->outputs[0]}, 1);
          g->mark_output(act->outputs[0]);
          return g;
        };
        std::map<std::string, Tensor> inputs = {
            {"x", random(Shape{1, 3, 20, 20})}, {"r", random(form == 2 ? Shape{1, 3, 1, out} : Shape{1, 3, out, out})}};
        inputs["x"].data<float>()[45] = std::numeric_limits<float>::quiet_NaN();
        inputs["x"].data<float>()[530] = std::numeric_limits<float>::infinity();
        auto [plain, fused] = compile_unfused_and_fused(build);
        ASSERT_TRUE(plain.ok() && fused.ok());
        int pools = 0;
        for (const Step& st : (*fused)->steps) pools += st.node->op_type == "TesseraFusedPool";
        const std::string what = str_cat(pool, " stride ", stride, " form ", form);
        EXPECT_EQ(pools, form == 2 ? 0 : 1) << what;
        EXPECT_EQ((*fused)->steps.size(), form == 2 ? 2u : 1u) << what;  // the broadcast Add and the Relu fused
        expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                       run_outputs(std::move(*plain), Executor::kSequential, inputs), what);
      }
}

TEST(Fusion, ActivationMovesBeforeConcat) {
  std::mt19937 rng(11);
  auto random = [&](Shape s) { return uniform_tensor(rng, -2.f, 2.f, std::move(s)); };
  for (bool shared : {false, true}) {
    auto build = [&] {
      rng.seed(5);
      auto g = std::make_unique<Graph>();
      Value* x = g->add_input("x", DType::kFloat32, Shape{1, 4, 6, 6});
      Value* r = g->add_input("r", DType::kFloat32, Shape{1, 5, 6, 6});
      Value* c = g->add_node("Conv", "conv", {x, g->add_constant("w", random(Shape{5, 4, 1, 1}))}, 1)->outputs[0];
      c = g->add_node("Add", "res", {c, r}, 1)->outputs[0];
      Value* e = g->add_node("Mul", "mul", {x, g->add_constant("k", random(Shape{1, 4, 1, 1}))}, 1)->outputs[0];
      Node* cat = g->add_node("Concat", "cat", {c, e}, 1);
      cat->attrs["axis"] = Attribute{};
      cat->attrs["axis"].kind = Attribute::Kind::kInt;
      cat->attrs["axis"].i = 1;
      Node* a = g->add_node("Clip", "clip", {cat->outputs[0], g->add_constant("lo", Tensor::from_floats({-0.5f}, Shape{})),
                                             g->add_constant("hi", Tensor::from_floats({1.f}, Shape{}))}, 1);
      g->mark_output(a->outputs[0]);
      if (shared) g->mark_output(e);  // the Mul's output has a second reader
      return g;
    };
    std::map<std::string, Tensor> inputs = {{"x", random(Shape{1, 4, 6, 6})}, {"r", random(Shape{1, 5, 6, 6})}};
    inputs["x"].data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
    auto [plain, fused] = compile_unfused_and_fused(build);
    ASSERT_TRUE(plain.ok() && fused.ok());
    EXPECT_EQ((*fused)->stats.activations_pushed, shared ? 0 : 1);
    int clips = 0;
    for (const Step& st : (*fused)->steps) clips += st.node->op_type == "Clip";
    EXPECT_EQ(clips, shared ? 1 : 0);
    // conv + residual + clip, mul + clip, concat
    if (!shared) {
      EXPECT_EQ((*fused)->steps.size(), 3u);
    }
    expect_bitwise(run_outputs(std::move(*fused), Executor::kSequential, inputs),
                   run_outputs(std::move(*plain), Executor::kSequential, inputs), shared ? "shared" : "moved");
  }
}

// The attention pattern in its forms (scale by Div or Mul or none, mask of
// full shape, per key, per batch entry, or none; 3-D and 4-D): fused into
// one rOperator, equal to the unfused ops within rel-L2 1e-6.
// Multi-head attention as PyTorch exports it: each of Q, K, V reshaped
// from rows of heads [B, S, H*D] and transposed to one matrix per head, the
// result transposed and reshaped back. The attention reads and writes the
// rows of heads itself (8 layout ops fewer), bitwise equal to the unfused
// graph; a graph whose output is the per-head result keeps its layout ops.
TEST(Fusion, AttentionReadsAndWritesRowsOfHeads) {
  std::mt19937 rng(9);
  struct Case {
    int64_t b, h, s, d, t, dv;
    bool mask, per_head_output;
  };
  for (const Case& c : {Case{1, 2, 64, 64, 64, 64, true, false}, Case{2, 3, 7, 8, 11, 5, false, false},
                        Case{1, 1, 9, 16, 9, 16, true, false}, Case{2, 2, 5, 4, 6, 4, true, true}}) {
    auto perm = [](std::vector<int64_t> p) {
      Attribute a;
      a.kind = Attribute::Kind::kInts;
      a.ints = std::move(p);
      return a;
    };
    auto build = [&] {
      auto g = std::make_unique<Graph>();
      auto heads = [&](const char* name, int64_t rows, int64_t width, std::vector<int64_t> p) {
        Value* x = g->add_input(name, DType::kFloat32, Shape{c.b, rows, c.h * width});
        Value* shape = g->add_constant(std::string(name) + "_shape",
                                       Tensor::from_int64s({c.b, rows, c.h, width}, Shape{4}));
        Value* r = g->add_node("Reshape", std::string(name) + "_reshape", {x, shape}, 1)->outputs[0];
        Node* tr = g->add_node("Transpose", std::string(name) + "_transpose", {r}, 1);
        tr->attrs["perm"] = perm(std::move(p));
        return tr->outputs[0];
      };
      Value* q = heads("q", c.s, c.d, {0, 2, 1, 3});
      Value* k = heads("k", c.t, c.d, {0, 2, 3, 1});
      Value* v = heads("v", c.t, c.dv, {0, 2, 1, 3});
      Value* y = g->add_node("MatMul", "qk", {q, k}, 1)->outputs[0];
      y = g->add_node("Div", "scale", {y, g->add_constant("sc", Tensor::from_floats({8.f}, Shape{}))}, 1)->outputs[0];
      if (c.mask) y = g->add_node("Add", "mask", {y, g->add_input("m", DType::kFloat32, Shape{c.b, 1, 1, c.t})}, 1)
                          ->outputs[0];
      y = g->add_node("Softmax", "softmax", {y}, 1)->outputs[0];
      y = g->add_node("MatMul", "pv", {y, v}, 1)->outputs[0];
      if (c.per_head_output) g->mark_output(y);
      Node* tr = g->add_node("Transpose", "y_transpose", {y}, 1);
      tr->attrs["perm"] = perm({0, 2, 1, 3});
      Value* shape = g->add_constant("y_shape", Tensor::from_int64s({c.b, c.s, c.h * c.dv}, Shape{3}));
      g->mark_output(g->add_node("Reshape", "y_reshape", {tr->outputs[0], shape}, 1)->outputs[0]);
      return g;
    };
    std::map<std::string, Tensor> inputs = {{"q", uniform_tensor(rng, -1, 1, Shape{c.b, c.s, c.h * c.d})},
                                            {"k", uniform_tensor(rng, -1, 1, Shape{c.b, c.t, c.h * c.d})},
                                            {"v", uniform_tensor(rng, -1, 1, Shape{c.b, c.t, c.h * c.dv})}};
    if (c.mask) inputs["m"] = uniform_tensor(rng, -3, 0, Shape{c.b, 1, 1, c.t});
    auto [plain, fused] = compile_unfused_and_fused(build);
    ASSERT_TRUE(plain.ok() && fused.ok()) << (plain.ok() ? fused.status().to_string() : plain.status().to_string());
    ASSERT_EQ((*fused)->stats.attention_fused, 1);
    int64_t heads = -1;
    for (const Step& st : (*fused)->steps)
      if (st.node->op_type == "TesseraAttention") heads = st.node->attr_int("heads", 0);
    EXPECT_EQ(heads, c.per_head_output ? 0 : c.h);
    if (!c.per_head_output) {
      EXPECT_EQ((*fused)->steps.size(), 1u);
    }
    for (int64_t tasks : {0, 1, 3}) {  // rTasks that split score matrices part way
      auto [p, f] = compile_unfused_and_fused(build, tasks);
      ASSERT_TRUE(p.ok() && f.ok());
      expect_bitwise(run_outputs(std::move(*f), Executor::kSequential, inputs),
                     run_outputs(std::move(*p), Executor::kSequential, inputs),
                     str_cat("b", c.b, " h", c.h, " s", c.s, " t", c.t, " tasks ", tasks));
    }
  }
}

TEST(Fusion, AttentionPatterns) {
  std::mt19937 rng(3);
  auto random = [&](Shape s) { return uniform_tensor(rng, -1.f, 1.f, std::move(s)); };
  struct Case {
    std::vector<int64_t> batch;
    int64_t s, d, t, dv;
    const char* scale;  // "", "Div", "Mul"
    int mask;           // 0 none, 1 full, 2 per key, 3 per batch entry and key
  };
  for (const Case& c : {Case{{1, 2}, 64, 64, 64, 64, "Div", 2}, Case{{3}, 17, 8, 23, 5, "Mul", 1},
                        Case{{2, 3}, 9, 4, 9, 4, "", 0}, Case{{2, 2}, 33, 16, 40, 8, "Div", 3},
                        Case{{1}, 5, 7, 1, 3, "Mul", 0}}) {
    auto dims = [&](int64_t a, int64_t b) {
      std::vector<int64_t> d = c.batch;
      d.push_back(a);
      d.push_back(b);
      return Shape(d);
    };
    std::map<std::string, Tensor> inputs = {{"q", random(dims(c.s, c.d))}, {"k", random(dims(c.d, c.t))},
                                            {"v", random(dims(c.t, c.dv))}};
    Shape mask_shape;
    if (c.mask == 1) mask_shape = dims(c.s, c.t);
    if (c.mask == 2) mask_shape = Shape{c.t};
    if (c.mask == 3) {
      std::vector<int64_t> d = c.batch;
      for (size_t i = 1; i < d.size(); ++i) d[i] = 1;
      d.push_back(1);
      d.push_back(c.t);
      mask_shape = Shape(d);
    }
    if (c.mask) inputs["m"] = random(mask_shape);
    auto build = [&] {
      auto g = std::make_unique<Graph>();
      Value* q = g->add_input("q", DType::kFloat32, dims(c.s, c.d));
      Value* k = g->add_input("k", DType::kFloat32, dims(c.d, c.t));
      Value* v = g->add_input("v", DType::kFloat32, dims(c.t, c.dv));
      Value* y = g->add_node("MatMul", "qk", {q, k}, 1)->outputs[0];
      if (std::string(c.scale) != "")
        y = g->add_node(c.scale, "scale", {y, g->add_constant("sc", Tensor::from_floats({2.5f}, Shape{}))}, 1)
                ->outputs[0];
      if (c.mask) y = g->add_node("Add", "mask", {g->add_input("m", DType::kFloat32, mask_shape), y}, 1)->outputs[0];
      y = g->add_node("Softmax", "softmax", {y}, 1)->outputs[0];
      y = g->add_node("MatMul", "pv", {y, v}, 1)->outputs[0];
      g->mark_output(y);
      return g;
    };
    auto [plain, fused] = compile_unfused_and_fused(build);
    ASSERT_TRUE(plain.ok() && fused.ok()) << (plain.ok() ? fused.status().to_string() : plain.status().to_string());
    ASSERT_EQ((*fused)->stats.attention_fused, 1);
    ASSERT_EQ((*fused)->steps.size(), 1u);
    auto got = run_outputs(std::move(*fused), Executor::kSequential, inputs);
    auto want = run_outputs(std::move(*plain), Executor::kSequential, inputs);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_LE(rel_l2(got[0], want[0]), 1e-6) << c.s << "x" << c.t << " " << c.scale << " mask " << c.mask;
  }
}

// block_channels (compiler/block_channels.cc) on a chain of inverted
// residual blocks (1x1 expand + Clip, depthwise + Clip, 1x1 project +
// residual) after a 3-channel stem: with channels in blocks of 8, the
// blocks' convs run blocked, converted in once (the stem's output) and out
// once (before the pooling), and every output has the NCHW graph's bits
// (short reductions: the NCHW 1x1s are packed, summing as the blocked ones
// do), in one rTask per op and at the kernels' grain. Broken up by an op
// after every block (two conversions per three convs), with one block
// only (the same), or with channels not in blocks of 8, the convs stay on
// NCHW planes.
TEST(ChannelBlocks, ChainsOfPointwiseAndDepthwiseConvsRunBlocked) {
  if (kernel_find(cpu_kernels(), "TesseraBlockedConv") == nullptr)
    GTEST_SKIP() << "no blocked rKernels in this build (they need AVX2 with FMA)";
  std::mt19937 rng(11);
  auto random = [&](Shape s) { return uniform_tensor(rng, -1.f, 1.f, std::move(s)); };
  auto ints = [](std::vector<int64_t> v) {
    Attribute a;
    a.kind = Attribute::Kind::kInts;
    a.ints = std::move(v);
    return a;
  };
  struct Case {
    int64_t channels;  // the blocks' input and output
    int blocks;
    bool broken;  // a Mul by a per-channel constant after every block
    int want_blocked;
  };
  for (const Case& c : {Case{16, 3, false, 9}, Case{16, 3, true, 0}, Case{12, 3, false, 0}, Case{16, 1, false, 0}}) {
    SCOPED_TRACE(str_cat(c.channels, " channels, ", c.blocks, " blocks", c.broken ? ", broken up" : ""));
    const int64_t e = c.channels * 3;
    auto build = [&] {
      rng.seed(5);
      auto g = std::make_unique<Graph>();
      auto conv = [&](Value* x, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t group) {
        Node* n = g->add_node("Conv", "conv" + std::to_string(g->nodes().size()),
                              {x, g->add_constant("w" + std::to_string(g->nodes().size()),
                                                  random(Shape{cout, cin / group, k, k})),
                               g->add_constant("b" + std::to_string(g->nodes().size()), random(Shape{cout}))},
                              1);
        n->attrs["pads"] = ints({k / 2, k / 2, k / 2, k / 2});
        n->attrs["strides"] = ints({stride, stride});
        Attribute gr;
        gr.i = group;
        n->attrs["group"] = gr;
        return n->outputs[0];
      };
      auto relu6 = [&](Value* y) {
        return g->add_node("Clip", "clip" + std::to_string(g->nodes().size()),
                           {y, g->add_constant("lo" + std::to_string(g->nodes().size()),
                                               Tensor::from_floats({0.f}, Shape{})),
                            g->add_constant("hi" + std::to_string(g->nodes().size()),
                                            Tensor::from_floats({6.f}, Shape{}))},
                           1)
            ->outputs[0];
      };
      Value* x = g->add_input("x", DType::kFloat32, Shape{1, 3, 30, 30});
      Value* y = relu6(conv(x, 3, c.channels, 3, 2, 1));
      for (int b = 0; b < c.blocks; ++b) {
        Value* h = relu6(conv(y, c.channels, e, 1, 1, 1));
        h = relu6(conv(h, e, e, 3, 1, e));
        h = conv(h, e, c.channels, 1, 1, 1);
        y = g->add_node("Add", "add" + std::to_string(b), {y, h}, 1)->outputs[0];
        if (c.broken)
          y = g->add_node("Mul", "mul" + std::to_string(b),
                          {y, g->add_constant("s" + std::to_string(b), random(Shape{1, c.channels, 1, 1}))}, 1)
                  ->outputs[0];
      }
      g->mark_output(g->add_node("GlobalAveragePool", "pool", {y}, 1)->outputs[0]);
      return g;
    };
    std::map<std::string, Tensor> inputs{{"x", random(Shape{1, 3, 30, 30})}};
    for (int64_t tasks : {1, 0}) {
      CompileConfig co;
      co.tasks_per_op = tasks;
      co.channel_blocks = false;
      auto plain = compile_graph(build(), co);
      co.channel_blocks = true;
      auto blocked = compile_graph(build(), co);
      ASSERT_TRUE(plain.ok() && blocked.ok()) << (plain.ok() ? blocked.status() : plain.status()).to_string();
      EXPECT_EQ((*plain)->stats.convs_blocked, 0);
      ASSERT_EQ((*blocked)->stats.convs_blocked, c.want_blocked);
      int to = 0, from = 0, convs = 0;
      for (const Step& st : (*blocked)->steps) {
        to += st.node->op_type == "TesseraToBlocked";
        from += st.node->op_type == "TesseraFromBlocked";
        convs += st.node->op_type == "TesseraBlockedConv";
      }
      EXPECT_EQ(convs, c.want_blocked);
      EXPECT_EQ(to, c.want_blocked > 0 ? 1 : 0);
      EXPECT_EQ(from, c.want_blocked > 0 ? 1 : 0);
      // The NCHW depthwise strips add a 3 x 3 window's taps at stride 1 by
      // columns, the blocked kernel by rows: the same products summed in
      // another order (conformance/blocked_test holds each blocked kernel
      // to the strips' bits on transposed planes).
      const std::vector<Tensor> got = run_outputs(std::move(*blocked), Executor::kSequential, inputs),
                                want = run_outputs(std::move(*plain), Executor::kSequential, inputs);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LE(rel_l2(got[i], want[i]), 1e-6) << "blocked against NCHW, " << tasks << " rTasks per op";
    }
  }
}

}  // namespace
}  // namespace tessera
