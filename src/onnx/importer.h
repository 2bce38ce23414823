// ONNX importer: the only code that sees ONNX protobuf.
//
// Reads an ONNX model (opsets 11-17 of the default domain), runs ONNX's own
// checker and shape inference, and converts it to a Graph: initializers
// (including external data files next to the model) become constant Values,
// float16/bfloat16/float64 tensors are converted to float32, Constant nodes
// become constants. Errors name the file, node and tensor at fault.
//
//   auto g = import_onnx_file("model.onnx");
//   if (!g.ok()) return g.status();
#pragma once

#include <memory>
#include <string>

#include "ir/graph.h"
#include "tessera/status.h"

namespace tessera {

inline constexpr int64_t kMinOpset = 11;
inline constexpr int64_t kMaxOpset = 17;

struct ImportOptions {
  bool run_onnx_checker = true;
  bool run_onnx_shape_inference = true;
};

Result<std::unique_ptr<Graph>> import_onnx_file(const std::string& path, const ImportOptions& options = {});

// Imports from bytes. `model_dir` resolves external data ("" forbids it);
// `display_name` is used in messages.
Result<std::unique_ptr<Graph>> import_onnx_bytes(const void* data, size_t size, const std::string& model_dir,
                                                 const std::string& display_name,
                                                 const ImportOptions& options = {});

}  // namespace tessera
