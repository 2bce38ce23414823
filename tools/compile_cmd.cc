// tessera compile MODEL.onnx -o MODEL.tsx: compile once (import, passes,
// rKernels, profile, schedule, memory plan) and write an Executable that
// `tessera run MODEL.tsx` runs without the ONNX file.
#include <cstdio>
#include <filesystem>

#include "base/log.h"
#include "base/strings.h"
#include "compiler/executable.h"
#include "compiler/program.h"
#include "topology/cpu_topology.h"
#include "topology/host_map.h"
#include "tools/cli.h"
#include "tools/commands.h"

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
  if (is_executable_file(model)) return cli::usage_error(kCompile, str_cat("'", model, "' is already an Executable"));
  auto veus = a.get_int("--veus", 0, 1, 256);
  if (!veus.ok()) return cli::usage_error(kCompile, veus.status().message());
  Policy policy = Policy::kAuto;
  if (a.has("--policy") && (!policy_parse(a.get("--policy"), &policy) || policy == Policy::kRandom))
    return cli::usage_error(kCompile, str_cat("--policy must be auto, wavefront or critical-path, got '",
                                              a.get("--policy"), "'"));
  CompileConfig co;
  co.build_plan = true;
  co.schedule.policy = policy;
  co.schedule.veus = *veus > 0 ? static_cast<int>(*veus) : cpu_topology().cores;
  if (Status st = cli::apply_compile_flags(a, &co); !st.ok()) return cli::usage_error(kCompile, st.message());
  co.profile_options.progress = [](size_t done, size_t total, bool) { print_progress(done, total); };
  if (Status st = cli::parse_shape_flags(a, &co.input_shapes); !st.ok()) return cli::usage_error(kCompile, st.message());
  HostMap host_map;
  if (Status st = cli::prepare_plan(a, /*pin=*/true, &host_map, &co); !st.ok()) return cli::fail(st);
  auto program = compile_onnx(model, co);
  if (!program.ok()) return cli::fail(program.status());
  cli::log_host_map(host_map);
  const Program& p = **program;
  if (Status st = write_executable(p, out); !st.ok()) return cli::fail(st);
  std::error_code ec;
  auto bytes = std::filesystem::file_size(out, ec);
  log_info(out, ": ", p.steps.size(), " ops, ", p.stats.rtasks, " rTasks on ", p.plan->veus, " vEUs (",
           policy_name(p.plan->policy), ", predicted ", str_fixed(p.plan->predicted_us / 1e3, 3), " ms), arena ",
           str_fixed(static_cast<double>(p.memory.arena_bytes) / 1e6, 2), " MB, file ",
           str_fixed(static_cast<double>(ec ? 0 : bytes) / 1e6, 2), " MB; compiled in ", str_fixed(p.stats.compile_ms, 1),
           " ms");
  return 0;
}

}  // namespace tessera::tools
