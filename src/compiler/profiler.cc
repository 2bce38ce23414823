#include "compiler/profiler.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>

#if defined(__x86_64__)
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
// dtype and shape of every input (constants by shape only) and output;
// "|cold" where its constants were evicted before each sample.
std::string step_key(const Step& s, bool cold) {
  std::ostringstream k;
  k << s.node->op_type << "|" << s.kernel->name << "|tasks=" << s.op->tasks() << "|opset=" << s.node->opset;
  if (cold) k << "|cold";
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
// samples, each scaled by its round's gauge ratio, instead, but never
// below the fastest sample taken. The gauge and a kernel are not always
// slowed alike (a gauge run cut by the hypervisor, a neighbour that
// streams memory and leaves the FMA units alone), and an estimate faster
// than any run ever seen would plan on speed the core never showed.
constexpr size_t kMinQuietSamples = 3;

// Writes back and drops every cache line of these bytes from every level
// of this PU's caches (and, coherently, every other PU's), as if the next
// read came after a run's worth of other data had pushed them out (x86-64
// only: profiler_can_evict).
void evict_from_caches(const std::vector<std::span<const std::byte>>& spans) {
#if defined(__x86_64__)
  constexpr uintptr_t kLine = 64;
  for (std::span<const std::byte> b : spans) {
    if (b.empty()) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(b.data()) & ~(kLine - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(b.data() + b.size());
    for (uintptr_t a = begin; a < end; a += kLine) _mm_clflush(reinterpret_cast<const void*>(a));
  }
  _mm_mfence();  // every flush done before the timed run's first load
#else
  (void)spans;
#endif
}

// Whether only one live node reads `v`. A constant several nodes read (a
// recurrent layer's R, read by every time step) comes round again within
// a run, after only what the steps between touch: the run finds it in
// cache, and the profile does not evict it.
bool read_once_per_run(const Value* v) {
  const Node* reader = nullptr;
  for (const Node* n : v->uses) {
    if (n->dead || n == reader) continue;
    if (reader != nullptr) return false;
    reader = n;
  }
  return true;
}

// What to evict before each sample of `s` (ProfileOptions::cold_llc_kb):
// the constant inputs only it reads and what its op packed; empty where
// the profile is warm or they exceed the cache.
std::vector<std::span<const std::byte>> cold_spans(const Step& s, const ProfileOptions& o) {
  std::vector<std::span<const std::byte>> spans;
  if (o.cold_llc_kb <= 0 || !profiler_can_evict()) return spans;
  size_t bytes = 0;
  for (const Value* v : s.node->inputs)
    if (v != nullptr && v->is_constant() && read_once_per_run(v)) {
      spans.emplace_back(static_cast<const std::byte*>(v->constant->raw()), v->constant->nbytes());
      bytes += v->constant->nbytes();
    }
  for (std::span<const std::byte> b : s.op->resident()) {
    spans.push_back(b);
    bytes += b.size();
  }
  if (static_cast<double>(bytes) > o.cold_llc_kb * 1024) spans.clear();
  return spans;
}

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
  // Cold: what a run reads from memory (the node's constants and what the
  // op packed from them) leaves the caches before every sample; the time
  // that takes does not count towards the op's sampling time.
  const std::vector<std::span<const std::byte>> cold = cold_spans(s, o);
  std::vector<double> quiet, scaled;
  double fastest = std::numeric_limits<double>::infinity();
  const int64_t start = now_ns();
  int64_t evicting_ns = 0;
  while (true) {
    const double g = gauge_us();
    *best_gauge = std::min(*best_gauge, g);
    const double ratio = g / *best_gauge;
    for (int64_t t : picks) {
      if (!cold.empty()) {
        const int64_t e0 = now_ns();
        evict_from_caches(cold);
        evicting_ns += now_ns() - e0;
      }
      int64_t t0 = now_ns();
      s.op->run(t, args);
      const double us = static_cast<double>(now_ns() - t0) / 1e3;
      if (ratio <= kQuietGauge) quiet.push_back(us);
      scaled.push_back(us / ratio);
      fastest = std::min(fastest, us);
    }
    double elapsed_ms = static_cast<double>(now_ns() - start - evicting_ns) / 1e6;
    if ((static_cast<int>(quiet.size()) >= o.min_samples && elapsed_ms >= o.min_ms_per_op) ||
        elapsed_ms >= o.max_ms_per_op)
      break;
  }
  *contended = quiet.size() < kMinQuietSamples;
  std::vector<double>& use = *contended ? scaled : quiet;
  std::nth_element(use.begin(), use.begin() + static_cast<long>(use.size() / 2), use.end());
  const double median = use[use.size() / 2];
  return std::max(*contended ? std::max(median, fastest) : median, 0.01);
}

}  // namespace

std::string profile_step_key(const Step& s, const ProfileOptions& o) { return step_key(s, !cold_spans(s, o).empty()); }

bool profiler_can_evict() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

size_t program_constant_bytes(const Program& p) {
  std::unordered_set<const Value*> seen;
  size_t bytes = 0;
  for (const Step& s : p.steps)
    for (const Value* v : s.node->inputs)
      if (v != nullptr && v->is_constant() && seen.insert(v).second) bytes += v->constant->nbytes();
  return bytes;
}

size_t program_activation_bytes(const Program& p) {
  if (p.graph == nullptr) return 0;
  std::vector<const Node*> order;
  order.reserve(p.steps.size());
  for (const Step& s : p.steps) order.push_back(s.node);
  return plan_memory(*p.graph, order, p.aliases).arena_bytes;
}

bool weights_are_cold(const Program& p, double cache_kb) {
  if (!(cache_kb > 0)) return false;
  const double touched =
      static_cast<double>(program_constant_bytes(p)) + static_cast<double>(program_activation_bytes(p));
  return touched > cache_kb * 1024;
}

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
  std::string key = profile_step_key(s, options_);
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
