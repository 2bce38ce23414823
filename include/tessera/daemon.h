// Talking to tesserad, the daemon that owns a machine's devices
// (docs/daemon.md): what connect("unix:///path", {.token = ...}) needs, and
// what a daemon reports about itself. Sessions of a daemon's Runtime are
// the same Session as local ones; in appliance mode they run in this
// process on the cores the daemon leased them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct ConnectOptions {
  // The tenant's token; "" = $TESSERA_TOKEN, else the first line of
  // `token_file` (or of $TESSERA_TOKEN_FILE).
  std::string token = {};
  std::string token_file = {};
  // What this client calls itself in the daemon's logs and faults; "" =
  // the program's name and pid.
  std::string client = {};
};

// The lower-case hex SHA-256 of a token: what a daemon's config stores
// (`tessera token hash`).
std::string token_hash(std::string_view token);

struct TenantStatus {
  std::string name, mode;  // mode: "appliance" or "cloud"
  int sessions = 0, veus = 0, connections = 0;
  uint64_t memory_bytes = 0;
  int max_veus = 0, max_sessions = 0;
  uint64_t max_memory = 0;
};

struct VDeviceStatus {
  uint64_t lease = 0;
  std::vector<int> cores;  // PU indexes of the host map
  std::string tenant, session;
  uint64_t memory_bytes = 0;
  int pid = 0;  // the client process holding it
  std::string mode;  // its tenant's: "appliance" or "cloud"
  // Since the lease began: runs finished, the time they computed, the sum
  // of their latencies (cloud: as the daemon sees them; appliance: as the
  // client reports them with its pings, a fraction of a lease timeout late).
  uint64_t runs = 0;
  double busy_s = 0, latency_s = 0, age_s = 0;
  // The session's latency objective (0: none) and its Plan's prediction
  // (0: not known), against latency_s / runs measured.
  double objective_ms = 0, predicted_ms = 0;
};

struct DeviceStatus {
  std::string name, kind;
  std::vector<int> pus;
  int free_veus = 0;
  std::vector<VDeviceStatus> vdevices;
};

// A daemon as the connected tenant sees it: itself (an admin: everyone).
struct ServerStatus {
  std::string tenant, mode;  // who this connection is
  bool admin = false;
  int version = 0, pid = 0;
  double uptime_s = 0;
  uint64_t faults = 0;
  std::vector<TenantStatus> tenants;
  std::vector<DeviceStatus> devices;
};

struct FaultInfo {
  uint64_t id = 0;
  std::string time;  // UTC, ISO 8601
  std::string tenant, device, kind, message;
};

// As `tessera status --json` and `tessera faults --json` print them.
std::string status_to_json(const ServerStatus& s);
std::string faults_to_json(const std::vector<FaultInfo>& f);

}  // namespace tessera
