// Session: a compiled Program bound to memory and an executor, run many
// times.
//
//   auto program = compile_onnx("model.onnx", {});
//   auto session = Session::create(std::move(*program), {.executor = Executor::kTwoLayer, .threads = 2});
//   (*session)->set_input("x", tensor);
//   (*session)->run();
//   Tensor y = (*session)->output(0);
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
// Ownership: the Session owns its Program, arena and threads. Thread-safety:
// one thread at a time may call a Session's methods.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "compiler/program.h"
#include "devices/cpu/cpu_vdevice.h"
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

enum class Executor { kSequential, kTwoLayer, kPlan };
std::string_view executor_name(Executor e);
bool executor_parse(std::string_view name, Executor* out);

struct SessionOptions {
  Executor executor = Executor::kTwoLayer;
  int threads = 0;  // 0: the cores available (plan: the Plan's vEU count)
  // Plan executor: pin worker vEU i to PU i, and the threads that create the
  // session and call run() to PU 0 (devices/cpu/cpu_vdevice.h). Off leaves
  // every affinity alone.
  bool pin = true;
};

class Session {
 public:
  static Result<std::unique_ptr<Session>> create(std::unique_ptr<Program> program, const SessionOptions& options);
  ~Session();

  const Program& program() const { return *program_; }
  int threads() const { return threads_; }
  Executor executor() const { return options_.executor; }

  // Graph inputs and outputs, in model order.
  const std::vector<Value*>& inputs() const { return program_->graph->inputs(); }
  const std::vector<Value*>& outputs() const { return program_->graph->outputs(); }

  // Copies `t` into input `name`'s arena buffer; its dtype and shape must
  // match the bound input exactly.
  Status set_input(const std::string& name, const Tensor& t);
  // Executes the program once on the current inputs.
  Status run();
  // A copy of output i after run().
  Tensor output(size_t i) const;
  // Fills the whole arena with a NaN pattern (0xFF bytes), so that any
  // element a kernel fails to write shows up. Call before set_input().
  void poison_arena();

  // The plan executor's device (nullptr for the other executors).
  CpuVDevice* vdevice() { return vdevice_.get(); }

 private:
  Session(std::unique_ptr<Program> program, const SessionOptions& options, int threads);
  void run_sequential();
  void run_two_layer();

  std::unique_ptr<Program> program_;
  SessionOptions options_;
  int threads_;
  void* arena_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_stride_ = 0;
  ResolvedArgs args_;  // per step: argument pointers resolved once
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<CpuVDevice> vdevice_;
};

}  // namespace tessera
