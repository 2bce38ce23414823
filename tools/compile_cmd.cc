// tessera compile MODEL.onnx -o MODEL.tsx: compile once (import, passes,
// rKernels, profile, schedule, memory plan) and write an Executable that
// `tessera run MODEL.tsx` runs without the ONNX file.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"
#include "text.h"

namespace tessera::tools {
namespace {

const cli::Command kCompile = {
    "compile",
    "tessera compile MODEL.onnx -o MODEL.tsx [options]",
    "Compile an ONNX model into an Executable: the bound graph, rKernel table, Plan, memory plan and\n"
    "weights in one file (docs/formats/executable.md). `tessera run MODEL.tsx` runs it without the\n"
    "ONNX file and without compiling again; the weights are mapped, not copied.",
    cli::with_compile_options({
        {"--output", "FILE", "the Executable to write (required)"},
        {"--veus", "N", "vEUs the Plan is built for (default: one per core)"},
        {"--policy", "NAME", "scheduling policy: auto | wavefront | critical-path (default auto)"},
        {"--shape", "NAME=DIMS", "bind a dynamic input's shape, e.g. x=1x3x224x224", true},
        {"--quiet", "", "no summary on stderr"},
    }),
    "examples:\n"
    "  tessera compile build/zoo/resnet18.onnx -o resnet18.tsx\n"
    "  tessera run resnet18.tsx --iters 20\n"
    "  tessera compile bert.onnx --shape input_ids=1x64 --veus 2 --policy critical-path -o bert.tsx\n"};

}  // namespace

int compile_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kCompile, argc, argv, 1, "expected exactly one MODEL.onnx", &a); rc >= 0) return rc;
  if (a.has("--quiet")) log_set_level(LogLevel::kWarning);
  if (!a.has("--output")) return cli::usage_error(kCompile, "-o FILE (the Executable to write) is required");
  const std::string model = a.positional[0];
  const std::string out = a.get("--output");
  if (is_executable_file(model)) return cli::usage_error(kCompile, cat("'", model, "' is already an Executable"));
  auto veus = a.get_int("--veus", 0, 1, 256);
  if (!veus.ok()) return cli::usage_error(kCompile, veus.status().message());
  SessionOptions so;
  so.veus = static_cast<int>(*veus);
  if (a.has("--policy") && !policy_parse(a.get("--policy"), &so.policy))
    return cli::usage_error(kCompile, cat("--policy must be auto, wavefront or critical-path, got '", a.get("--policy"), "'"));
  CompileOptions co;
  if (Status st = cli::apply_compile_flags(a, &co); !st.ok()) return cli::usage_error(kCompile, st.message());
  if (Status st = cli::parse_shape_flags(a, &co.shapes); !st.ok()) return cli::usage_error(kCompile, st.message());
  const auto t0 = std::chrono::steady_clock::now();
  auto rt = connect();
  if (!rt.ok()) return cli::fail(rt.status());
  auto m = rt->compile(model, co);
  if (!m.ok()) return cli::fail(m.status());
  if (Status st = m->save(out, so); !st.ok()) return cli::fail(st);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // What was written, read back from the file.
  auto written = inspect(out);
  if (!written.ok()) return cli::fail(written.status());
  const PlanInfo& p = *written->plan;
  std::error_code ec;
  auto bytes = std::filesystem::file_size(out, ec);
  say(out, ": ", p.steps.size(), " ops, ", p.tasks.size(), " rTasks on ", p.veus, " vEUs (", policy_name(p.policy),
      ", predicted ", fixed(p.predicted_us / 1e3, 3), " ms), arena ", fixed(static_cast<double>(p.arena_bytes) / 1e6, 2),
      " MB, file ", fixed(static_cast<double>(ec ? 0 : bytes) / 1e6, 2), " MB; compiled in ", fixed(ms, 1), " ms");
  return 0;
}

}  // namespace tessera::tools
