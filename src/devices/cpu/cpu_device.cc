#include "devices/cpu/cpu_device.h"

#include <fstream>

#include "devices/cpu/engine.h"
#include "devices/cpu/plan_runner.h"
#include "kernels/cpu/kernel.h"
#include "topology/cpu_topology.h"
#include "topology/host_map.h"

namespace tessera {
namespace {

uint64_t memory_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

class CpuDevice : public Device {
 public:
  DeviceInfo info() const override {
    const CpuTopology& t = cpu_topology();
    const int veus = std::max(1, t.cores);  // one per core: slots 0..cores-1 of the topology order
    return {"cpu", "cpu", veus, veus, memory_total_bytes(), t.summary, cpu_model_name(), kernel_isa()};
  }
  KernelTable kernels() const override { return cpu_kernels(); }
  std::string_view program_kind() const override { return "cpu"; }
  bool profiles() const override { return true; }
  // Every pass; a stacked LSTM's projection carried by the steps below only
  // where the cells run it fused (kernels/cpu/kernel.h, rnn_carry_fused).
  Passes passes() const override {
    Passes p;
    p.recurrent_carry = rnn_carry_fused();
    return p;
  }
  VeuCosts costs(const HostMap* map, const std::vector<int>& slots) const override {
    return map ? VeuCosts::from_host_map(*map, slots) : VeuCosts::uniform(static_cast<int>(slots.size()));
  }
  PlanRunner plan_runner(const HostMap* map, const std::vector<int>& slots, bool pin) const override {
    // A map from a file describes another host: its rates are no gauge here.
    const bool here = map && (map->origin == "measured" || map->origin == "cache") && !map->pus.empty();
    const double rate = here ? map->pus[0].fma_gflops : 0;
    const int a = slots.size() > 0 ? slots[0] : 0, b = slots.size() > 1 ? slots[1] : 1;
    const double handoff = here && a < map->size() && b < map->size() && a != b ? 1e3 * map->handoff_us(a, b) : 0;
    return cpu_plan_runner(pin, rate, slots, handoff);
  }
  Result<std::unique_ptr<LoadedProgram>> load(std::unique_ptr<Program> p, const PlaceOptions& o) override {
    return Engine::load(std::move(p), o, false);
  }
};

class CpuBackend : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::vector<std::shared_ptr<Device>> discover() override {
    static const std::shared_ptr<Device> cpu = std::make_shared<CpuDevice>();
    return {cpu};
  }
};

}  // namespace

Backend* cpu_backend() {
  static CpuBackend b;
  return &b;
}

}  // namespace tessera
