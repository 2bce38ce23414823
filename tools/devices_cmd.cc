// tessera devices: the devices this process's Runtime can run sessions on.
// A client of the public API only (include/tessera/).
#include <cstdio>
#include <string>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"

namespace tessera::tools {
namespace {

const cli::Command kDevices = {
    "devices",
    "tessera devices [options]",
    "List the devices sessions can run on: kind, vEUs, memory and where each is on the host.",
    {
        {"--json", "", "print one JSON object on stdout"},
    },
    "The cpu device has one vEU per core; a session takes cores of its own while free ones\n"
    "remain. The null device runs the whole pipeline without touching data (run --device null).\n\n"
    "examples:\n"
    "  tessera devices\n"
    "  tessera devices --json\n"};

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}

}  // namespace

int devices_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kDevices, argc, argv, 0, "takes no arguments", &a); rc >= 0) return rc;
  Result<Runtime> rt = connect();
  if (!rt.ok()) return cli::fail(rt.status());
  const std::vector<DeviceInfo> devices = rt->devices();
  if (a.has("--json")) {
    std::string s = "{\"runtime\":" + json_string(rt->uri()) + ",\"devices\":[";
    for (size_t i = 0; i < devices.size(); ++i) {
      const DeviceInfo& d = devices[i];
      s += (i ? "," : "") + std::string("{\"name\":") + json_string(d.name) + ",\"kind\":" + json_string(d.kind) +
           ",\"veus\":" + std::to_string(d.veus) + ",\"free_veus\":" + std::to_string(d.free_veus) +
           ",\"memory_bytes\":" + std::to_string(d.memory_bytes) + ",\"place\":" + json_string(d.place) +
           ",\"note\":" + json_string(d.note) + ",\"kernels\":" + json_string(d.kernels) + "}";
    }
    std::printf("%s]}\n", s.c_str());
    return 0;
  }
  std::printf("%-6s %-6s %5s %5s %9s  %-26s %s\n", "NAME", "KIND", "vEUs", "FREE", "MEMORY", "PLACE", "NOTE");
  for (const DeviceInfo& d : devices) {
    const std::string mem = d.memory_bytes ? std::to_string(d.memory_bytes >> 30) + " GiB" : "-";
    std::printf("%-6s %-6s %5d %5d %9s  %-26s %s\n", d.name.c_str(), d.kind.c_str(), d.veus, d.free_veus, mem.c_str(), d.place.c_str(),
                d.note.c_str());
  }
  return 0;
}

}  // namespace tessera::tools
