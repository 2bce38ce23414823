// The CUDA backend. Its host side everywhere: models compile with the
// cuda rKernels into valid Plans for a GPU's worth of vEUs, and ops it
// lacks are refused by name. On a GPU (skipped with a message where there
// is none): the Plan as one persistent launch and the two-layer control
// as a replayed graph give the CPU's outputs to rounding, the same bits
// as each other, and the same bits run after run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "compiler/plan.h"
#include "compiler/program.h"
#include "devices/cuda/cuda_rkernels.h"
#include "tessera/tessera.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

const char* kModels[] = {"mlp", "add_chain", "add_chains8"};

CompileConfig cuda_config(int veus) {
  CompileConfig c;
  c.kernels = cuda::cuda_kernels();
  c.fuse = false;
  c.lower_recurrent = false;
  c.concat_in_place = false;
  c.profile = false;
  c.build_plan = true;
  c.schedule.veus = veus;
  return c;
}

TEST(CudaHost, ModelsCompileIntoValidPlansForAGpu) {
  for (const char* m : kModels) {
    for (int veus : {1, 8, 132}) {
      SCOPED_TRACE(testing::Message() << m << " on " << veus << " vEUs");
      auto p = compile_onnx(testing_util::zoo(std::string(m) + ".onnx"), cuda_config(veus));
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      ASSERT_TRUE((*p)->plan);
      EXPECT_TRUE(plan_validate(**p, *(*p)->plan).ok());
      for (const Step& s : (*p)->steps) {
        EXPECT_EQ(std::string(s.kernel->name).rfind("cuda.", 0), 0u) << s.node->label();
        EXPECT_NE(dynamic_cast<const cuda::CudaOp*>(s.op.get()), nullptr) << s.node->label();
      }
    }
  }
  // An op the device lacks is named.
  auto conv = compile_onnx(testing_util::zoo("resnet18.onnx"), cuda_config(4));
  ASSERT_FALSE(conv.ok());
  EXPECT_NE(conv.status().message().find("Conv"), std::string::npos) << conv.status().to_string();
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
    Result<Model> model = rt->compile(testing_util::zoo(std::string(m) + ".onnx"), o);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    Result<NamedTensors> in = load_npz(testing_util::zoo(std::string(m) + ".inputs.npz"));
    ASSERT_TRUE(in.ok());
    Result<NamedTensors> ref = model->session({.veus = 1, .executor = Executor::kSequential})->run(*in);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    std::vector<NamedTensors> gpu;
    for (auto [executor, veus] : {std::pair{Executor::kPlan, sms}, std::pair{Executor::kPlan, 8},
                                  std::pair{Executor::kTwoLayer, sms}}) {
      SCOPED_TRACE(testing::Message() << executor_name(executor) << " on " << veus);
      Result<Session> s = model->session({.device = "cuda", .veus = veus, .executor = executor});
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      Result<NamedTensors> first = s->run(*in);
      ASSERT_TRUE(first.ok()) << first.status().to_string();
      for (const auto& [name, t] : *first) EXPECT_LE(testing_util::rel_l2(t, *ref->find(name)), 1e-5) << name;
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
