// tessera: the command-line front end. One file per subcommand.
#include <cstdio>
#include <cstring>
#include <string>

#include "tessera/tessera.h"
#include "commands.h"

namespace {

void print_help() {
  std::printf(
      "usage: tessera <command> [options]\n\n"
      "Tessera compiles ONNX models into schedules of fine-grained tasks and runs them.\n\n"
      "commands:\n"
      "  run MODEL.onnx|.tsx  run a model (compiling it first) or an Executable; print latency and outputs\n"
      "  compile MODEL.onnx   compile into an Executable file (-o MODEL.tsx)\n"
      "  inspect MODEL        show inputs, outputs, ops, parameters and FLOPs (.onnx or .tsx)\n"
      "  plan MODEL           compile into a Plan (or read an Executable's) and show it (--svg)\n"
      "  profile MODEL.onnx   measure every op's rTask cost (cached for later compiles)\n"
      "  topo                 show the host map: PUs, measured costs between them, what the planner concludes\n"
      "  devices              list the devices sessions run on (cpu, null; cuda where there is a GPU)\n"
      "  ops                  list supported ops and their rKernels\n"
      "  status               show a daemon (tesserad): tenants, sessions, vDevices (--connect URI)\n"
      "  faults               list a daemon's fault records; --clear ID\n"
      "  top                  a live view of a daemon: vDevices, runs/s, latency, tenants\n"
      "  token                hash a tenant's token for tesserad's config, or make a new one\n"
      "  daemon               start, stop or check tesserad (--config FILE)\n\n"
      "options:\n"
      "  --version            print the version\n"
      "  --help, -h           show this help (also: tessera <command> --help)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_help();
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    print_help();
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("tessera %s\n", std::string(tessera::version()).c_str());
    if (auto rt = tessera::connect(); rt.ok())
      for (const tessera::DeviceInfo& d : rt->devices())
        if (!d.kernels.empty()) std::printf("%s kernels: %s\n", d.kind.c_str(), d.kernels.c_str());
    return 0;
  }
  if (cmd == "run") return tessera::tools::run_main(argc - 2, argv + 2);
  if (cmd == "compile") return tessera::tools::compile_main(argc - 2, argv + 2);
  if (cmd == "inspect") return tessera::tools::inspect_main(argc - 2, argv + 2);
  if (cmd == "ops") return tessera::tools::ops_main(argc - 2, argv + 2);
  if (cmd == "plan") return tessera::tools::plan_main(argc - 2, argv + 2);
  if (cmd == "profile") return tessera::tools::profile_main(argc - 2, argv + 2);
  if (cmd == "topo") return tessera::tools::topo_main(argc - 2, argv + 2);
  if (cmd == "devices") return tessera::tools::devices_main(argc - 2, argv + 2);
  if (cmd == "status") return tessera::tools::status_main(argc - 2, argv + 2);
  if (cmd == "faults") return tessera::tools::faults_main(argc - 2, argv + 2);
  if (cmd == "token") return tessera::tools::token_main(argc - 2, argv + 2);
  if (cmd == "daemon") return tessera::tools::daemon_main(argc - 2, argv + 2);
  if (cmd == "top") return tessera::tools::top_main(argc - 2, argv + 2);
  std::fprintf(stderr, "tessera: error: unknown command '%s' (commands: run, compile, inspect, plan, profile, topo, devices, ops, status, faults, top, token, daemon; see tessera --help)\n",
               cmd.c_str());
  return 2;
}
