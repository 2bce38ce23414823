// tessera inspect MODEL.onnx: what a model holds, without running it.
#include <cstdio>

#include "base/strings.h"
#include "compiler/executable.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"
#include "ir/printer.h"
#include "kernels/cpu/kernel.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "tools/cli.h"
#include "tools/commands.h"

namespace tessera::tools {
namespace {

const cli::Command kInspect = {
    "inspect",
    "tessera inspect MODEL.onnx|MODEL.tsx [options]",
    "Show a model's inputs, outputs, node count by op, parameters and FLOP estimate.",
    {
        {"--shape", "NAME=DIMS", "bind a dynamic input's shape (needed for FLOPs)", true},
        {"--graph", "", "also print every node, after shapes are bound"},
    },
    "examples:\n  tessera inspect build/zoo/resnet18.onnx\n  tessera inspect bert.onnx --shape input_ids=1x64 --graph\n"};

}  // namespace

int inspect_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kInspect, argc, argv, 1, "expected exactly one MODEL.onnx", &a); rc >= 0) return rc;
  const std::string path = a.positional[0];
  BindOptions bo;
  if (Status st = cli::parse_shape_flags(a, &bo.input_shapes); !st.ok()) return cli::usage_error(kInspect, st.message());
  // An Executable holds its graph bound and simplified already.
  std::unique_ptr<Program> exe;
  std::unique_ptr<Graph> imported;
  if (is_executable_file(path)) {
    if (a.has("--shape")) return cli::usage_error(kInspect, str_cat(path, " is a compiled Executable; its shapes are fixed"));
    auto p = load_executable(path);
    if (!p.ok()) return cli::fail(p.status());
    exe = std::move(*p);
  } else {
    auto g = import_onnx_file(path);
    if (!g.ok()) return cli::fail(g.status());
    imported = std::move(*g);
  }
  Graph& graph = exe ? *exe->graph : *imported;
  GraphSummary before = graph_summarize(graph);

  std::printf("model     %s\n", path.c_str());
  std::printf("graph     %s (opset %lld)\n", graph.name.empty() ? "(unnamed)" : graph.name.c_str(),
              static_cast<long long>(graph.opset));
  std::printf("inputs\n");
  for (const Value* v : graph.inputs())
    std::printf("  %-24s %s %s\n", v->name.c_str(), std::string(dtype_name(v->dtype)).c_str(), v->shape.to_string().c_str());

  // An Executable's graph holds the compiler's internal ops (fused and
  // lowered ones), which an ONNX file may not; its loader checked them.
  Status supported = exe ? Status() : check_supported(graph);
  Status bound = exe || !supported.ok() ? supported : bind_shapes(graph, bo, cpu_evaluate);
  std::printf("outputs\n");
  for (const Value* v : graph.outputs())
    std::printf("  %-24s %s %s\n", v->name.c_str(), std::string(dtype_name(v->dtype)).c_str(),
                bound.ok() ? v->shape.to_string().c_str() : "?");
  std::printf("nodes     %d\n", before.nodes);
  for (auto& [op, count] : before.op_counts) {
    bool ok = op_find(op) != nullptr && cpu_kernel_find(op) != nullptr;
    std::printf("  %-24s %d%s\n", op.c_str(), count, ok ? "" : "   (not supported)");
  }
  std::printf("params    %s (%sB)\n", human_count(static_cast<double>(before.parameters)).c_str(),
              human_count(static_cast<double>(before.parameter_bytes)).c_str());
  if (bound.ok()) {
    GraphSummary after = graph_summarize(graph);
    std::printf("flops     %s per run (multiply-add = 2)\n", human_count(after.flops).c_str());
    if (exe)
      std::printf("plan      %d vEUs, %s, %zu rTasks, predicted %.1f us; arena %sB (Executable compiled from %s)\n",
                  exe->plan->veus, std::string(policy_name(exe->plan->policy)).c_str(), exe->plan->placements.size(),
                  exe->plan->predicted_us, human_count(static_cast<double>(exe->memory.arena_bytes)).c_str(),
                  exe->source.c_str());
    if (a.has("--graph")) std::printf("\n%s", graph_to_text(graph).c_str());
  } else {
    std::printf("flops     unknown: %s\n", bound.message().c_str());
  }
  return 0;
}

}  // namespace tessera::tools
