// Runtime, Model, Session, Event: compiling a model and running it.
//
//   tessera::Result<tessera::Runtime> rt = tessera::connect("local");
//   tessera::Result<tessera::Model> m = rt->compile("resnet18.onnx", {});
//   tessera::Result<tessera::Session> s = m->session({.device = "cpu", .veus = 2});
//   tessera::Result<tessera::NamedTensors> out = s->run(inputs);
//
// A Runtime is where models compile and sessions run: connect("local")
// is this process (the default). A Model is a model compiled for that
// Runtime (from an ONNX file or an Executable written by Model::save or
// `tessera compile`); it is placed on a device and vEU count by
// Model::session, which compiles the Plan for them (the measured plan
// choice and the profile are cached on disk, so the next session of the
// same model on the same host starts quickly). A Session owns its memory
// and its vEUs: on the CPU, worker threads pinned to cores of its own
// while the Runtime has free cores (SessionOptions::cores overrides).
//
// Ownership: Runtime, Model, Session and Event are handles; copies share
// one object, which lives while any handle does (a Session keeps its Model
// and Runtime alive). Requests still queued when a Session's last handle
// goes fail their Events ("the session was closed"); the one running
// finishes first. A handle may be dropped anywhere, an Event's callback
// included.
//
// Thread-safety: Runtime and Model are safe to use from any number of
// threads. A Session runs one request at a time: run() and submit() may be
// called from any thread, and requests are served in the order they were
// made. Event is safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/daemon.h"
#include "tessera/status.h"
#include "tessera/tensor.h"

namespace tessera {

// The library's version, "MAJOR.MINOR.PATCH".
std::string_view version();

// Defined in tessera/inspect.h.
struct PlanInfo;
struct CompileReport;
struct ProfileReport;
struct OpSupport;

// Whether `path` is an Executable (.tsx, written by Model::save or
// `tessera compile`): by its first bytes, whatever its name.
bool is_executable_file(const std::string& path);

// "1x3x224x224", with a dynamic dim's name (or "?") where it is unbound.
struct TensorInfo;
std::string shape_string(const TensorInfo& t);

// Tensors by name, in order (a model's inputs or outputs in model order,
// an .npz's arrays in file order). Iterates as pairs.
class NamedTensors {
 public:
  using value_type = std::pair<std::string, Tensor>;
  NamedTensors() = default;
  NamedTensors(std::initializer_list<value_type> items);

  // Adds `name`, or replaces its tensor where it is present already.
  void set(const std::string& name, Tensor t);
  // The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
  Tensor* find(const std::string& name);
  bool contains(const std::string& name) const { return find(name) != nullptr; }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }

 private:
  std::vector<value_type> items_;
};

// Every array of a NumPy .npz file (stored or deflated), by name, in file
// order; and writing them (stored).
Result<NamedTensors> load_npz(const std::string& path);
Status save_npz(const std::string& path, const NamedTensors& tensors);

// One input or output of a model.
struct TensorInfo {
  std::string name = {};
  DType dtype = DType::kUndefined;
  std::vector<int64_t> shape = {};          // -1 where a dim is dynamic (unbound)
  std::vector<std::string> symbols = {};    // per dim: the dynamic dim's name, else ""
};

// A device a Runtime can run sessions on.
struct DeviceInfo {
  std::string name = {};  // "cpu", "null"
  std::string kind = {};  // "cpu", "null"
  int veus = 0;       // vEUs it has (cpu: one per core)
  int free_veus = 0;  // not held by a session of this Runtime
  uint64_t memory_bytes = 0;
  std::string place = {};  // where it is on the host ("1 package, 2 cores, 2 PUs")
  std::string note = {};   // what it is, in a few words
  std::string kernels = {};  // the build of its rKernels ("avx512", "avx2", "portable")
};

enum class Executor : uint8_t {
  kSequential,  // every rTask in order, on the calling thread
  kTwoLayer,    // op by op, each op's rTasks over a thread pool (the control)
  kPlan,        // the compiled Plan on the session's vEUs (the default)
};
std::string_view executor_name(Executor e);  // "sequential", "two-layer", "plan"
bool executor_parse(std::string_view name, Executor* out);

enum class PlanPolicy : uint8_t {
  kAuto,          // both policies predicted; the best candidates timed (cached)
  kWavefront,
  kCriticalPath,
};

struct CompileOptions {
  // Binds dynamic input dims: input name -> its full shape.
  std::map<std::string, std::vector<int64_t>> shapes = {};
  // Measure rTask costs (cached per host) rather than estimate them.
  bool profile = true;
  // With PlanPolicy::kAuto, time the best candidate Plans in real runs
  // (the choice is cached); off keeps the predicted best.
  bool measure = true;
  // Fuse ops (epilogues, elementwise chains, attention); offer heavy ops in
  // several tilings.
  bool fuse = true;
  bool variants = true;
  // A host map file to plan for instead of this host's
  // (docs/formats/host-map.md).
  std::string host_map = {};
  // Fuse MobileNetV2's inverted residual blocks into one op each.
  bool block_fusion = false;
  // Let a batch-1 Concat's producers write its parts in place.
  bool concat_in_place = true;
  // Run chains of 1x1 and depthwise convs with channels in blocks of 8 (one
  // vector per pixel), where the device has the kernels (the cpu with AVX2).
  bool channel_blocks = true;
  // Lower forward LSTMs and GRUs to one op per time step; with it, project
  // a stacked layer's input every `recurrent_chunk` steps (0: at once) and
  // carry the projection in the steps below (`recurrent_carry`; the cpu
  // carries only where its kernels are AVX-512, which run the two fused).
  bool lower_recurrent = true;
  int64_t recurrent_chunk = 0;
  bool recurrent_carry = true;
  // Progress of long work (measuring the host, profiling rTasks, timing
  // Plans): (what, done, total). Called on the compiling thread.
  std::function<void(std::string_view what, size_t done, size_t total)> progress = {};
};

struct SessionOptions {
  // "cpu" (the default) or "null" (runs the whole pipeline without
  // touching data: runs complete at once, outputs are zero-filled).
  std::string device = "cpu";
  // vEUs; 0: every free one (at least 1). The plan choice may keep a Plan
  // on fewer when it ran faster.
  int veus = 0;
  Executor executor = Executor::kPlan;
  PlanPolicy policy = PlanPolicy::kAuto;
  // CPU cores (PU indexes in the host map) for the vEUs; empty: the
  // Runtime's next free ones. Explicit cores may overlap other sessions'.
  std::vector<int> cores = {};
  // Pin vEU i to cores[i] (and the thread that runs vEU 0 to cores[0];
  // the thread that opened the session gets its affinity back when the
  // last session it opened is destroyed on it: docs/api.md).
  bool pin = true;
  // Plan executor on several vEUs: a run may go on one thread alone (the
  // Plan's rTasks, in an order its waits allow: the same bits; pinned, on
  // the core that ran fastest) while that runs faster, as when the host
  // runs the vEUs' cores in turns or slows one of them;
  // and, on 2 pinned vEUs, with the Plan's two lists on each other's cores
  // while that runs faster, as when the host slows the core of the busier
  // list; and a 1-vEU Plan kept on a request for more vEUs on the
  // session's second core while that one runs it faster.
  // And a vEU that waits for another right after its share of an op takes
  // rTasks of that op from the end of the other's share, while that one
  // still has some to run (the same bits: an rTask computes the same on
  // any thread), as when the host runs one core slower for a while.
  // RunBreakdown::alone, ::exchanged and ::taken say which runs did. A
  // Plan whose runs start alone (PlanInfo::alone_first) moves to its vEUs
  // once they run faster. false: always the Plan as placed, and a Plan
  // whose runs start alone always alone.
  bool adapt = true;
  // A latency objective in milliseconds (0: none): the session is admitted
  // only where its Plan's predicted latency meets it, and refused
  // (ResourceExhausted, with both figures) otherwise. A daemon reports the
  // prediction against what its runs measure (tessera status).
  double latency_ms = 0;
};

// Where a run's time went, in milliseconds.
struct RunBreakdown {
  double copy_in_ms = 0;   // inputs into the session's memory
  double queue_ms = 0;     // waiting behind earlier requests (submit)
  double compute_ms = 0;   // the Plan (or executor) running
  double copy_out_ms = 0;  // outputs out (0 where bound with bind_output)
  double device_ms = 0;    // an accelerator's own time inside compute_ms (GPU events); 0 on the CPU
  std::vector<double> wait_ms = {};  // plan executor: per vEU, time spent waiting
  bool alone = false;                 // plan executor: the run went on one thread alone (SessionOptions::adapt)
  bool exchanged = false;             // plan executor: the run went with its 2 lists on each other's cores, or its 1 list on the second core (adapt)
  int64_t taken = 0;                  // plan executor: rTasks a waiting vEU took from the one it waited for (adapt)
  // Bytes copied: inputs the Plan could not read where they lay (memory
  // not aligned to the dtype, say), outputs not bound with bind_output.
  uint64_t copy_in_bytes = 0, copy_out_bytes = 0;
};

namespace detail {
struct RuntimeState;
struct ModelState;
struct SessionState;
struct EventState;
}  // namespace detail

// The completion of a submitted run.
class Event {
 public:
  Event() = default;
  // Whether the run has finished (successfully or not).
  bool poll() const;
  // Blocks until it has; the run's status.
  Status wait() const;
  // The outputs, once finished (waits until then); the run's error if it
  // failed.
  Result<NamedTensors> outputs() const;
  // Calls `f` with the run's status once it finishes, on the thread that
  // ran it (at once, on this thread, if it has finished already). `f` must
  // not block.
  void then(std::function<void(const Status&)> f) const;

 private:
  friend class Session;
  explicit Event(std::shared_ptr<detail::EventState> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::EventState> s_;
};

class Session {
 public:
  Session() = default;
  const std::vector<TensorInfo>& inputs() const;   // model order, shapes bound
  const std::vector<TensorInfo>& outputs() const;  // model order
  std::string device() const;                      // "cpu", "null"
  int veus() const;                                // the Plan's vEUs (1 for sequential)
  std::vector<int> cores() const;                  // cpu: the cores its vEUs run on
  Executor executor() const;

  // Runs once on `inputs` (every model input, by name; dtype and shape as
  // inputs() says) and returns the outputs in model order. Outputs bound
  // with bind_output are written there and come back as borrowed Tensors
  // of that memory.
  Result<NamedTensors> run(const NamedTensors& inputs);
  // The same, writing into `outputs`: an output present there by name is
  // written into its Tensor's memory (dtype and shape as outputs() says;
  // checked before the run), the others are added as run() would return
  // them. Nothing is allocated for the outputs given, and a failed run
  // leaves their contents unspecified.
  Status run(const NamedTensors& inputs, NamedTensors& outputs);
  // The same, asynchronously: returns at once; the inputs are copied in
  // when the run starts, so they must stay alive and unchanged until the
  // Event finishes.
  Event submit(const NamedTensors& inputs);
  // Later runs write output `name` into `dst` (its dtype and shape must be
  // the output's; the memory must outlive those runs). An undefined
  // Tensor unbinds it.
  Status bind_output(const std::string& name, Tensor dst);

  // The latest finished run's breakdown.
  RunBreakdown last_breakdown() const;
  // The plan executor: the next run writes a Chrome trace (measured and
  // predicted lanes per vEU) to `path`.
  Status trace_next_run(const std::string& path);
  // A description of the Plan: policy, vEUs, predicted and measured
  // makespans, and per vEU the time it waited: `wait_ms` where given (a
  // median over runs, say), else the latest run's (a JSON object, as
  // `tessera run --json` prints under "plan").
  std::string plan_json(const std::vector<double>& wait_ms = {}) const;
  // The Plan it runs (tessera/inspect.h); FailedPrecondition for the
  // sequential and two-layer executors, which run none.
  Result<PlanInfo> plan() const;
  // What compiling (or loading the Executable) did (tessera/inspect.h).
  CompileReport compile_report() const;

 private:
  friend class Model;
  explicit Session(std::shared_ptr<detail::SessionState> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::SessionState> s_;
};

class Model {
 public:
  Model() = default;
  const std::string& path() const;
  const std::vector<TensorInfo>& inputs() const;   // model order
  const std::vector<TensorInfo>& outputs() const;  // model order
  // Whether this is a compiled Executable (its Plan fixes the vEU count,
  // the executor and the shapes).
  bool is_executable() const;

  // Places the model on a device: compiles its Plan for the vEUs asked
  // for and starts them.
  Result<Session> session(const SessionOptions& options = {});
  // Writes an Executable (.tsx): the compiled model, its Plan for
  // `veus` vEUs (0: every core) and its weights.
  Status save(const std::string& path, int veus = 0);
  // The same for the vEUs and policy in `options` (an Executable runs on
  // the plan executor, on the cpu).
  Status save(const std::string& path, const SessionOptions& options);
  // The Plan a session with these options would run, without starting
  // one: compiled for the device, vEUs and policy asked for (the measured
  // plan choice times candidates on the first cores), or an Executable's
  // own (tessera/inspect.h).
  Result<PlanInfo> plan(const SessionOptions& options = {});
  // Measures one rTask of every op (the profile cache first, unless
  // `refresh`) as compiled with this model's options, on this host
  // (tessera/inspect.h). Progress through CompileOptions::progress.
  Result<ProfileReport> profile(bool refresh = false);

 private:
  friend class Runtime;
  explicit Model(std::shared_ptr<detail::ModelState> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::ModelState> s_;
};

class Runtime {
 public:
  Runtime() = default;
  const std::string& uri() const;
  std::vector<DeviceInfo> devices() const;
  // An ONNX model (.onnx) or an Executable (.tsx).
  Result<Model> compile(const std::string& path, const CompileOptions& options = {});
  // The ONNX ops `device` runs and the rKernels it may run each with, by
  // op name (tessera/inspect.h).
  Result<std::vector<OpSupport>> ops(const std::string& device = "cpu") const;

  // A daemon's Runtime (tessera/daemon.h): the daemon as this tenant sees
  // it, its fault records (an admin's: all), and clearing one (admins
  // only). FailedPrecondition for "local".
  Result<ServerStatus> status() const;
  Result<std::vector<FaultInfo>> faults() const;
  Status clear_fault(uint64_t id);

 private:
  friend Result<Runtime> connect(const std::string& uri, const ConnectOptions& options);
  explicit Runtime(std::shared_ptr<detail::RuntimeState> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::RuntimeState> s_;
};

// "local" (this process; the default), or "unix:///path": the daemon
// listening there (tessera/daemon.h), as the tenant whose token `options`
// gives. Sessions of a daemon's Runtime run on the cores it leases them;
// the leases end with the session, or with this process. ("tcp://" will
// serve remote daemons.)
Result<Runtime> connect(const std::string& uri = "local", const ConnectOptions& options = {});

}  // namespace tessera
