// tesserad: the daemon that owns this machine's devices for Tessera's
// clients (docs/daemon.md). Foreground; logs to stderr; SIGTERM or SIGINT
// closes every connection (their leases go with them) and exits 0.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log.h"
#include "daemon/config.h"
#include "daemon/server.h"
#include "daemon/wire.h"
#include "daemon/worker.h"
#include "tessera/host_map.h"
#include "tessera/runtime.h"

namespace {

constexpr const char* kHelp =
    "usage: tesserad --config FILE [--quiet] [--detach | --stop | --running | --check]\n"
    "\n"
    "The Tessera daemon: owns this machine's cores, cuts them into vDevices for the tenants\n"
    "its config lists, hands out leases that die with their holder, and records faults.\n"
    "Runs in the foreground and logs to stderr; SIGTERM or SIGINT ends it (exit 0).\n"
    "\n"
    "options:\n"
    "  --config FILE   the TOML config (see examples/tesserad.toml and docs/daemon.md)\n"
    "  --check         read and check the config, say what it holds, and exit (0: good)\n"
    "  --detach        run in the background: logs to STATE_DIR/tesserad.log, pid in\n"
    "                  STATE_DIR/tesserad.pid; returns once it listens (0) or has failed (1)\n"
    "  --stop          stop the daemon of this config (SIGTERM; waits up to 10 s)\n"
    "  --running       exit 0 if the daemon of this config runs and listens, 3 if not\n"
    "  --quiet         warnings and errors only\n"
    "  --version       print the version\n"
    "  -h, --help      this text\n"
    "\n"
    "Clients: tessera status --connect unix:///PATH --token TOKEN; tessera run --connect ...;\n"
    "tessera.connect(\"unix:///PATH\", token=...) in Python.\n";

pid_t read_pid(const std::string& path) {
  std::ifstream f(path);
  long pid = 0;
  return (f >> pid) && pid > 0 ? static_cast<pid_t>(pid) : -1;
}

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
  bool check = false, detach = false, stop = false, running = false;
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
    } else if (a == "--detach") {
      detach = true;
    } else if (a == "--stop") {
      stop = true;
    } else if (a == "--running") {
      running = true;
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
  const std::string pid_file = config->state_dir + "/tesserad.pid";
  if (stop || running) {
    const pid_t pid = read_pid(pid_file);
    const bool alive = pid > 0 && ::kill(pid, 0) == 0;
    if (running) {
      const bool listens = alive && tessera::daemon::connect_unix(config->socket).ok();
      std::printf("tesserad (%s): %s\n", config_path.c_str(),
                  listens ? ("running, pid " + std::to_string(pid) + ", on " + config->socket).c_str() : "not running");
      return listens ? 0 : 3;
    }
    if (!alive) {
      std::printf("tesserad (%s): not running\n", config_path.c_str());
      return 0;
    }
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 1000 && ::kill(pid, 0) == 0; ++i) ::usleep(10000);
    if (::kill(pid, 0) == 0) return fail("pid " + std::to_string(pid) + " did not stop within 10 s");
    std::remove(pid_file.c_str());
    std::printf("tesserad (%s): stopped (pid %d)\n", config_path.c_str(), static_cast<int>(pid));
    return 0;
  }
  if (detach) {
    std::error_code ec;
    std::filesystem::create_directories(config->state_dir, ec);
    const std::string log = config->state_dir + "/tesserad.log";
    const pid_t child = ::fork();
    if (child < 0) return fail("fork: " + std::string(std::strerror(errno)));
    if (child > 0) {  // wait until it listens, or has died
      for (int i = 0; i < 3000; ++i) {
        int status = 0;
        if (::waitpid(child, &status, WNOHANG) == child)
          return fail("it stopped at once (exit " + std::to_string(WEXITSTATUS(status)) + "); see " + log);
        if (read_pid(pid_file) == child && tessera::daemon::connect_unix(config->socket).ok()) {
          std::printf("tesserad: running, pid %d, on %s; logs in %s\n", static_cast<int>(child), config->socket.c_str(),
                      log.c_str());
          return 0;
        }
        ::usleep(10000);
      }
      return fail("it did not listen within 30 s; see " + log);
    }
    ::setsid();
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) ::dup2(fd, 2), ::dup2(fd, 1);
    if (null >= 0) ::dup2(null, 0);
  }
  tessera::Result<tessera::HostMap> map = tessera::host_map_obtain({});
  if (!map.ok()) return fail("the host map: " + map.status().message());
  tessera::daemon::Server server(std::move(*config));
  if (tessera::Status st = server.start(*map); !st.ok()) return fail(st.message());
  {
    std::ofstream f(pid_file, std::ios::trunc);
    f << ::getpid() << "\n";
  }
  tessera::Status st = server.serve();
  if (read_pid(pid_file) == ::getpid()) std::remove(pid_file.c_str());
  if (!st.ok()) return fail(st.message());
  return 0;
}
