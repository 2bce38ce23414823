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
    // The CPU's memory layout and argument pointers, no thread, no run.
    EngineOptions eo;
    eo.executor = o.executor;
    eo.threads = o.veus;
    eo.pin = false;
    eo.null_device = true;
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create(std::move(p), eo));
    return std::unique_ptr<LoadedProgram>(std::move(e));
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
