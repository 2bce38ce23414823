// tessera-gpu-bench: the Tessera half of bench/gpu/gpu_bench.py, on the
// public API alone. For each zoo model it compiles two sessions on the GPU,
// the Plan as one persistent launch over every SM and the two-layer control
// (one launch per op, replayed as a CUDA graph); checks both against the
// model's PyTorch outputs and for the same bits run after run; then waits
// on standard input, so that the driver can interleave it with PyTorch:
//
//   round N   runs every session N times, model by model, the two
//             executors alternating; prints one JSON line per session with
//             the device times (GPU events around the launch) of each run
//   quit      exits
//
// Usage: tessera-gpu-bench ZOO_DIR MODEL...
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "tessera/inspect.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;

double rel_l2(const Tensor& got, const Tensor& want) {
  if (got.dtype() != DType::kFloat32 || want.dtype() != DType::kFloat32 || got.numel() != want.numel()) return INFINITY;
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = static_cast<double>(got.data<float>()[i]) - want.data<float>()[i];
    num += d * d;
    den += static_cast<double>(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

bool same_bits(const NamedTensors& a, const NamedTensors& b) {
  for (const auto& [name, t] : a) {
    const Tensor* u = b.find(name);
    if (u == nullptr || u->nbytes() != t.nbytes() || std::memcmp(u->raw(), t.raw(), t.nbytes()) != 0) return false;
  }
  return a.size() == b.size();
}

struct Entry {
  std::string model, executor;
  Session session;
  NamedTensors inputs;
};

int fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "tessera-gpu-bench: %s: %s\n", what.c_str(), st.to_string().c_str());
  return 1;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

// A model that does not compile or run is reported and left out.
void refuse(const std::string& model, const std::string& executor, const Status& st) {
  std::printf("{\"check\":1,\"model\":\"%s\",\"executor\":\"%s\",\"error\":\"%s\"}\n", model.c_str(),
              executor.c_str(), json_escape(st.to_string()).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tessera-gpu-bench ZOO_DIR MODEL...\n");
    return 2;
  }
  const std::string zoo = argv[1];
  Result<Runtime> rt = connect();
  if (!rt.ok()) return fail("connect", rt.status());
  std::string gpu;
  for (const DeviceInfo& d : rt->devices())
    if (d.kind == "cuda" && gpu.empty()) gpu = d.note;
  if (gpu.empty()) {
    std::fprintf(stderr, "tessera-gpu-bench: no CUDA device here (no GPU or no driver)\n");
    return 3;
  }
  std::printf("{\"gpu\":\"%s\"}\n", gpu.c_str());
  std::vector<Entry> entries;
  for (int a = 2; a < argc; ++a) {
    const std::string m = argv[a];
    std::fprintf(stderr, "tessera-gpu-bench: compiling %s\n", m.c_str());
    CompileOptions o;
    o.profile = false;
    o.measure = false;
    if (m == "bert_tiny") o.shapes = {{"input_ids", {1, 64}}, {"attention_mask", {1, 64}}};
    Result<Model> model = rt->compile(zoo + "/" + m + ".onnx", o);
    Result<NamedTensors> in = load_npz(zoo + "/" + m + ".inputs.npz");
    Result<NamedTensors> want = load_npz(zoo + "/" + m + ".outputs.npz");
    if (!model.ok() || !in.ok() || !want.ok()) {
      const Status st = !model.ok() ? model.status() : !in.ok() ? in.status() : want.status();
      refuse(m, "plan", st);
      refuse(m, "two-layer", st);
      continue;
    }
    for (Executor ex : {Executor::kPlan, Executor::kTwoLayer}) {
      const std::string name = ex == Executor::kPlan ? "plan" : "two-layer";
      std::fprintf(stderr, "tessera-gpu-bench: %s on the GPU (%s)\n", m.c_str(), name.c_str());
      Result<Session> s = model->session({.device = "cuda", .executor = ex});
      if (!s.ok()) {
        refuse(m, name, s.status());
        continue;
      }
      Result<NamedTensors> first = s->run(*in);
      if (!first.ok()) {
        refuse(m, name, first.status());
        continue;
      }
      double worst = 0;
      std::size_t i = 0;
      std::vector<std::string> names;
      for (const auto& [n, t] : *want) names.push_back(n);
      for (const auto& [n, t] : *first) {
        // The zoo names outputs output / output0.. in model order.
        const Tensor* w = want->find(n);
        if (w == nullptr && i < names.size()) w = want->find(names[i]);
        worst = std::max(worst, w == nullptr ? INFINITY : rel_l2(t, *w));
        ++i;
      }
      bool stable = true;
      for (int r = 0; r < 5 && stable; ++r) {
        Result<NamedTensors> again = s->run(*in);
        stable = again.ok() && same_bits(*again, *first);
      }
      double predicted_us = 0;
      int veus = 0;
      if (Result<PlanInfo> p = s->plan(); p.ok()) {
        predicted_us = p->predicted_us;
        veus = p->veus;
      }
      std::printf(
          "{\"check\":1,\"model\":\"%s\",\"executor\":\"%s\",\"rel_l2\":%.3g,\"stable\":%s,\"veus\":%d,"
          "\"predicted_us\":%.2f}\n",
          m.c_str(), name.c_str(), worst, stable ? "true" : "false", veus, predicted_us);
      entries.push_back({m, name, std::move(*s), std::move(*in)});
      in = load_npz(zoo + "/" + m + ".inputs.npz");
    }
  }
  std::fflush(stdout);
  std::string cmd;
  while (std::cin >> cmd) {
    if (cmd == "quit") break;
    int n = 0;
    if (cmd != "round" || !(std::cin >> n) || n < 1) {
      std::fprintf(stderr, "tessera-gpu-bench: expected 'round N' or 'quit'\n");
      return 2;
    }
    std::map<std::string, std::vector<double>> dev, wall;
    // Model by model, the executors alternating run by run.
    for (std::size_t e = 0; e < entries.size(); e += 2)
      for (int r = 0; r < n; ++r)
        for (std::size_t k = e; k < e + 2 && k < entries.size(); ++k) {
          Entry& x = entries[k];
          Result<NamedTensors> out = x.session.run(x.inputs);
          if (!out.ok()) return fail(x.model + " " + x.executor, out.status());
          const RunBreakdown b = x.session.last_breakdown();
          dev[x.model + "/" + x.executor].push_back(b.device_ms);
          wall[x.model + "/" + x.executor].push_back(b.compute_ms + b.copy_in_ms + b.copy_out_ms);
        }
    for (const Entry& x : entries) {
      const std::string key = x.model + "/" + x.executor;
      std::printf("{\"model\":\"%s\",\"executor\":\"%s\",\"device_ms\":[", x.model.c_str(), x.executor.c_str());
      for (std::size_t i = 0; i < dev[key].size(); ++i) std::printf("%s%.5f", i ? "," : "", dev[key][i]);
      std::printf("],\"run_ms\":[");
      for (std::size_t i = 0; i < wall[key].size(); ++i) std::printf("%s%.5f", i ? "," : "", wall[key][i]);
      std::printf("]}\n");
    }
    std::printf("{\"round_done\":1}\n");
    std::fflush(stdout);
  }
  return 0;
}
