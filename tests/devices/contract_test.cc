// The backend contract (devices/device.h) as the layers above use it: every
// backend's devices describe themselves, give the compiler their rKernels
// and cost model, load a Program compiled with them on a vDevice and run
// it; DeviceEvent completes once, callbacks included.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "devices/device.h"
#include "kernels/cpu/kernel.h"
#include "runtime/backends.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

TEST(DeviceEvent, ReadyPendingAndCallbacks) {
  DeviceEvent ok;
  EXPECT_TRUE(ok.poll());
  EXPECT_TRUE(ok.wait().ok());
  DeviceEvent failed = DeviceEvent::ready(internal_error("boom"));
  EXPECT_EQ(failed.wait().message(), "boom");
  DeviceEvent later = DeviceEvent::pending();
  EXPECT_FALSE(later.poll());
  std::atomic<int> called{0};
  later.then([&](const Status& st) { called += st.ok() ? 1 : 100; });
  std::thread t([&] { later.complete(Status()); });
  EXPECT_TRUE(later.wait().ok());
  t.join();
  EXPECT_TRUE(later.poll());
  EXPECT_EQ(called.load(), 1);
  later.then([&](const Status&) { ++called; });  // after completion: at once
  EXPECT_EQ(called.load(), 2);
}

TEST(Backends, FindDeviceNamesWhatThereIs) {
  EXPECT_TRUE(find_device("cpu").ok());
  EXPECT_TRUE(find_device("null").ok());
  Result<std::shared_ptr<Device>> none = find_device("tpu");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("cpu, null"), std::string::npos) << none.status().message();
}

// The cpu asks the compiler for every pass but one where its kernels lack
// the fused form: a stacked LSTM's projection carried by the steps below
// only with AVX-512 (the unfused cell runs GEMV and tile one after the
// other, slower than projecting separately).
TEST(Backends, CpuCarriesRecurrentProjectionsOnlyWhereFused) {
  Result<std::shared_ptr<Device>> cpu = find_device("cpu");
  ASSERT_TRUE(cpu.ok());
  const Device::Passes p = (*cpu)->passes();
  EXPECT_TRUE(p.fuse && p.lower_recurrent && p.concat_in_place);
  EXPECT_EQ(p.recurrent_chunk, -1);
  EXPECT_EQ(p.recurrent_carry, std::string(kernel_isa()) == "avx512") << kernel_isa();
  EXPECT_EQ(p.recurrent_carry, rnn_carry_fused());
}

// Each device, through the contract alone: compile mlp with its rKernels
// and cost model for 2 vEUs, load, run, read the outputs. The cpu's agree
// with its sequential run within 1e-5 for each executor (the Plan may tile
// ops otherwise); the null device's are zero.
TEST(Backends, EveryDeviceCompilesLoadsAndRuns) {
  for (Backend* b : backends())
    for (const std::shared_ptr<Device>& d : b->discover()) {
      const DeviceInfo info = d->info();
      SCOPED_TRACE(info.name);
      EXPECT_EQ(info.name, b->name());
      EXPECT_GE(info.veus, 1);
      ASSERT_FALSE(d->kernels().empty());
      Result<Buffer> buf = d->allocate(1000);
      ASSERT_TRUE(buf.ok());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data) % 64, 0u);
      std::vector<Tensor> ref;
      for (Executor e : {Executor::kSequential, Executor::kTwoLayer, Executor::kPlan}) {
        const std::vector<int> slots = {0, std::min(1, info.veus - 1)};
        CompileConfig c;
        c.kernels = d->kernels();
        c.build_plan = e == Executor::kPlan;
        c.schedule.veus = 2;
        c.slots = slots;
        c.costs = [&](const std::vector<int>& s) { return d->costs(nullptr, s); };
        std::map<std::string, Tensor> inputs;
        auto p = testing_util::compile_zoo("mlp", c, &inputs);
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        Result<std::unique_ptr<LoadedProgram>> l = d->load(std::move(*p), {e, 2, slots, false});
        ASSERT_TRUE(l.ok()) << l.status().to_string();
        LoadedProgram& lp = **l;
        for (const auto& [name, t] : inputs) ASSERT_TRUE(lp.set_input(name, t).ok());
        ASSERT_TRUE(lp.run().wait().ok());
        const Value* out = lp.program().graph->outputs()[0];
        Tensor got(out->dtype, out->shape);
        std::memcpy(got.raw(), lp.output_data(0), got.nbytes());
        if (info.kind == "null") {
          for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.data<float>()[i], 0.f);
        } else if (ref.empty()) {
          ref.push_back(got);
        } else {
          EXPECT_LE(testing_util::rel_l2(got, ref[0]), 1e-5) << executor_name(e);
        }
      }
    }
}

}  // namespace
}  // namespace tessera
