#include "devices/null/null_device.h"

#include "devices/cpu/engine.h"
#include "kernels/cpu/kernel.h"
#include "topology/cpu_topology.h"

namespace tessera {
namespace {

class NullDevice : public Device {
 public:
  DeviceInfo info() const override {
    const int veus = std::max(1, cpu_topology().cores);
    return {"null", "null", veus, veus, 0, "nowhere", "runs the whole pipeline without touching data"};
  }
  KernelTable kernels() const override { return cpu_kernels(); }
  std::string_view program_kind() const override { return "cpu"; }
  Result<std::unique_ptr<LoadedProgram>> load(std::unique_ptr<Program> p, const PlaceOptions& o) override {
    return Engine::load(std::move(p), o, true);  // the CPU's memory layout, no thread, no run
  }
};

class NullBackend : public Backend {
 public:
  std::string_view name() const override { return "null"; }
  std::vector<std::shared_ptr<Device>> discover() override {
    static const std::shared_ptr<Device> d = std::make_shared<NullDevice>();
    return {d};
  }
};

}  // namespace

Backend* null_backend() {
  static NullBackend b;
  return &b;
}

}  // namespace tessera
