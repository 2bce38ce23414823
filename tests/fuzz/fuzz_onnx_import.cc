// libFuzzer target: arbitrary bytes through the ONNX importer and the
// compiler (shape binding, constant folding, kernel selection, memory
// plan). Any crash, sanitizer report or leak is a bug; errors are fine.
#include <cstddef>
#include <cstdint>

#include "compiler/program.h"
#include "onnx/importer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = tessera::import_onnx_bytes(data, size, "", "fuzz.onnx");
  if (!g.ok()) return 0;
  auto p = tessera::compile_graph(std::move(*g), {});
  (void)p;
  return 0;
}
