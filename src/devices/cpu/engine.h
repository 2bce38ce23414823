// Engine: a compiled Program bound to memory and an executor, run many
// times. What the public Session (tessera/runtime.h) runs on the CPU.
//
//   auto program = compile_onnx("model.onnx", {});
//   auto engine = Engine::create(std::move(*program), {.executor = Executor::kTwoLayer, .threads = 2});
//   (*engine)->set_input("x", tensor);
//   (*engine)->run().wait();
//   Tensor y = (*engine)->output(0);
//
// At create(): the arena is allocated once, every rTask's argument pointers
// are resolved once, per-thread scratch is allocated, worker threads start.
// run() allocates nothing and takes no lock.
//
// Executors:
//   plan        the compile-time schedule: the Program's Plan on a CPU
//               vDevice of plan.veus vEUs that only wait and signal (needs
//               a Program compiled with build_plan);
//   sequential  every rTask of every op in order, on the calling thread;
//   two-layer   op by op; each op's rTasks spread over a pool of N threads
//               (the classic inter-op/intra-op control for the Plan
//               executor).
//
// Ownership: the Engine owns its Program, arena and threads. Thread-safety:
// one thread at a time may call a Engine's methods.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/thread_pool.h"
#include "compiler/program.h"
#include "devices/cpu/cpu_vdevice.h"
#include "devices/device.h"
#include "tessera/runtime.h"
#include "tessera/status.h"

namespace tessera {

// Every step's argument pointers into `arena` (constants at their data),
// resolved once.
struct ResolvedArgs {
  std::vector<std::vector<const void*>> in;
  std::vector<std::vector<void*>> out;
  std::vector<StepArgs> steps;  // per step: its op and the two arrays above
};
ResolvedArgs resolve_args(const Program& p, void* arena);

// Executor, executor_name and executor_parse: tessera/runtime.h.

struct EngineOptions {
  Executor executor = Executor::kTwoLayer;
  int threads = 0;  // 0: the cores available (plan: the Plan's vEU count, and a spare PU: adapt)
  // Plan executor: pin worker vEU i to PU i, and the threads that create the
  // engine and call run() to PU 0 (devices/cpu/cpu_vdevice.h). Off leaves
  // every affinity alone.
  bool pin = true;
  // Plan executor: the PU slots (topology order) vEU u runs on, slots[u];
  // empty: 0, 1, ...
  std::vector<int> slots = {};
  // The null device: everything is loaded (arena, argument pointers) but
  // no thread starts and run() computes nothing: it zero-fills the outputs.
  bool null_device = false;
  // Plan executor on several vEUs: run the Plan's rTasks on one thread
  // alone while that runs faster (the host stopped letting the vEUs run at
  // once, or slowed one PU: pinned on 2 vEUs, the thread of the vEU that
  // waited longest beyond its prediction, on the faster PU), and a pinned
  // 2-vEU Plan's two lists on each other's PUs while that runs faster
  // (the host slowed the PU of the busier list; devices/cpu/run_mode.h). A pinned 1-vEU Plan given 2 or more `threads`
  // keeps a second PU and runs its list there while that runs faster.
  bool adapt = true;
  // Plan executor on several vEUs: a vEU that waits for another right
  // after its share of an op takes rTasks of that op from the end of the
  // other's share (devices/cpu/cpu_vdevice.h, PlanBalance): the same bits.
  bool balance = true;
  // Plan executor: every run on one vEU's thread alone, in the order
  // plan_one_thread_order gives (for tests: the same bits as the Plan):
  // vEU `alone_veu`'s (0 the calling thread, 1 the worker of a 2-vEU Plan).
  bool always_alone = false;
  int alone_veu = 0;
  // Plan executor on 2 vEUs: every run with the lists exchanged (for tests
  // and measurements: the same bits as the Plan); a 1-vEU Plan given 2
  // threads: every run on the second PU.
  bool always_exchanged = false;
};

// How an Engine runs its Program's steps once: one implementation per
// executor (sequential, two-layer, plan), chosen at Engine::create.
// Thread-safety: run() from one thread at a time.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual void run(const Program& p, const ResolvedArgs& args) = 0;
  // (optional) The plan executor's vEUs; nullptr for the others.
  virtual CpuVDevice* vdevice() { return nullptr; }
  // (optional) Whether the last run went on the calling thread alone.
  virtual bool ran_alone() const { return false; }
  // (optional) Whether the last run went with a 2-vEU Plan's lists on
  // each other's PUs.
  virtual bool ran_exchanged() const { return false; }
  // (optional) rTasks of the last run a waiting vEU took from another.
  virtual int64_t rtasks_taken() const { return 0; }
  // (optional) The caller's clock around the last run (LoadedProgram::ran).
  virtual void ran(int64_t start_ns, int64_t end_ns) {}
};
// The executor `options` names, for `threads` threads; the null device's
// runs nothing.
std::unique_ptr<StepExecutor> make_step_executor(const Program& p, const EngineOptions& options, int threads);
// The PUs the plan executor's vDevice holds for `p`'s Plan: its vEUs, or 2
// for a 1-vEU Plan that keeps a spare PU (EngineOptions::adapt).
int plan_pus(const Program& p, const EngineOptions& options);

// The CPU's LoadedProgram (devices/device.h).
class Engine : public LoadedProgram {
 public:
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Program> program, const EngineOptions& options);
  // A Device's load() (devices/device.h) on the CPU's memory: the cpu's,
  // or with `null_device` the null device's.
  static Result<std::unique_ptr<LoadedProgram>> load(std::unique_ptr<Program> program, const PlaceOptions& o,
                                                     bool null_device);
  ~Engine() override;

  const Program& program() const override { return *program_; }
  int veus() const override { return threads_; }
  int threads() const { return threads_; }
  Executor executor() const { return options_.executor; }

  // Graph inputs and outputs, in model order.
  const std::vector<Value*>& inputs() const { return program_->graph->inputs(); }
  const std::vector<Value*>& outputs() const { return program_->graph->outputs(); }

  // Copies `t` into input `name`'s arena buffer; its dtype and shape must
  // match the bound input exactly.
  Status set_input(const std::string& name, const Tensor& t) override;
  // Executes the program once on the current inputs, on this thread (vEU
  // 0 of the plan executor): the event is ready when it returns.
  DeviceEvent run() override;
  // A copy of output i after run().
  Tensor output(size_t i) const;
  // Output i's bytes after run(): in the arena, or where bound.
  const void* output_data(size_t i) const override;
  // Later runs read input i from `data`, or write output i into it, in
  // place of the value's arena bytes (nullptr: the arena again): every
  // argument pointer into those bytes moves there, so nothing is copied.
  // `data` holds the value's bytes, aligned to its element size, and is
  // not written by the caller during a run. Fails (the caller copies
  // instead) where the value is a constant, both an input and an output,
  // or a part written in place into a Concat's output.
  Status bind_input(size_t i, const void* data) override;
  Status bind_output(size_t i, void* data) override;
  void wait_ms(std::vector<double>& out) const override;
  bool ran_alone() const override { return exec_->ran_alone(); }
  void ran(int64_t start_ns, int64_t end_ns) override { exec_->ran(start_ns, end_ns); }
  bool ran_exchanged() const override { return exec_->ran_exchanged(); }
  int64_t rtasks_taken() const override { return exec_->rtasks_taken(); }
  Status set_trace(std::vector<std::pair<int64_t, int64_t>>* spans) override;
  // Fills the whole arena with a NaN pattern (0xFF bytes), so that any
  // element a kernel fails to write shows up. Call before set_input().
  void poison_arena();

  // The plan executor's device (nullptr for the other executors).
  CpuVDevice* vdevice() { return exec_->vdevice(); }

 private:
  Engine(std::unique_ptr<Program> program, const EngineOptions& options, int threads);

  std::unique_ptr<Program> program_;
  EngineOptions options_;
  int threads_;
  void* arena_ = nullptr;
  Status bind(int slot, const Value* v, void* data);

  ResolvedArgs args_;      // per step: argument pointers resolved once
  ResolvedArgs arena_args_;  // the same, every value in the arena
  struct ArgRef {
    size_t step, arg;
    bool out;
    size_t offset;  // into the value's bytes
  };
  std::unordered_map<int, std::vector<ArgRef>> refs_;  // per bound slot: the pointers into it
  std::vector<const void*> bound_out_;  // per output: where bound, else nullptr
  std::unique_ptr<StepExecutor> exec_;
};

}  // namespace tessera
