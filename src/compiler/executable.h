// The Executable file (.tsx): a compiled Program — bound graph, rKernel
// table, Plan, memory plan — and its weights in one file, so that a model
// runs without its ONNX file and without compiling again. Specified byte by
// byte in docs/formats/executable.md.
//
//   TESSERA_RETURN_IF_ERROR(write_executable(*program, "resnet18.tsx"));
//   auto p = load_executable("resnet18.tsx");     // maps the weights, no copy
//   auto s = Engine::create(std::move(*p), {.executor = Executor::kPlan});
//
// The loader trusts nothing in the file: it checks the header, checksums,
// the bounds of every offset and size, re-infers every shape and dtype from
// the graph and compares, accepts only rKernels this build has and rTask
// counts they reproduce, validates the Plan (every rTask once, every
// dependency guaranteed by a wait, no wait cycle) and checks that values
// sharing arena bytes can never be live at the same time under that Plan.
//
// Thread-safety: functions are reentrant; a loaded Program is immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/program.h"
#include "tessera/status.h"

namespace tessera {

inline constexpr char kExecutableMagic[8] = {'T', 'E', 'S', 'S', 'E', 'X', 'E', '\0'};
inline constexpr uint32_t kExecutableVersion = 9;
// The device kind an Executable's rKernels and Plan are for.
inline constexpr char kExecutableDevice[] = "cpu";
inline constexpr uint32_t kExecutableHeaderBytes = 64;

// Writes `p` (which must carry a Plan) to `path`, atomically: a temporary
// file renamed into place, so a failed write never leaves a partial file.
Status write_executable(const Program& p, const std::string& path);

struct LoadOptions {
  // Check the metadata and weight CRC-32s. The fuzzer turns this off to
  // reach the structural checks behind them.
  bool verify_checksums = true;
  // The rKernels of the device loading it (empty: the CPU's) and the
  // device kind they are for, which the file must name.
  KernelTable kernels = {};
  std::string device = kExecutableDevice;
};

// Maps `path` and builds a Program whose constants point into the mapping.
Result<std::unique_ptr<Program>> load_executable(const std::string& path, const LoadOptions& options = {});

// The same from bytes in memory; `name` is used in messages. The bytes are
// copied when they are not 64-byte aligned, else borrowed: `owner` keeps
// them alive for as long as the Program lives (may be null if the caller
// outlives the Program).
Result<std::unique_ptr<Program>> load_executable_bytes(const void* data, size_t size, const std::string& name,
                                                       std::shared_ptr<void> owner, const LoadOptions& options = {});

// True if the file at `path` starts with the Executable magic (declared
// in tessera/runtime.h too).
bool is_executable_file(const std::string& path);

}  // namespace tessera
