// Runtime and Model (tessera/runtime.h): connecting, compiling, placing a
// model on a device.
#include <algorithm>
#include <filesystem>

#include "api/state.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/strings.h"
#include "compiler/executable.h"
#include "onnx/importer.h"
#include "runtime/backends.h"
#include "topology/cpu_topology.h"

#ifndef TESSERA_VERSION_STRING
#define TESSERA_VERSION_STRING "0.0.0"
#endif

namespace tessera {

using detail::DaemonLink;
using detail::ModelState;
using detail::RuntimeState;
using detail::SessionState;

std::string_view version() { return TESSERA_VERSION_STRING; }

std::string shape_string(const TensorInfo& t) {
  Shape s(t.shape);
  s.symbols = t.symbols;
  return s.to_string();
}

namespace detail {
namespace {

// vEUs of the cpu device: one per core (slots 0..cores-1 of the topology
// order, which lists one PU per core first).
int cpu_veus() { return std::max(1, cpu_topology().cores); }

}  // namespace

Result<std::vector<int>> RuntimeState::acquire(int wanted, const std::vector<int>& cores, bool* shared) {
  const int pus = std::max(1, cpu_topology().pus);
  std::lock_guard<std::mutex> lock(mu);
  if (holders.empty()) holders.assign(static_cast<size_t>(pus), 0);
  std::vector<int> slots;
  *shared = false;
  if (!cores.empty()) {
    if (wanted != 0 && wanted != static_cast<int>(cores.size()))
      return invalid_argument(str_cat("SessionOptions: veus is ", wanted, " but ", cores.size(), " cores are given"));
    for (int c : cores) {
      if (c < 0 || c >= pus)
        return invalid_argument(str_cat("core ", c, " is not on this host (cores 0 to ", pus - 1, ")"));
      slots.push_back(c);
    }
  } else {
    const int n = cpu_veus();
    std::vector<int> free;
    for (int s = 0; s < n; ++s)
      if (holders[static_cast<size_t>(s)] == 0) free.push_back(s);
    const int count = wanted > 0 ? wanted : std::max<int>(1, static_cast<int>(free.size()));
    slots.assign(free.begin(), free.begin() + std::min<size_t>(free.size(), static_cast<size_t>(count)));
    // Too few free: the least held cores, in order, take the rest.
    std::vector<int> by_load(static_cast<size_t>(n));
    for (int s = 0; s < n; ++s) by_load[static_cast<size_t>(s)] = s;
    std::stable_sort(by_load.begin(), by_load.end(),
                     [&](int a, int b) { return holders[static_cast<size_t>(a)] < holders[static_cast<size_t>(b)]; });
    for (size_t k = 0; static_cast<int>(slots.size()) < count; ++k) {
      const int s = by_load[k % by_load.size()];
      if (k < by_load.size() && std::find(slots.begin(), slots.end(), s) != slots.end()) continue;
      slots.push_back(s);
      *shared = true;
    }
  }
  for (int s : slots)
    if (holders[static_cast<size_t>(s)]++ > 0) *shared = true;
  return slots;
}

void RuntimeState::release(const std::vector<int>& slots) {
  std::lock_guard<std::mutex> lock(mu);
  for (int s : slots)
    if (static_cast<size_t>(s) < holders.size() && holders[static_cast<size_t>(s)] > 0) --holders[static_cast<size_t>(s)];
}

Result<const HostMap*> RuntimeState::map(const std::string& file, const CompileOptions& o, HostMap* scratch) {
  HostMapOptions ho;
  ho.file = file;
  if (o.progress)
    ho.progress = [&](std::string_view stage, size_t done, size_t total) {
      o.progress(str_cat("measuring the host: ", stage), done, total);
    };
  if (!file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(*scratch, host_map_obtain(ho));
    return scratch;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (!host_map) {
    TESSERA_ASSIGN_OR_RETURN(HostMap m, host_map_obtain(ho));
    if (m.origin == "measured") {
      log_info("this host was measured for the planner (cached for later runs; tessera topo shows it)");
      for (const std::string& note : m.notes) log_info("host map: ", note);
    }
    host_map = std::move(m);
  }
  return &*host_map;
}

CompileConfig config_of(const CompileOptions& o) {
  CompileConfig c;
  for (const auto& [name, dims] : o.shapes) c.input_shapes[name] = Shape(dims);
  c.profile = o.profile;
  c.variants = o.variants;
  c.fuse = o.fuse;
  c.fuse_blocks = o.fuse && o.block_fusion;
  c.concat_in_place = o.concat_in_place;
  c.channel_blocks = o.channel_blocks;
  c.lower_recurrent = o.lower_recurrent;
  c.recurrent_chunk = o.recurrent_chunk;
  c.recurrent_carry = o.recurrent_carry;
  if (o.progress)
    c.profile_options.progress = [p = o.progress](size_t done, size_t total, bool) { p("profiling rTasks", done, total); };
  return c;
}

}  // namespace detail

namespace {

std::vector<TensorInfo> infos(const std::vector<Value*>& values) {
  std::vector<TensorInfo> out;
  for (const Value* v : values) out.push_back({v->name, v->dtype, v->shape.dims, v->shape.symbols});
  return out;
}

Policy policy_of(PlanPolicy p) {
  switch (p) {
    case PlanPolicy::kWavefront: return Policy::kWavefront;
    case PlanPolicy::kCriticalPath: return Policy::kCriticalPath;
    case PlanPolicy::kAuto: break;
  }
  return Policy::kAuto;
}

// Compiles `m` for a session on `device`: a Plan for `veus` vEUs on
// `slots` where the executor is the plan executor, with the device's
// rKernels, cost model and plan runner.
Result<std::unique_ptr<Program>> compile_for(ModelState& m, detail::RuntimeState& rt, const SessionOptions& so,
                                             const Device& device, int veus, const std::vector<int>& slots) {
  if (m.executable) {
    LoadOptions lo;
    lo.kernels = device.kernels();
    lo.device = std::string(device.program_kind());
    return load_executable(m.path, lo);
  }
  CompileConfig c = detail::config_of(m.options);
  c.kernels = device.kernels();
  c.profile = c.profile && device.profiles();
  const Device::Passes passes = device.passes();
  c.fuse = c.fuse && passes.fuse;
  c.fuse_blocks = c.fuse_blocks && passes.fuse;
  c.lower_recurrent = c.lower_recurrent && passes.lower_recurrent;
  if (passes.recurrent_chunk >= 0) c.recurrent_chunk = passes.recurrent_chunk;
  c.recurrent_carry = c.recurrent_carry && passes.recurrent_carry;
  c.concat_in_place = c.concat_in_place && passes.concat_in_place;
  HostMap file_map;
  if (so.executor == Executor::kPlan) {
    c.build_plan = true;
    c.schedule.veus = veus;
    c.schedule.policy = policy_of(so.policy);
    c.slots = slots;
    if (device.plans_on_host_map()) {
      TESSERA_ASSIGN_OR_RETURN(c.host_map, rt.map(m.options.host_map, m.options, &file_map));
    }
    const HostMap* map = c.host_map;
    c.costs = [&device, map](const std::vector<int>& s) { return device.costs(map, s); };
    c.task_cost = [&device](const Node& n, int64_t tasks) {
      const double us = device.task_cost_us(n, tasks);
      return us >= 0 ? us : analytic_task_cost(n, tasks);
    };
    if (m.options.measure) c.plan_runner = device.plan_runner(map, slots, so.pin);
  } else {
    c.profile = false;  // the profile costs a Plan's rTasks
    c.variants = false;
  }
  TESSERA_ASSIGN_OR_RETURN(auto graph, import_onnx_file(m.path));
  auto p = compile_graph(std::move(graph), c);
  if (!p.ok()) return p.status().with_context(m.path);
  (*p)->source = m.path;
  return std::move(*p);
}

}  // namespace

Result<std::unique_ptr<Program>> detail::compile_plan(ModelState& m, const SessionOptions& so) {
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Device> device, find_device(so.device));
  if (m.executable) return compile_for(m, *m.runtime, so, *device, 0, {});
  if (so.veus < 0 || so.veus > 1024) return invalid_argument(str_cat("SessionOptions: veus ", so.veus, " is out of range"));
  const int all = device->info().kind == "cpu" ? cpu_veus() : device->info().veus;
  std::vector<int> slots = so.cores;
  if (slots.empty())
    for (int u = 0; u < (so.veus > 0 ? so.veus : all); ++u) slots.push_back(u);
  if (so.veus > 0 && so.veus != static_cast<int>(slots.size()))
    return invalid_argument(str_cat("SessionOptions: veus is ", so.veus, " but ", slots.size(), " cores are given"));
  return compile_for(m, *m.runtime, so, *device, static_cast<int>(slots.size()), slots);
}

// ---------------------------------------------------------------- Runtime ---

Result<Runtime> connect(const std::string& uri, const ConnectOptions& options) {
  if (uri.rfind("unix://", 0) == 0) {
    auto s = std::make_shared<RuntimeState>();
    s->uri = uri;
    TESSERA_ASSIGN_OR_RETURN(s->daemon, DaemonLink::open(uri, options));
    s->daemon->set_ping_stats([rt = s.get()](daemon::Ping* ping) {
      std::lock_guard<std::mutex> lock(rt->mu);
      for (const auto& [lease, c] : rt->leased) {
        daemon::LeaseStats* x = ping->add_stats();
        x->set_lease(lease);
        x->set_runs(c->runs.load(std::memory_order_relaxed));
        x->set_busy_s(static_cast<double>(c->busy_ns.load(std::memory_order_relaxed)) / 1e9);
        x->set_latency_s(static_cast<double>(c->wall_ns.load(std::memory_order_relaxed)) / 1e9);
      }
    });
    return Runtime(s);
  }
  if (uri.empty() || uri == "local") {
    static std::mutex mu;
    static std::weak_ptr<RuntimeState> local;
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<RuntimeState> s = local.lock();
    if (!s) {
      s = std::make_shared<RuntimeState>();
      s->uri = "local";
      local = s;
    }
    return Runtime(s);
  }
  for (const char* scheme : {"tcp://", "tls://"})
    if (uri.rfind(scheme, 0) == 0)
      return unimplemented(str_cat("connect: '", uri, "': remote daemons are not served yet; use \"local\" or a ",
                                   "daemon on this machine (unix:///path)"));
  return invalid_argument(str_cat("connect: '", uri, "' is not a Tessera URI (\"local\", unix:///path, tcp://host:port)"));
}

const std::string& Runtime::uri() const {
  static const std::string none;
  return s_ ? s_->uri : none;
}

std::vector<DeviceInfo> Runtime::devices() const {
  std::vector<DeviceInfo> out;
  for (Backend* b : backends())
    for (const std::shared_ptr<Device>& d : b->discover()) {
      DeviceInfo info = d->info();
      if (info.kind == "cpu" && s_) {  // less the cores this Runtime's sessions hold
        std::lock_guard<std::mutex> lock(s_->mu);
        for (int k = 0; k < info.veus && static_cast<size_t>(k) < s_->holders.size(); ++k)
          info.free_veus -= s_->holders[static_cast<size_t>(k)] > 0;
      }
      out.push_back(std::move(info));
    }
  return out;
}

Result<Model> Runtime::compile(const std::string& path, const CompileOptions& options) {
  if (!s_) return failed_precondition("Runtime: not connected (use tessera::connect)");
  if (detail::is_cloud(*s_)) {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<ModelState> m, detail::compile_remote(s_, path, options));
    return Model(m);
  }
  auto m = std::make_shared<ModelState>();
  m->runtime = s_;
  m->path = path;
  m->options = options;
  m->executable = is_executable_file(path);
  std::unique_ptr<Program> p;
  if (m->executable) {
    if (!options.shapes.empty())
      return invalid_argument(str_cat(path, " is a compiled Executable: its shapes are fixed (drop the shapes given)"));
    TESSERA_ASSIGN_OR_RETURN(p, load_executable(path));
  } else {
    // Compiled once without a Plan: the model is checked whole (ops,
    // shapes, kernels) before any session places it.
    CompileConfig c = detail::config_of(options);
    c.profile = false;
    c.variants = false;
    TESSERA_ASSIGN_OR_RETURN(auto graph, import_onnx_file(path));
    auto compiled = compile_graph(std::move(graph), c);
    if (!compiled.ok()) return compiled.status().with_context(path);
    p = std::move(*compiled);
  }
  m->inputs = infos(p->graph->inputs());
  m->outputs = infos(p->graph->outputs());
  return Model(m);
}

// ------------------------------------------------------------------ Model ---

namespace {

// The vEUs a session asks for: an Executable's own count (either the Plan's
// or the one it was compiled for may be asked), 1 for the sequential
// executor, else as given (0: every free one).
Result<int> session_veus(const ModelState& m, const SessionOptions& so, const Program* executable) {
  if (so.executor == Executor::kSequential) return 1;
  if (executable == nullptr) return so.veus;
  const Plan& plan = *executable->plan;
  const int requested = std::max(plan.requested_veus, plan.veus);
  if (so.veus != 0 && so.veus != plan.veus && so.veus != requested)
    return invalid_argument(str_cat(m.path, " was compiled for ", requested, " vEUs",
                                    requested != plan.veus ? str_cat(" (its Plan uses ", plan.veus, ")") : "",
                                    "; compile it again for ", so.veus));
  return plan.veus;
}

}  // namespace

const std::string& Model::path() const {
  static const std::string none;
  return s_ ? s_->path : none;
}
const std::vector<TensorInfo>& Model::inputs() const {
  static const std::vector<TensorInfo> none;
  return s_ ? s_->inputs : none;
}
const std::vector<TensorInfo>& Model::outputs() const {
  static const std::vector<TensorInfo> none;
  return s_ ? s_->outputs : none;
}
bool Model::is_executable() const { return s_ && s_->executable; }

Result<Session> Model::session(const SessionOptions& so) {
  if (!s_) return failed_precondition("Model: empty (use Runtime::compile)");
  if (!s_->remote.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<SessionState> st, detail::open_remote(s_, so));
    return Session(st);
  }
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Device> device, find_device(so.device));
  if (so.veus < 0 || so.veus > 1024) return invalid_argument(str_cat("SessionOptions: veus ", so.veus, " is out of range"));
  if (!(so.latency_ms >= 0 && so.latency_ms < 1e9))
    return invalid_argument("SessionOptions: latency_ms must be a number of milliseconds from 0");
  if (s_->executable && so.executor != Executor::kPlan)
    return invalid_argument(str_cat(s_->path, " is an Executable: it runs on the plan executor only"));
  auto st = std::make_shared<SessionState>();
  st->model = s_;
  st->runtime = s_->runtime;
  st->options = so;
  st->device = so.device;
  st->device_ptr = device;
  // An Executable is loaded once, for the device, and fixes the vEUs.
  const int64_t t0 = now_ns();
  std::unique_ptr<Program> program;
  if (s_->executable) {
    TESSERA_ASSIGN_OR_RETURN(program, compile_for(*s_, *s_->runtime, so, *device, 0, {}));
  }
  TESSERA_ASSIGN_OR_RETURN(int veus, session_veus(*s_, so, program.get()));
  // Cores first (the cpu's vDevice), so that the Plan is chosen on the
  // cores it will run on.
  if (device->info().kind == "cpu" && s_->runtime->daemon) {
    if (!so.cores.empty())
      return invalid_argument(str_cat("SessionOptions: cores ", str_join(so.cores, ","), " are given, but the daemon at ",
                                      s_->runtime->daemon->path(), " chooses a session's cores"));
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(s_->path, ec);
    TESSERA_ASSIGN_OR_RETURN(st->slots, s_->runtime->lease(veus, ec ? 0 : bytes, s_->path, so.latency_ms, &st->lease));
    veus = static_cast<int>(st->slots.size());
    {
      std::lock_guard<std::mutex> lock(s_->runtime->mu);
      s_->runtime->leased[st->lease] = st->counters;
    }
  } else if (device->info().kind == "cpu") {
    bool shared = false;
    TESSERA_ASSIGN_OR_RETURN(st->slots, s_->runtime->acquire(veus, so.cores, &shared));
    veus = static_cast<int>(st->slots.size());
    if (shared)
      log_warning("this session shares cores with another session of this process (cores ", str_join(st->slots, ","),
                  "): both run slower");
  } else if (veus == 0) {
    veus = device->info().veus;
  }
  if (!program) {
    TESSERA_ASSIGN_OR_RETURN(program, compile_for(*s_, *s_->runtime, so, *device, veus, st->slots));
  }
  // Admission by schedule: the Plan's predicted latency against the
  // objective (a daemon's lease checks it there, and shows both).
  if (so.latency_ms > 0) {
    if (!program->plan || so.executor != Executor::kPlan)
      return invalid_argument("SessionOptions: a latency objective needs the plan executor (its Plan's prediction)");
    const double predicted_ms = program->plan->predicted_us / 1e3;
    if (st->lease != 0) {
      TESSERA_RETURN_IF_ERROR(s_->runtime->admit(st->lease, predicted_ms));
    } else if (!(predicted_ms <= so.latency_ms)) {
      return resource_exhausted(str_cat(s_->path, ": the Plan on ", program->plan->veus, " vEU(s) is predicted to take ",
                                        predicted_ms, " ms; the objective is ", so.latency_ms, " ms"));
    }
  }
  st->inputs = infos(program->graph->inputs());
  st->outputs = infos(program->graph->outputs());
  st->report = detail::compile_report(*program);
  st->report.compile_ms = static_cast<double>(now_ns() - t0) / 1e6;
  st->veus = program->plan && so.executor == Executor::kPlan ? program->plan->veus : veus;
  PlaceOptions po;
  po.executor = so.executor;
  po.veus = veus;
  po.slots = st->slots;
  po.pin = so.pin;
  po.adapt = so.adapt;
  TESSERA_ASSIGN_OR_RETURN(st->loaded, device->load(std::move(program), po));
  st->bound.assign(st->outputs.size(), Tensor());
  st->bound_outputs.assign(st->outputs.size(), nullptr);
  st->bound_inputs.assign(st->inputs.size(), nullptr);
  return Session(st);
}

Status Model::save(const std::string& path, int veus) {
  SessionOptions so;
  so.veus = veus;
  return save(path, so);
}

Status Model::save(const std::string& path, const SessionOptions& options) {
  if (!s_) return failed_precondition("Model: empty (use Runtime::compile)");
  if (!s_->remote.empty()) return detail::not_in_cloud("Model::save");
  if (options.executor != Executor::kPlan || options.device != "cpu")
    return invalid_argument("an Executable holds a Plan for the cpu device: save with the plan executor on the cpu");
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Program> p, detail::compile_plan(*s_, options));
  return write_executable(*p, path);
}

}  // namespace tessera
