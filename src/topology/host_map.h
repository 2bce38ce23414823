// The host map: where the processing units (PUs) are, and what it costs to
// move data and control between any two of them, as measured on this host.
// The scheduler charges data that crosses vEUs by it, and later placement
// (the daemon cutting cores into partitions, memory placed by distance)
// asks it the same question: how far apart are two places.
//
// hwloc says what it knows (cpu_topology.h); a virtual machine often hides
// the caches, and whether two vCPUs are one core's siblings or two cores
// far apart changes from host to host. So the map is measured
// (host_map_measure, calibrate.h): per PU its FMA rate and memory
// bandwidth; per ordered pair of PUs the cost of reading data the other
// just wrote, at a few sizes, of writing again data the other just read,
// the one-way hand-off latency of a spin flag, and the FMA rate when both
// run at once (which tells siblings of one core). It is cached, keyed by
// the host's shape, and checked against a quick fingerprint before a
// cached map is trusted.
//
//   HostMapOptions o;                       // $TESSERA_HOST_MAP, else the cache, else measure
//   Result<HostMap> m = host_map_obtain(o);
//   double ns = m->crossing_ns_per_kb(/*reader=*/1, /*writer=*/0, /*kb=*/128);
//
// Indexes are positions in `pus` (placement order: vEU u runs on pus[u]),
// not OS indexes. The file format is docs/formats/host-map.md.
//
// Thread-safety: a HostMap is a value; host_map_obtain may run in several
// processes at once (the cache is replaced whole, by rename).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/host_map.h"
#include "topology/cpu_topology.h"

namespace tessera {

// Sharing, HostPu, Place, HostMap, HostMapOptions, host_map_obtain,
// host_map_conclusions, host_map_to_json, host_map_read and host_gauge:
// tessera/host_map.h.

// A map of `pus` PUs where every local access costs local_ns_per_kb,
// every cross-PU read remote_ns_per_kb, rewrites nothing extra, and every
// hand-off handoff_ns; for tests and for hosts that cannot be measured.
HostMap host_map_uniform(int pus, double local_ns_per_kb, double remote_ns_per_kb, double handoff_ns);

// The profile cache's part of the key for this map's host: its PU count,
// sharing digest and the first PU's FMA class, e.g. "2pu-1f0c9a3e-f14".
std::string host_profile_tag(const HostMap& m);

// The cache key of this host's shape: CPU id, instruction set, the PUs and
// their hwloc groups (hashed), e.g. "AMD_EPYC-f25m17s1-avx512-2pu-5c1d09aa".
std::string host_shape_key(const CpuTopology& t);

// Parses and validates a map; errors name `source` and the field at fault.
Result<HostMap> host_map_from_json(std::string_view text, const std::string& source);
Status host_map_write(const std::string& path, const HostMap& m);

// Where the cache keeps this host's map.
std::string host_map_cache_path(const std::string& cache_dir);

// A cached map's disagreements with the host in a row, across processes
// (kept in a file beside the map; a process whose fingerprint agrees ends
// the streak): when the first and the last were seen (unix seconds), and
// by how many processes. Hosts have moments that last seconds to a minute
// (hand-offs four times the map's, two vCPUs run as one core's siblings);
// measured in one, the map would describe the moment, with another digest,
// and every cached plan choice would be made again in it. A cached plan
// choice whose runs are slower than its timeline keeps such a streak too
// (compiler/plan_choice.cc).
struct MapDoubt {
  int64_t first_s = 0, last_s = 0;
  int count = 0;
};
inline constexpr int kDoubtProcesses = 3;
inline constexpr int64_t kDoubtSpanS = 600;   // a streak this long is no moment
inline constexpr int64_t kDoubtGapS = 1800;   // a disagreement this long after the last begins a new streak
// Records a disagreement at now_s in `d`; whether the streak has lasted
// long enough (kDoubtProcesses disagreements over kDoubtSpanS) for the map
// to be measured again.
bool map_doubt_settles(MapDoubt* d, int64_t now_s);
// A streak as text ("first last count") and back; text that is not one
// (or an impossible one) reads as no streak.
std::string map_doubt_text(const MapDoubt& d);
MapDoubt map_doubt_parse(const std::string& text);

}  // namespace tessera
