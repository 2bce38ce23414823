// Looking inside (tessera/inspect.h): model summaries, Plans, profiles and
// the ops a device runs, as values built from the compiler's structures.
#include "tessera/inspect.h"

#include <algorithm>

#include "api/state.h"
#include "base/clock.h"
#include "base/strings.h"
#include "compiler/executable.h"
#include "compiler/profiler.h"
#include "ir/ops/op_registry.h"
#include "ir/printer.h"
#include "kernels/cpu/kernel.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "runtime/backends.h"
#include "runtime/trace.h"
#include "topology/host_map.h"

namespace tessera {

using detail::ModelState;
using detail::SessionState;

std::string_view policy_name(PlanPolicy p) {
  switch (p) {
    case PlanPolicy::kWavefront: return "wavefront";
    case PlanPolicy::kCriticalPath: return "critical-path";
    case PlanPolicy::kAuto: break;
  }
  return "auto";
}

bool policy_parse(std::string_view name, PlanPolicy* out) {
  for (PlanPolicy p : {PlanPolicy::kAuto, PlanPolicy::kWavefront, PlanPolicy::kCriticalPath})
    if (name == policy_name(p)) {
      *out = p;
      return true;
    }
  return false;
}

namespace detail {

PlanPolicy public_policy(Policy p) {
  switch (p) {
    case Policy::kWavefront: return PlanPolicy::kWavefront;
    case Policy::kCriticalPath: return PlanPolicy::kCriticalPath;
    default: return PlanPolicy::kAuto;
  }
}

PlanInfo plan_info(const Program& p) {
  PlanInfo info;
  info.source = p.source;
  info.arena_bytes = p.memory.arena_bytes;
  info.unshared_bytes = p.memory.naive_bytes;
  info.costs_profiled = p.costs_measured;
  for (const Step& st : p.steps)
    info.steps.push_back({st.node->op_type, st.node->name, std::string(st.kernel->name), std::string(st.op->path()),
                          st.op->tasks()});
  if (!p.plan) return info;
  const Plan& plan = *p.plan;
  info.policy = public_policy(plan.policy);
  info.veus = plan.veus;
  info.requested_veus = std::max(plan.requested_veus, plan.veus);
  info.predicted_us = plan.predicted_us;
  info.measured_us = plan.measured_us;
  info.alone_first = plan.alone_first;
  info.alone_predicted_us = plan.alone_predicted_us;
  info.waits = plan.waits;
  info.signals = plan.signals;
  info.tasks_per_veu = plan.tasks_per_veu;
  for (const Plan::Candidate& c : plan.candidates)
    info.candidates.push_back({c.veus, public_policy(c.policy), c.predicted_us, c.measured_us});
  info.tasks.reserve(plan.placements.size());
  for (const TaskPlacement& t : plan.placements) info.tasks.push_back({t.veu, t.index, t.step, t.task, t.start_us, t.end_us});
  for (const std::vector<Instr>& list : plan.program) {
    std::vector<PlanInstr>& out = info.program.emplace_back();
    out.reserve(list.size());
    for (const Instr& in : list) {
      const PlanInstr::Kind kind = in.kind == Instr::Kind::kRun      ? PlanInstr::Kind::kRun
                                   : in.kind == Instr::Kind::kSignal ? PlanInstr::Kind::kSignal
                                                                     : PlanInstr::Kind::kWait;
      out.push_back({kind, in.a, in.b});
    }
  }
  return info;
}

CompileReport compile_report(const Program& p) {
  const CompileStats& s = p.stats;
  CompileReport r;
  r.source = p.source;
  r.nodes_imported = s.nodes_imported;
  r.ops = static_cast<int>(p.steps.size());
  r.folded = s.folded;
  r.removed = s.identities_removed + s.dead_removed;
  r.fused = s.fused + s.chains_fused + s.attention_fused + s.blocks_fused;
  r.blocked = s.convs_blocked;
  r.rtasks = s.rtasks;
  r.arena_bytes = p.memory.arena_bytes;
  r.compile_ms = s.compile_ms;
  return r;
}

}  // namespace detail

// ---------------------------------------------------------------- inspect ---

Result<ModelSummary> inspect(const std::string& path, const InspectOptions& options) {
  ModelSummary s;
  s.path = path;
  s.executable = is_executable_file(path);
  std::unique_ptr<Program> exe;
  std::unique_ptr<Graph> imported;
  if (s.executable) {
    if (!options.shapes.empty())
      return invalid_argument(str_cat(path, " is a compiled Executable; its shapes are fixed"));
    TESSERA_ASSIGN_OR_RETURN(exe, load_executable(path));
  } else {
    TESSERA_ASSIGN_OR_RETURN(imported, import_onnx_file(path));
  }
  Graph& graph = exe ? *exe->graph : *imported;
  const GraphSummary before = graph_summarize(graph);
  s.graph_name = graph.name;
  s.opset = graph.opset;
  for (const Value* v : graph.inputs()) s.inputs.push_back({v->name, v->dtype, v->shape.dims, v->shape.symbols});
  // An Executable's graph holds the compiler's internal ops (fused and
  // lowered ones), which an ONNX file may not; its loader checked them.
  if (!exe) {
    s.shapes_bound = check_supported(graph);
    if (s.shapes_bound.ok()) {
      BindOptions bo;
      for (const auto& [name, dims] : options.shapes) bo.input_shapes[name] = Shape(dims);
      s.shapes_bound = bind_shapes(graph, bo, cpu_evaluate);
    }
  }
  for (const Value* v : graph.outputs()) {
    TensorInfo o{v->name, v->dtype, {}, {}};
    if (s.shapes_bound.ok()) o.shape = v->shape.dims, o.symbols = v->shape.symbols;
    s.outputs.push_back(std::move(o));
  }
  s.nodes = before.nodes;
  for (const auto& [op, count] : before.op_counts)
    s.ops.push_back({op, count, op_find(op) != nullptr && cpu_kernel_find(op) != nullptr});
  s.parameters = before.parameters;
  s.parameter_bytes = before.parameter_bytes;
  if (s.shapes_bound.ok()) {
    s.flops = graph_summarize(graph).flops;
    if (options.graph_text) s.graph_text = graph_to_text(graph);
  }
  if (exe) s.plan = detail::plan_info(*exe);
  return s;
}

Result<std::vector<OpSupport>> Runtime::ops(const std::string& device) const {
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Device> d, find_device(device));
  const KernelTable kernels = d->kernels();
  std::vector<OpSupport> out;
  for (const std::string& op : supported_ops(kernels)) {
    OpSupport& o = out.emplace_back();
    o.op = op;
    for (const RKernel& k : kernels)
      if (k.op == op) o.kernels.push_back({std::string(k.name), std::string(k.description)});
  }
  return out;
}

// ------------------------------------------------------------------ Model ---

Result<PlanInfo> Model::plan(const SessionOptions& options) {
  if (!s_) return failed_precondition("Model: empty (use Runtime::compile)");
  if (!s_->remote.empty()) return detail::not_in_cloud("Model::plan");
  if (options.executor != Executor::kPlan)
    return invalid_argument(str_cat("the ", executor_name(options.executor), " executor runs no Plan"));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Program> p, detail::compile_plan(*s_, options));
  return detail::plan_info(*p);
}

Result<ProfileReport> Model::profile(bool refresh) {
  if (!s_) return failed_precondition("Model: empty (use Runtime::compile)");
  if (!s_->remote.empty()) return detail::not_in_cloud("Model::profile");
  std::unique_ptr<Program> p;
  if (s_->executable) {
    TESSERA_ASSIGN_OR_RETURN(p, load_executable(s_->path));
  } else {
    CompileConfig c = detail::config_of(s_->options);
    c.profile = false;  // measured below, as asked
    TESSERA_ASSIGN_OR_RETURN(auto graph, import_onnx_file(s_->path));
    auto compiled = compile_graph(std::move(graph), c);
    if (!compiled.ok()) return compiled.status().with_context(s_->path);
    p = std::move(*compiled);
  }
  // The same cache as compiles for this host's shape use.
  HostMap scratch;
  TESSERA_ASSIGN_OR_RETURN(const HostMap* map, s_->runtime->map(s_->options.host_map, s_->options, &scratch));
  ProfileOptions po;
  po.refresh = refresh;
  po.host_tag = host_profile_tag(*map);
  if (weights_are_cold(*p, map->cache_kept_kb()) && profiler_can_evict()) po.cold_llc_kb = map->cache_kept_kb();
  if (s_->options.progress)
    po.progress = [f = s_->options.progress](size_t done, size_t total, bool) { f("profiling rTasks", done, total); };
  TESSERA_ASSIGN_OR_RETURN(ProfileResult r, profile_program(*p, po));
  ProfileReport out;
  for (size_t i = 0; i < p->steps.size(); ++i) {
    const Step& st = p->steps[i];
    out.rows.push_back({st.node->op_type, st.node->name, std::string(st.kernel->name), std::string(st.op->path()),
                        st.op->tasks(), r.task_cost_us[i], static_cast<bool>(r.cached[i])});
  }
  out.measured = r.measured;
  out.from_cache = r.from_cache;
  out.contended = r.contended;
  out.cache_path = r.cache_path;
  out.weight_bytes = program_constant_bytes(*p);
  out.activation_bytes = program_activation_bytes(*p);
  out.llc_kb = map->llc_kb;
  out.cache_kept_kb = map->cache_kept_kb();
  out.weights_cold = po.cold_llc_kb > 0;
  return out;
}

// ---------------------------------------------------------------- Session ---

Result<PlanInfo> Session::plan() const {
  if (!s_) return failed_precondition("Session: empty (use Model::session)");
  if (!s_->loaded) return detail::not_in_cloud("Session::plan");
  const Program& p = s_->loaded->program();
  if (!p.plan || s_->options.executor != Executor::kPlan)
    return failed_precondition(str_cat("the session runs the ", executor_name(s_->options.executor),
                                       " executor, which has no Plan"));
  return detail::plan_info(p);
}

CompileReport Session::compile_report() const { return s_ ? s_->report : CompileReport{}; }

std::string Session::plan_json(const std::vector<double>& wait_ms) const {
  if (!s_ || !s_->loaded) return "{}";
  const Program& p = s_->loaded->program();
  if (!p.plan) return "{}";
  if (!wait_ms.empty()) return plan_summary_json(*p.plan, wait_ms);
  const uint64_t ticket = s_->turns->take();  // the latest run's, between runs
  s_->turns->await(ticket);
  std::vector<double> last = s_->last.wait_ms;
  s_->turns->end();
  return plan_summary_json(*p.plan, last);
}

}  // namespace tessera
