// The CUDA kernels' own code (rtasks.h) on the CPU: each zoo model compiled
// with the cuda rKernels, laid out by the loader's code (dev_ops) and run
// rTask by rTask, every rTask a block of 256 emulated threads. Its outputs
// must be PyTorch's within rel-L2 1e-4 and the same bits run after run.
// Where there is no GPU this is what tests the GPU's arithmetic.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/strings.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/kernel.h"
#include "devices/cuda/cuda_rkernels.h"
#include "devices/cuda/emulator.h"
#include "tessera/tessera.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

CompileConfig cuda_config() { return cuda::cuda_compile_config(); }

// The first step whose emulated output is not what the CPU's rKernel makes
// of the same inputs (rel-L2 over 1e-4), or "" : where a failing model
// goes wrong.
std::string first_divergent_step(const Program& p, cuda::EmulatedProgram& e) {
  for (size_t s = 0; s < p.steps.size(); ++s) {
    e.run_step(s);
    const Step& st = p.steps[s];
    Graph g;
    std::vector<Value*> ins;
    for (size_t j = 0; j < st.node->inputs.size(); ++j) {
      const Value* v = st.node->inputs[j];
      if (v == nullptr) {
        ins.push_back(nullptr);
        continue;
      }
      Tensor t(v->dtype, v->shape);
      std::memcpy(t.raw(), e.slot(st.inputs[j]), t.nbytes());
      ins.push_back(g.add_constant(v->name, std::move(t)));
    }
    Node* n = g.add_node(st.node->op_type, st.node->name, ins, static_cast<int>(st.node->outputs.size()));
    n->attrs = st.node->attrs;
    n->opset = st.node->opset;
    std::vector<Tensor> want;
    if (!op_infer(*n).ok() || !cpu_evaluate(*n, &want).ok()) continue;  // no CPU rKernel to compare with
    for (size_t k = 0; k < want.size() && k < st.outputs.size(); ++k) {
      if (want[k].dtype() != DType::kFloat32) continue;
      Tensor got(want[k].dtype(), want[k].shape());
      std::memcpy(got.raw(), e.slot(st.outputs[k]), got.nbytes());
      const double err = testing_util::rel_l2(got, want[k]);
      if (!(err <= 1e-4)) return str_cat(st.node->label(), " output ", k, ": rel-L2 ", err);
    }
  }
  return "";
}

void check_model(const std::string& m) {
  SCOPED_TRACE(m);
  CompileConfig c = cuda_config();
  if (m == "bert_tiny") c.input_shapes["input_ids"] = c.input_shapes["attention_mask"] = Shape{1, 64};
  auto p = compile_onnx(testing_util::zoo(m + ".onnx"), c);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto e = cuda::EmulatedProgram::load(**p);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  Result<NamedTensors> in = load_npz(testing_util::zoo(m + ".inputs.npz"));
  Result<NamedTensors> want = load_npz(testing_util::zoo(m + ".outputs.npz"));
  ASSERT_TRUE(in.ok() && want.ok());
  const std::vector<Value*>& ins = (*p)->graph->inputs();
  for (size_t i = 0; i < ins.size(); ++i) {
    const Tensor* t = in->find(ins[i]->name);
    ASSERT_NE(t, nullptr) << ins[i]->name;
    ASSERT_EQ(t->nbytes(), (*p)->slots[static_cast<size_t>((*p)->input_slots[i])].bytes) << ins[i]->name;
    std::memcpy((*e)->input(i), t->raw(), t->nbytes());
  }
  const auto t0 = std::chrono::steady_clock::now();
  (*e)->run();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<Tensor> first;
  const std::vector<Value*>& outs = (*p)->graph->outputs();
  bool right = true;
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor* w = want->find(outs[i]->name);
    ASSERT_NE(w, nullptr) << outs[i]->name;
    Tensor got(outs[i]->dtype, outs[i]->shape);
    std::memcpy(got.raw(), (*e)->output(i), got.nbytes());
    const double err = testing_util::rel_l2(got, *w);
    EXPECT_LE(err, 1e-4) << outs[i]->name;
    right = right && err <= 1e-4;
    first.push_back(std::move(got));
  }
  if (!right) {
    std::string where = first_divergent_step(**p, **e);
    ADD_FAILURE() << "first step off the CPU's: " << (where.empty() ? "none" : where);
    return;
  }
  (*e)->run();
  for (size_t i = 0; i < outs.size(); ++i)
    EXPECT_EQ(std::memcmp((*e)->output(i), first[i].raw(), first[i].nbytes()), 0) << outs[i]->name << " changed";
  std::printf("%s: %zu steps emulated in %.1f s\n", m.c_str(), (*p)->steps.size(), s);
}

Tensor random_tensor(const Shape& s, uint32_t seed, float lo, float hi) {
  Tensor t(DType::kFloat32, s);
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    t.data<float>()[i] = lo + (hi - lo) * static_cast<float>(x % 100000) / 100000.f;
  }
  return t;
}

Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

Attribute int_attr(int64_t v) {
  Attribute a;
  a.i = v;
  return a;
}

// One node, its first input the model's and the others constants, on the
// emulated GPU and by the CPU's rKernel: rel-L2 within 1e-5.
void single_op_matches(const std::string& op, const std::vector<Shape>& shapes, std::map<std::string, Attribute> attrs) {
  SCOPED_TRACE(op);
  auto g = std::make_unique<Graph>();
  std::vector<Value*> ins = {g->add_input("x", DType::kFloat32, shapes[0])};
  const Tensor x = random_tensor(shapes[0], 1, -1, 1);
  for (size_t i = 1; i < shapes.size(); ++i)  // positive, as a variance must be
    ins.push_back(g->add_constant(str_cat("c", i), random_tensor(shapes[i], static_cast<uint32_t>(i + 1), 0.1f, 1.f)));
  Node* n = g->add_node(op, "op", ins, 1);
  n->attrs = std::move(attrs);
  n->opset = 17;
  g->mark_output(n->outputs[0]);
  // The CPU's answer, on constant inputs.
  Graph ref;
  std::vector<Value*> rins = {ref.add_constant("x", x)};
  for (size_t i = 1; i < ins.size(); ++i) rins.push_back(ref.add_constant(ins[i]->name, *ins[i]->constant));
  Node* rn = ref.add_node(op, "op", rins, 1);
  rn->attrs = n->attrs;
  rn->opset = 17;
  Status ist = op_infer(*rn);
  ASSERT_TRUE(ist.ok()) << ist.to_string();
  std::vector<Tensor> want;
  Status cst = cpu_evaluate(*rn, &want);
  ASSERT_TRUE(cst.ok()) << cst.to_string();
  auto p = compile_graph(std::move(g), cuda_config());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto e = cuda::EmulatedProgram::load(**p);
  ASSERT_TRUE(e.ok());
  std::memcpy((*e)->input(0), x.raw(), x.nbytes());
  (*e)->run();
  Tensor got(want[0].dtype(), want[0].shape());
  std::memcpy(got.raw(), (*e)->output(0), got.nbytes());
  EXPECT_LE(testing_util::rel_l2(got, want[0]), 1e-5);
}

// Geometry the zoo does not reach: strides, dilations, asymmetric windows,
// groups that are neither 1 nor depthwise, pools that count the padding,
// BatchNormalization left in the graph (PyTorch's newer exporter keeps it),
// rows too long for a warp.
TEST(CudaEmulator, OpsMatchTheCpu) {
  single_op_matches("Conv", {Shape{2, 6, 11, 9}, Shape{8, 3, 3, 2}, Shape{8}},
                    {{"group", int_attr(2)}, {"strides", ints_attr({2, 1})}, {"pads", ints_attr({1, 0, 1, 1})},
                     {"dilations", ints_attr({1, 2})}});
  single_op_matches("Conv", {Shape{1, 5, 13, 13}, Shape{300, 5, 3, 3}},
                    {{"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}});
  single_op_matches("Conv", {Shape{1, 512, 7, 7}, Shape{40, 512, 3, 3}}, {{"pads", ints_attr({1, 1, 1, 1})}});  // split k
  single_op_matches("AveragePool", {Shape{1, 3, 10, 7}},
                    {{"kernel_shape", ints_attr({3, 2})}, {"strides", ints_attr({2, 2})},
                     {"pads", ints_attr({1, 1, 1, 1})}, {"count_include_pad", int_attr(1)}});
  single_op_matches("MaxPool", {Shape{1, 3, 10, 7}},
                    {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"ceil_mode", int_attr(1)}});
  single_op_matches("BatchNormalization", {Shape{2, 8, 5, 3}, Shape{8}, Shape{8}, Shape{8}, Shape{8}}, {});
  // Rows a warp each (a last rTask with fewer rows than warps) and rows
  // the whole block reduces.
  single_op_matches("Softmax", {Shape{13, 70}}, {});
  single_op_matches("LogSoftmax", {Shape{3, 2000}}, {});
  single_op_matches("LayerNormalization", {Shape{5, 3, 40}, Shape{40}, Shape{40}}, {});
  single_op_matches("LayerNormalization", {Shape{2, 1500}, Shape{1500}}, {});
  single_op_matches("MatMul", {Shape{3, 70, 33}, Shape{33, 130}}, {});
  single_op_matches("Gemm", {Shape{40, 300}, Shape{50, 300}, Shape{50}}, {{"transB", int_attr(1)}});
}

TEST(CudaEmulator, ZooModelsMatchPyTorch) {
  for (const char* m : {"mlp", "add_chains8", "bert_tiny", "lstm_tc", "nasnet_like", "resnet18", "mobilenet_v2"})
    check_model(m);
}

// A Plan over many vEUs, its lists interleaved in several orders that
// honour its waits, computes the bits of the step-by-step run: its waits
// order every reader after its writers, and no two tensors alive at once
// share memory under any of those orders.
TEST(CudaEmulator, PlansComputeTheSameBitsInEveryOrderTheirWaitsAllow) {
  for (const char* m : {"bert_tiny", "lstm_tc", "nasnet_like"}) {
    SCOPED_TRACE(m);
    CompileConfig c = cuda_config();
    if (std::string(m) == "bert_tiny") c.input_shapes["input_ids"] = c.input_shapes["attention_mask"] = Shape{1, 64};
    auto seq = compile_onnx(testing_util::zoo(std::string(m) + ".onnx"), c);
    c.build_plan = true;
    c.schedule.veus = 16;
    auto planned = compile_onnx(testing_util::zoo(std::string(m) + ".onnx"), c);
    ASSERT_TRUE(seq.ok() && planned.ok());
    ASSERT_TRUE((*planned)->plan);
    Result<NamedTensors> in = load_npz(testing_util::zoo(std::string(m) + ".inputs.npz"));
    ASSERT_TRUE(in.ok());
    auto feed = [&](const Program& p, cuda::EmulatedProgram& e) {
      for (size_t i = 0; i < p.graph->inputs().size(); ++i) {
        const Tensor* t = in->find(p.graph->inputs()[i]->name);
        std::memcpy(e.input(i), t->raw(), t->nbytes());
      }
    };
    auto a = cuda::EmulatedProgram::load(**seq);
    ASSERT_TRUE(a.ok());
    feed(**seq, **a);
    (*a)->run();
    for (uint64_t seed : {1, 2, 3}) {
      auto b = cuda::EmulatedProgram::load(**planned);
      ASSERT_TRUE(b.ok());
      feed(**planned, **b);
      Status st = (*b)->run_plan(seed);
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (size_t i = 0; i < (*seq)->output_slots.size(); ++i) {
        const size_t bytes = (*seq)->slots[static_cast<size_t>((*seq)->output_slots[i])].bytes;
        EXPECT_EQ(std::memcmp((*a)->output(i), (*b)->output(i), bytes), 0) << "output " << i << ", seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace tessera
