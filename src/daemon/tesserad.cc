// tesserad: the daemon that owns this machine's devices for Tessera's
// clients (docs/daemon.md). Foreground; logs to stderr; SIGTERM or SIGINT
// closes every connection (their leases go with them) and exits 0.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log.h"
#include "daemon/config.h"
#include "daemon/server.h"
#include "daemon/worker.h"
#include "tessera/host_map.h"
#include "tessera/runtime.h"

namespace {

constexpr const char* kHelp =
    "usage: tesserad --config FILE [--quiet]\n"
    "\n"
    "The Tessera daemon: owns this machine's cores, cuts them into vDevices for the tenants\n"
    "its config lists, hands out leases that die with their holder, and records faults.\n"
    "Runs in the foreground and logs to stderr; SIGTERM or SIGINT ends it (exit 0).\n"
    "\n"
    "options:\n"
    "  --config FILE   the TOML config (see examples/tesserad.toml and docs/daemon.md)\n"
    "  --check         read and check the config, say what it holds, and exit (0: good)\n"
    "  --quiet         warnings and errors only\n"
    "  --version       print the version\n"
    "  -h, --help      this text\n"
    "\n"
    "Clients: tessera status --connect unix:///PATH --token TOKEN; tessera run --connect ...;\n"
    "tessera.connect(\"unix:///PATH\", token=...) in Python.\n";

int fail(const std::string& what) {
  std::fprintf(stderr, "tesserad: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // A cloud session's worker, started by the daemon (worker.h).
  if (argc == 3 && std::strcmp(argv[1], "--worker") == 0) {
    tessera::log_set_level(tessera::LogLevel::kWarning);
    return tessera::daemon::worker_main(std::atoi(argv[2]));
  }
  std::string config_path;
  bool check = false;
  tessera::log_set_level(tessera::LogLevel::kInfo);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      return 0;
    }
    if (a == "--version") {
      std::printf("tesserad %s\n", std::string(tessera::version()).c_str());
      return 0;
    }
    if (a == "--check") {
      check = true;
    } else if (a == "--quiet") {
      tessera::log_set_level(tessera::LogLevel::kWarning);
    } else if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config_path = a.substr(9);
    } else {
      return fail("unknown argument '" + a + "' (see --help)");
    }
  }
  if (config_path.empty()) return fail("--config FILE is required (see --help)");
  tessera::Result<tessera::daemon::DaemonConfig> config = tessera::daemon::load_config(config_path);
  if (!config.ok()) return fail(config.status().message());
  if (check) {
    std::printf("%s: socket %s, state in %s, lease timeout %g s; %zu tenant(s):\n", config_path.c_str(),
                config->socket.c_str(), config->state_dir.c_str(), config->lease_timeout_s, config->tenants.size());
    for (const tessera::daemon::TenantConfig& t : config->tenants)
      std::printf("  %-16s %-9s max_veus %d, max_memory %llu, max_sessions %d%s%s\n", t.name.c_str(),
                  tessera::daemon::mode_name(t.mode), t.max_veus, static_cast<unsigned long long>(t.max_memory),
                  t.max_sessions, t.admin ? ", admin" : "", t.uids.empty() ? "" : ", uids restricted");
    return 0;
  }
  tessera::Result<tessera::HostMap> map = tessera::host_map_obtain({});
  if (!map.ok()) return fail("the host map: " + map.status().message());
  tessera::daemon::Server server(std::move(*config));
  if (tessera::Status st = server.start(*map); !st.ok()) return fail(st.message());
  if (tessera::Status st = server.serve(); !st.ok()) return fail(st.message());
  return 0;
}
