// tessera inspect MODEL.onnx: what a model holds, without running it.
#include <cstdio>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"
#include "text.h"

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
  InspectOptions o;
  o.graph_text = a.has("--graph");
  if (Status st = cli::parse_shape_flags(a, &o.shapes); !st.ok()) return cli::usage_error(kInspect, st.message());
  if (!o.shapes.empty() && is_executable_file(path))
    return cli::usage_error(kInspect, cat(path, " is a compiled Executable; its shapes are fixed"));
  auto s = inspect(path, o);
  if (!s.ok()) return cli::fail(s.status());
  std::printf("model     %s\n", path.c_str());
  std::printf("graph     %s (opset %lld)\n", s->graph_name.empty() ? "(unnamed)" : s->graph_name.c_str(),
              static_cast<long long>(s->opset));
  std::printf("inputs\n");
  for (const TensorInfo& v : s->inputs)
    std::printf("  %-24s %s %s\n", v.name.c_str(), std::string(dtype_name(v.dtype)).c_str(), shape_string(v).c_str());
  const bool bound = s->shapes_bound.ok();
  std::printf("outputs\n");
  for (const TensorInfo& v : s->outputs)
    std::printf("  %-24s %s %s\n", v.name.c_str(), std::string(dtype_name(v.dtype)).c_str(),
                bound ? shape_string(v).c_str() : "?");
  std::printf("nodes     %d\n", s->nodes);
  for (const OpCount& op : s->ops)
    std::printf("  %-24s %d%s\n", op.op.c_str(), op.count, op.supported ? "" : "   (not supported)");
  std::printf("params    %s (%sB)\n", human_count(static_cast<double>(s->parameters)).c_str(),
              human_count(static_cast<double>(s->parameter_bytes)).c_str());
  if (!bound) {
    std::printf("flops     unknown: %s\n", s->shapes_bound.message().c_str());
    return 0;
  }
  std::printf("flops     %s per run (multiply-add = 2)\n", human_count(s->flops).c_str());
  if (const auto& p = s->plan)
    std::printf("plan      %d vEUs, %s, %zu rTasks, predicted %.1f us; arena %sB (Executable compiled from %s)\n", p->veus,
                std::string(policy_name(p->policy)).c_str(), p->tasks.size(), p->predicted_us,
                human_count(static_cast<double>(p->arena_bytes)).c_str(), p->source.c_str());
  if (a.has("--graph")) std::printf("\n%s", s->graph_text.c_str());
  return 0;
}

}  // namespace tessera::tools
