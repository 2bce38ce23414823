// The host map: where the processing units (PUs) are, and what it costs to
// move data and control between any two of them, as measured on this host.
// The planner charges data that crosses vEUs by it; `tessera topo` prints it.
//
//   tessera::Result<tessera::HostMap> m = tessera::host_map_obtain({});  // cached, else measured
//   double ns = m->crossing_ns_per_kb(/*reader=*/1, /*writer=*/0, /*kb=*/128);
//
// Per PU its FMA rate and memory bandwidth; per ordered pair of PUs the cost
// of reading data the other just wrote, at a few sizes, of writing again
// data the other just read, the one-way hand-off latency of a spin flag,
// and the FMA rate when both run at once (which tells siblings of one
// core). Measured at first use (a few seconds), cached keyed by the
// host's shape, and checked against a quick fingerprint before a cached
// map is trusted.
//
// Indexes are positions in `pus` (placement order: vEU u runs on pus[u]),
// not OS indexes. The file format is docs/formats/host-map.md.
//
// Thread-safety: a HostMap is a value; host_map_obtain may run in several
// processes at once (the cache is replaced whole, by rename).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

namespace tessera {

// The closest thing two PUs share.
enum class Sharing : uint8_t { kSelf, kCore, kL2, kL3, kNone };
std::string_view sharing_name(Sharing s);  // "self", "core", "l2", "l3", "none"
bool sharing_parse(std::string_view name, Sharing* out);

struct HostPu {
  unsigned os_index = 0;
  int core = -1, l2 = -1, l3 = -1, numa = 0;  // group ids (equal: shared); -1 unknown
  double fma_gflops = 0;  // fp32 FMA rate of this PU alone; 0 = not measured
  double mem_gbps = 0;    // reading memory far beyond the caches, alone; 0 = not measured
};

// A place the map knows the distance to: a PU, the memory of a NUMA node,
// or a device (none yet).
struct Place {
  enum class Kind : uint8_t { kPu, kNuma, kDevice };
  Kind kind = Kind::kPu;
  int index = 0;
};

struct HostMap {
  static constexpr int kVersion = 1;
  // The size whose costs stand for a pair in summaries and in distance().
  static constexpr double kTypicalKb = 128;

  std::string key;           // host_shape_key() of the host it describes
  std::string cpu;           // model name
  int64_t measured_at = 0;   // unix seconds; 0 for a written map
  double measure_s = 0;      // how long measuring took
  std::string groups_from;   // "hwloc" or "measured": where core/L2/L3 sharing came from
  bool noisy = false;        // some quantity kept varying while measured
  std::vector<std::string> notes;
  std::string origin;        // how this process got it: "measured", "cache", "file PATH" (not stored)

  std::vector<HostPu> pus;
  // The last-level cache of the first PU (L3, else L2), KB, as hwloc
  // reports it; 0 = unknown.
  double llc_kb = 0;
  // The largest working set, KB, that the first PU still finds in its
  // caches when it reads it again and again, measured; 0 = not measured.
  // Where other tenants of the machine share the last-level cache, it
  // holds far less than its size.
  double llc_held_kb = 0;
  std::vector<double> sizes_kb;  // ascending; costs below are per size
  // read_ns_per_kb[s][r * n + w]: PU r reading sizes_kb[s] KB that PU w
  // has just written (r == w: its own data).
  std::vector<std::vector<double>> read_ns_per_kb;
  // rewrite_ns_per_kb[s][w * n + r]: PU w writing again sizes_kb[s] KB
  // that PU r has just read (w == r: data no one else holds).
  std::vector<std::vector<double>> rewrite_ns_per_kb;
  std::vector<double> handoff_ns;      // [from * n + to]: one way; 0 on the diagonal
  std::vector<double> fma_together;    // [a * n + b]: FMA rate of a while b runs FMAs too, over a's alone
  std::vector<Sharing> sharing;        // [a * n + b]

  int size() const { return static_cast<int>(pus.size()); }
  // What a run can count on the caches to keep between two runs, KB: the
  // measured llc_held_kb (never above llc_kb), else llc_kb; 0 = unknown.
  // A model whose weights and activations together exceed it reads its
  // weights from memory in every run, and is profiled that way.
  double cache_kept_kb() const;
  // ns per KB for `reader` to read `kb` KB that `writer` just wrote,
  // interpolated on log size between the measured sizes (clamped).
  double read_cost(int reader, int writer, double kb) const;
  // What `kb` KB crossing from `writer` to `reader` costs beyond keeping
  // it on one PU, in ns per KB: the reader's excess over reading its own
  // data. 0 for reader == writer; never negative. This is what the
  // planner charges.
  double crossing_ns_per_kb(int reader, int writer, double kb) const;
  // The writer's excess, in ns per KB, for writing again `kb` KB while
  // `reader` still holds them (every line must be taken back from its
  // cache) over rewriting data only it holds. The planner does not
  // charge it: between runs the reader's cache has mostly let the lines
  // go, and where it has not, a run's measured costs (the plan choice)
  // show it.
  double rewrite_premium_ns_per_kb(int writer, int reader, double kb) const;
  double handoff_us(int from, int to) const { return handoff_ns[static_cast<size_t>(from * size() + to)] / 1e3; }
  Sharing share(int a, int b) const { return sharing[static_cast<size_t>(a * size() + b)]; }
  // The distance between two places, as ns per KB of reading at `to` what
  // was written at `from` (kTypicalKb): PU to PU the measured read cost; a
  // PU and its own NUMA node's memory, the PU's memory read cost. Places
  // the map does not know (devices, other nodes' memory) are NotFound.
  Result<double> distance(const Place& from, const Place& to) const;
  // Days since measured (0 for a written map).
  double age_days(int64_t now_unix) const;
  // A short digest of what the planner concludes from the map: each PU's
  // FMA rate in half-octave classes, the sharing of every pair, its cross
  // reads as cheap or dear (kDearCrossing times local) and its hand-off as
  // near (< kNearHandoffNs), mid (< kFarHandoffNs) or far. Plan choices
  // measured under one digest are not reused under another.
  static constexpr double kDearCrossing = 2.5;
  static constexpr double kNearHandoffNs = 120, kFarHandoffNs = 800;
  std::string digest() const;
  // The sharing of every pair alone: the profile cache's part of the key.
  std::string sharing_digest() const;
  // Checks sizes, ranges and finiteness; the message names the field.
  Status validate() const;
};

// What the planner concludes from a map, a line per kind of pair (pairs
// grouped by what they share): the crossing cost and hand-off (medians
// over the group), and above what time a 2-way split of an op pays for
// them (an op reading a kTypicalKb input made on one PU, whose output goes
// back there).
std::vector<std::string> host_map_conclusions(const HostMap& m);

// The map as JSON (docs/formats/host-map.md); host_map_read reads one back,
// validated (errors name the file and the field).
std::string host_map_to_json(const HostMap& m);
Result<HostMap> host_map_read(const std::string& path);

struct HostMapOptions {
  // A map to use as is (synthetic maps for tests, a host measured
  // elsewhere). "" = $TESSERA_HOST_MAP if set, else the cache.
  std::string file;
  std::string cache_dir;  // "" = $TESSERA_CACHE or ~/.cache/tessera
  bool refresh = false;   // measure again even when the cache has a map
  bool verify = true;     // check a cached map against a fresh fingerprint
  int reps = 0;           // samples per measured quantity; 0 = the default
  // (stage, done, total) while measuring.
  std::function<void(std::string_view, size_t, size_t)> progress;
};

// The map for this host: from the file named by the options or the
// environment; else from the cache, unless three fingerprints in a row
// disagree with it (then measured again, with a note saying why), except
// where the host only looks as in a moment (a slower hand-off, PUs now
// sharing a core): then the cached map is used, with a note, until three
// processes over ten minutes have found it so; else measured and cached.
Result<HostMap> host_map_obtain(const HostMapOptions& o);

// Whether this host is, right now, as `m` describes it: every PU running at
// full speed at once (the gauge the plan choice waits on) and the first
// pair's hand-off within 1.5x of the map's. `why` says what differs (or
// that it is quiet). Takes a few milliseconds.
struct HostGauge {
  bool quiet = false;
  std::string why = {};
};
HostGauge host_gauge(const HostMap& m);

}  // namespace tessera
