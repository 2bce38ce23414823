// tessera token | status | faults: the daemon from its clients' side
// (docs/daemon.md). A client of the public API only (include/tessera/).
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"

namespace tessera::tools {

namespace {

const std::vector<cli::OptionSpec> kConnectOptions = {
    {"--connect", "URI", "the daemon, unix:///PATH (default: $TESSERA_CONNECT)"},
    {"--token", "TOKEN", "the tenant's token (default: $TESSERA_TOKEN)"},
    {"--token-file", "FILE", "a file whose first line is the token (default: $TESSERA_TOKEN_FILE)"},
};

std::string fixed3(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

std::vector<cli::OptionSpec> with_connect(std::vector<cli::OptionSpec> own) {
  own.insert(own.begin(), kConnectOptions.begin(), kConnectOptions.end());
  return own;
}

const cli::Command kToken = {
    "token",
    "tessera token hash [TOKEN] | tessera token new",
    "Tokens for tesserad's tenants: `hash` prints a token's SHA-256 (what the config's token_sha256\n"
    "holds; the token is read from stdin when not given), `new` makes a random token and prints it\n"
    "and its hash.",
    {},
    "examples:\n"
    "  tessera token new\n"
    "  printf %s \"$TOKEN\" | tessera token hash\n"};

const cli::Command kStatus = {
    "status",
    "tessera status --connect unix:///PATH [options]",
    "Show a daemon as this tenant sees it: tenants (an admin sees all), sessions, vEUs, memory, and\n"
    "the devices' vDevices with the tenant leasing each.",
    with_connect({{"--json", "", "print one JSON object on stdout"}}),
    "examples:\n"
    "  tessera status --connect unix:///run/tessera/tesserad.sock --token-file ~/.tessera-token\n"
    "  TESSERA_CONNECT=unix:///tmp/t.sock TESSERA_TOKEN=... tessera status --json\n"};

const cli::Command kFaults = {
    "faults",
    "tessera faults --connect unix:///PATH [options]",
    "List a daemon's fault records (a client that died holding leases, a lease reclaimed for\n"
    "silence, a refused request, a message that did not decode): this tenant's, or all for an admin.",
    with_connect({{"--json", "", "print a JSON list on stdout"}, {"--clear", "ID", "remove record ID (admins only)"}}),
    "examples:\n"
    "  tessera faults --connect unix:///run/tessera/tesserad.sock\n"
    "  tessera faults --connect unix:///run/tessera/tesserad.sock --clear 3\n"};

const cli::Command kTop = {
    "top",
    "tessera top --connect unix:///PATH [options]",
    "A live view of a daemon, like nvidia-smi and htop: devices and their vDevices (tenant, mode,\n"
    "cores, runs/s, mean latency, busy share, memory), tenants against their quotas. q or Ctrl-C\n"
    "quits.",
    with_connect({{"--interval", "SECONDS", "between refreshes (default 1)"},
                  {"--once", "", "print one frame (runs/s over one interval) and exit"}}),
    "An admin sees every tenant; a tenant sees itself.\n\n"
    "examples:\n"
    "  tessera top --connect unix:///run/tessera/tesserad.sock --token-file ~/.tessera-token\n"};

const cli::Command kDaemon = {
    "daemon",
    "tessera daemon start|stop|status --config FILE",
    "Start tesserad in the background, stop it, or say whether it runs (the tesserad program\n"
    "beside this one; `tesserad --help` for running it in the foreground).",
    {{"--config", "FILE", "the daemon's TOML config (see examples/tesserad.toml, docs/daemon.md)"}},
    "`start` returns once the daemon listens (its log: STATE_DIR/tesserad.log); `status` exits 0\n"
    "when it runs, 3 when not.\n\n"
    "examples:\n"
    "  tessera daemon start --config /etc/tessera/tesserad.toml\n"
    "  tessera daemon status --config /etc/tessera/tesserad.toml\n"};

}  // namespace

namespace {

std::string mib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}

// One frame: `before` is the previous status (runs/s and latency over the
// interval between them), empty on the first.
std::string top_frame(const ServerStatus& now, const ServerStatus* before, double interval_s) {
  std::string o;
  char line[512];
  std::snprintf(line, sizeof line, "tesserad pid %d, up %.0f s, protocol %d; tenant '%s'%s; %llu fault record(s)\n\n",
                now.pid, now.uptime_s, now.version, now.tenant.c_str(), now.admin ? " (admin)" : "",
                static_cast<unsigned long long>(now.faults));
  o += line;
  for (const DeviceStatus& d : now.devices) {
    std::snprintf(line, sizeof line, "DEVICE %s (%s): %zu vEUs, %d free\n", d.name.c_str(), d.kind.c_str(), d.pus.size(),
                  d.free_veus);
    o += line;
    std::snprintf(line, sizeof line, "  %-6s %-14s %-9s %-8s %9s %11s %6s %10s  %s\n", "LEASE", "TENANT", "MODE", "CORES",
                  "RUNS/S", "LATENCY", "BUSY", "MEMORY", "SESSION");
    o += line;
    for (const VDeviceStatus& v : d.vdevices) {
      const VDeviceStatus* was = nullptr;
      if (before != nullptr)
        for (const DeviceStatus& bd : before->devices)
          for (const VDeviceStatus& bv : bd.vdevices)
            if (bv.lease == v.lease && bd.name == d.name) was = &bv;
      const double runs = static_cast<double>(v.runs - (was ? was->runs : 0));
      const double span = was ? interval_s : std::max(v.age_s, 1e-9);
      const double lat = runs > 0 ? (v.latency_s - (was ? was->latency_s : 0)) / runs : 0;
      const double busy = (v.busy_s - (was ? was->busy_s : 0)) / (span * std::max<size_t>(1, v.cores.size()));
      std::string cores;
      for (int c : v.cores) cores += (cores.empty() ? "" : ",") + std::to_string(c);
      char latency[32];
      if (runs > 0 && lat < 1e-3) std::snprintf(latency, sizeof latency, "%.0f us", lat * 1e6);
      else if (runs > 0) std::snprintf(latency, sizeof latency, "%.2f ms", lat * 1e3);
      else std::snprintf(latency, sizeof latency, "-");
      std::snprintf(line, sizeof line, "  %-6llu %-14s %-9s %-8s %9.1f %11s %5.0f%% %10s  %s\n",
                    static_cast<unsigned long long>(v.lease), v.tenant.c_str(), v.mode.c_str(), cores.c_str(), runs / span,
                    latency, 100 * std::min(1.0, busy), mib(v.memory_bytes).c_str(), v.session.c_str());
      o += line;
    }
  }
  std::snprintf(line, sizeof line, "\n%-16s %-9s %-9s %-9s %-21s %s\n", "TENANT", "MODE", "SESSIONS", "vEUs", "MEMORY",
                "CONNECTIONS");
  o += line;
  for (const TenantStatus& t : now.tenants) {
    const std::string sessions = std::to_string(t.sessions) + "/" + std::to_string(t.max_sessions);
    const std::string veus = std::to_string(t.veus) + "/" + std::to_string(t.max_veus);
    const std::string memory = mib(t.memory_bytes) + "/" + mib(t.max_memory);
    std::snprintf(line, sizeof line, "%-16s %-9s %-9s %-9s %-21s %d\n", t.name.c_str(), t.mode.c_str(), sessions.c_str(),
                  veus.c_str(), memory.c_str(), t.connections);
    o += line;
  }
  return o;
}

}  // namespace

int top_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kTop, argc, argv, 0, "takes no arguments", &a); rc >= 0) return rc;
  double interval = 1;
  if (a.has("--interval")) {
    interval = std::atof(a.get("--interval").c_str());
    if (!(interval >= 0.05 && interval <= 3600)) return cli::usage_error(kTop, "--interval must be 0.05 to 3600 seconds");
  }
  Result<Runtime> rt = connect_from(a);
  if (!rt.ok()) return cli::fail(rt.status());
  Result<ServerStatus> first = rt->status();
  if (!first.ok()) return cli::fail(first.status());
  ServerStatus before = *first;
  const bool tty = ::isatty(1) && ::isatty(0) && !a.has("--once");
  // On a terminal, keys arrive one at a time (q quits), restored on exit.
  struct Keys {
    termios saved{};
    bool set = false;
    explicit Keys(bool on) {
      if (!on || ::tcgetattr(0, &saved) != 0) return;
      termios raw = saved;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      set = ::tcsetattr(0, TCSANOW, &raw) == 0;
    }
    ~Keys() {
      if (set) ::tcsetattr(0, TCSANOW, &saved);
    }
  } keys(tty);
  for (;;) {
    // Waiting for the interval, or for q on a terminal.
    if (tty) {
      pollfd p{0, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(interval * 1000)) > 0) {
        char c = 0;
        if (::read(0, &c, 1) <= 0 || c == 'q') return 0;
      }
    } else {
      ::usleep(static_cast<useconds_t>(interval * 1e6));
    }
    Result<ServerStatus> now = rt->status();
    if (!now.ok()) return cli::fail(now.status());
    const std::string frame = top_frame(*now, &before, interval);
    std::fputs(tty ? ("\033[H\033[2J" + frame).c_str() : frame.c_str(), stdout);
    std::fflush(stdout);
    if (!tty) return 0;
    before = *now;
  }
}

int daemon_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kDaemon, argc, argv, 1, "takes start, stop or status", &a); rc >= 0) return rc;
  const std::string& what = a.positional[0];
  const char* flag = what == "start" ? "--detach" : what == "stop" ? "--stop" : what == "status" ? "--running" : nullptr;
  if (flag == nullptr) return cli::usage_error(kDaemon, "takes start, stop or status, not '" + what + "'");
  if (!a.has("--config")) return cli::usage_error(kDaemon, "--config FILE is required");
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string tesserad = (self.parent_path() / "tesserad").string();
  if (ec || ::access(tesserad.c_str(), X_OK) != 0)
    return cli::fail(not_found("tesserad is not beside this program (" + tesserad + ")"));
  const std::string config = a.get("--config");
  ::execl(tesserad.c_str(), "tesserad", "--config", config.c_str(), flag, static_cast<char*>(nullptr));
  return cli::fail(internal_error("cannot start " + tesserad + ": " + std::strerror(errno)));
}

std::string connect_uri(const cli::Args& a) {
  std::string uri = a.get("--connect");
  if (uri.empty())
    if (const char* e = std::getenv("TESSERA_CONNECT")) uri = e;
  return uri.empty() ? "local" : uri;
}

Result<Runtime> connect_from(const cli::Args& a) {
  ConnectOptions o;
  o.token = a.get("--token");
  o.token_file = a.get("--token-file");
  return connect(connect_uri(a), o);
}

int token_main(int argc, char** argv) {
  Result<cli::Args> parsed = cli::parse(kToken, argc, argv);
  if (!parsed.ok()) return cli::usage_error(kToken, parsed.status().message());
  const cli::Args& a = *parsed;
  if (a.help) {
    std::fputs(cli::help_text(kToken).c_str(), stdout);
    return 0;
  }
  if (a.positional.empty() || a.positional.size() > 2) return cli::usage_error(kToken, "takes hash [TOKEN] or new");
  const std::string& what = a.positional[0];
  if (what == "hash") {
    std::string token;
    if (a.positional.size() > 1) {
      token = a.positional[1];
    } else if (!std::getline(std::cin, token)) {
      return cli::fail(invalid_argument("tessera token hash: no token given and none on stdin"));
    }
    while (!token.empty() && (token.back() == '\r' || token.back() == '\n')) token.pop_back();
    std::printf("%s\n", token_hash(token).c_str());
    return 0;
  }
  if (what == "new" && a.positional.size() == 1) {
    std::ifstream rnd("/dev/urandom", std::ios::binary);
    unsigned char bytes[24];
    if (!rnd.read(reinterpret_cast<char*>(bytes), sizeof bytes))
      return cli::fail(internal_error("cannot read /dev/urandom"));
    static const char kHex[] = "0123456789abcdef";
    std::string token = "tsr_";
    for (unsigned char b : bytes) token += kHex[b >> 4], token += kHex[b & 15];
    std::printf("token        %s\ntoken_sha256 %s\n", token.c_str(), token_hash(token).c_str());
    return 0;
  }
  return cli::usage_error(kToken, "takes hash [TOKEN] or new");
}

int status_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kStatus, argc, argv, 0, "takes no arguments", &a); rc >= 0) return rc;
  Result<Runtime> rt = connect_from(a);
  if (!rt.ok()) return cli::fail(rt.status());
  Result<ServerStatus> s = rt->status();
  if (!s.ok()) return cli::fail(s.status());
  if (a.has("--json")) {
    std::printf("%s\n", status_to_json(*s).c_str());
    return 0;
  }
  std::printf("tesserad pid %d, protocol %d, up %.0f s; you are tenant '%s' (%s%s); %llu fault record(s)\n\n", s->pid,
              s->version, s->uptime_s, s->tenant.c_str(), s->mode.c_str(), s->admin ? ", admin" : "",
              static_cast<unsigned long long>(s->faults));
  std::printf("%-16s %-9s %-9s %-9s %-17s %s\n", "TENANT", "MODE", "SESSIONS", "vEUs", "MEMORY (MiB)", "CONNECTIONS");
  for (const TenantStatus& t : s->tenants) {
    const std::string sessions = std::to_string(t.sessions) + "/" + std::to_string(t.max_sessions);
    const std::string veus = std::to_string(t.veus) + "/" + std::to_string(t.max_veus);
    const std::string memory = std::to_string(t.memory_bytes >> 20) + "/" + std::to_string(t.max_memory >> 20);
    std::printf("%-16s %-9s %-9s %-9s %-17s %d\n", t.name.c_str(), t.mode.c_str(), sessions.c_str(), veus.c_str(),
                memory.c_str(), t.connections);
  }
  for (const DeviceStatus& d : s->devices) {
    std::printf("\ndevice %s: %zu PU(s), %d free\n", d.name.c_str(), d.pus.size(), d.free_veus);
    std::printf("  %-6s %-10s %-14s %-9s %-8s %8s %27s  %s\n", "LEASE", "CORES", "TENANT", "MODE", "PID", "RUNS",
                "LATENCY ms: GOAL/PLAN/RUNS", "SESSION");
    for (const VDeviceStatus& v : d.vdevices) {
      std::string cores;
      for (int c : v.cores) cores += (cores.empty() ? "" : ",") + std::to_string(c);
      char latency[64];
      std::snprintf(latency, sizeof latency, "%s/%s/%s", v.objective_ms > 0 ? fixed3(v.objective_ms).c_str() : "-",
                    v.predicted_ms > 0 ? fixed3(v.predicted_ms).c_str() : "-",
                    v.runs > 0 ? fixed3(1e3 * v.latency_s / static_cast<double>(v.runs)).c_str() : "-");
      std::printf("  %-6llu %-10s %-14s %-9s %-8d %8llu %27s  %s\n", static_cast<unsigned long long>(v.lease),
                  cores.c_str(), v.tenant.c_str(), v.mode.c_str(), v.pid, static_cast<unsigned long long>(v.runs), latency,
                  v.session.c_str());
    }
  }
  return 0;
}

int faults_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kFaults, argc, argv, 0, "takes no arguments", &a); rc >= 0) return rc;
  Result<Runtime> rt = connect_from(a);
  if (!rt.ok()) return cli::fail(rt.status());
  if (a.has("--clear")) {
    Result<int64_t> id = a.get_int("--clear", 0, 1, INT64_MAX);
    if (!id.ok()) return cli::fail(id.status());
    if (Status st = rt->clear_fault(static_cast<uint64_t>(*id)); !st.ok()) return cli::fail(st);
    std::fprintf(stderr, "fault %lld cleared\n", static_cast<long long>(*id));
    return 0;
  }
  Result<std::vector<FaultInfo>> f = rt->faults();
  if (!f.ok()) return cli::fail(f.status());
  if (a.has("--json")) {
    std::printf("%s\n", faults_to_json(*f).c_str());
    return 0;
  }
  std::printf("%-5s %-24s %-12s %-16s %s\n", "ID", "TIME", "TENANT", "KIND", "MESSAGE");
  for (const FaultInfo& r : *f)
    std::printf("%-5llu %-24s %-12s %-16s %s\n", static_cast<unsigned long long>(r.id), r.time.c_str(),
                r.tenant.empty() ? "-" : r.tenant.c_str(), r.kind.c_str(), r.message.c_str());
  return 0;
}

}  // namespace tessera::tools
