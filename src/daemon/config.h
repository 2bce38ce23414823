// tesserad's configuration (a TOML file; docs/daemon.md, examples/tesserad.toml).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::daemon {

enum class Mode { kAppliance, kCloud };
const char* mode_name(Mode m);

struct TenantConfig {
  std::string name;
  std::string token_sha256;   // lower-case hex of the token's SHA-256
  Mode mode = Mode::kAppliance;
  std::vector<uint32_t> uids;  // empty: any uid
  int max_veus = 1;
  uint64_t max_memory = uint64_t{2} << 30;
  int max_sessions = 8;
  bool admin = false;
};

struct DaemonConfig {
  std::string path;  // the file it was read from
  std::string socket = "/run/tessera/tesserad.sock";
  std::string metrics;  // "host:port", empty: none
  std::string state_dir = "/var/lib/tessera";
  double lease_timeout_s = 10;
  std::vector<TenantConfig> tenants;
  bool fault_injection = false;  // [testing]
};

// Reads and checks a config file; errors name the file, line and key.
Result<DaemonConfig> load_config(const std::string& path);
Result<DaemonConfig> parse_config(const std::string& text, const std::string& path);

// "2GiB", "512MiB", "1000000": bytes.
Result<uint64_t> parse_bytes(const std::string& text);

}  // namespace tessera::daemon
