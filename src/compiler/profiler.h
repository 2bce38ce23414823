// Profiler: the measured cost of one rTask of each rOperator.
//
// Each step's rKernel instance (op, attributes, bound shapes and dtypes,
// tiling) runs on the calling thread, warm, on buffers of the right sizes:
// constants are the model's own, runtime values are zeros (valid for every
// kernel, Gather indices included). A few rTask indices spread over the op
// run in rounds until there are enough samples and enough time for a stable
// median. Before each round a small fixed workload (the gauge) is timed: a
// round counts only if the gauge ran within 12% of its best time, so that a
// cost measured while another tenant shared the core (a noisy host) does
// not enter the Plan; where no such round comes before max_ms_per_op, the
// median of all rounds, each scaled by its gauge ratio, is used instead
// (counted in ProfileResult::contended). The gauge's best time is cached
// too. Results persist in a profile cache, a text file under
// $TESSERA_CACHE (default ~/.cache/tessera), keyed by CPU (cpu_cache_key:
// model, family and stepping, and the kernels' instruction set), by the
// host's shape (ProfileOptions::host_tag) and by kernel version, and later
// compiles reuse them.
//
// Thread-safety: the cache file is rewritten whole (write to a temporary,
// rename), so concurrent profilers lose at worst each other's new entries.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera {

class Program;
struct Step;

// Bumped whenever an rKernel changes speed or tiling, or the profiler
// the way it takes a cost: old cache entries stop matching.
inline constexpr int kKernelVersion = 85;

struct ProfileOptions {
  bool use_cache = true;   // read and update the cache
  bool refresh = false;    // measure everything, then update the cache
  std::string cache_dir;       // "" = $TESSERA_CACHE or ~/.cache/tessera
  // The host's shape beside the CPU in the cache's name (host_profile_tag:
  // PUs and what they share), so costs taken on one shape of host are not
  // reused on another; "" = the CPU alone.
  std::string host_tag;
  double min_ms_per_op = 2.0;  // keep sampling an op at least this long...
  int min_samples = 7;         // ...and for at least this many rTask runs
  double max_ms_per_op = 50.0;
  // > 0: time each rTask with the step's constant inputs and the bytes its
  // op packed from them (ROp::resident) evicted from the caches first, as
  // a run finds them when the model's weights and activations exceed what
  // the caches keep between runs (weights_are_cold): that size in KB. A
  // step whose constants are larger still reads them from memory either
  // way and is timed as it comes. Cached apart from warm costs. Where this CPU cannot evict
  // (profiler_can_evict): 0, warm.
  double cold_llc_kb = 0;
  // Called after each op: (done, total, from_cache).
  std::function<void(size_t, size_t, bool)> progress;
};

struct ProfileResult {
  std::vector<double> task_cost_us;  // per step: median µs of one rTask
  std::vector<bool> cached;          // per step: came from the cache
  size_t measured = 0, from_cache = 0;
  size_t contended = 0;  // measured with the core never at full speed: scaled estimates
  std::string cache_path;
};

Result<ProfileResult> profile_program(const Program& p, const ProfileOptions& options);

// The profile cache's key of one rKernel instance as `options` would time
// it: op, rKernel, tiling, attributes, the dtype and shape of every input
// and output, and "|cold" where its constants are evicted before each
// sample (ProfileOptions::cold_llc_kb).
std::string profile_step_key(const Step& s, const ProfileOptions& options);

// Whether the profiler can evict bytes from the caches on this CPU
// (x86-64: clflush).
bool profiler_can_evict();

// Whether a run of `p` reads its weights from memory: the constant bytes
// its steps read and its activations (program_activation_bytes) together
// exceed `cache_kb`, what the caches of the PU a vEU runs on keep between
// runs (HostMap::cache_kept_kb; 0 = unknown, taken as warm). A run
// touches all of them once, in the same order every time, so by the time
// a weight comes round again the bytes touched since have pushed it out.
bool weights_are_cold(const Program& p, double cache_kb);
// The constant bytes the steps of `p` read, each constant counted once.
size_t program_constant_bytes(const Program& p);
// The arena the steps of `p` need run one after another (plan_memory in
// step order): the activation bytes a run touches.
size_t program_activation_bytes(const Program& p);

// The measuring engine behind profile_program, for costing single rKernel
// instances (a step's variants): reads the cache once, measures what it
// lacks, writes the cache back on flush() or destruction.
class Profiler {
 public:
  explicit Profiler(const ProfileOptions& options);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // µs of one rTask of `s` (its node, rKernel and op as tiled).
  double cost(const Step& s, bool* from_cache = nullptr);
  void flush();
  const std::string& cache_path() const { return cache_path_; }
  size_t measured() const { return measured_; }
  size_t from_cache() const { return from_cache_; }
  size_t contended() const { return contended_; }

 private:
  ProfileOptions options_;
  std::string cache_path_;
  std::map<std::string, double> cache_, fresh_;
  bool dirty_ = false;
  size_t measured_ = 0, from_cache_ = 0, contended_ = 0;
  double best_gauge_ = 1e300;  // µs: the gauge's best time, cached or seen
  bool gauge_warm_ = false;
};

// What the profile cache's file name says of the machine: the CPU's id
// (cpu_id(): model name, family, model and stepping) and the instruction
// set the kernels were built for (kernel_isa()), e.g.
// "AMD_EPYC-f25m1s1-avx2".
std::string cpu_cache_key();

}  // namespace tessera
