// tessera ops: the supported ops and their rKernels.
#include <cstdio>

#include "compiler/program.h"
#include "kernels/cpu/kernel.h"
#include "tools/cli.h"
#include "tools/commands.h"

namespace tessera::tools {

int ops_main(int argc, char** argv) {
  const cli::Command cmd = {"ops", "tessera ops", "List the supported ONNX ops (opsets 11-17) and their CPU rKernels.",
                            {}, ""};
  auto parsed = cli::parse(cmd, argc, argv);
  if (!parsed.ok()) return cli::usage_error(cmd, parsed.status().message());
  if (parsed->help) {
    std::fputs(cli::help_text(cmd).c_str(), stdout);
    return 0;
  }
  if (!parsed->positional.empty()) return cli::usage_error(cmd, "takes no arguments");
  auto ops = supported_ops();
  std::printf("%zu ops supported on the CPU backend\n\n", ops.size());
  std::printf("%-24s %-28s %s\n", "op", "rKernel", "tiling");
  for (const std::string& op : ops) {
    for (const RKernel& k : cpu_kernels()) {
      if (k.op != op) continue;
      std::printf("%-24s %-28s %s\n", op.c_str(), std::string(k.name).c_str(), std::string(k.description).c_str());
    }
  }
  return 0;
}

}  // namespace tessera::tools
