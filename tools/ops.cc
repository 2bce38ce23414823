// tessera ops: the supported ops and their rKernels.
#include <cstdio>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"
#include "text.h"

namespace tessera::tools {

int ops_main(int argc, char** argv) {
  const cli::Command cmd = {"ops", "tessera ops [--device NAME]",
                            "List the supported ONNX ops (opsets 11-17) and the rKernels a device runs them with.",
                            {{"--device", "NAME", "the device whose rKernels to list (default cpu; see tessera devices)"}},
                            ""};
  cli::Args a;
  if (int rc = cli::start(cmd, argc, argv, 0, "takes no arguments", &a); rc >= 0) return rc;
  auto rt = connect();
  if (!rt.ok()) return cli::fail(rt.status());
  const std::string device = a.get("--device", "cpu");
  auto ops = rt->ops(device);
  if (!ops.ok()) return cli::fail(ops.status());
  std::printf("%zu ops supported on the %s device\n\n", ops->size(), device.c_str());
  std::printf("%-24s %-28s %s\n", "op", "rKernel", "tiling");
  for (const OpSupport& op : *ops)
    for (const KernelInfo& k : op.kernels)
      std::printf("%-24s %-28s %s\n", op.op.c_str(), k.name.c_str(), k.description.c_str());
  return 0;
}

}  // namespace tessera::tools
