#include "topology/calibrate.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <chrono>
#include <numeric>
#include <thread>

#include "base/clock.h"
#include "base/strings.h"

namespace tessera {
namespace {

// ------------------------------------------------------------ loops ---

inline void compiler_barrier() { asm volatile("" ::: "memory"); }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

#if defined(__AVX512F__)
constexpr int kFmaLanes = 16;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kFmaLanes = 8;
#else
constexpr int kFmaLanes = 1;
#endif

// fp32 FLOPs in `iters` rounds of fma_loop.
double fma_flops(int64_t iters) { return static_cast<double>(iters) * 12 * 2 * kFmaLanes; }

// `iters` rounds of 12 independent FMA chains; returns fp32 FLOPs done.
__attribute__((noinline)) double fma_loop(int64_t iters) {
#if defined(__AVX512F__)
  using V = __m512;
  auto set = [](float x) { return _mm512_set1_ps(x); };
  auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  auto add = [](V a, V b) { return _mm512_add_ps(a, b); };
  auto first = [](V a) { return _mm512_cvtss_f32(a); };
#elif defined(__AVX2__) && defined(__FMA__)
  using V = __m256;
  auto set = [](float x) { return _mm256_set1_ps(x); };
  auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  auto add = [](V a, V b) { return _mm256_add_ps(a, b); };
  auto first = [](V a) { return _mm256_cvtss_f32(a); };
#else
  using V = float;
  auto set = [](float x) { return x; };
  auto fma = [](V a, V b, V c) { return a * b + c; };
  auto add = [](V a, V b) { return a + b; };
  auto first = [](V a) { return a; };
#endif
  V a0 = set(0), a1 = set(1), a2 = set(2), a3 = set(3), a4 = set(4), a5 = set(5);
  V a6 = set(6), a7 = set(7), a8 = set(8), a9 = set(9), a10 = set(10), a11 = set(11);
  const V m = set(0.9999f), b = set(1e-4f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = fma(a0, m, b), a1 = fma(a1, m, b), a2 = fma(a2, m, b), a3 = fma(a3, m, b);
    a4 = fma(a4, m, b), a5 = fma(a5, m, b), a6 = fma(a6, m, b), a7 = fma(a7, m, b);
    a8 = fma(a8, m, b), a9 = fma(a9, m, b), a10 = fma(a10, m, b), a11 = fma(a11, m, b);
#if defined(__AVX512F__) || defined(__AVX2__)
    // Keeps the chains in registers and the loop as written.
    asm volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
#endif
  }
  V s = add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7)));
  s = add(s, add(add(a8, a9), add(a10, a11)));
  volatile float sink = first(s);
  (void)sink;
  return fma_flops(iters);
}

// GFLOP/s of the FMA loop run for about `ms` (after a ramp of the same
// length, so the clock has settled).
// Rounds of fma_loop that take about `ms` on the calling thread's PU.
int64_t fma_iters_for(double ms) {
  int64_t iters = 20000;
  for (int pass = 0; pass < 8; ++pass) {  // grow until a run takes ms
    const int64_t t0 = now_ns();
    fma_loop(iters);
    const double took = static_cast<double>(now_ns() - t0) / 1e6;
    if (took >= ms * 0.5) break;
    iters = static_cast<int64_t>(static_cast<double>(iters) * std::min(16.0, ms / std::max(took, 1e-3)));
  }
  return iters;
}

double fma_rate(double ms) {
  const int64_t iters = fma_iters_for(ms);
  double best = 0;
  for (int k = 0; k < 3; ++k) {
    const int64_t t0 = now_ns();
    const double flops = fma_loop(iters);
    best = std::max(best, flops / static_cast<double>(now_ns() - t0));  // FLOP per ns = GFLOP/s
  }
  return best;
}

// Reads `bytes` (a multiple of 256) with independent accumulators, so the
// loop is bound by the loads, not by a chain of adds.
__attribute__((noinline)) uint64_t read_buffer(const char* p, size_t bytes) {
#if defined(__AVX512F__)
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a0);
  return lanes[0] ^ lanes[7];
#elif defined(__AVX2__)
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a0, 0) ^ _mm256_extract_epi64(a0, 3));
#else
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t a[8] = {};
  for (size_t i = 0; i < bytes / 8; i += 8)
    for (int k = 0; k < 8; ++k) a[k] ^= q[i + k];
  return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
#endif
}

__attribute__((noinline)) void write_buffer(char* p, size_t bytes, uint64_t value) {
#if defined(__AVX512F__)
  const __m512i v = _mm512_set1_epi64(static_cast<long long>(value));
  for (size_t i = 0; i < bytes; i += 64) _mm512_store_si512(p + i, v);
#elif defined(__AVX2__)
  const __m256i v = _mm256_set1_epi64x(static_cast<long long>(value));
  for (size_t i = 0; i < bytes; i += 32) _mm256_store_si256(reinterpret_cast<__m256i*>(p + i), v);
#else
  uint64_t* q = reinterpret_cast<uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) q[i] = value;
#endif
  compiler_barrier();
}

std::atomic<uint64_t> g_sink{0};  // keeps every read alive

double timed_read_ns(const char* p, size_t bytes) {
  compiler_barrier();
  const int64_t t0 = now_ns();
  const uint64_t x = read_buffer(p, bytes);
  const int64_t t1 = now_ns();
  g_sink.fetch_xor(x, std::memory_order_relaxed);
  return static_cast<double>(t1 - t0);
}

double timed_write_ns(char* p, size_t bytes, uint64_t value) {
  compiler_barrier();
  const int64_t t0 = now_ns();
  write_buffer(p, bytes, value);
  return static_cast<double>(now_ns() - t0);
}

// ------------------------------------------------------------ helpers ---

struct Buffer {
  explicit Buffer(size_t bytes) : size(bytes), data(static_cast<char*>(std::aligned_alloc(4096, bytes))) {
    std::memset(data, 0, bytes);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  size_t size;
  char* data;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double lower_quartile(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 4), v.end());
  return v[v.size() / 4];
}

// Median of the even and of the odd samples: far apart means the host
// changed while measuring.
bool halves_agree(const std::vector<double>& v, double* lo, double* hi) {
  std::vector<double> a, b;
  for (size_t i = 0; i < v.size(); ++i) (i % 2 ? b : a).push_back(v[i]);
  const double ma = median(a), mb = median(b);
  *lo = std::min(ma, mb);
  *hi = std::max(ma, mb);
  return *lo <= 0 || *hi / *lo <= 4.0 / 3.0;
}

// Runs fa on PU a and fb on PU b at the same time and waits for both.
template <typename A, typename B>
void on_pair(unsigned a, unsigned b, A&& fa, B&& fb) {
  std::thread ta([&] {
    pin_current_thread_to_pu(a);
    fa();
  });
  std::thread tb([&] {
    pin_current_thread_to_pu(b);
    fb();
  });
  ta.join();
  tb.join();
}

template <typename F>
void on_pu(unsigned pu, F&& f) {
  std::thread t([&] {
    pin_current_thread_to_pu(pu);
    f();
  });
  t.join();
}

void spin_until(const std::atomic<int>& flag, int value) {
  while (flag.load(std::memory_order_acquire) != value) cpu_relax();
}

// ------------------------------------------------------- measurements ---

constexpr double kSizesKb[] = {16, 128, 1024, 4096};
constexpr size_t kSizes = sizeof kSizesKb / sizeof kSizesKb[0];
constexpr size_t kTypicalSize = 1;  // 128 KB
static_assert(kSizesKb[kTypicalSize] == HostMap::kTypicalKb);

struct CostSamples {
  std::vector<double> read, rewrite;  // ns per KB
};

// One PU: reads of what it just wrote, rewrites of what only it holds.
CostSamples local_costs(unsigned pu, size_t bytes, int reps) {
  CostSamples s;
  Buffer buf(bytes);
  const double kb = static_cast<double>(bytes) / 1024;
  on_pu(pu, [&] {
    write_buffer(buf.data, bytes, 1);
    for (int k = 0; k < reps + 1; ++k) {
      const double w = timed_write_ns(buf.data, bytes, static_cast<uint64_t>(k) + 2);
      const double r = timed_read_ns(buf.data, bytes);
      if (k == 0) continue;  // the first pass moves the buffer into place
      s.rewrite.push_back(w / kb);
      s.read.push_back(r / kb);
    }
  });
  return s;
}

// Writer w, reader r: r reads what w just wrote; w rewrites what r just
// read (every sample after the first).
CostSamples cross_costs(unsigned writer, unsigned reader, size_t bytes, int reps) {
  CostSamples s;
  Buffer buf(bytes);
  const double kb = static_cast<double>(bytes) / 1024;
  std::atomic<int> step{0};
  on_pair(
      writer, reader,
      [&] {
        for (int k = 0; k <= reps; ++k) {
          spin_until(step, 2 * k);
          const double w = timed_write_ns(buf.data, bytes, static_cast<uint64_t>(k) + 7);
          if (k > 0) s.rewrite.push_back(w / kb);
          step.store(2 * k + 1, std::memory_order_release);
        }
      },
      [&] {
        for (int k = 0; k <= reps; ++k) {
          spin_until(step, 2 * k + 1);
          const double r = timed_read_ns(buf.data, bytes);
          if (k > 0) s.read.push_back(r / kb);
          step.store(2 * k + 2, std::memory_order_release);
        }
      });
  return s;
}

// One-way hand-off between PUs a and b: half the mean round trip of a
// flag bounced `rounds` times, for each of `runs` runs a millisecond apart
// (so that one burst of a neighbour's work spoils few of them).
std::vector<double> handoff_samples(unsigned a, unsigned b, int rounds, int runs) {
  struct alignas(64) Flag {
    std::atomic<int64_t> v{0};
  };
  std::vector<double> out;
  for (int run = 0; run < runs; ++run) {
    Flag ping, pong;
    double ns = 0;
    on_pair(
        a, b,
        [&] {
          const int64_t t0 = now_ns();
          for (int64_t i = 1; i <= rounds; ++i) {
            ping.v.store(i, std::memory_order_release);
            while (pong.v.load(std::memory_order_acquire) < i) cpu_relax();
          }
          ns = static_cast<double>(now_ns() - t0) / (2.0 * rounds);
        },
        [&] {
          for (int64_t i = 1; i <= rounds; ++i) {
            while (ping.v.load(std::memory_order_acquire) < i) cpu_relax();
            pong.v.store(i, std::memory_order_release);
          }
        });
    out.push_back(ns);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return out;
}

// FMA rates of a and b running at once, each over its rate alone.
// ns from the first start to the last end of `iters` FMA rounds on each of
// `pus`, started together. Two vCPUs a hypervisor runs in turns on one
// physical thread take twice as long as one, however fast each is while
// it runs.
double fma_span_ns(const std::vector<unsigned>& pus, int64_t iters) {
  const size_t n = pus.size();
  std::atomic<size_t> ready{0};
  std::vector<int64_t> start(n), end(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      pin_current_thread_to_pu(pus[i]);
      ready.fetch_add(1);
      while (ready.load() < n) cpu_relax();
      start[i] = now_ns();
      fma_loop(iters);
      end[i] = now_ns();
    });
  for (std::thread& t : threads) t.join();
  return static_cast<double>(*std::max_element(end.begin(), end.end()) - *std::min_element(start.begin(), start.end()));
}

// How fast a and b run the same FMA work together, over the slower of
// the two alone (each alone the best of two).
double fma_together_ratio(unsigned a, unsigned b, double ms) {
  int64_t iters = 0;
  on_pu(a, [&] { iters = fma_iters_for(ms); });
  double alone = 0;
  for (unsigned p : {a, b}) alone = std::max(alone, std::min(fma_span_ns({p}, iters), fma_span_ns({p}, iters)));
  return alone / fma_span_ns({a, b}, iters);
}

// GB/s reading a buffer far beyond the caches (the best of 3 passes).
double memory_rate(unsigned pu, size_t mb) {
  double best = 0;
  Buffer buf(mb << 20);
  on_pu(pu, [&] {
    write_buffer(buf.data, buf.size, 3);
    for (int k = 0; k < 3; ++k) best = std::max(best, static_cast<double>(buf.size) / timed_read_ns(buf.data, buf.size));
  });
  return best;
}

// Re-read rates on `pu`, GB/s, of working sets of `sizes_kb` (ascending):
// each the best of kHeldPasses passes over the first bytes of one buffer
// (a neighbour's bursts only ever slow a pass), after one pass that
// brings them in. Stops two sizes after the rate has fallen below the
// midpoint between the best so far and memory.
std::vector<double> reread_rates(unsigned pu, const std::vector<double>& sizes_kb, double mem_gbps) {
  constexpr int kHeldPasses = 7;
  std::vector<double> rates;
  Buffer buf(static_cast<size_t>(sizes_kb.back()) * 1024);
  on_pu(pu, [&] {
    write_buffer(buf.data, buf.size, 5);
    double best = 0;
    int below = 0;
    for (double kb : sizes_kb) {
      const size_t bytes = static_cast<size_t>(kb) * 1024;
      timed_read_ns(buf.data, bytes);
      std::vector<double> gbps;
      for (int k = 0; k < kHeldPasses; ++k) gbps.push_back(static_cast<double>(bytes) / timed_read_ns(buf.data, bytes));
      rates.push_back(*std::max_element(gbps.begin(), gbps.end()));
      best = std::max(best, rates.back());
      below = rates.back() < std::sqrt(best * mem_gbps) ? below + 1 : 0;
      if (below == 2) break;
    }
  });
  return rates;
}

// --------------------------------------------------------- the map ---

class Measurer {
 public:
  Measurer(const CpuTopology& t, const MeasureOptions& o) : t_(t), o_(o), n_(t.pus) {}

  HostMap run() {
    const int64_t t0 = now_ns();
    m_.key = host_shape_key(t_);
    m_.cpu = cpu_model_name();
    m_.llc_kb = t_.llc_kb;
    m_.measured_at = static_cast<int64_t>(std::time(nullptr));
    for (const CpuPu& p : t_.pu_info) m_.pus.push_back({p.os_index, p.core, p.l2, p.l3, p.numa, 0, 0});
    m_.sizes_kb.assign(std::begin(kSizesKb), std::end(kSizesKb));
    const size_t nn = static_cast<size_t>(n_) * static_cast<size_t>(n_);
    m_.read_ns_per_kb.assign(kSizes, std::vector<double>(nn, 0));
    m_.rewrite_ns_per_kb.assign(kSizes, std::vector<double>(nn, 0));
    m_.handoff_ns.assign(nn, 0);
    m_.fma_together.assign(nn, 1);
    m_.sharing.assign(nn, Sharing::kNone);
    std::vector<std::pair<int, int>> pairs = pairs_to_measure();
    total_ = static_cast<size_t>(n_) + pairs.size();
    for (int p = 0; p < n_; ++p) measure_pu(p);
    measure_held();
    for (const auto& [a, b] : pairs) measure_pair(a, b);
    // The FMA rate once more, after the pairs, the best kept: a neighbour
    // that held a core for the first look must not lower it for good.
    for (int p = 0; p < n_; ++p)
      on_pu(os(p), [&] {
        HostPu& pu = m_.pus[static_cast<size_t>(p)];
        pu.fma_gflops = std::max(pu.fma_gflops, fma_rate(o_.fma_ms));
      });
    fill_unmeasured(pairs);
    decide_sharing();
    m_.measure_s = static_cast<double>(now_ns() - t0) / 1e9;
    return std::move(m_);
  }

 private:
  size_t at(int a, int b) const { return static_cast<size_t>(a * n_ + b); }
  unsigned os(int p) const { return m_.pus[static_cast<size_t>(p)].os_index; }
  void progress(const std::string& stage) {
    if (o_.progress) o_.progress(stage, ++done_, total_);
  }

  std::vector<std::pair<int, int>> pairs_to_measure() const {
    std::vector<std::pair<int, int>> pairs;
    constexpr int kAllPairsUpTo = 16;
    for (int a = 0; a < n_; ++a)
      for (int b = a + 1; b < n_; ++b)
        if (n_ <= kAllPairsUpTo || a == 0 || b == a + 1) pairs.push_back({a, b});
    return pairs;
  }

  // Keeps the lower quartile of `samples`: what the hardware does when
  // nothing else runs (a neighbour's bursts only ever raise samples).
  // When the halves of the samples disagree, `again` measures once more
  // and the quartile of both is kept, flagged if the second set disagrees
  // too.
  template <typename F>
  double steady(std::vector<double> samples, const std::string& what, F&& again) {
    double lo, hi;
    if (halves_agree(samples, &lo, &hi)) return lower_quartile(samples);
    std::vector<double> more = again();
    if (!halves_agree(more, &lo, &hi)) {
      m_.noisy = true;
      if (m_.notes.size() < 12)
        m_.notes.push_back(str_cat(what, " varied from ", str_fixed(lo, 1), " to ", str_fixed(hi, 1), " while measured"));
    }
    samples.insert(samples.end(), more.begin(), more.end());
    return lower_quartile(samples);
  }

  void measure_pu(int p) {
    HostPu& pu = m_.pus[static_cast<size_t>(p)];
    on_pu(os(p), [&] { pu.fma_gflops = fma_rate(o_.fma_ms); });
    pu.mem_gbps = memory_rate(os(p), o_.mem_mb);
    for (size_t s = 0; s < kSizes; ++s) {
      const size_t bytes = static_cast<size_t>(kSizesKb[s]) * 1024;
      CostSamples c = local_costs(os(p), bytes, o_.reps);
      const std::string where = str_cat("PU ", os(p), " ", kSizesKb[s], " KB");
      auto redo = [&] { return local_costs(os(p), bytes, o_.reps); };
      m_.read_ns_per_kb[s][at(p, p)] = steady(c.read, where + " read (ns/KB)", [&] { return redo().read; });
      m_.rewrite_ns_per_kb[s][at(p, p)] = steady(c.rewrite, where + " write (ns/KB)", [&] { return redo().rewrite; });
    }
    progress(str_cat("PU ", os(p)));
  }

  // How much the first PU's caches keep of a working set read again and
  // again (HostMap::llc_held_kb): the least of kHeldSweeps sweeps. Other
  // tenants' use of a shared cache comes and goes; a run can count only
  // on what the cache keeps while they are busy.
  void measure_held() {
    constexpr int kHeldSweeps = 3;
    const std::vector<double> sizes = held_sizes_kb(m_.llc_kb);
    const double mem = m_.pus[0].mem_gbps;
    double held = 0;
    for (int k = 0; k < kHeldSweeps; ++k) {
      const double h = held_working_set_kb(sizes, reread_rates(os(0), sizes, mem), mem);
      held = k == 0 ? h : std::min(held, h);
    }
    m_.llc_held_kb = held;
  }

  void measure_pair(int a, int b) {
    const std::string pair = str_cat("PUs ", os(a), "-", os(b));
    for (size_t s = 0; s < kSizes; ++s) {
      const size_t bytes = static_cast<size_t>(kSizesKb[s]) * 1024;
      for (const auto& [writer, reader] : {std::pair{a, b}, std::pair{b, a}}) {
        const int w = writer, r = reader;  // lambdas below capture them
        CostSamples c = cross_costs(os(w), os(r), bytes, o_.reps);
        const std::string where = str_cat(pair, " ", kSizesKb[s], " KB");
        auto redo = [&] { return cross_costs(os(w), os(r), bytes, o_.reps); };
        m_.read_ns_per_kb[s][at(r, w)] = steady(c.read, where + " remote read (ns/KB)", [&] { return redo().read; });
        m_.rewrite_ns_per_kb[s][at(w, r)] =
            steady(c.rewrite, where + " rewrite (ns/KB)", [&] { return redo().rewrite; });
      }
    }
    constexpr int kRounds = 500, kRuns = 9;
    const double h = steady(handoff_samples(os(a), os(b), kRounds, kRuns), pair + " hand-off (ns)",
                            [&] { return handoff_samples(os(a), os(b), kRounds, kRuns); });
    m_.handoff_ns[at(a, b)] = m_.handoff_ns[at(b, a)] = h;
    // The median of three: a hypervisor that briefly runs both vCPUs on
    // one physical thread must not make them siblings for good.
    std::vector<double> together_runs;
    for (int k = 0; k < 3; ++k) together_runs.push_back(fma_together_ratio(os(a), os(b), o_.fma_ms));
    const double together = median(together_runs);
    m_.fma_together[at(a, b)] = m_.fma_together[at(b, a)] = together;
    progress(pair);
  }

  // Beyond kAllPairsUpTo PUs: an unmeasured pair takes the costs of a
  // measured pair of the same hwloc relation (same core, L2, L3), else of
  // the pair (0, b).
  void fill_unmeasured(const std::vector<std::pair<int, int>>& pairs) {
    if (static_cast<int>(pairs.size()) == n_ * (n_ - 1) / 2) return;
    auto relation = [&](int a, int b) {
      const HostPu &x = m_.pus[static_cast<size_t>(a)], &y = m_.pus[static_cast<size_t>(b)];
      if (x.core >= 0 && x.core == y.core) return 0;
      if (x.l2 >= 0 && x.l2 == y.l2) return 1;
      if (x.l3 >= 0 && x.l3 == y.l3) return 2;
      return x.numa == y.numa ? 3 : 4;
    };
    std::vector<bool> done(static_cast<size_t>(n_) * static_cast<size_t>(n_), false);
    for (const auto& [a, b] : pairs) done[at(a, b)] = done[at(b, a)] = true;
    for (int a = 0; a < n_; ++a)
      for (int b = 0; b < n_; ++b) {
        if (a == b || done[at(a, b)]) continue;
        std::pair<int, int> from{0, b};
        for (const auto& [x, y] : pairs)
          if (relation(x, y) == relation(a, b)) from = {x, y};
        copy_pair(from.first, from.second, a, b);
      }
  }

  void copy_pair(int xa, int xb, int a, int b) {
    for (size_t s = 0; s < kSizes; ++s) {
      m_.read_ns_per_kb[s][at(a, b)] = m_.read_ns_per_kb[s][at(xa, xb)];
      m_.rewrite_ns_per_kb[s][at(a, b)] = m_.rewrite_ns_per_kb[s][at(xa, xb)];
    }
    m_.handoff_ns[at(a, b)] = m_.handoff_ns[at(xa, xb)];
    m_.fma_together[at(a, b)] = m_.fma_together[at(xa, xb)];
  }

  void decide_sharing() {
    m_.groups_from = t_.caches_known ? "hwloc" : "measured";
    if (!t_.caches_known) m_.notes.push_back("hwloc reports no caches on this host: cache sharing was measured");
    for (int a = 0; a < n_; ++a)
      for (int b = 0; b < n_; ++b) {
        Sharing s = Sharing::kSelf;
        if (a != b) s = t_.caches_known ? sharing_by_hwloc(a, b) : sharing_by_cost(a, b);
        if (a != b && m_.fma_together[at(a, b)] < kCoreShareRatio) s = Sharing::kCore;
        m_.sharing[at(a, b)] = s;
      }
    // Measured groups replace the unknown ones: union by sharing.
    auto group = [&](Sharing upto, auto member) {
      std::vector<int> id(static_cast<size_t>(n_), -1);
      int next = 0;
      for (int a = 0; a < n_; ++a) {
        if (id[static_cast<size_t>(a)] < 0) id[static_cast<size_t>(a)] = next++;
        for (int b = a + 1; b < n_; ++b)
          if (m_.sharing[at(a, b)] <= upto && id[static_cast<size_t>(b)] < 0) id[static_cast<size_t>(b)] = id[static_cast<size_t>(a)];
      }
      for (int a = 0; a < n_; ++a) member(m_.pus[static_cast<size_t>(a)]) = id[static_cast<size_t>(a)];
    };
    group(Sharing::kCore, [](HostPu& p) -> int& { return p.core; });
    if (!t_.caches_known) {
      group(Sharing::kL2, [](HostPu& p) -> int& { return p.l2; });
      group(Sharing::kL3, [](HostPu& p) -> int& { return p.l3; });
    }
  }

  Sharing sharing_by_hwloc(int a, int b) const {
    const HostPu &x = m_.pus[static_cast<size_t>(a)], &y = m_.pus[static_cast<size_t>(b)];
    if (x.core >= 0 && x.core == y.core) return Sharing::kCore;
    if (x.l2 >= 0 && x.l2 == y.l2) return Sharing::kL2;
    if (x.l3 >= 0 && x.l3 == y.l3) return Sharing::kL3;
    return Sharing::kNone;
  }

  Sharing sharing_by_cost(int a, int b) const {
    const double local = m_.read_ns_per_kb[kTypicalSize][at(a, a)];
    const double remote = m_.read_ns_per_kb[kTypicalSize][at(a, b)];
    const double memory = 1e6 / 1024 / std::max(m_.pus[static_cast<size_t>(a)].mem_gbps, 1e-9);  // ns per KB
    if (remote <= kL2ShareRatio * local) return Sharing::kL2;
    if (remote < kL3ShareRatio * memory) return Sharing::kL3;
    return Sharing::kNone;
  }

  const CpuTopology& t_;
  const MeasureOptions& o_;
  const int n_;
  HostMap m_;
  size_t done_ = 0, total_ = 0;
};

}  // namespace

const char* measure_isa() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#else
  return "portable";
#endif
}

double held_working_set_kb(const std::vector<double>& sizes_kb, const std::vector<double>& gbps, double mem_gbps) {
  const size_t n = std::min(sizes_kb.size(), gbps.size());
  if (n == 0) return 0;
  if (!(mem_gbps > 0)) mem_gbps = gbps[n - 1];
  const double best = *std::max_element(gbps.begin(), gbps.begin() + static_cast<long>(n));
  if (best < kHeldContrast * mem_gbps) return sizes_kb.front();  // nothing above the smallest size reads faster
  const double cut = std::sqrt(best * mem_gbps);
  double held = sizes_kb.front();
  for (size_t i = 0; i < n; ++i)
    if (gbps[i] >= cut) held = sizes_kb[i];
  return held;
}

std::vector<double> held_sizes_kb(double llc_kb) {
  const double top = llc_kb > 0 ? std::min(2 * llc_kb, kHeldMaxKb) : kHeldMaxKb;
  std::vector<double> sizes;
  for (double kb = 1024; kb <= top; kb *= 2) {
    sizes.push_back(kb);
    if (kb * 1.5 <= top) sizes.push_back(kb * 1.5);
  }
  return sizes;
}

HostMap host_map_measure(const CpuTopology& t, const MeasureOptions& o) { return Measurer(t, o).run(); }

HostFingerprint host_fingerprint(const CpuTopology& t) {
  HostFingerprint f;
  constexpr double kMs = 1.5;
  const unsigned a = t.pu_order[0];
  double alone_a = 0;
  on_pu(a, [&] { alone_a = fma_rate(kMs); });
  f.fma_gflops = alone_a;
  f.valid = true;
  if (t.pus < 2) return f;
  const unsigned b = t.pu_order[1];
  f.pair = true;
  f.handoff_ns = lower_quartile(handoff_samples(a, b, 500, 5));
  f.fma_together = fma_together_ratio(a, b, kMs);
  return f;
}

bool host_quiet(const CpuTopology& t, const std::vector<int>& slots, double expected_gflops,
                double expected_handoff_ns) {
  std::vector<unsigned> all;
  for (int s : slots)
    if (s >= 0 && s < t.pus) all.push_back(t.pu_order[static_cast<size_t>(s)]);
  if (slots.empty()) all.assign(t.pu_order.begin(), t.pu_order.begin() + t.pus);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  if (all.empty()) return true;
  constexpr double kMs = 1.0;
  const unsigned first = all[0];
  int64_t iters = 0;
  on_pu(first, [&] { iters = fma_iters_for(kMs); });
  const double alone = std::min(fma_span_ns({first}, iters), fma_span_ns({first}, iters));
  const double flops = fma_flops(iters);
  if (expected_gflops > 0 && flops / alone < kQuietRatio * expected_gflops) return false;
  if (all.size() == 1) return true;
  if (alone / fma_span_ns(all, iters) < kQuietRatio) return false;
  // The first two of `slots` in their order (the map's pair), not sorted.
  if (expected_handoff_ns > 0) {
    auto slot = [&](size_t i) {
      return slots.size() > i && slots[i] >= 0 && slots[i] < t.pus ? slots[i] : static_cast<int>(i);
    };
    const unsigned a = t.pu_order[static_cast<size_t>(slot(0))], b = t.pu_order[static_cast<size_t>(slot(1))];
    if (a != b && lower_quartile(handoff_samples(a, b, 200, 2)) > kHandoffSlack * expected_handoff_ns) return false;
  }
  return true;
}

HostGauge host_gauge(const HostMap& m) {
  const CpuTopology& t = cpu_topology();
  if (!host_quiet(t, {}, m.pus.empty() ? 0 : m.pus[0].fma_gflops))
    return {false, "busy: the host is taking a share of this process's PUs"};
  const HostFingerprint f = host_fingerprint(t);
  if (f.pair && m.size() > 1 && f.handoff_ns > kHandoffSlack * m.handoff_ns[1])
    return {false, str_cat("moved: a hand-off between the first two PUs takes ", str_fixed(f.handoff_ns, 0),
                           " ns, the map says ", str_fixed(m.handoff_ns[1], 0))};
  return {true, "quiet: every PU runs at full speed at once, hand-offs as mapped"};
}

bool host_map_matches(const HostMap& m, const HostFingerprint& f, std::string* why, bool* moment) {
  if (moment != nullptr) *moment = false;
  if (!f.valid) return true;
  const double rate = m.pus[0].fma_gflops;
  if (rate > 0 && (f.fma_gflops > rate * kFmaSlack || f.fma_gflops * kFmaSlack < rate)) {
    *why = str_cat("the first PU now runs FMAs at ", str_fixed(f.fma_gflops, 0), " GFLOP/s, the map says ",
                   str_fixed(rate, 0), " (another machine?)");
    return false;
  }
  if (!f.pair || m.size() < 2) return true;
  // Sharing first: PUs run as siblings of one core for a moment also hand
  // off faster.
  const bool core_now = f.fma_together < kCoreShareRatio;
  const bool core_then = m.fma_together[1] < kCoreShareRatio;
  if (core_now != core_then) {
    *why = str_cat("the first two PUs ", core_now ? "now share" : "no longer share", " a core (FMA rate together ",
                   str_fixed(f.fma_together, 2), " of alone, the map says ", str_fixed(m.fma_together[1], 2), ")");
    if (moment != nullptr) *moment = core_now;
    return false;
  }
  const double h = m.handoff_ns[1];  // pair (0, 1)
  if (h > 0 && (f.handoff_ns > h * kFingerprintSlack || f.handoff_ns * kFingerprintSlack < h)) {
    *why = str_cat("the hand-off between the first two PUs now takes ", str_fixed(f.handoff_ns, 0), " ns, the map says ",
                   str_fixed(h, 0), " ns");
    if (moment != nullptr) *moment = f.handoff_ns > h;
    return false;
  }
  return true;
}

}  // namespace tessera
