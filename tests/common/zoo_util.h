// Helpers shared by the suites that compile and run zoo models.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/npy.h"
#include "onnx/importer.h"
#include "devices/cpu/engine.h"

namespace tessera::testing_util {

// build/zoo/<name>, or $TESSERA_ZOO/<name>.
inline std::string zoo(const std::string& name) {
  const char* env = std::getenv("TESSERA_ZOO");
  return (std::filesystem::path(env ? env : "build/zoo") / name).string();
}

// build/zoo-extra/<name> (the unseen-kind models), or $TESSERA_ZOO_EXTRA/<name>.
inline std::string zoo_extra(const std::string& name) {
  const char* env = std::getenv("TESSERA_ZOO_EXTRA");
  return (std::filesystem::path(env ? env : "build/zoo-extra") / name).string();
}

// Compiles <path>.onnx with its inputs' shapes bound from <path>.inputs.npz;
// fills `inputs`.
inline Result<std::unique_ptr<Program>> compile_model(const std::string& path, const CompileConfig& base,
                                                      std::map<std::string, Tensor>* inputs) {
  TESSERA_ASSIGN_OR_RETURN(*inputs, npz_read(path + ".inputs.npz"));
  TESSERA_ASSIGN_OR_RETURN(auto g, import_onnx_file(path + ".onnx"));
  CompileConfig co = base;
  for (Value* in : g->inputs()) co.input_shapes[in->name] = inputs->at(in->name).shape();
  return compile_graph(std::move(g), co);
}

// Compiles zoo model `name` with its inputs' shapes bound; fills `inputs`.
inline Result<std::unique_ptr<Program>> compile_zoo(const std::string& name, const CompileConfig& base,
                                                    std::map<std::string, Tensor>* inputs) {
  return compile_model(zoo(name), base, inputs);
}

// Runs twice with a poisoned arena; returns the second run's outputs.
inline std::vector<Tensor> run_outputs(std::unique_ptr<Program> p, Executor ex,
                                       const std::map<std::string, Tensor>& inputs) {
  auto s = Engine::create(std::move(p), {ex, 2});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return {};
  std::vector<Tensor> outs;
  for (int rep = 0; rep < 2; ++rep) {
    (*s)->poison_arena();
    for (const Value* in : (*s)->inputs()) EXPECT_TRUE((*s)->set_input(in->name, inputs.at(in->name)).ok());
    EXPECT_TRUE((*s)->run().wait().ok());
  }
  for (size_t i = 0; i < (*s)->outputs().size(); ++i) outs.push_back((*s)->output(i));
  return outs;
}

// The bundled zoo's models (scripts/make_zoo.py).
inline const std::vector<std::string> kZooModels = {"resnet18", "mobilenet_v2", "bert_tiny", "lstm_tc",
                                                     "nasnet_like", "mlp", "add_chain", "add_chains8"};

// Built with AddressSanitizer or ThreadSanitizer (make asan, make tsan).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// Whether a sweep over policies and vEU counts tries only its first and
// last configurations: every model's does in sanitizer builds,
// where what is looked for is a memory or thread error, which one
// configuration of a code path shows (the sweeps' middles run the same
// kernels and the same executor on other cuts); the Release build
// (make test) sweeps them all.
inline constexpr bool kSweepEndsOnly = kSanitized;

// Relative L2 distance of float tensors: |got - want| / |want|.
inline double rel_l2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double d = static_cast<double>(got.data<float>()[i]) - want.data<float>()[i];
    num += d * d;
    den += static_cast<double>(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline void expect_bitwise(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].nbytes(), want[i].nbytes()) << what;
    EXPECT_EQ(std::memcmp(got[i].raw(), want[i].raw(), got[i].nbytes()), 0) << what << ": output " << i << " differs";
  }
}

}  // namespace tessera::testing_util
