// The smallest program that runs an ONNX model with Tessera:
//
//   build/bin/example_run_model build/zoo/mlp.onnx
//
// compiles the model, fills every input with ones, runs it once on the
// two-layer executor and prints the first values of each output.
#include <cstdio>

#include "compiler/program.h"
#include "runtime/engine.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx\n", argv[0]);
    return 2;
  }
  // 1. Compile: import, bind shapes, fold constants, pick rKernels, plan memory.
  auto program = tessera::compile_onnx(argv[1], {});
  if (!program.ok()) {
    std::fprintf(stderr, "%s\n", program.status().to_string().c_str());
    return 1;
  }
  // 2. A session owns the arena and the worker threads.
  auto session = tessera::Engine::create(std::move(*program), {tessera::Executor::kTwoLayer, 2});
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  tessera::Engine& s = **session;
  // 3. Bind inputs (dtype and shape must match what the model was bound to).
  for (const tessera::Value* in : s.inputs()) {
    tessera::Tensor t(in->dtype, in->shape);
    for (int64_t i = 0; i < t.numel() && in->dtype == tessera::DType::kFloat32; ++i) t.data<float>()[i] = 1.0f;
    if (auto st = s.set_input(in->name, t); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
  }
  // 4. Run and read outputs.
  if (auto st = s.run(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 1;
  }
  for (size_t i = 0; i < s.outputs().size(); ++i) {
    tessera::Tensor y = s.output(i);
    std::printf("%s %s:", s.outputs()[i]->name.c_str(), tessera::shape_string(y.shape()).c_str());
    for (int64_t k = 0; k < y.numel() && k < 5; ++k) std::printf(" %g", y.value_as_double(k));
    std::printf("\n");
  }
  return 0;
}
