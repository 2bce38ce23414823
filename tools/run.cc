// tessera run MODEL.onnx: compile and execute a model, report latency and
// outputs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"
#include "text.h"

namespace tessera::tools {
namespace {

const cli::Command kRun = {
    "run",
    "tessera run MODEL.onnx|MODEL.tsx [options]",
    "Compile an ONNX model (or load an Executable written by `tessera compile`) and run it on a\n"
    "device (the local CPU unless --device says another); print latency and outputs.",
    cli::with_compile_options({
        {"--input", "NAME=FILE", "input from a .npy file; or FILE.npz holding inputs by name", true},
        {"--shape", "NAME=DIMS", "bind a dynamic input's shape, e.g. x=1x3x224x224", true},
        {"--output-dir", "DIR", "write each output to DIR/<name>.npy"},
        {"--iters", "N", "timed runs (default 10)"},
        {"--warmup", "N", "untimed runs first (default 2)"},
        {"--threads", "N", "vEUs / worker threads, including the caller (default: all cores); policy auto may\n"
                           "                          keep a Plan on fewer when it ran faster (see --no-measure)"},
        {"--executor", "NAME", "plan | two-layer | sequential (default plan)"},
        {"--device", "NAME", "cpu (default) | cuda (a GPU, where there is one) | null: import, compile, schedule and\n"
                             "                          load as for the cpu, check the inputs, compute nothing (outputs\n"
                             "                          zero-filled); see tessera devices"},
        {"--policy", "NAME", "plan executor's scheduling policy: auto | wavefront | critical-path (default auto:\n"
                             "                          both predicted, the best candidates timed; the choice is cached)"},
        {"--no-pin", "", "plan executor: leave threads unpinned (default: vEU i on core i, the caller on core 0)"},
        {"--no-adapt", "",
         "plan executor: always run the Plan on its vEUs as placed (default: a run goes on one thread\n"
         "                          alone, on the faster core, while that is faster on average, as when the host runs\n"
         "                          the cores in turns or slows one, a 2-vEU Plan's lists on each other's cores while\n"
         "                          that is faster, as when the host slows the busier list's core, and a 1-vEU Plan on\n"
         "                          the second core it was given while that one runs faster, and a vEU that waits for\n"
         "                          another right after its share of an op takes rTasks of that op from the other's\n"
         "                          share; --json marks such runs \"alone\", \"exchanged\" and counts \"taken\"). A\n"
         "                          Plan whose runs start alone (the 1-vEU Plan ran fastest when timed, its rTasks as\n"
         "                          fast alone: \"alone_first\") moves to its vEUs once they run faster; with this, it\n"
         "                          always runs alone"},
        {"--seed", "N", "seed for inputs not given (default 0)"},
        {"--trace", "FILE", "write a Chrome trace of one run (measured and predicted lanes per vEU)"},
        {"--json", "", "print one JSON object on stdout at the end"},
        {"--quiet", "", "no human-readable text on stderr"},
        {"--latency-ms", "MS", "a latency objective: refused unless the Plan is predicted to meet it (a daemon\n"
                               "                          shows the prediction against the runs, tessera status)"},
        {"--connect", "URI", "run as a tenant of the daemon at unix:///PATH (default: $TESSERA_CONNECT, else\n"
                             "                          this process alone): on the cores it leases (appliance mode)"},
        {"--token", "TOKEN", "the tenant's token with --connect (default: $TESSERA_TOKEN)"},
        {"--token-file", "FILE", "a file whose first line is the token (default: $TESSERA_TOKEN_FILE)"},
    }),
    "Inputs not given are filled with seeded random values: floats uniform in [-1, 1),\n"
    "integers uniform in [0, 16), bools fair coins.\n\n"
    "examples:\n"
    "  tessera run build/zoo/resnet18.onnx --iters 20\n"
    "  tessera compile build/zoo/resnet18.onnx -o resnet18.tsx && tessera run resnet18.tsx\n"
    "  tessera run model.onnx --input x=x.npy --output-dir out/ --json\n"
    "  tessera run bert.onnx --shape input_ids=1x64 --executor sequential\n"
    "  tessera run model.onnx --threads 4 --policy critical-path\n"};

Tensor random_tensor(DType dt, const std::vector<int64_t>& shape, uint64_t seed) {
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

bool is_integer(DType t) {
  return t == DType::kInt64 || t == DType::kInt32 || t == DType::kInt8 || t == DType::kUInt8;
}

// Converts a loaded array to the input's dtype where that is lossless in
// intent (npy float64 was narrowed on load; integer widths may differ).
Result<Tensor> conform(const Tensor& t, const TensorInfo& v, const std::string& source) {
  if (t.dtype() == v.dtype) return t;
  if (!is_integer(t.dtype()) || !is_integer(v.dtype))
    return invalid_argument(cat("input '", v.name, "' is ", dtype_name(v.dtype), " but ", source, " holds ",
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
std::vector<double> runs_wait_ms(const std::vector<RunBreakdown>& runs) {
  std::vector<double> out;
  for (size_t u = 0; !runs.empty() && u < runs[0].wait_ms.size(); ++u) {
    std::vector<double> w;
    for (const RunBreakdown& r : runs) w.push_back(r.wait_ms[u]);
    out.push_back(percentile(w, 0.5));
  }
  return out;
}

std::string preview(const Tensor& t) {
  int64_t n = t.numel();
  std::string s = "[";
  for (int64_t i = 0; i < std::min<int64_t>(n, 5); ++i) s += cat(i ? ", " : "", t.value_as_double(i));
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
    s += cat("  min ", mn, " max ", mx, " mean ", sum / static_cast<double>(n));
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

Status not_an_input(const std::string& name, const std::vector<TensorInfo>& inputs) {
  std::vector<std::string> names;
  for (const TensorInfo& in : inputs) names.push_back(in.name);
  return not_found(cat("--input names '", name, "', which is not a model input (inputs: ", join(names, ", "), ")"));
}

const TensorInfo* find_input(const std::vector<TensorInfo>& inputs, const std::string& name) {
  for (const TensorInfo& in : inputs)
    if (in.name == name) return &in;
  return nullptr;
}

// Every array given names a model input of its dtype (or a lossless
// integer width) and, where the shape is bound, of that shape.
Status check_given(const cli::Args& a, const std::map<std::string, Tensor>& given, const std::vector<TensorInfo>& inputs,
                   const std::map<std::string, std::vector<int64_t>>& bound) {
  for (const auto& [name, t] : given) {
    const TensorInfo* v = find_input(inputs, name);
    if (v == nullptr) {
      if (from_npz_bulk(a)) continue;
      return not_an_input(name, inputs);
    }
    TESSERA_RETURN_IF_ERROR(conform(t, *v, cat("the file given for '", name, "'")).status());
    const bool dynamic = std::find(v->shape.begin(), v->shape.end(), -1) != v->shape.end();
    const std::vector<int64_t>& want = bound.count(name) ? bound.at(name) : v->shape;
    if ((bound.count(name) || !dynamic) && t.shape() != want)
      return invalid_argument(cat("input '", name, "' has shape ", shape_string(want), ", got ", shape_string(t.shape()),
                                  " (use --shape to bind another size)"));
  }
  return Status();
}

// Reads every --input: NAME=FILE.npy, NAME=FILE.npz (its array NAME, or
// its only one) or FILE.npz (every array, by name).
Status read_inputs(const cli::Command& cmd, const cli::Args& a, std::map<std::string, Tensor>* given, int* usage) {
  for (const std::string& spec : a.has("--input") ? a.values.at("--input") : std::vector<std::string>{}) {
    size_t eq = spec.find('=');
    std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
    std::string file = eq == std::string::npos ? spec : spec.substr(eq + 1);
    bool npz = file.size() > 4 && file.substr(file.size() - 4) == ".npz";
    if (npz) {
      TESSERA_ASSIGN_OR_RETURN(NamedTensors arrays, load_npz(file));
      if (name.empty()) {
        for (auto& [k, t] : arrays) (*given)[k] = t;
      } else if (const Tensor* t = arrays.find(name)) {
        (*given)[name] = *t;
      } else if (arrays.size() == 1) {
        (*given)[name] = arrays.begin()->second;
      } else {
        return not_found(cat(file, " has no array named '", name, "'"));
      }
    } else {
      if (name.empty()) {
        *usage = cli::usage_error(cmd, cat("--input expects NAME=FILE.npy or FILE.npz, got '", spec, "'"));
        return invalid_argument("usage");
      }
      TESSERA_ASSIGN_OR_RETURN((*given)[name], Tensor::load_npy(file));
    }
  }
  return Status();
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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
  SessionOptions so;
  so.veus = static_cast<int>(*threads);
  so.pin = !a.has("--no-pin");
  so.adapt = !a.has("--no-adapt");
  so.device = a.get("--device", "cpu");
  if (a.has("--latency-ms")) {
    so.latency_ms = std::atof(a.get("--latency-ms").c_str());
    if (!(so.latency_ms > 0 && so.latency_ms < 1e9)) return cli::usage_error(kRun, "--latency-ms must be a positive number");
  }
  auto rt = connect_from(a);
  if (!rt.ok()) return cli::fail(rt.status());
  std::vector<std::string> names;
  for (const DeviceInfo& d : rt->devices()) names.push_back(d.name);
  if (std::find(names.begin(), names.end(), so.device) == names.end())
    return cli::usage_error(kRun, cat("no device '", so.device, "' (devices: ", join(names, ", "), "; see tessera devices)"));
  const bool null_device = so.device == "null";
  if (so.device != "cpu" && a.has("--trace")) return cli::usage_error(kRun, "--trace needs the cpu device");
  if (a.has("--executor") && !executor_parse(a.get("--executor"), &so.executor))
    return cli::usage_error(kRun, cat("--executor must be plan, two-layer or sequential, got '", a.get("--executor"), "'"));
  if (a.has("--policy") && !policy_parse(a.get("--policy"), &so.policy))
    return cli::usage_error(kRun, cat("--policy must be auto, wavefront or critical-path, got '", a.get("--policy"), "'"));
  if (a.has("--policy") && so.executor != Executor::kPlan)
    return cli::usage_error(kRun, "--policy applies to the plan executor only");
  if (a.has("--no-pin") && so.executor != Executor::kPlan)
    return cli::usage_error(kRun, "--no-pin applies to the plan executor only");
  if (a.has("--no-adapt") && so.executor != Executor::kPlan)
    return cli::usage_error(kRun, "--no-adapt applies to the plan executor only");
  if (a.has("--trace") && so.executor != Executor::kPlan) return cli::usage_error(kRun, "--trace needs the plan executor");

  CompileOptions co;
  if (Status st = cli::apply_compile_flags(a, &co); !st.ok()) return cli::usage_error(kRun, st.message());
  if (Status st = cli::parse_shape_flags(a, &co.shapes); !st.ok()) return cli::usage_error(kRun, st.message());

  std::map<std::string, Tensor> given;
  int usage = 0;
  if (Status st = read_inputs(kRun, a, &given, &usage); !st.ok()) return usage != 0 ? usage : cli::fail(st);
  const bool executable = is_executable_file(model);
  if (executable) {
    // An Executable is compiled already: its Plan fixes the executor, the
    // vEU count, the policy and the shapes.
    std::string opt = cli::first_compile_flag(a);
    for (const char* o : {"--shape", "--policy"})
      if (a.has(o)) opt = o;
    if (!opt.empty()) return cli::usage_error(kRun, cat(opt, " applies when compiling; ", model, " is a compiled Executable"));
    if (so.executor != Executor::kPlan)
      return cli::usage_error(kRun, cat(model, " is an Executable: it runs on the plan executor only"));
    // Compiled for N vEUs, the measured choice may have kept a Plan on
    // fewer: either count names this Executable.
    auto summary = inspect(model);
    if (!summary.ok()) return cli::fail(summary.status());
    const PlanInfo& plan = *summary->plan;
    if (so.veus > 0 && so.veus != plan.veus && so.veus != plan.requested_veus)
      return cli::usage_error(kRun, cat(model, " was compiled for ", plan.requested_veus, " vEUs",
                                        plan.requested_veus != plan.veus ? cat(" (its Plan uses ", plan.veus, ")") : "",
                                        "; compile it again with --veus ", so.veus));
  } else if (!given.empty()) {
    // Dynamic dimensions are bound from the arrays given (an explicit
    // --shape wins), and arrays that cannot be bound fail here, before
    // compiling (and timing Plans) for them; the session checks them again.
    auto summary = inspect(model);
    if (!summary.ok()) return cli::fail(summary.status());
    for (const TensorInfo& in : summary->inputs) {
      auto it = given.find(in.name);
      const bool dynamic = std::find(in.shape.begin(), in.shape.end(), -1) != in.shape.end();
      if (it != given.end() && !co.shapes.count(in.name) && dynamic) co.shapes[in.name] = it->second.shape();
    }
    if (Status st = check_given(a, given, summary->inputs, co.shapes); !st.ok()) return cli::fail(st);
  }
  const auto compile_start = std::chrono::steady_clock::now();
  auto m = rt->compile(model, co);
  if (!m.ok()) return cli::fail(m.status());
  auto s = m->session(so);
  if (!s.ok()) return cli::fail(s.status());
  const double compile_ms = ms_since(compile_start);
  Session& session = *s;

  NamedTensors feeds;  // every input, as bound
  for (auto& [name, t] : given) {
    const TensorInfo* v = find_input(session.inputs(), name);
    if (v == nullptr) {
      if (from_npz_bulk(a)) continue;
      return cli::fail(not_an_input(name, session.inputs()));
    }
    auto c = conform(t, *v, cat("the file given for '", name, "'"));
    if (!c.ok()) return cli::fail(c.status());
    feeds.set(name, *c);
  }
  const uint64_t input_seed = static_cast<uint64_t>(*seed);
  for (size_t i = 0; i < session.inputs().size(); ++i) {
    const TensorInfo& v = session.inputs()[i];
    if (given.count(v.name)) continue;
    say("input '", v.name, "': random ", dtype_name(v.dtype), " ", shape_string(v), " (seed ", *seed, ")");
    feeds.set(v.name, random_tensor(v.dtype, v.shape, input_seed + i * 7919));
  }

  // Only now that the model and its inputs are accepted: a failing run
  // prints nothing but its error line.
  const CompileReport report = session.compile_report();
  if (executable)
    say(model, ": Executable of ", report.ops, " ops (compiled from ", report.source, "); ", report.rtasks,
        " rTasks; arena ", human_count(static_cast<double>(report.arena_bytes)), "B; loaded and validated in ",
        fixed(compile_ms, 1), " ms");
  else
    say(model, ": ", report.nodes_imported, " nodes imported, ", report.ops, " ops after ", report.folded, " folded, ",
        report.removed, " removed, ", report.fused, " fused",
        report.blocked > 0 ? cat(", ", report.blocked, " convs on channel blocks") : std::string(), "; ",
        report.rtasks, " rTasks; arena ",
        human_count(static_cast<double>(report.arena_bytes)), "B; imported and compiled in ", fixed(compile_ms, 1), " ms");
  // Runs. Inputs are read where they lie; latency is the compute part
  // (what the executors differ in), and --json breaks every run down.
  for (int64_t i = 0; i < *warmup; ++i)
    if (auto out = session.run(feeds); !out.ok()) return cli::fail(out.status());
  std::vector<RunBreakdown> runs;
  std::vector<double> ms, wall_ms;
  NamedTensors outs;
  for (int64_t i = 0; i < *iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = session.run(feeds);
    wall_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!out.ok()) return cli::fail(out.status());
    outs = std::move(*out);
    runs.push_back(session.last_breakdown());
    ms.push_back(runs.back().compute_ms);
  }
  const std::string trace_path = a.get("--trace");
  if (!trace_path.empty()) {
    if (Status st = session.trace_next_run(trace_path); !st.ok()) return cli::fail(st);
    if (auto out = session.run(feeds); !out.ok()) return cli::fail(out.status());
    say("trace of one run written to ", trace_path, " (open in chrome://tracing or ui.perfetto.dev)");
  }
  double lmin = *std::min_element(ms.begin(), ms.end()), lmax = *std::max_element(ms.begin(), ms.end());
  double lmed = percentile(ms, 0.5), lp90 = percentile(ms, 0.9);

  // Outputs.
  std::string out_dir = a.get("--output-dir");
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return cli::fail(invalid_argument(cat("cannot create --output-dir '", out_dir, "': ", ec.message())));
  }
  std::string outputs_json;
  std::string how = std::string(executor_name(session.executor()));
  if (auto plan = session.plan(); plan.ok()) {
    how = cat("plan (", policy_name(plan->policy), ", predicted ", std::round(plan->predicted_us) / 1000, " ms");
    if (plan->requested_veus > plan->veus)
      how += cat("; ", plan->veus, " of ", plan->requested_veus, " vEUs: fastest when the candidates were timed");
    if (plan->alone_first && so.adapt)
      how += cat("; runs start on one thread (predicted ", std::round(plan->alone_predicted_us) / 1000,
                 " ms), as fast as the 1-vEU Plan when the candidates were timed, and move to the ", plan->veus,
                 " vEUs once a probe finds them faster");
    else if (plan->alone_first)
      how += cat("; every run on one thread (predicted ", std::round(plan->alone_predicted_us) / 1000,
                 " ms), as fast as the 1-vEU Plan when the candidates were timed (--no-adapt)");
    how += ")";
  }
  if (null_device)
    say("device null: the model was imported, compiled, scheduled and loaded and its inputs checked; nothing "
        "was computed, outputs are zero-filled");
  say("executor ", how, null_device ? " on the null device" : "", ", ", session.veus(), " thread(s); latency over ",
      *iters, " runs: median ", cat(std::round(lmed * 1000) / 1000), " ms (min ", cat(std::round(lmin * 1000) / 1000),
      ", p90 ", cat(std::round(lp90 * 1000) / 1000), ", max ", cat(std::round(lmax * 1000) / 1000), ")");
  if (so.adapt) {
    // How the runs adapted to the host (--no-adapt: none did; a Plan that
    // starts alone then runs alone, as `how` says).
    int64_t alone = 0, exchanged = 0, taken = 0, taking = 0;
    for (const RunBreakdown& r : runs) {
      alone += r.alone;
      exchanged += r.exchanged;
      taken += r.taken;
      taking += r.taken > 0;
    }
    if (alone + exchanged + taken > 0)
      say("adapted to the host: ", alone, " run(s) alone, ", exchanged, " with lists exchanged, ", taking,
          " in which waiting vEUs took rTasks (", taken, " in all)");
  }
  size_t i = 0;
  for (const auto& [name, t] : outs) {
    say("output '", name, "': ", dtype_name(t.dtype()), " ", shape_string(t.shape()), " ", preview(t));
    if (!out_dir.empty()) {
      std::string path = (std::filesystem::path(out_dir) / (safe_file_name(name) + ".npy")).string();
      if (Status st = t.save_npy(path); !st.ok()) return cli::fail(st);
    }
    outputs_json += cat(i++ ? "," : "", "{\"name\":\"", json_escape(name), "\",\"dtype\":\"", dtype_name(t.dtype()),
                        "\",\"shape\":[", join(t.shape(), ","), "]}");
  }
  if (json) {
    std::string runs_json;
    for (size_t k = 0; k < runs.size(); ++k) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "{\"wall_ms\":%.6f,\"copy_in_ms\":%.6f,\"compute_ms\":%.6f,\"copy_out_ms\":%.6f,"
                    "\"device_ms\":%.6f,\"alone\":%s,\"exchanged\":%s,\"taken\":%lld,\"wait_ms\":[",
                    wall_ms[k], runs[k].copy_in_ms, runs[k].compute_ms, runs[k].copy_out_ms, runs[k].device_ms,
                    runs[k].alone ? "true" : "false", runs[k].exchanged ? "true" : "false",
                    static_cast<long long>(runs[k].taken));
      runs_json += cat(k ? "," : "", buf);
      for (size_t u = 0; u < runs[k].wait_ms.size(); ++u) {
        std::snprintf(buf, sizeof buf, "%s%.6f", u ? "," : "", runs[k].wait_ms[u]);
        runs_json += buf;
      }
      runs_json += "]}";
    }
    std::string plan_json;
    if (session.plan().ok()) plan_json = ",\"plan\":" + session.plan_json(runs_wait_ms(runs));
    std::printf(
        "{\"model\":\"%s\",\"device\":\"%s\",\"executor\":\"%s\",\"threads\":%d,\"iters\":%lld,"
        "\"latency_ms\":{\"min\":%.6f,\"median\":%.6f,\"p90\":%.6f,\"max\":%.6f}%s,\"outputs\":[%s],"
        "\"runs\":[%s]}\n",
        json_escape(model).c_str(), so.device.c_str(), std::string(executor_name(session.executor())).c_str(),
        session.veus(), static_cast<long long>(*iters), lmin, lmed, lp90, lmax, plan_json.c_str(), outputs_json.c_str(),
        runs_json.c_str());
  }
  return 0;
}

}  // namespace tessera::tools
