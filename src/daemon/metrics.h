// tesserad's Prometheus metrics (prometheus-cpp): series prefixed
// `tessera_`, base units, `_total` counters, names after dcgm-exporter's
// where they mean the same (docs/daemon.md lists them). Served on the
// config's `metrics` address at /metrics by the exporter's own threads;
// the daemon's loop only updates values (atomic).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace tessera::daemon {

class Metrics {
 public:
  Metrics();
  ~Metrics();
  // Serves /metrics on "host:port" ("" serves nothing; values are kept).
  Status serve(const std::string& address);

  void run(const std::string& tenant, const std::string& mode, double latency_s, bool ok);
  // Runs counted elsewhere (a worker's rings): per latency bucket
  // (ring.h's bounds, then +Inf), their latencies' sum, and errors.
  void runs_counted(const std::string& tenant, const std::vector<double>& buckets, double latency_sum, uint64_t runs,
                    uint64_t errors);
  void runs_reported(const std::string& tenant, uint64_t runs);  // appliance clients' counts, as deltas
  void fault(const std::string& tenant, const std::string& kind);
  void restart(const std::string& tenant);
  // Per tenant, set every tick.
  void tenant(const std::string& tenant, const std::string& mode, int sessions, int connections, int veus,
              uint64_t memory_used, uint64_t memory_quota);
  // The cpu device: its vEUs, those leased, and the fraction of its
  // leased cores' time spent computing over the last tick.
  void device(const std::string& device, int veus, int leased, double utilization);

 private:
  static const std::vector<double>& bounds();
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>*runs_, *run_errors_, *faults_, *restarts_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Gauge>*sessions_, *connections_, *veus_, *memory_used_, *memory_free_, *device_veus_,
      *device_leased_, *utilization_;
};

}  // namespace tessera::daemon
