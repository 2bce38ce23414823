// Measuring the host map (host_map.h). Every quantity is timed on threads
// pinned to the PUs concerned, repeated, and its lower quartile kept (what
// the hardware does when nothing else runs: a neighbour's bursts only
// ever raise samples); a quantity whose two halves of samples disagree by
// more than a third is measured again, and flagged (HostMap::noisy, with
// a note) if it still does.
//
// Per PU, alone: the FMA rate (12 independent vector FMA chains), the
// memory read rate (a buffer far beyond the caches), and reading and
// rewriting its own data at each size. For the first PU, the largest
// working set its caches keep when it is read again and again.
// Per pair of PUs a, b: b reads what a just wrote (and the other way), a
// rewrites what b just read, at each size; the one-way hand-off of a spin
// flag (half a ping-pong round trip); and both running the FMA loop at
// once, timed from the first start to the last end (siblings of one core,
// or two vCPUs run in turns on one physical thread, take about twice as
// long as one).
// Sharing: two PUs share a core when their FMA rates together fall below
// kCoreShareRatio of alone. Caches come from hwloc when it reports any;
// else a pair shares an L2 when reading the other's data of kTypicalKb
// costs at most kL2ShareRatio times reading its own, and an L3 when it
// costs less than kL3ShareRatio of reading memory.
//
// Thread-safety: runs threads of its own; call from one thread at a time.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/host_map.h"

namespace tessera {

inline constexpr double kCoreShareRatio = 0.75;
inline constexpr double kL2ShareRatio = 1.5;
inline constexpr double kL3ShareRatio = 0.5;

struct MeasureOptions {
  // (stage, done, total): "PU 1 of 2", "pair 0-1", ...
  std::function<void(std::string_view, size_t, size_t)> progress;
  int reps = 15;           // samples per size and pair
  double fma_ms = 3.0;     // per FMA timing
  size_t mem_mb = 96;      // the buffer that stands for memory
};

// Measures the map of the PUs in `t` (all pairs up to 16 PUs; beyond,
// each PU with PU 0 and with its neighbours in placement order, the rest
// filled from the pair of the same sharing).
HostMap host_map_measure(const CpuTopology& t, const MeasureOptions& o);

// The caches' held working set (HostMap::llc_held_kb). The first PU reads
// working sets of held_sizes_kb(llc_kb) again and again: 1 MB up, in
// steps of 1.5x and 2x, to twice the last-level cache (kHeldMaxKb where
// unknown, and at most that). held_working_set_kb takes the rates, GB/s,
// and the memory rate (0: the largest size's), and returns the largest
// size read at least at the midpoint (geometric) between the best rate
// and memory's; where no size reads kHeldContrast times faster than
// memory, the smallest size.
inline constexpr double kHeldMaxKb = 128 * 1024;
inline constexpr double kHeldContrast = 1.3;
std::vector<double> held_sizes_kb(double llc_kb);
double held_working_set_kb(const std::vector<double>& sizes_kb, const std::vector<double>& gbps, double mem_gbps);

// A quick look (about 20 ms) at the first PUs, to tell whether a cached
// map still describes this host (a virtual machine can be moved to
// another machine between two runs): the FMA rate of the first PU alone,
// and for the first two the hand-off latency and the FMA rate together
// over alone (`pair` is false with one PU).
struct HostFingerprint {
  bool valid = false;
  double fma_gflops = 0;
  bool pair = false;
  double handoff_ns = 0;
  double fma_together = 1;
};
HostFingerprint host_fingerprint(const CpuTopology& t);

// Whether `m` still describes the host that gave `f`: the FMA rate within
// kFmaSlack of the map's, the hand-off within a factor of
// kFingerprintSlack of the map's for its first pair, and the same answer
// to "do they share a core". Otherwise false, with the reason in *why.
inline constexpr double kFmaSlack = 1.25;
inline constexpr double kFingerprintSlack = 3.0;
// `*moment` (when given) says whether the difference is of the kind a
// moment of this host makes, which passes: a slower hand-off, or PUs that
// now share a core. Another FMA rate (another machine), a faster hand-off
// or PUs that no longer share a core (the map was measured in a moment)
// are not.
bool host_map_matches(const HostMap& m, const HostFingerprint& f, std::string* why, bool* moment = nullptr);

// Whether the PUs at `slots` (indexes into t.pu_order; empty: all) can all
// run at full speed at once right now (no neighbour or hypervisor taking a
// share of them): the same FMA work, started on all of them together, must
// all be done within 1 / kQuietRatio of the time the first alone takes (two
// vCPUs run in turns on one physical thread take twice as long), the
// first alone must reach kQuietRatio of `expected_gflops` (its rate in the
// host map; 0: not checked), and a hand-off between the first two must
// take at most kHandoffSlack times `expected_handoff_ns` (the map's for
// that pair; 0: not checked): a host can run both at full speed while it
// delays what passes between them (hand-offs four times the map's, for
// seconds), and a Plan timed then runs as if on one. Takes about 4 ms.
inline constexpr double kQuietRatio = 0.8;
inline constexpr double kHandoffSlack = 1.5;
bool host_quiet(const CpuTopology& t, const std::vector<int>& slots, double expected_gflops,
                double expected_handoff_ns = 0);

// The instruction set of the measuring loops (the build's): "avx512",
// "avx2" or "portable".
const char* measure_isa();

}  // namespace tessera
