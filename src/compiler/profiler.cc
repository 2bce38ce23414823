#include "compiler/profiler.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "base/clock.h"
#include "base/paths.h"
#include "base/strings.h"
#include "compiler/program.h"
#include "kernels/cpu/kernel.h"
#include "topology/cpu_topology.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// The cache key of the gauge's best time (step keys start with an op type).
constexpr char kGaugeKey[] = "@gauge";

// One run of the contention gauge, in µs: a fixed mix of independent fused
// multiply-adds and loads from L1, about 2 µs on a quiet core. Another
// thread sharing this core (a hypervisor's neighbour on the same physical
// core) or a lower clock makes it slower by about as much as it slows the
// kernels, so the ratio to the best time seen tells a measurement taken at
// full speed from one that was not.
double gauge_us() {
  alignas(64) static float data[4096];
  const int64_t t0 = now_ns();
#if defined(__AVX512F__)
  __m512 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int it = 0; it < 256; ++it) {
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(data + ((it * 8 + j) % 256) * 16));
  }
  __m512 sum = acc[0];
  for (int j = 1; j < 8; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  volatile float sink = lanes[0] + lanes[15];
#else
  float acc[64];
  for (int j = 0; j < 64; ++j) acc[j] = static_cast<float>(j);
  for (int it = 0; it < 256; ++it)
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * 0.999f + data[(it * 64 + j) % 4096];
  float sum = 0;
  for (float v : acc) sum += v;
  volatile float sink = sum;
#endif
  (void)sink;
  return static_cast<double>(now_ns() - t0) / 1e3;
}

// Identifies an rKernel instance: op, rKernel, tiling, attributes, and the
// dtype and shape of every input (constants by shape only) and output.
std::string step_key(const Step& s) {
  std::ostringstream k;
  k << s.node->op_type << "|" << s.kernel->name << "|tasks=" << s.op->tasks() << "|opset=" << s.node->opset;
  for (const auto& [name, a] : s.node->attrs) {
    k << "|" << name << "=";
    switch (a.kind) {
      case Attribute::Kind::kInt: k << a.i; break;
      case Attribute::Kind::kFloat: k << a.f; break;
      case Attribute::Kind::kString: k << a.s; break;
      case Attribute::Kind::kInts: k << str_join(a.ints, ","); break;
      case Attribute::Kind::kFloats: k << str_join(a.floats, ","); break;
      case Attribute::Kind::kStrings: k << str_join(a.strings, ","); break;
      case Attribute::Kind::kTensor: k << dtype_name(a.t.dtype()) << shape_string(a.t.shape()); break;
    }
  }
  for (const Value* v : s.node->inputs) {
    if (v == nullptr) k << "|-";
    else k << "|" << (v->is_constant() ? "c" : "") << dtype_name(v->dtype) << v->shape.to_string();
  }
  for (const Value* v : s.node->outputs) k << "|>" << dtype_name(v->dtype) << v->shape.to_string();
  return k.str();
}

std::map<std::string, double> load_cache(const std::string& path) {
  std::map<std::string, double> m;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t tab = line.rfind('\t');
    if (tab == std::string::npos || line.empty() || line[0] == '#') continue;
    char* end = nullptr;
    double v = std::strtod(line.c_str() + tab + 1, &end);
    if (end != line.c_str() + tab + 1 && v > 0 && v < 1e9) m[line.substr(0, tab)] = v;
  }
  return m;
}

void save_cache(const std::string& path, const std::map<std::string, double>& m) {
  std::ostringstream out;
  out << "# tessera profile cache: <rKernel instance> TAB <µs per rTask>\n";
  out.precision(17);  // round-trips every double: a reloaded cost equals the measured one
  for (const auto& [k, v] : m) out << k << "\t" << v << "\n";
  write_file_atomic(path, out.str());  // a cache that cannot be written is not an error
}

// A round of samples counts as taken at full speed when the gauge run just
// before it was within this factor of the best gauge time.
constexpr double kQuietGauge = 1.12;
// Fewer full-speed samples than this by max_ms_per_op: the median of all
// samples, each scaled by its round's gauge ratio, instead.
constexpr size_t kMinQuietSamples = 3;

// Times rTasks of one step; returns the median µs of one rTask among the
// rounds taken at full speed (see gauge_us), updating *best_gauge.
// *contended: no such rounds were to be had, the result is scaled.
double measure_step(const Step& s, const ProfileOptions& o, double* best_gauge, bool* contended) {
  std::vector<std::vector<unsigned char>> buffers;
  std::vector<const void*> in;
  std::vector<void*> out;
  auto buffer = [&](const Value* v) -> void* {
    size_t bytes = static_cast<size_t>(v->shape.numel()) * dtype_size(v->dtype) + 64;
    buffers.emplace_back(bytes, 0);
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buffers.back().data()) + 63) / 64 * 64);
  };
  buffers.reserve(s.node->inputs.size() + s.node->outputs.size() + 1);
  for (const Value* v : s.node->inputs) {
    if (v == nullptr) in.push_back(nullptr);
    else if (v->is_constant()) in.push_back(v->constant->raw());
    else in.push_back(buffer(v));
  }
  for (const Value* v : s.node->outputs) out.push_back(buffer(v));
  buffers.emplace_back(s.op->scratch_bytes() + 64, 0);
  void* scratch = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buffers.back().data()) + 63) / 64 * 64);
  TaskArgs args{in.data(), out.data(), scratch};
  const int64_t n = s.op->tasks();
  // Up to 4 sample indices spread over the op (edge tiles can be smaller).
  std::vector<int64_t> picks;
  for (int64_t i : {int64_t{0}, n / 3, (2 * n) / 3, n - 1})
    if (std::find(picks.begin(), picks.end(), i) == picks.end()) picks.push_back(i);
  for (int64_t t : picks) s.op->run(t, args);  // warm caches, library JIT
  std::vector<double> quiet, scaled;
  const int64_t start = now_ns();
  while (true) {
    const double g = gauge_us();
    *best_gauge = std::min(*best_gauge, g);
    const double ratio = g / *best_gauge;
    for (int64_t t : picks) {
      int64_t t0 = now_ns();
      s.op->run(t, args);
      const double us = static_cast<double>(now_ns() - t0) / 1e3;
      if (ratio <= kQuietGauge) quiet.push_back(us);
      scaled.push_back(us / ratio);
    }
    double elapsed_ms = static_cast<double>(now_ns() - start) / 1e6;
    if ((static_cast<int>(quiet.size()) >= o.min_samples && elapsed_ms >= o.min_ms_per_op) ||
        elapsed_ms >= o.max_ms_per_op)
      break;
  }
  *contended = quiet.size() < kMinQuietSamples;
  std::vector<double>& use = *contended ? scaled : quiet;
  std::nth_element(use.begin(), use.begin() + static_cast<long>(use.size() / 2), use.end());
  return std::max(use[use.size() / 2], 0.01);
}

}  // namespace

std::string cpu_cache_key() { return str_cat(cpu_id(), "-", kernel_isa()); }

Profiler::Profiler(const ProfileOptions& o) : options_(o) {
  const std::string host = o.host_tag.empty() ? "" : "-" + o.host_tag;
  cache_path_ =
      (fs::path(cache_dir(o.cache_dir)) / str_cat("profile-", cpu_cache_key(), host, "-k", kKernelVersion, ".tsv")).string();
  if (o.use_cache) cache_ = load_cache(cache_path_);
  cpu_kernels_thread_init();
  if (auto g = cache_.find(kGaugeKey); g != cache_.end()) best_gauge_ = g->second;
}

Profiler::~Profiler() { flush(); }

void Profiler::flush() {
  if (options_.use_cache && dirty_) save_cache(cache_path_, cache_);
  dirty_ = false;
}

double Profiler::cost(const Step& s, bool* from_cache) {
  std::string key = step_key(s);
  auto it = cache_.find(key);
  auto seen = fresh_.find(key);  // the same instance twice in one compile
  bool hit = !options_.refresh && it != cache_.end();
  if (from_cache) *from_cache = hit;
  if (hit) {
    ++from_cache_;
    return it->second;
  }
  if (seen != fresh_.end()) return seen->second;
  if (!gauge_warm_) {  // the best of a few hundred runs before the first measurement
    for (int i = 0; i < 200; ++i) best_gauge_ = std::min(best_gauge_, gauge_us());
    gauge_warm_ = true;
  }
  bool contended = false;
  double us = measure_step(s, options_, &best_gauge_, &contended);
  fresh_[key] = us;
  cache_[key] = us;
  cache_[kGaugeKey] = best_gauge_;
  dirty_ = true;
  ++measured_;
  if (contended) ++contended_;
  return us;
}

Result<ProfileResult> profile_program(const Program& p, const ProfileOptions& o) {
  ProfileResult r;
  Profiler prof(o);
  r.cache_path = prof.cache_path();
  for (size_t i = 0; i < p.steps.size(); ++i) {
    bool hit = false;
    r.task_cost_us.push_back(prof.cost(p.steps[i], &hit));
    r.cached.push_back(hit);
    if (o.progress) o.progress(i + 1, p.steps.size(), hit);
  }
  r.measured = prof.measured();
  r.from_cache = prof.from_cache();
  r.contended = prof.contended();
  return r;
}

}  // namespace tessera
