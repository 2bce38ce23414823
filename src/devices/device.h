// The backend contract: what everything above devices/ goes through to
// reach a kind of device (DESIGN.md, "The backend contract").
//
//   Backend        a registry entry: a name and discover() -> Devices
//   Device         what it is (DeviceInfo: kind, vEUs, memory, place on the
//                  host), which rKernels it runs (the compiler asks, the
//                  compiler decides), its cost model for the scheduler, the
//                  runner that times candidate Plans on it, buffers, and
//                  load(Program) -> LoadedProgram
//   LoadedProgram  a Program placed on a vDevice (a subset of the Device's
//                  vEUs) with its own per-run state; run() -> DeviceEvent
//   Buffer         bytes on a device
//   DeviceEvent    a run's completion: poll, wait, then
//
// Hooks marked (optional) have a default here that a backend may keep.
//
//   std::shared_ptr<Device> cpu = cpu_backend()->discover()[0];
//   compile with cpu->kernels(), cpu->costs(map, slots), cpu->plan_runner(...)
//   auto loaded = cpu->load(std::move(program), {.executor = Executor::kPlan, .slots = {0, 1}});
//   (*loaded)->run().wait();
//
// Ownership: discover() returns shared Devices; load() returns a
// LoadedProgram the caller owns, which owns its Program and every resource
// (threads, memory) of its vDevice. Thread-safety: Backend and Device
// methods may be called from any thread; a LoadedProgram from one thread at
// a time; DeviceEvent from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/plan.h"
#include "compiler/program.h"
#include "kernels/rkernel.h"
#include "tessera/runtime.h"
#include "tessera/status.h"

namespace tessera {

struct HostMap;

// A run's completion. A run that finished on the caller's thread (the CPU's)
// is a ready event, made without allocating.
class DeviceEvent {
 public:
  DeviceEvent() = default;  // ready, ok
  static DeviceEvent ready(Status st) {
    DeviceEvent e;
    e.ready_ = std::move(st);
    return e;
  }
  // One that a device completes later with complete().
  static DeviceEvent pending();
  void complete(Status st) const;

  bool poll() const;
  Status wait() const;
  // `f` runs once the event completes (at once, here, if it has).
  void then(std::function<void(const Status&)> f) const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::vector<std::function<void(const Status&)>> callbacks;
  };
  std::shared_ptr<State> s_;  // null: ready with ready_
  Status ready_;
};

// Bytes on a device, freed when the last copy goes.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> owner;
};

// A Program placed on a vDevice: its memory, its argument pointers and its
// vEUs, ready to run many times.
class LoadedProgram {
 public:
  virtual ~LoadedProgram() = default;
  virtual const Program& program() const = 0;
  virtual int veus() const = 0;
  // Copies `t` into input `name`'s memory (dtype and shape as bound).
  virtual Status set_input(const std::string& name, const Tensor& t) = 0;
  // (optional) Later runs read input i from / write output i into caller
  // memory, without a copy; nullptr: the device's memory again. Default:
  // unimplemented (the caller copies).
  virtual Status bind_input(size_t i, const void* data);
  virtual Status bind_output(size_t i, void* data);
  // Output i's bytes after a run.
  virtual const void* output_data(size_t i) const = 0;
  // Runs the Program once on the current inputs.
  virtual DeviceEvent run() = 0;
  // (optional) The caller's steady clock (now_ns) just before the last
  // run() and just after its event was ready. A device that adapts to
  // its run times (cpu: devices/cpu/run_mode.h) takes these from the
  // first call on instead of reading the clock around each run itself.
  // Default: ignored.
  virtual void ran(int64_t start_ns, int64_t end_ns) {}
  // (optional) Per vEU, the time the last run spent waiting (ms), into
  // `out` (its memory reused: called on every run). Default: none.
  virtual void wait_ms(std::vector<double>& out) const { out.clear(); }
  // (optional) Whether the last run went on the calling thread alone in
  // place of its vEUs (cpu: devices/cpu/run_mode.h). Default: false.
  virtual bool ran_alone() const { return false; }
  // (optional) Whether the last run went with a 2-vEU Plan's two lists on
  // each other's PUs, or a 1-vEU Plan's list on its second slot (cpu:
  // devices/cpu/run_mode.h). Default: false.
  virtual bool ran_exchanged() const { return false; }
  // (optional) rTasks of the last run that a waiting vEU took from the
  // one it waited for (cpu: devices/cpu/cpu_vdevice.h, PlanBalance).
  // Default: 0.
  virtual int64_t rtasks_taken() const { return 0; }
  // (optional) An accelerator's own time for the last run's work (ms,
  // timed on the device: the launch to its end, without the copies).
  // Default: 0, none kept.
  virtual double device_ms() const { return 0; }
  // (optional) While set, runs record each rTask's (start, end) in ns into
  // spans[i], i in the order of the Plan's placements; nullptr stops.
  // Default: unimplemented.
  virtual Status set_trace(std::vector<std::pair<int64_t, int64_t>>* spans);
};

struct PlaceOptions {
  Executor executor = Executor::kPlan;
  int veus = 1;  // the executor's threads (the Plan's own count for kPlan)
  // The vDevice: the Device's vEU slots it runs on (cpu: PU slots of the
  // topology order), vEU u on slots[u]; empty: 0, 1, ...
  std::vector<int> slots = {};
  bool pin = true;  // cpu: pin each vEU to its slot
  bool adapt = true;  // cpu: a Plan's runs may go on the caller alone, a 2-vEU Plan's lists on each other's PUs, or a 1-vEU Plan's on a second slot, while that is faster; waiting vEUs take rTasks (PlanBalance)
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceInfo info() const = 0;
  // The rKernels it runs; the compiler chooses among them.
  virtual KernelTable kernels() const = 0;
  // The device kind its Executables name (the kind whose rKernels it runs).
  virtual std::string_view program_kind() const = 0;
  // (optional) Whether rTask costs measured by the profiler on this host
  // hold here. Default: false (the analytic model).
  virtual bool profiles() const { return false; }
  // (optional) The compiler passes whose ops its rKernels cover. Default:
  // all of them (the CPU's).
  struct Passes {
    bool fuse = true;             // fused Conv/Gemm/MatMul epilogues, elementwise chains, attention, blocks
    bool lower_recurrent = true;  // LSTM/GRU as per-step cells
    bool concat_in_place = true;  // producers writing their parts of a Concat
    // The lowered cells' projections: -1 as the compile options say, else
    // one per this many steps of the layer below (0: one of all of them).
    int64_t recurrent_chunk = -1;
    bool recurrent_carry = true;  // may the steps below carry the projection
  };
  virtual Passes passes() const { return {}; }
  // (optional) The scheduler's cost model for vEUs on `slots`. Default:
  // uniform hand-offs, free crossing.
  virtual VeuCosts costs(const HostMap* map, const std::vector<int>& slots) const;
  // (optional) Whether costs() reads the host map (the CPU's cores), so
  // that it is measured before planning. Default: yes.
  virtual bool plans_on_host_map() const { return true; }
  // (optional) One rTask's cost (µs) of `node` cut into `tasks`, where the
  // device's rTasks are not profiled. Default: < 0, the host's analytic
  // model.
  virtual double task_cost_us(const Node& node, int64_t tasks) const { return -1; }
  // (optional) A runner that times candidate Plans on `slots`. Default:
  // none (the Plan with the best prediction is kept).
  virtual PlanRunner plan_runner(const HostMap* map, const std::vector<int>& slots, bool pin) const { return {}; }
  // (optional) Memory on the device. Default: 64-byte aligned host memory.
  virtual Result<Buffer> allocate(size_t bytes);
  // Places `p` (compiled with kernels()) on the vDevice `o` names.
  virtual Result<std::unique_ptr<LoadedProgram>> load(std::unique_ptr<Program> p, const PlaceOptions& o) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The devices of this kind on this host (none where absent).
  virtual std::vector<std::shared_ptr<Device>> discover() = 0;
};

}  // namespace tessera
