// tessera topo: the host map (src/topology/host_map.h): the PUs, what
// moving data and control between them costs, and what the planner
// concludes from it.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"
#include "text.h"

namespace tessera::tools {
namespace {

const cli::Command kTopo = {
    "topo",
    "tessera topo [options]",
    "Show the host map: the PUs vEUs run on (placement order: vEU i on the i-th), and for every pair the\n"
    "measured cost of reading data the other just wrote, of writing again what the other read, and of a\n"
    "hand-off; what the PUs share; how much of a working set read again and again the caches keep (a\n"
    "shared last-level cache holds less than its size); and what the planner concludes. The map is\n"
    "measured at first use (a few seconds), cached under $TESSERA_CACHE (default ~/.cache/tessera) keyed\n"
    "by the host's shape, and checked against a quick fingerprint before a cached map is trusted.",
    {
        {"--json", "", "print the map as one JSON object (fields as in docs/formats/host-map.md, plus origin,\n"
                       "                          age_days, digest and conclusions)"},
        {"--refresh", "", "measure again, even when the cache holds a map"},
        {"--host-map", "FILE", "show this map instead of this host's (also $TESSERA_HOST_MAP)"},
        {"--quiet", "", "no progress on stderr"},
        {"--gauge", "", "say whether the host is as its map describes right now: every PU running at full\n"
                        "                          speed at once (the FMA gauge the plan choice waits on) and the first\n"
                        "                          pair's hand-off within 1.5x of the map's; exit 0 when so, 3 when not"},
    },
    "examples:\n  tessera topo\n  tessera topo --json | python3 -m json.tool\n  tessera topo --refresh\n"};

void progress_bar(std::string_view stage, size_t done, size_t total) {
  if (!isatty(STDERR_FILENO)) return;
  const int width = 30;
  const int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
  std::fprintf(stderr, "\rmeasuring the host [%s%s] %zu/%zu %-16s", std::string(filled, '=').c_str(),
               std::string(width - filled, ' ').c_str(), done, total, std::string(stage).c_str());
  if (done == total) std::fprintf(stderr, "\r%*s\r", width + 60, "");
}

std::string when(int64_t unix_s) {
  if (unix_s <= 0) return "never (a map written by hand)";
  char buf[64];
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

void print_matrix(const HostMap& m, const char* title, auto&& value, int digits) {
  const int n = m.size();
  std::printf("\n%s\n        ", title);
  for (int b = 0; b < n; ++b) std::printf("%9s", cat("PU ", m.pus[static_cast<size_t>(b)].os_index).c_str());
  std::printf("\n");
  for (int a = 0; a < n; ++a) {
    std::printf("  %-6s", cat("PU ", m.pus[static_cast<size_t>(a)].os_index).c_str());
    for (int b = 0; b < n; ++b) std::printf("%9s", fixed(value(a, b), digits).c_str());
    std::printf("\n");
  }
}

void print_text(const HostMap& m) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::printf("host map  %s\n", m.key.c_str());
  std::printf("cpu       %s\n", m.cpu.c_str());
  std::printf("digest    %s (what the planner concludes; plan choices are cached under it)\n", m.digest().c_str());
  std::printf("from      %s; measured %s", m.origin.c_str(), when(m.measured_at).c_str());
  if (m.measured_at > 0) std::printf(" (%s days ago, in %s s)", fixed(m.age_days(now), 1).c_str(), fixed(m.measure_s, 1).c_str());
  std::printf("\ncaches    sharing from %s%s; last level %s; kept between runs %s\n", m.groups_from.c_str(),
              m.noisy ? "; NOISY while measured" : "",
              m.llc_kb > 0 ? cat(fixed(m.llc_kb / 1024, 1), " MiB per PU").c_str() : "unknown",
              m.llc_held_kb > 0 ? cat(fixed(m.cache_kept_kb() / 1024, 1), " MiB (measured)").c_str()
                                : "not measured");
  std::printf("\n  vEU  PU   core  L2  L3  NUMA  FMA GFLOP/s  memory GB/s\n");
  for (int p = 0; p < m.size(); ++p) {
    const HostPu& pu = m.pus[static_cast<size_t>(p)];
    std::printf("  %-4d %-4u %-5d %-3d %-3d %-5d %-12s %s\n", p, pu.os_index, pu.core, pu.l2, pu.l3, pu.numa,
                pu.fma_gflops > 0 ? fixed(pu.fma_gflops, 0).c_str() : "-",
                pu.mem_gbps > 0 ? fixed(pu.mem_gbps, 1).c_str() : "-");
  }
  print_matrix(m, "read cost, ns per KB of 128 KB just written (rows read, columns wrote):",
               [&](int a, int b) { return m.read_cost(a, b, HostMap::kTypicalKb); }, 1);
  print_matrix(m, "crossing cost over reading one's own data, ns per KB at 128 KB (what the planner charges):",
               [&](int a, int b) { return m.crossing_ns_per_kb(a, b, HostMap::kTypicalKb); }, 1);
  print_matrix(m, "writing again 128 KB the other PU read, ns per KB over data only the writer holds (rows wrote):",
               [&](int a, int b) { return m.rewrite_premium_ns_per_kb(a, b, HostMap::kTypicalKb); }, 1);
  print_matrix(m, "hand-off, one way (ns):", [&](int a, int b) { return m.handoff_ns[static_cast<size_t>(a * m.size() + b)]; }, 0);
  if (m.size() > 1) {
    std::printf("\ncrossing cost by size (ns per KB), PU %u reading what PU %u wrote:", m.pus[1].os_index, m.pus[0].os_index);
    for (double kb : m.sizes_kb) std::printf("  %s KB: %s", fixed(kb, 0).c_str(), fixed(m.crossing_ns_per_kb(1, 0, kb), 1).c_str());
    std::printf("\n");
  }
  std::printf("\nthe planner concludes:\n");
  for (const std::string& c : host_map_conclusions(m)) std::printf("  - %s\n", c.c_str());
  for (const std::string& note : m.notes) std::printf("  note: %s\n", note.c_str());
}

}  // namespace

int topo_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kTopo, argc, argv, 0, "takes no arguments", &a); rc >= 0) return rc;
  HostMapOptions o;
  o.refresh = a.has("--refresh");
  o.file = a.get("--host-map");
  if (o.refresh && !o.file.empty()) return cli::usage_error(kTopo, "--refresh measures this host; --host-map shows a given map");
  if (!a.has("--quiet")) o.progress = progress_bar;
  auto m = host_map_obtain(o);
  if (!m.ok()) return cli::fail(m.status());
  if (a.has("--gauge")) {
    const HostGauge g = host_gauge(*m);
    std::printf("%s\n", g.why.c_str());
    return g.quiet ? 0 : 3;
  }
  if (a.has("--json")) {
    nlohmann::json j = nlohmann::json::parse(host_map_to_json(*m));
    j["origin"] = m->origin;
    j["digest"] = m->digest();
    j["age_days"] = std::round(m->age_days(static_cast<int64_t>(std::time(nullptr))) * 100) / 100;
    j["conclusions"] = host_map_conclusions(*m);
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  print_text(*m);
  return 0;
}

}  // namespace tessera::tools
