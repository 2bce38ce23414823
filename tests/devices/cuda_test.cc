// The CUDA backend. Its host side everywhere: every zoo model compiles
// with the cuda rKernels into valid Plans for a GPU's worth of vEUs, and
// ops it lacks are refused by name. On a GPU (skipped with a message where
// there is none): the Plan as one persistent launch and the two-layer
// control as a replayed graph give PyTorch's outputs within rel-L2 1e-4,
// the same bits as each other, and the same bits run after run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "compiler/plan.h"
#include "compiler/program.h"
#include "devices/cuda/cuda_rkernels.h"
#include "tessera/tessera.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

// The zoo models the GPU runs, and the shapes of their dynamic inputs.
const char* kModels[] = {"mlp", "add_chain", "add_chains8", "bert_tiny", "lstm_tc", "nasnet_like", "resnet18",
                         "mobilenet_v2"};

void fix_shapes(const std::string& model, std::map<std::string, Shape>* shapes) {
  if (model == "bert_tiny") (*shapes)["input_ids"] = (*shapes)["attention_mask"] = Shape{1, 64};
}

CompileConfig cuda_config(int veus) {
  CompileConfig c = cuda::cuda_compile_config();
  c.build_plan = true;
  c.schedule.veus = veus;
  return c;
}

TEST(CudaHost, ModelsCompileIntoValidPlansForAGpu) {
  for (const char* m : kModels) {
    for (int veus : {1, 8, 132}) {
      SCOPED_TRACE(testing::Message() << m << " on " << veus << " vEUs");
      CompileConfig c = cuda_config(veus);
      fix_shapes(m, &c.input_shapes);
      auto p = compile_onnx(testing_util::zoo(std::string(m) + ".onnx"), c);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      ASSERT_TRUE((*p)->plan);
      EXPECT_TRUE(plan_validate(**p, *(*p)->plan).ok());
      for (const Step& s : (*p)->steps) {
        EXPECT_EQ(std::string(s.kernel->name).rfind("cuda.", 0), 0u) << s.node->label();
        EXPECT_NE(dynamic_cast<const cuda::CudaOp*>(s.op.get()), nullptr) << s.node->label();
      }
    }
  }
  // The LSTM is lowered to a cell per step, stacked layers projected per step.
  auto lstm = compile_onnx(testing_util::zoo("lstm_tc.onnx"), cuda_config(8));
  ASSERT_TRUE(lstm.ok()) << lstm.status().to_string();
  std::map<std::string, int> ops;
  for (const Step& s : (*lstm)->steps) ++ops[s.node->op_type];
  EXPECT_EQ(ops["TesseraLstmCell"], 1000);
  EXPECT_EQ(ops["TesseraRnnProj"], 1 + 9 * 100);
  // A node the device has no rKernel for is named, once folding is done.
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", DType::kFloat32, Shape{1, 64});
  Node* hs = g->add_node("HardSigmoid", "gate", {x}, 1);
  g->mark_output(hs->outputs[0]);
  auto refused = compile_graph(std::move(g), cuda_config(4));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'gate'"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("HardSigmoid"), std::string::npos) << refused.status().to_string();
}

bool same_bits(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    const Tensor* u = b.find(name);
    if (u == nullptr || u->nbytes() != t.nbytes() || std::memcmp(u->raw(), t.raw(), t.nbytes()) != 0) return false;
  }
  return true;
}

TEST(CudaGpu, PlanAndTwoLayerMatchTheCpuAndEachOther) {
  Result<Runtime> rt = connect();
  ASSERT_TRUE(rt.ok());
  int sms = 0;
  for (const DeviceInfo& d : rt->devices())
    if (d.kind == "cuda") sms = d.veus;
  if (sms == 0) GTEST_SKIP() << "no CUDA device here (no GPU or no driver): the GPU half of the CUDA tests is skipped";
  for (const char* m : kModels) {
    SCOPED_TRACE(m);
    CompileOptions o;
    o.profile = false;
    o.measure = false;
    if (std::string(m) == "bert_tiny") o.shapes = {{"input_ids", {1, 64}}, {"attention_mask", {1, 64}}};
    Result<Model> model = rt->compile(testing_util::zoo(std::string(m) + ".onnx"), o);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    Result<NamedTensors> in = load_npz(testing_util::zoo(std::string(m) + ".inputs.npz"));
    ASSERT_TRUE(in.ok());
    // PyTorch's outputs (fp32 on the CPU), by output name.
    Result<NamedTensors> ref = load_npz(testing_util::zoo(std::string(m) + ".outputs.npz"));
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    std::vector<NamedTensors> gpu;
    for (auto [executor, veus] : {std::pair{Executor::kPlan, sms}, std::pair{Executor::kPlan, 8},
                                  std::pair{Executor::kTwoLayer, sms}}) {
      SCOPED_TRACE(testing::Message() << executor_name(executor) << " on " << veus);
      Result<Session> s = model->session({.device = "cuda", .veus = veus, .executor = executor});
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      Result<NamedTensors> first = s->run(*in);
      ASSERT_TRUE(first.ok()) << first.status().to_string();
      // The GPU's own time, inside what the run took.
      const RunBreakdown b = s->last_breakdown();
      EXPECT_GT(b.device_ms, 0);
      EXPECT_LE(b.device_ms, b.compute_ms);
      for (const auto& [name, t] : *first) {
        const Tensor* want = ref->find(name);
        ASSERT_NE(want, nullptr) << name;
        EXPECT_LE(testing_util::rel_l2(t, *want), 1e-4) << name;
      }
      for (int r = 0; r < 3; ++r) {
        Result<NamedTensors> again = s->run(*in);
        ASSERT_TRUE(again.ok());
        EXPECT_TRUE(same_bits(*again, *first)) << "run " << r + 2 << " differs from the first";
      }
      gpu.push_back(*first);
    }
    for (size_t k = 1; k < gpu.size(); ++k) EXPECT_TRUE(same_bits(gpu[k], gpu[0])) << "executor " << k;
  }
}

}  // namespace
}  // namespace tessera
