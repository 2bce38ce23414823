// The daemon's fault records: every fault (a client that died holding
// leases, a lease reclaimed for silence, a refused forged request, a
// message that did not decode, a worker crash) as one record that
// survives restarts: a JSON line each in <state_dir>/faults.jsonl.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::daemon {

struct FaultRecord {
  uint64_t id = 0;
  std::string time;  // UTC, ISO 8601
  std::string tenant, device, kind, message;
};

class FaultLog {
 public:
  // The newest this many are kept (a flood of refused requests cannot fill
  // the daemon's memory or disk): past twice as many, the oldest go.
  static constexpr size_t kKept = 10000;
  // Reads the records already in `dir` (created if missing). A line that
  // does not parse is kept out and reported, not fatal.
  Status open(const std::string& dir);
  // Records a fault now (appended and flushed to the file).
  const FaultRecord& add(std::string tenant, std::string device, std::string kind, std::string message);
  // Removes one; NotFound for an unknown id.
  Status clear(uint64_t id);
  const std::vector<FaultRecord>& records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  Status rewrite();
  std::string path_;
  std::vector<FaultRecord> records_;
  uint64_t next_id_ = 1;
};

std::string utc_now_iso8601();

}  // namespace tessera::daemon
