// Engine::run allocates nothing: global operator new is replaced with a
// counting version, and every zoo model runs on both executors with the
// count armed only around run(). (malloc calls from C code such as oneDNN
// are not seen here; its sgemm does not allocate for these sizes.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <vector>

#include "ir/npy.h"
#include "onnx/importer.h"
#include "devices/cpu/engine.h"

// These replacements pair malloc/aligned_alloc with free, which is correct;
// GCC cannot see that through the replaced operators.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<bool> g_armed{false};
std::atomic<int64_t> g_allocs{0};
}  // namespace

void* operator new(size_t n) {
  if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(n ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  void* p = std::aligned_alloc(static_cast<size_t>(a), (n + static_cast<size_t>(a) - 1) / static_cast<size_t>(a) *
                                                           static_cast<size_t>(a));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(NoAllocHook, CountsAllocations) {
  g_allocs = 0;
  g_armed = true;
  auto* v = new std::vector<int>(100);
  g_armed = false;
  delete v;
  EXPECT_GE(g_allocs.load(), 2);  // the vector and its buffer
}

class NoAlloc : public ::testing::TestWithParam<std::string> {};

TEST_P(NoAlloc, RunAllocatesNothing) {
  const char* env = std::getenv("TESSERA_ZOO");
  std::string base = (fs::path(env ? env : "build/zoo") / GetParam()).string();
  ASSERT_TRUE(fs::exists(base + ".onnx")) << "run `make zoo` first";
  auto inputs = npz_read(base + ".inputs.npz");
  ASSERT_TRUE(inputs.ok());
  for (Executor ex : {Executor::kSequential, Executor::kTwoLayer, Executor::kPlan}) {
    auto g = import_onnx_file(base + ".onnx");
    ASSERT_TRUE(g.ok());
    CompileConfig co;
    co.build_plan = ex == Executor::kPlan;
    co.schedule.veus = 2;
    for (Value* in : (*g)->inputs()) co.input_shapes[in->name] = inputs->at(in->name).shape();
    auto p = compile_graph(std::move(*g), co);
    ASSERT_TRUE(p.ok());
    auto s = Engine::create(std::move(*p), {ex, 2});
    ASSERT_TRUE(s.ok());
    for (const Value* in : (*s)->inputs()) ASSERT_TRUE((*s)->set_input(in->name, inputs->at(in->name)).ok());
    ASSERT_TRUE((*s)->run().wait().ok());  // warm: first-touch, library init
    g_allocs = 0;
    g_armed = true;
    Status st;
    for (int i = 0; i < 3; ++i) st = (*s)->run().wait();
    g_armed = false;
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(g_allocs.load(), 0) << GetParam() << " on " << executor_name(ex);
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, NoAlloc,
                         ::testing::Values("resnet18", "mobilenet_v2", "bert_tiny", "lstm_tc", "nasnet_like", "mlp",
                                           "add_chain", "add_chains8"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace tessera
