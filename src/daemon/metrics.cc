#include "daemon/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <exception>

#include "base/strings.h"
#include "daemon/ring.h"

namespace tessera::daemon {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  runs_ = &BuildCounter().Name("tessera_runs_total").Help("Runs finished, per tenant and mode").Register(r);
  run_errors_ = &BuildCounter().Name("tessera_run_errors_total").Help("Runs that failed, per tenant").Register(r);
  faults_ = &BuildCounter().Name("tessera_faults_total").Help("Fault records made, per tenant and kind").Register(r);
  restarts_ = &BuildCounter().Name("tessera_worker_restarts_total").Help("Cloud workers restarted after a crash").Register(r);
  latency_ = &BuildHistogram()
                  .Name("tessera_run_latency_seconds")
                  .Help("Cloud runs' latency as the daemon sees it (request to its worker's answer)")
                  .Register(r);
  sessions_ = &BuildGauge().Name("tessera_sessions").Help("Sessions (leases) held, per tenant").Register(r);
  connections_ = &BuildGauge().Name("tessera_connections").Help("Connections, per tenant").Register(r);
  veus_ = &BuildGauge().Name("tessera_veus_leased").Help("vEUs (cores) leased, per tenant").Register(r);
  memory_used_ = &BuildGauge().Name("tessera_memory_used_bytes").Help("Memory the tenant's sessions declare").Register(r);
  memory_free_ = &BuildGauge().Name("tessera_memory_free_bytes").Help("The tenant's max_memory less what it uses").Register(r);
  device_veus_ = &BuildGauge().Name("tessera_device_veus").Help("vEUs of a device").Register(r);
  device_leased_ = &BuildGauge().Name("tessera_device_veus_leased").Help("vEUs of a device leased").Register(r);
  utilization_ = &BuildGauge()
                      .Name("tessera_device_utilization_ratio")
                      .Help("Fraction of a device's leased cores' time spent computing, over the last second")
                      .Register(r);
}

Metrics::~Metrics() = default;

Status Metrics::serve(const std::string& address) {
  if (address.empty()) return Status();
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return failed_precondition(str_cat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  return Status();
}

void Metrics::run(const std::string& tenant, const std::string& mode, double latency_s, bool ok) {
  if (!ok) {
    run_errors_->Add({{"tenant", tenant}}).Increment();
    return;
  }
  runs_->Add({{"tenant", tenant}, {"mode", mode}}).Increment();
  latency_->Add({{"tenant", tenant}}, bounds()).Observe(latency_s);
}

void Metrics::runs_counted(const std::string& tenant, const std::vector<double>& buckets, double latency_sum,
                           uint64_t runs, uint64_t errors) {
  if (errors > 0) run_errors_->Add({{"tenant", tenant}}).Increment(static_cast<double>(errors));
  if (runs == 0) return;
  runs_->Add({{"tenant", tenant}, {"mode", "cloud"}}).Increment(static_cast<double>(runs));
  latency_->Add({{"tenant", tenant}}, bounds()).ObserveMultiple(buckets, latency_sum);
}

const prometheus::Histogram::BucketBoundaries& Metrics::bounds() {
  static const prometheus::Histogram::BucketBoundaries b(std::begin(kLatencyBounds), std::end(kLatencyBounds));
  return b;
}

void Metrics::runs_reported(const std::string& tenant, uint64_t runs) {
  if (runs > 0) runs_->Add({{"tenant", tenant}, {"mode", "appliance"}}).Increment(static_cast<double>(runs));
}

void Metrics::fault(const std::string& tenant, const std::string& kind) {
  faults_->Add({{"tenant", tenant}, {"kind", kind}}).Increment();
}

void Metrics::restart(const std::string& tenant) { restarts_->Add({{"tenant", tenant}}).Increment(); }

void Metrics::tenant(const std::string& tenant, const std::string& mode, int sessions, int connections, int veus,
                     uint64_t memory_used, uint64_t memory_quota) {
  sessions_->Add({{"tenant", tenant}, {"mode", mode}}).Set(sessions);
  connections_->Add({{"tenant", tenant}}).Set(connections);
  veus_->Add({{"tenant", tenant}}).Set(veus);
  memory_used_->Add({{"tenant", tenant}}).Set(static_cast<double>(memory_used));
  memory_free_->Add({{"tenant", tenant}}).Set(static_cast<double>(memory_quota > memory_used ? memory_quota - memory_used : 0));
}

void Metrics::device(const std::string& device, int veus, int leased, double utilization) {
  device_veus_->Add({{"device", device}}).Set(veus);
  device_leased_->Add({{"device", device}}).Set(leased);
  utilization_->Add({{"device", device}}).Set(utilization);
}

}  // namespace tessera::daemon
