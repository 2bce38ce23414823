// tessera run MODEL.onnx: compile and execute a model, report latency and
// outputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "base/clock.h"
#include "base/log.h"
#include "base/strings.h"
#include "ir/npy.h"
#include "compiler/executable.h"
#include "onnx/importer.h"
#include "devices/cpu/engine.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "runtime/trace.h"
#include "topology/cpu_topology.h"
#include "topology/host_map.h"

namespace tessera::tools {
namespace {

const cli::Command kRun = {
    "run",
    "tessera run MODEL.onnx|MODEL.tsx [options]",
    "Compile an ONNX model (or load an Executable written by `tessera compile`) and run it on the\n"
    "local CPU; print latency and outputs.",
    cli::with_compile_options({
        {"--input", "NAME=FILE", "input from a .npy file; or FILE.npz holding inputs by name", true},
        {"--shape", "NAME=DIMS", "bind a dynamic input's shape, e.g. x=1x3x224x224", true},
        {"--output-dir", "DIR", "write each output to DIR/<name>.npy"},
        {"--iters", "N", "timed runs (default 10)"},
        {"--warmup", "N", "untimed runs first (default 2)"},
        {"--threads", "N", "vEUs / worker threads, including the caller (default: all cores); policy auto may\n"
                           "                          keep a Plan on fewer when it ran faster (see --no-measure)"},
        {"--executor", "NAME", "plan | two-layer | sequential (default plan)"},
        {"--device", "NAME", "cpu (default) | null: import, compile, schedule and load as for the cpu, check the\n"
                             "                          inputs, compute nothing (outputs zero-filled; see tessera devices)"},
        {"--policy", "NAME", "plan executor's scheduling policy: auto | wavefront | critical-path (default auto:\n"
                             "                          both predicted, the best candidates timed; the choice is cached)"},
        {"--no-pin", "", "plan executor: leave threads unpinned (default: vEU i on core i, the caller on core 0)"},
        {"--seed", "N", "seed for inputs not given (default 0)"},
        {"--trace", "FILE", "write a Chrome trace of one run (measured and predicted lanes per vEU)"},
        {"--json", "", "print one JSON object on stdout at the end"},
        {"--quiet", "", "no human-readable text on stderr"},
    }),
    "Inputs not given are filled with seeded random values: floats uniform in [-1, 1),\n"
    "integers uniform in [0, 16), bools fair coins.\n\n"
    "examples:\n"
    "  tessera run build/zoo/resnet18.onnx --iters 20\n"
    "  tessera compile build/zoo/resnet18.onnx -o resnet18.tsx && tessera run resnet18.tsx\n"
    "  tessera run model.onnx --input x=x.npy --output-dir out/ --json\n"
    "  tessera run bert.onnx --shape input_ids=1x64 --executor sequential\n"
    "  tessera run model.onnx --threads 4 --policy critical-path\n"};

Tensor random_tensor(DType dt, const Shape& shape, uint64_t seed) {
  Tensor t(dt, shape);
  std::mt19937_64 rng(seed);
  int64_t n = t.numel();
  switch (dt) {
    case DType::kFloat32: {
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = u(rng);
      break;
    }
    case DType::kInt64:
      for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng() % 16);
      break;
    case DType::kInt32:
      for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng() % 16);
      break;
    case DType::kInt8:
      for (int64_t i = 0; i < n; ++i) t.data<int8_t>()[i] = static_cast<int8_t>(rng() % 16);
      break;
    default:  // uint8, bool
      for (int64_t i = 0; i < n; ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % (dt == DType::kBool ? 2 : 16));
      break;
  }
  return t;
}

// Converts a loaded array to the input's dtype where that is lossless in
// intent (npy float64 was narrowed on load; integer widths may differ).
Result<Tensor> conform(const Tensor& t, const Value& v, const std::string& source) {
  if (t.dtype() == v.dtype) return t;
  bool int_to_int = dtype_is_integer(t.dtype()) && dtype_is_integer(v.dtype);
  if (!int_to_int)
    return invalid_argument(str_cat("input '", v.name, "' is ", dtype_name(v.dtype), " but ", source, " holds ",
                                    dtype_name(t.dtype())));
  Tensor out(v.dtype, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t x = t.value_as_int64(i);
    switch (v.dtype) {
      case DType::kInt64: out.data<int64_t>()[i] = x; break;
      case DType::kInt32: out.data<int32_t>()[i] = static_cast<int32_t>(x); break;
      case DType::kInt8: out.data<int8_t>()[i] = static_cast<int8_t>(x); break;
      default: out.data<uint8_t>()[i] = static_cast<uint8_t>(x); break;
    }
  }
  return out;
}

std::string safe_file_name(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) c = '_';
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double idx = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

// Per vEU, the median over runs of the time it spent waiting (ms).
template <typename Runs>
std::vector<double> runs_wait_ms(const Runs& runs) {
  std::vector<double> out;
  for (size_t u = 0; !runs.empty() && u < runs[0].wait_ms.size(); ++u) {
    std::vector<double> w;
    for (const auto& r : runs) w.push_back(r.wait_ms[u]);
    out.push_back(percentile(w, 0.5));
  }
  return out;
}

std::string preview(const Tensor& t) {
  int64_t n = t.numel();
  std::string s = "[";
  for (int64_t i = 0; i < std::min<int64_t>(n, 5); ++i) s += str_cat(i ? ", " : "", t.value_as_double(i));
  if (n > 5) s += ", ...";
  s += "]";
  if (n > 0 && t.dtype() == DType::kFloat32) {
    double mn = 1e300, mx = -1e300, sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      double x = t.data<float>()[i];
      mn = std::min(mn, x);
      mx = std::max(mx, x);
      sum += x;
    }
    s += str_cat("  min ", mn, " max ", mx, " mean ", sum / static_cast<double>(n));
  }
  return s;
}

// .npz archives may carry more arrays (expected outputs, say): those are
// skipped silently only when no NAME= was given for them.
bool from_npz_bulk(const cli::Args& a) {
  for (const std::string& spec : a.values.at("--input"))
    if (spec.find('=') == std::string::npos) return true;
  return false;
}

Status not_an_input(const std::string& name, const std::vector<Value*>& inputs) {
  std::vector<std::string> names;
  for (const Value* in : inputs) names.push_back(in->name);
  return not_found(str_cat("--input names '", name, "', which is not a model input (inputs: ", str_join(names, ", "),
                           ")"));
}

// Every array given names a model input of its dtype (or a lossless
// integer width) and, where the shape is bound, of that shape.
Status check_given(const cli::Args& a, const std::map<std::string, Tensor>& given, const std::vector<Value*>& inputs,
                   const std::map<std::string, Shape>& bound) {
  for (const auto& [name, t] : given) {
    const Value* v = nullptr;
    for (const Value* in : inputs)
      if (in->name == name) v = in;
    if (v == nullptr) {
      if (from_npz_bulk(a)) continue;
      return not_an_input(name, inputs);
    }
    TESSERA_RETURN_IF_ERROR(conform(t, *v, str_cat("the file given for '", name, "'")).status());
    const Shape& want = bound.count(name) ? bound.at(name) : v->shape;
    if (want.is_static() && !(t.shape() == want))
      return invalid_argument(str_cat("input '", name, "' has shape ", want.to_string(), ", got ", shape_string(t.shape()),
                                      " (use --shape to bind another size)"));
  }
  return Status();
}

}  // namespace

int run_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kRun, argc, argv, 1, "expected exactly one MODEL.onnx", &a); rc >= 0) return rc;
  const std::string model = a.positional[0];
  bool json = a.has("--json");
  if (a.has("--quiet")) log_set_level(LogLevel::kWarning);

  auto iters = a.get_int("--iters", 10, 1, 1000000);
  auto warmup = a.get_int("--warmup", 2, 0, 1000000);
  auto threads = a.get_int("--threads", 0, 1, 1024);
  auto seed = a.get_int("--seed", 0, 0, INT64_MAX);
  for (auto* r : {&iters, &warmup, &threads, &seed})
    if (!r->ok()) return cli::usage_error(kRun, r->status().message());
  EngineOptions so;
  so.executor = Executor::kPlan;
  so.threads = static_cast<int>(*threads);
  so.pin = !a.has("--no-pin");
  const std::string device = a.get("--device", "cpu");
  if (device != "cpu" && device != "null")
    return cli::usage_error(kRun, str_cat("no device '", device, "' (devices: cpu, null; see tessera devices)"));
  so.null_device = device == "null";
  if (so.null_device && a.has("--trace")) return cli::usage_error(kRun, "--trace needs the cpu device");
  if (a.has("--executor") && !executor_parse(a.get("--executor"), &so.executor))
    return cli::usage_error(kRun, str_cat("--executor must be plan, two-layer or sequential, got '",
                                          a.get("--executor"), "'"));
  Policy policy = Policy::kAuto;
  if (a.has("--policy") && (!policy_parse(a.get("--policy"), &policy) || policy == Policy::kRandom))
    return cli::usage_error(kRun, str_cat("--policy must be auto, wavefront or critical-path, got '",
                                          a.get("--policy"), "'"));
  if (a.has("--policy") && so.executor != Executor::kPlan)
    return cli::usage_error(kRun, "--policy applies to the plan executor only");
  if (a.has("--no-pin") && so.executor != Executor::kPlan)
    return cli::usage_error(kRun, "--no-pin applies to the plan executor only");
  if (a.has("--trace") && so.executor != Executor::kPlan) return cli::usage_error(kRun, "--trace needs the plan executor");

  CompileConfig co;
  HostMap host_map;
  if (Status st = cli::apply_compile_flags(a, &co); !st.ok()) return cli::usage_error(kRun, st.message());
  if (so.executor == Executor::kPlan) {
    co.build_plan = true;
    co.schedule.policy = policy;
    co.schedule.veus = so.threads > 0 ? so.threads : cpu_topology().cores;  // one vEU per core
    co.profile_options.progress = [](size_t done, size_t total, bool) { print_progress(done, total); };
  } else {
    co.profile = false;  // the profile costs a Plan's rTasks
    co.variants = false;
  }
  if (Status st = cli::parse_shape_flags(a, &co.input_shapes); !st.ok()) return cli::usage_error(kRun, st.message());

  // Inputs.
  std::map<std::string, Tensor> given;
  for (const std::string& spec : a.has("--input") ? a.values.at("--input") : std::vector<std::string>{}) {
    size_t eq = spec.find('=');
    std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
    std::string file = eq == std::string::npos ? spec : spec.substr(eq + 1);
    bool npz = file.size() > 4 && file.substr(file.size() - 4) == ".npz";
    if (npz) {
      auto arrays = npz_read(file);
      if (!arrays.ok()) return cli::fail(arrays.status());
      if (name.empty()) {
        for (auto& [k, t] : *arrays) given[k] = t;
      } else if (arrays->count(name)) {
        given[name] = arrays->at(name);
      } else if (arrays->size() == 1) {
        given[name] = arrays->begin()->second;
      } else {
        return cli::fail(not_found(str_cat(file, " has no array named '", name, "'")));
      }
    } else {
      if (name.empty()) return cli::usage_error(kRun, str_cat("--input expects NAME=FILE.npy or FILE.npz, got '", spec, "'"));
      auto t = npy_read(file);
      if (!t.ok()) return cli::fail(t.status());
      given[name] = *t;
    }
  }
  std::unique_ptr<Program> program;
  const int64_t compile_start = now_ns();
  const bool executable = is_executable_file(model);
  if (executable) {
    // An Executable is compiled already: its Plan fixes the executor, the
    // vEU count, the policy and the shapes.
    std::string opt = cli::first_compile_flag(a);
    for (const char* o : {"--shape", "--policy"})
      if (a.has(o)) opt = o;
    if (!opt.empty())
      return cli::usage_error(kRun, str_cat(opt, " applies when compiling; ", model, " is a compiled Executable"));
    if (so.executor != Executor::kPlan)
      return cli::usage_error(kRun, str_cat(model, " is an Executable: it runs on the plan executor only"));
    auto loaded = load_executable(model);
    if (!loaded.ok()) return cli::fail(loaded.status());
    program = std::move(*loaded);
    // Compiled for N vEUs, the measured choice may have kept a Plan on
    // fewer: either count names this Executable.
    const Plan& plan = *program->plan;
    const int requested = std::max(plan.requested_veus, plan.veus);
    if (so.threads > 0 && so.threads != plan.veus && so.threads != requested)
      return cli::usage_error(kRun, str_cat(model, " was compiled for ", requested, " vEUs",
                                            requested != plan.veus ? str_cat(" (its Plan uses ", plan.veus, ")") : "",
                                            "; compile it again with --veus ", so.threads));
  } else {
    // Import first, so that dynamic dimensions can be bound from the arrays
    // given (an explicit --shape wins).
    auto graph = import_onnx_file(model);
    if (!graph.ok()) return cli::fail(graph.status());
    for (const Value* in : (*graph)->inputs()) {
      auto it = given.find(in->name);
      if (it != given.end() && !co.input_shapes.count(in->name) && !in->shape.is_static())
        co.input_shapes[in->name] = it->second.shape();
    }
    // Inputs that cannot be bound fail here, before compiling (and timing
    // Plans) for them; the session checks them again.
    if (Status st = check_given(a, given, (*graph)->inputs(), co.input_shapes); !st.ok()) return cli::fail(st);
    if (so.executor == Executor::kPlan)
      if (Status st = cli::prepare_plan(a, so.pin, &host_map, &co); !st.ok()) return cli::fail(st);
    if (so.null_device) {  // nothing runs there: costs estimated, no Plan timed
      co.profile = false;
      co.plan_runner = {};
    }
    auto compiled = compile_graph(std::move(*graph), co);
    if (!compiled.ok()) return cli::fail(compiled.status().with_context(model));
    program = std::move(*compiled);
    program->source = model;
  }
  program->stats.compile_ms = static_cast<double>(now_ns() - compile_start) / 1e6;
  const CompileStats stats = program->stats;
  auto session_or = Engine::create(std::move(program), so);
  if (!session_or.ok()) return cli::fail(session_or.status());
  Engine& session = **session_or;

  std::vector<std::pair<std::string, Tensor>> feeds;  // every input, as bound
  for (auto& [name, t] : given) {
    const Value* v = nullptr;
    for (const Value* in : session.inputs())
      if (in->name == name) v = in;
    if (v == nullptr) {
      if (from_npz_bulk(a)) continue;
      return cli::fail(not_an_input(name, session.inputs()));
    }
    auto c = conform(t, *v, str_cat("the file given for '", name, "'"));
    if (!c.ok()) return cli::fail(c.status());
    Status st = session.set_input(name, *c);
    if (!st.ok()) return cli::fail(st);
    feeds.emplace_back(name, *c);
  }
  uint64_t input_seed = static_cast<uint64_t>(*seed);
  for (size_t i = 0; i < session.inputs().size(); ++i) {
    const Value* v = session.inputs()[i];
    if (given.count(v->name)) continue;
    log_info("input '", v->name, "': random ", dtype_name(v->dtype), " ", v->shape.to_string(), " (seed ", *seed, ")");
    Tensor t = random_tensor(v->dtype, v->shape, input_seed + i * 7919);
    Status st = session.set_input(v->name, t);
    if (!st.ok()) return cli::fail(st);
    feeds.emplace_back(v->name, std::move(t));
  }

  // Only now that the model and its inputs are accepted: a failing run
  // prints nothing but its error line.
  cli::log_host_map(host_map);
  if (executable)
    log_info(model, ": Executable of ", session.program().steps.size(), " ops (compiled from ",
             session.program().source, "); ", stats.rtasks, " rTasks; arena ",
             human_count(static_cast<double>(session.program().memory.arena_bytes)), "B; loaded and validated in ",
             str_fixed(stats.compile_ms, 1), " ms");
  else
    log_info(model, ": ", stats.nodes_imported, " nodes imported, ", session.program().steps.size(), " ops after ",
             stats.folded, " folded, ", stats.identities_removed + stats.dead_removed, " removed, ",
             stats.fused + stats.chains_fused + stats.attention_fused + stats.blocks_fused, " fused; ", stats.rtasks,
             " rTasks; arena ", human_count(static_cast<double>(session.program().memory.arena_bytes)),
             "B; imported and compiled in ", str_fixed(stats.compile_ms, 1), " ms");
  // Runs. Each timed run copies the inputs in, computes, and copies the
  // outputs out; latency is the compute part (what the executors differ
  // in), and --json breaks every run down.
  for (int64_t i = 0; i < *warmup; ++i) {
    Status st = session.run().wait();
    if (!st.ok()) return cli::fail(st);
  }
  struct RunBreakdown {
    double copy_in_ms, compute_ms, copy_out_ms;
    std::vector<double> wait_ms;
  };
  std::vector<RunBreakdown> runs;
  std::vector<double> ms;
  std::vector<Tensor> outs(session.outputs().size());
  for (int64_t i = 0; i < *iters; ++i) {
    int64_t t0 = now_ns();
    for (auto& [name, t] : feeds) {
      Status st = session.set_input(name, t);
      if (!st.ok()) return cli::fail(st);
    }
    int64_t t1 = now_ns();
    Status st = session.run().wait();
    if (!st.ok()) return cli::fail(st);
    int64_t t2 = now_ns();
    for (size_t k = 0; k < outs.size(); ++k) outs[k] = session.output(k);
    int64_t t3 = now_ns();
    RunBreakdown b{static_cast<double>(t1 - t0) / 1e6, static_cast<double>(t2 - t1) / 1e6,
                   static_cast<double>(t3 - t2) / 1e6, {}};
    if (CpuVDevice* d = session.vdevice())
      for (int64_t w : d->wait_ns()) b.wait_ms.push_back(static_cast<double>(w) / 1e6);
    runs.push_back(std::move(b));
    ms.push_back(runs.back().compute_ms);
  }
  std::string trace_path = a.get("--trace");
  if (!trace_path.empty()) {
    CpuVDevice* d = session.vdevice();
    if (d == nullptr) return cli::usage_error(kRun, "--trace needs the plan executor");
    std::vector<std::pair<int64_t, int64_t>> spans(session.program().plan->placements.size());
    d->set_trace(&spans);
    Status st = session.run().wait();
    d->set_trace(nullptr);
    if (!st.ok()) return cli::fail(st);
    st = write_chrome_trace(trace_path, session.program(), spans);
    if (!st.ok()) return cli::fail(st);
    log_info("trace of one run written to ", trace_path, " (open in chrome://tracing or ui.perfetto.dev)");
  }
  double lmin = *std::min_element(ms.begin(), ms.end()), lmax = *std::max_element(ms.begin(), ms.end());
  double lmed = percentile(ms, 0.5), lp90 = percentile(ms, 0.9);

  // Outputs.
  std::string out_dir = a.get("--output-dir");
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return cli::fail(invalid_argument(str_cat("cannot create --output-dir '", out_dir, "': ", ec.message())));
  }
  std::string outputs_json;
  std::string how = std::string(executor_name(session.executor()));
  if (const auto& plan = session.program().plan) {
    how = str_cat("plan (", policy_name(plan->policy), ", predicted ", std::round(plan->predicted_us) / 1000, " ms");
    if (plan->requested_veus > plan->veus)
      how += str_cat("; ", plan->veus, " of ", plan->requested_veus, " vEUs: fastest when the candidates were timed");
    how += ")";
  }
  if (so.null_device)
    log_info("device null: the model was imported, compiled, scheduled and loaded and its inputs checked; nothing "
             "was computed, outputs are zero-filled");
  log_info("executor ", how, so.null_device ? " on the null device" : "", ", ", session.threads(), " thread(s); latency over ", *iters,
           " runs: median ", str_cat(std::round(lmed * 1000) / 1000), " ms (min ", str_cat(std::round(lmin * 1000) / 1000),
           ", p90 ", str_cat(std::round(lp90 * 1000) / 1000), ", max ", str_cat(std::round(lmax * 1000) / 1000), ")");
  for (size_t i = 0; i < session.outputs().size(); ++i) {
    const Value* v = session.outputs()[i];
    const Tensor& t = outs[i];
    log_info("output '", v->name, "': ", dtype_name(v->dtype), " ", v->shape.to_string(), " ", preview(t));
    if (!out_dir.empty()) {
      std::string path = (std::filesystem::path(out_dir) / (safe_file_name(v->name) + ".npy")).string();
      Status st = npy_write(path, t);
      if (!st.ok()) return cli::fail(st);
    }
    outputs_json += str_cat(i ? "," : "", "{\"name\":\"", json_escape(v->name), "\",\"dtype\":\"", dtype_name(v->dtype),
                            "\",\"shape\":[", str_join(v->shape.dims, ","), "]}");
  }
  if (json) {
    std::string runs_json;
    for (size_t i = 0; i < runs.size(); ++i) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "{\"copy_in_ms\":%.6f,\"compute_ms\":%.6f,\"copy_out_ms\":%.6f,\"wait_ms\":[",
                    runs[i].copy_in_ms, runs[i].compute_ms, runs[i].copy_out_ms);
      runs_json += str_cat(i ? "," : "", buf);
      for (size_t u = 0; u < runs[i].wait_ms.size(); ++u) {
        std::snprintf(buf, sizeof buf, "%s%.6f", u ? "," : "", runs[i].wait_ms[u]);
        runs_json += buf;
      }
      runs_json += "]}";
    }
    std::string plan_json;
    if (const auto& plan = session.program().plan) plan_json = ",\"plan\":" + plan_summary_json(*plan, runs_wait_ms(runs));
    std::printf(
        "{\"model\":\"%s\",\"device\":\"%s\",\"executor\":\"%s\",\"threads\":%d,\"iters\":%lld,"
        "\"latency_ms\":{\"min\":%.6f,\"median\":%.6f,\"p90\":%.6f,\"max\":%.6f}%s,\"outputs\":[%s],"
        "\"runs\":[%s]}\n",
        json_escape(model).c_str(), device.c_str(), std::string(executor_name(session.executor())).c_str(), session.threads(),
        static_cast<long long>(*iters), lmin, lmed, lp90, lmax, plan_json.c_str(), outputs_json.c_str(),
        runs_json.c_str());
  }
  return 0;
}

}  // namespace tessera::tools
