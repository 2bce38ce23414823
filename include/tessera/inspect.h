// Looking inside: what a model holds, the Plan a session runs, what its
// rTasks cost, which ops a device runs. The questions `tessera inspect`,
// `tessera plan`, `tessera profile` and `tessera ops` ask, for programs
// that ask them too.
//
//   tessera::Result<tessera::ModelSummary> s = tessera::inspect("bert.onnx", {.shapes = {{"ids", {1, 64}}}});
//   tessera::Result<tessera::PlanInfo> p = model->plan({.veus = 2});
//   tessera::Result<tessera::ProfileReport> r = model->profile();
//
// Everything here is a value: it owns its strings and vectors and refers
// to nothing in the Model or Session it came from. Thread-safety: as the
// handle it came from (tessera/runtime.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/runtime.h"
#include "tessera/status.h"

namespace tessera {

std::string_view policy_name(PlanPolicy p);  // "auto", "wavefront", "critical-path"
bool policy_parse(std::string_view name, PlanPolicy* out);

// One op of a Plan (an ONNX node, or several fused into one).
struct PlanStep {
  std::string op = {};      // "Conv", "FusedConv", ...
  std::string node = {};    // the node's name
  std::string kernel = {};  // the rKernel that runs it
  std::string path = {};    // the way the rKernel computes it for these shapes ("winograd", "1x1 packed", ...)
  int64_t rtasks = 0;
};

// One rTask where the Plan put it: vEU `veu`, its `index`-th rTask there,
// rTask `rtask` of step `step`, predicted to run from start_us to end_us.
struct PlanTask {
  int veu = 0, index = 0, step = 0;
  int64_t rtask = 0;
  double start_us = 0, end_us = 0;
};

// One instruction of a vEU's list: run rTask `b` of step `a`; signal (the
// vEU's counter becomes `b`); or wait until vEU `a`'s counter reaches `b`.
struct PlanInstr {
  enum class Kind : uint8_t { kRun, kSignal, kWait };
  Kind kind = Kind::kRun;
  int a = 0;
  int64_t b = 0;
};

// A Plan the measured plan choice timed.
struct PlanCandidate {
  int veus = 0;
  PlanPolicy policy = PlanPolicy::kAuto;
  double predicted_us = 0, measured_us = 0;
};

// A compiled Plan: rTasks placed on vEUs, each vEU's instruction list, and
// what it was predicted (and measured) to take.
struct PlanInfo {
  std::string source = {};   // the model it was compiled from
  PlanPolicy policy = PlanPolicy::kAuto;  // the policy that built it
  int veus = 0;              // vEUs the Plan uses
  int requested_veus = 0;    // vEUs asked for (the plan choice may use fewer)
  double predicted_us = 0;   // the makespan the scheduler predicts
  double measured_us = 0;    // the median the plan choice measured; 0: not timed
  // The 1-vEU Plan ran fastest when the candidates were timed, and this
  // Plan's rTasks on one thread as fast: runs start on one thread alone
  // and move to the Plan's vEUs once a probe finds them faster
  // (measured_us: the median alone; alone_predicted_us: a run alone).
  bool alone_first = false;
  double alone_predicted_us = 0;
  bool costs_profiled = false;  // rTask costs measured (else the analytic model's)
  int64_t waits = 0, signals = 0;
  std::vector<PlanCandidate> candidates = {};  // the Plans timed, when the choice was measured
  uint64_t arena_bytes = 0;        // activation memory
  uint64_t unshared_bytes = 0;     // the same if no two tensors shared memory
  std::vector<PlanStep> steps = {};
  std::vector<PlanTask> tasks = {};                  // every rTask
  std::vector<std::vector<PlanInstr>> program = {};  // per vEU
  std::vector<int64_t> tasks_per_veu = {};
};

// What compiling did to a model.
struct CompileReport {
  std::string source = {};
  int nodes_imported = 0;  // ONNX nodes
  int ops = 0;             // ops after the passes
  int folded = 0;          // constant-folded away
  int removed = 0;         // identities and dead nodes removed
  int fused = 0;           // fusions (epilogues, elementwise chains, attention, blocks)
  int blocked = 0;         // convs on the channel-blocked layout (CompileOptions::channel_blocks)
  int64_t rtasks = 0;
  uint64_t arena_bytes = 0;
  double compile_ms = 0;   // import and compile (an Executable: load and validate)
};

// One op's measured cost (tessera profile).
struct ProfileRow {
  std::string op = {}, node = {}, kernel = {}, path = {};
  int64_t rtasks = 0;
  double us_per_rtask = 0;
  bool cached = false;  // from the profile cache rather than measured now
};

struct ProfileReport {
  std::vector<ProfileRow> rows = {};  // in the compiled model's op order
  size_t measured = 0, from_cache = 0;
  // Measured while the core never ran at full speed (another thread on
  // it): scaled estimates, worth measuring again on a quiet host.
  size_t contended = 0;
  std::string cache_path = {};
  // The constant bytes the ops read and the activation bytes a run
  // touches; the last-level cache (HostMap::llc_kb; 0 = unknown) and what
  // the caches keep between runs (HostMap::cache_kept_kb); and whether
  // weights and activations exceed that: then every rTask was timed with
  // its weights evicted from the caches first, as a run reads them from
  // memory.
  uint64_t weight_bytes = 0;
  uint64_t activation_bytes = 0;
  double llc_kb = 0;
  double cache_kept_kb = 0;
  bool weights_cold = false;
};

// How many nodes of one op a model has, and whether they can run.
struct OpCount {
  std::string op = {};
  int count = 0;
  bool supported = false;
};

struct InspectOptions {
  // Binds dynamic input dims (needed for output shapes and FLOPs).
  std::map<std::string, std::vector<int64_t>> shapes = {};
  // Also render every node, after shapes are bound.
  bool graph_text = false;
};

// What a model file holds, without compiling it.
struct ModelSummary {
  std::string path = {};
  std::string graph_name = {};
  int64_t opset = 0;
  bool executable = false;
  std::vector<TensorInfo> inputs = {}, outputs = {};
  // Ok when every shape could be bound (outputs' shapes and `flops` are
  // known); else why not.
  Status shapes_bound = {};
  int nodes = 0;
  std::vector<OpCount> ops = {};  // by op name
  int64_t parameters = 0, parameter_bytes = 0;
  double flops = 0;               // per run, a multiply-add counting 2
  std::string graph_text = {};    // InspectOptions::graph_text
  std::optional<PlanInfo> plan = {};  // an Executable's
};

// An ONNX model (.onnx) or an Executable (.tsx), imported or loaded and
// its shapes bound; nothing compiled, nothing run.
Result<ModelSummary> inspect(const std::string& path, const InspectOptions& options = {});

// An rKernel, with what it does.
struct KernelInfo {
  std::string name = {};
  std::string description = {};
};

// An ONNX op a device runs, and the rKernels it may run it with.
struct OpSupport {
  std::string op = {};
  std::vector<KernelInfo> kernels = {};
};

}  // namespace tessera
