#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "base/strings.h"
#include "topology/calibrate.h"
#include "topology/cpu_topology.h"
#include "topology/host_map.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(Topology, PlacementOrderCoversAllowedPusOncePerCoreFirst) {
  const CpuTopology& t = cpu_topology();
  ASSERT_GE(t.cores, 1);
  ASSERT_GE(t.pus, t.cores);
  ASSERT_EQ(static_cast<int>(t.pu_order.size()), t.pus);
  std::set<unsigned> unique(t.pu_order.begin(), t.pu_order.end());
  EXPECT_EQ(unique.size(), t.pu_order.size()) << "a PU appears twice";
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  for (unsigned pu : t.pu_order) EXPECT_TRUE(CPU_ISSET(pu, &allowed)) << "PU " << pu << " is not ours to use";
  EXPECT_EQ(CPU_COUNT(&allowed), t.pus);
  EXPECT_FALSE(t.summary.empty());
}

TEST(Topology, PinningMovesTheThread) {
  const CpuTopology& t = cpu_topology();
  for (int slot = 0; slot < t.pus; ++slot) {
    std::thread th([&] {
      ASSERT_TRUE(pin_current_thread(slot));
      cpu_set_t set;
      ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof set, &set), 0);
      EXPECT_EQ(CPU_COUNT(&set), 1);
      EXPECT_TRUE(CPU_ISSET(t.pu_order[static_cast<size_t>(slot)], &set));
      std::this_thread::yield();
      EXPECT_EQ(sched_getcpu(), static_cast<int>(t.pu_order[static_cast<size_t>(slot)]));
    });
    th.join();
  }
}

// A hand-off slower than the map's (here: any, against a map that says a
// thousandth of a ns) makes the host not quiet, whatever else holds; the
// same PUs with the hand-off unchecked may be quiet or not (the host's
// state), so only the refusal is asserted.
TEST(Topology, QuietRefusesHandOffsSlowerThanTheMaps) {
  const CpuTopology& t = cpu_topology();
  if (t.pus < 2) GTEST_SKIP() << "one PU: no hand-off";
  EXPECT_FALSE(host_quiet(t, {0, 1}, 0, 1e-3));
  EXPECT_FALSE(host_quiet(t, {}, 0, 1e-3));
}

TEST(Topology, ShapeNamesEveryPuAndItsGroups) {
  const CpuTopology& t = cpu_topology();
  ASSERT_EQ(t.pu_info.size(), t.pu_order.size());
  for (size_t i = 0; i < t.pu_info.size(); ++i) EXPECT_EQ(t.pu_info[i].os_index, t.pu_order[i]);
  const std::string shape = t.shape();
  EXPECT_EQ(shape.rfind("pus=", 0), 0u) << shape;
  EXPECT_NE(shape.find(";l3="), std::string::npos) << shape;
  // The key carries the CPU, the PU count and a hash of the shape.
  const std::string key = host_shape_key(t);
  EXPECT_NE(key.find(str_cat("-", t.pus, "pu-")), std::string::npos) << key;
  EXPECT_NE(key.find(measure_isa()), std::string::npos) << key;
}

// A map written by hand: two PUs, cross reads 5x local, 300 ns hand-offs.
const char kTwoPus[] = R"({"version": 1, "pus": [{"os_index": 0}, {"os_index": 1}],
  "read_cost": [[10, 50], [50, 10]], "handoff_ns": [[0, 300], [300, 0]]})";

TEST(HostMap, ParsesAWrittenMapWithDefaults) {
  auto m = host_map_from_json(kTwoPus, "test");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->size(), 2);
  EXPECT_DOUBLE_EQ(m->read_cost(1, 0, 128), 50);
  EXPECT_DOUBLE_EQ(m->read_cost(1, 0, 1), 50);  // one size: every size
  EXPECT_DOUBLE_EQ(m->crossing_ns_per_kb(1, 0, 4096), 40);
  EXPECT_DOUBLE_EQ(m->crossing_ns_per_kb(0, 0, 128), 0);
  EXPECT_DOUBLE_EQ(m->handoff_us(0, 1), 0.3);
  EXPECT_EQ(m->share(0, 0), Sharing::kSelf);
  EXPECT_EQ(m->share(0, 1), Sharing::kNone);
  EXPECT_DOUBLE_EQ(m->fma_together[1], 1);
  EXPECT_EQ(m->age_days(2000000000), 0);  // written, not measured
  EXPECT_EQ(m->llc_kb, 0);                // last-level cache unknown
  const std::vector<std::string> said = host_map_conclusions(*m);
  ASSERT_FALSE(said.empty());
  EXPECT_NE(said[0].find("unknown"), std::string::npos) << said[0];
}

TEST(HostMap, RoundTripsThroughJson) {
  HostMap m = host_map_uniform(3, 10, 30, 250);
  m.sizes_kb = {16, 1024};
  m.read_ns_per_kb = {m.read_ns_per_kb[0], m.read_ns_per_kb[0]};
  for (double& v : m.read_ns_per_kb[1]) v *= 2;
  m.rewrite_ns_per_kb = {std::vector<double>(9, 5), std::vector<double>(9, 7)};
  m.rewrite_ns_per_kb[0][1] = 45;  // PU 0 rewriting what PU 1 read: +40
  m.sharing[1] = m.sharing[3] = Sharing::kL3;
  m.pus[2].fma_gflops = 116.4;
  m.pus[2].mem_gbps = 31.5;
  m.measured_at = 1790000000;
  m.notes = {"a note"};
  m.llc_kb = 32768;
  m.llc_held_kb = 12288;
  auto back = host_map_from_json(host_map_to_json(m), "round trip");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->key, m.key);
  EXPECT_EQ(back->sizes_kb, m.sizes_kb);
  EXPECT_EQ(back->read_ns_per_kb, m.read_ns_per_kb);
  EXPECT_EQ(back->rewrite_ns_per_kb, m.rewrite_ns_per_kb);
  EXPECT_EQ(back->handoff_ns, m.handoff_ns);
  EXPECT_EQ(back->sharing, m.sharing);
  EXPECT_EQ(back->notes, m.notes);
  EXPECT_EQ(back->measured_at, m.measured_at);
  EXPECT_DOUBLE_EQ(back->pus[2].fma_gflops, 116.4);
  EXPECT_DOUBLE_EQ(back->llc_kb, 32768);
  EXPECT_DOUBLE_EQ(back->llc_held_kb, 12288);
  EXPECT_DOUBLE_EQ(back->cache_kept_kb(), 12288);
  EXPECT_NE(host_map_conclusions(*back)[0].find("12.0 MiB the caches keep between runs"), std::string::npos)
      << host_map_conclusions(*back)[0];
  back->llc_held_kb = 0;  // not measured: hwloc's size stands
  EXPECT_DOUBLE_EQ(back->cache_kept_kb(), 32768);
  EXPECT_NE(host_map_conclusions(*back)[0].find("32.0 MiB last-level cache"), std::string::npos)
      << host_map_conclusions(*back)[0];
  back->llc_held_kb = 65536;  // never more than the cache itself
  EXPECT_DOUBLE_EQ(back->cache_kept_kb(), 32768);
  back->llc_kb = 0;  // hwloc knows nothing: the measurement stands
  EXPECT_DOUBLE_EQ(back->cache_kept_kb(), 65536);
  EXPECT_EQ(back->digest(), m.digest());
  // Interpolation on log size: halfway between 16 and 1024 KB is 128 KB.
  EXPECT_NEAR(back->read_cost(1, 0, 128), 45, 1e-9);
  EXPECT_NEAR(back->read_cost(1, 0, 8), 30, 1e-9);      // clamped below
  EXPECT_NEAR(back->read_cost(1, 0, 65536), 60, 1e-9);  // clamped above
  // Crossing is the reader's excess; the writer's excess is apart.
  EXPECT_NEAR(back->crossing_ns_per_kb(1, 0, 16), 20, 1e-9);
  EXPECT_NEAR(back->rewrite_premium_ns_per_kb(0, 1, 16), 40, 1e-9);
  EXPECT_NEAR(back->rewrite_premium_ns_per_kb(1, 0, 16), 0, 1e-9);
}

TEST(HostMap, RejectsMalformedMapsNamingTheField) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"pus": [{}], "read_cost": [[1]]})", "version: missing"},
      {R"({"version": 99, "pus": [{}], "read_cost": [[1]]})", "version: 99"},
      {R"({"version": 1, "read_cost": [[1]]})", "pus: missing"},
      {R"({"version": 1, "pus": [], "read_cost": []})", "pus: expected a list"},
      {R"({"version": 1, "pus": [{}, {}]})", "read_cost: missing"},
      {R"({"version": 1, "pus": [{}, {}], "read_cost": [[1, 2]]})", "read_cost: expected 2 rows"},
      {R"({"version": 1, "pus": [{}, {}], "read_cost": [[1, 2], [3]]})", "read_cost[1]: expected 2 numbers"},
      {R"({"version": 1, "pus": [{}, {}], "read_cost": [[1, 2], [3, "x"]]})", "read_cost[1][1]: expected a number"},
      {R"({"version": 1, "pus": [{}, {}], "read_cost": [[1, 2], [3, -4]]})", "read_cost_by_size: -4"},
      {R"({"version": 1, "pus": [{}, {}], "read_cost": [[1, 2], [3, 0]]})", "read_cost_by_size: 0"},
      {R"({"version": 1, "pus": [{"os_index": -3}], "read_cost": [[1]]})", "pus[0].os_index: -3"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "handoff_ns": [[1e300]]})", "handoff_ns: 1e+300"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "sizes_kb": [16, 8], "read_cost_by_size": [[[1]], [[1]]]})",
       "sizes_kb: sizes must be positive and ascending"},
      {R"({"version": 1, "pus": [{}], "sizes_kb": [16, 32], "read_cost": [[1]]})", "read_cost_by_size: missing"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "sharing": [["far"]]})", "sharing[0][0]: 'far'"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "noisy": 1})", "noisy: expected true or false"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "llc_kb": "32M"})", "llc_kb: expected a number"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "llc_kb": -1})", "llc_kb: expected KB from 0"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "llc_held_kb": "12M"})", "llc_held_kb: expected a number"},
      {R"({"version": 1, "pus": [{}], "read_cost": [[1]], "llc_held_kb": -5})", "llc_held_kb: expected KB from 0"},
  };
  for (const Case& c : cases) {
    auto m = host_map_from_json(c.json, "map.json");
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(m.status().message().find("map.json"), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(c.field), std::string::npos) << m.status().message();
  }
}

// The held working set from re-read rates: the largest size still read
// at the geometric midpoint between the best rate and memory's or above.
TEST(HostMap, HeldWorkingSetFromRereadRates) {
  const std::vector<double> sizes = held_sizes_kb(32768);
  ASSERT_FALSE(sizes.empty());
  EXPECT_DOUBLE_EQ(sizes.front(), 1024);
  EXPECT_DOUBLE_EQ(sizes.back(), 65536);  // twice the cache
  for (size_t i = 1; i < sizes.size(); ++i) EXPECT_GT(sizes[i], sizes[i - 1]);
  EXPECT_DOUBLE_EQ(held_sizes_kb(0).back(), kHeldMaxKb);         // unknown: up to the cap
  EXPECT_DOUBLE_EQ(held_sizes_kb(1 << 30).back(), kHeldMaxKb);   // never beyond it
  // Sizes 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64 MB; memory 15 GB/s.
  // A cliff after 12 MB, as on a VM whose 32 MiB L3 other tenants share:
  // the midpoint is sqrt(60 * 15) = 30 GB/s.
  const std::vector<double> cliff = {60, 58, 59, 57, 55, 56, 54, 50, 28, 20, 17, 16, 15};
  EXPECT_DOUBLE_EQ(held_working_set_kb(sizes, cliff, 15), 12288);
  // The cache whole: 32 MB still fast.
  const std::vector<double> whole = {60, 58, 59, 57, 55, 56, 54, 50, 52, 49, 45, 20, 15};
  EXPECT_DOUBLE_EQ(held_working_set_kb(sizes, whole, 15), 32768);
  // Measuring stopped early (fewer rates than sizes), memory's rate not
  // given: the last rate stands for it.
  const std::vector<double> early = {60, 58, 59, 57, 20, 16};
  EXPECT_DOUBLE_EQ(held_working_set_kb(sizes, early, 0), 3072);
  // No size reads much faster than memory: nothing above the smallest.
  const std::vector<double> flat(sizes.size(), 15);
  EXPECT_DOUBLE_EQ(held_working_set_kb(sizes, flat, 14), 1024);
  EXPECT_DOUBLE_EQ(held_working_set_kb({}, {}, 15), 0);
}

TEST(HostMap, AnswersDistancesBetweenPlaces) {
  HostMap m = host_map_uniform(2, 10, 40, 100);
  m.pus[1].mem_gbps = 1e6 / 1024 / 50;  // 50 ns per KB
  using K = Place::Kind;
  EXPECT_DOUBLE_EQ(*m.distance({K::kPu, 0}, {K::kPu, 1}), 40);
  EXPECT_DOUBLE_EQ(*m.distance({K::kPu, 1}, {K::kPu, 1}), 10);
  EXPECT_NEAR(*m.distance({K::kNuma, 0}, {K::kPu, 1}), 50, 1e-9);
  EXPECT_EQ(m.distance({K::kNuma, 0}, {K::kPu, 0}).status().code(), StatusCode::kNotFound);  // not measured
  EXPECT_EQ(m.distance({K::kPu, 0}, {K::kPu, 7}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(m.distance({K::kDevice, 0}, {K::kPu, 0}).status().code(), StatusCode::kNotFound);
}

// The digest moves when what the planner concludes moves (sharing, cross
// reads 4.5x local instead of 1.6x, a hand-off of another class), not
// with noise (a local read 20 % slower, hand-offs of 60 or 75 ns); the
// sharing digest with the sharing alone.
TEST(HostMap, DigestFollowsConclusionsNotNoise) {
  const HostMap a = host_map_uniform(2, 10, 16, 60);  // cross reads 1.6x local
  HostMap noisy = a, far = a, sibling = a, slow = a;
  noisy.read_ns_per_kb[0][0] = 12;
  noisy.handoff_ns[1] = noisy.handoff_ns[2] = 75;
  far.read_ns_per_kb[0][1] = far.read_ns_per_kb[0][2] = 45;
  sibling.sharing[1] = sibling.sharing[2] = Sharing::kCore;
  slow.handoff_ns[1] = slow.handoff_ns[2] = 300;
  EXPECT_EQ(noisy.digest(), a.digest());
  EXPECT_NE(far.digest(), a.digest());
  EXPECT_NE(sibling.digest(), a.digest());
  EXPECT_NE(slow.digest(), a.digest());
  EXPECT_EQ(far.sharing_digest(), a.sharing_digest());
  EXPECT_NE(sibling.sharing_digest(), a.sharing_digest());
}

// A cached map is trusted only while a fresh fingerprint agrees with it.
TEST(HostMap, FingerprintInvalidatesAStaleMap) {
  HostMap m = host_map_uniform(2, 10, 30, 200);
  m.pus[0].fma_gflops = 118;
  HostFingerprint f;
  f.valid = true;
  f.fma_gflops = 121;
  f.pair = true;
  f.handoff_ns = 250;
  f.fma_together = 0.98;
  std::string why;
  EXPECT_TRUE(host_map_matches(m, f, &why));
  f.fma_gflops = 200;  // moved to a machine with twice the FMA width
  EXPECT_FALSE(host_map_matches(m, f, &why));
  EXPECT_NE(why.find("GFLOP/s"), std::string::npos) << why;
  bool moment = true;
  EXPECT_FALSE(host_map_matches(m, f, &why, &moment));
  EXPECT_FALSE(moment) << "another machine";
  f.fma_gflops = 118;
  f.handoff_ns = 700;  // 3.5x the map's
  EXPECT_FALSE(host_map_matches(m, f, &why, &moment));
  EXPECT_NE(why.find("hand-off"), std::string::npos) << why;
  EXPECT_TRUE(moment) << "slower: as in a moment of the host";
  f.handoff_ns = 50;  // a quarter of the map's
  EXPECT_FALSE(host_map_matches(m, f, &why, &moment));
  EXPECT_FALSE(moment) << "faster: the map was measured in a moment";
  f.handoff_ns = 200;
  f.fma_together = 0.5;  // the two PUs now share a core
  EXPECT_FALSE(host_map_matches(m, f, &why, &moment));
  EXPECT_NE(why.find("now share"), std::string::npos) << why;
  EXPECT_TRUE(moment);
  f.handoff_ns = 30;  // siblings of one core for a moment: a faster hand-off too
  EXPECT_FALSE(host_map_matches(m, f, &why, &moment));
  EXPECT_NE(why.find("now share"), std::string::npos) << why;
  EXPECT_TRUE(moment);
  f.pair = false;  // one PU: no pair to compare
  EXPECT_TRUE(host_map_matches(m, f, &why));
}

struct TempDir {
  TempDir() : path((fs::temp_directory_path() / str_cat("tessera_topo_", ::getpid())).string()) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

// Measured once, then read from the cache keyed by the host's shape; a
// corrupt or foreign cache file is measured again; TESSERA_HOST_MAP and
// `file` take a map as given.
TEST(HostMap, ObtainMeasuresCachesAndHonoursGivenFiles) {
  TempDir dir;
  HostMapOptions o;
  o.cache_dir = dir.path;
  o.reps = 3;
  o.verify = false;  // this test must not depend on the host staying quiet
  size_t stages = 0;
  o.progress = [&](std::string_view, size_t done, size_t total) {
    ++stages;
    EXPECT_LE(done, total);
  };
  auto first = host_map_obtain(o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->origin, "measured");
  EXPECT_GE(stages, static_cast<size_t>(cpu_topology().pus));
  ASSERT_TRUE(first->validate().ok()) << first->validate().to_string();
  EXPECT_EQ(first->size(), cpu_topology().pus);
  EXPECT_EQ(first->key, host_shape_key(cpu_topology()));
  for (int p = 0; p < first->size(); ++p) {
    EXPECT_EQ(first->share(p, p), Sharing::kSelf);
    EXPECT_GT(first->pus[static_cast<size_t>(p)].fma_gflops, 0);
    EXPECT_GT(first->pus[static_cast<size_t>(p)].mem_gbps, 0);
  }
  EXPECT_GE(first->llc_held_kb, 1024);  // measured: the smallest working set tried at least
  const std::string path = host_map_cache_path(dir.path);
  ASSERT_TRUE(fs::exists(path));
  auto second = host_map_obtain(o);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->origin, "cache");
  EXPECT_EQ(second->read_ns_per_kb, host_map_read(path)->read_ns_per_kb);

  std::ofstream(path) << "{ truncated";
  auto third = host_map_obtain(o);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->origin, "measured");
  ASSERT_FALSE(third->notes.empty());
  EXPECT_NE(third->notes.back().find("not valid JSON"), std::string::npos) << third->notes.back();

  // A map measured before the held working set was: measured again.
  HostMap older = *second;
  older.llc_held_kb = 0;
  ASSERT_TRUE(host_map_write(path, older).ok());
  auto older_again = host_map_obtain(o);
  ASSERT_TRUE(older_again.ok());
  EXPECT_EQ(older_again->origin, "measured");
  EXPECT_GT(older_again->llc_held_kb, 0);
  EXPECT_NE(older_again->notes.back().find("predates measuring what the caches keep"), std::string::npos)
      << older_again->notes.back();

  HostMap foreign = host_map_uniform(cpu_topology().pus, 1, 2, 3);  // key "uniform"
  ASSERT_TRUE(host_map_write(path, foreign).ok());
  auto fourth = host_map_obtain(o);
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ(fourth->origin, "measured");
  EXPECT_NE(fourth->notes.back().find("another host shape"), std::string::npos);

  o.refresh = true;
  EXPECT_EQ(host_map_obtain(o)->origin, "measured");

  const std::string given = dir.path + "/given.json";
  std::ofstream(given) << kTwoPus;
  o.file = given;
  auto from_file = host_map_obtain(o);
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(from_file->origin, "file " + given);
  EXPECT_DOUBLE_EQ(from_file->read_cost(1, 0, 128), 50);
  o.file = "";
  ::setenv("TESSERA_HOST_MAP", given.c_str(), 1);
  auto from_env = host_map_obtain(o);
  ::unsetenv("TESSERA_HOST_MAP");
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->origin, "file " + given);
  o.file = dir.path + "/missing.json";
  EXPECT_EQ(host_map_obtain(o).status().code(), StatusCode::kNotFound);
}

// A cached map that disagrees with the host in its hand-off or core
// sharing is measured again only once the disagreement has lasted: seen by
// kDoubtProcesses processes over kDoubtSpanS, none more than kDoubtGapS
// after the one before.
TEST(HostMap, ADisagreementIsAMomentUntilItLasts) {
  MapDoubt d;
  EXPECT_FALSE(map_doubt_settles(&d, 1000));
  EXPECT_EQ(d.count, 1);
  EXPECT_FALSE(map_doubt_settles(&d, 1100));
  EXPECT_FALSE(map_doubt_settles(&d, 1200)) << "three processes, but within two minutes";
  EXPECT_TRUE(map_doubt_settles(&d, 1000 + kDoubtSpanS));
  MapDoubt gap;
  EXPECT_FALSE(map_doubt_settles(&gap, 0));
  EXPECT_FALSE(map_doubt_settles(&gap, 300));
  EXPECT_FALSE(map_doubt_settles(&gap, 300 + kDoubtGapS + 1)) << "a new streak";
  EXPECT_EQ(gap.count, 1);
  EXPECT_EQ(gap.first_s, 300 + kDoubtGapS + 1);
  MapDoubt back{5000, 5000, 2};
  EXPECT_FALSE(map_doubt_settles(&back, 4000)) << "a clock gone back begins a new streak";
  EXPECT_EQ(back.count, 1);
  // As text and back; text that is no streak, or an impossible one, reads as none.
  const MapDoubt read = map_doubt_parse(map_doubt_text(d));
  EXPECT_EQ(read.first_s, d.first_s);
  EXPECT_EQ(read.last_s, d.last_s);
  EXPECT_EQ(read.count, d.count);
  for (const char* bad : {"", "12 x 3", "20 10 2", "10 20 -1"}) EXPECT_EQ(map_doubt_parse(bad).count, 0) << bad;
}

// Obtained with a cached map whose hand-off is a thousandth of this
// host's (the host now looks as in a moment): used as cached, with a note,
// and the doubt recorded beside it. With one a thousand times this host's
// (the map was measured in a moment): measured again at once. Where the
// host ran FMAs at another rate just then (busy), either is measured again
// as another machine; where it ran the PUs as siblings of one core just
// then, either is kept for the moment. The written map says the first two
// PUs run on cores of their own whatever the first measurement found (a
// host that ran them as siblings then, and not in the check, would stale
// the map on sharing before its hand-off is looked at).
TEST(HostMap, ObtainKeepsAMapThatDisagreesForAMoment) {
  if (cpu_topology().pus < 2) GTEST_SKIP() << "one PU: no hand-off";
  TempDir dir;
  HostMapOptions o;
  o.cache_dir = dir.path;
  o.reps = 3;
  o.verify = false;
  auto first = host_map_obtain(o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const std::string path = host_map_cache_path(dir.path);
  for (double factor : {1e-3, 1e3}) {
    HostMap m = *first;
    for (double& h : m.handoff_ns) h *= factor;
    m.fma_together[1] = m.fma_together[static_cast<size_t>(m.size())] = 1.0;
    ASSERT_TRUE(host_map_write(path, m).ok());
    fs::remove(path + ".doubt");
    o.verify = true;
    auto got = host_map_obtain(o);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_FALSE(got->notes.empty());
    const std::string& note = got->notes.back();
    if (got->origin == "measured" && note.find("GFLOP/s") != std::string::npos) continue;  // busy just then
    // Run as siblings of one core just then: a moment, whatever the map's hand-off.
    const bool siblings = note.find("now share") != std::string::npos;
    if (factor < 1 || siblings) {
      EXPECT_EQ(got->origin, "cache") << note;
      EXPECT_EQ(got->handoff_ns, host_map_read(path)->handoff_ns) << "the cached map's";
      EXPECT_NE(note.find("not as this map describes right now"), std::string::npos) << note;
      EXPECT_TRUE(fs::exists(path + ".doubt"));
    } else {
      EXPECT_EQ(got->origin, "measured") << note;
      EXPECT_NE(note.find("hand-off"), std::string::npos) << note;
      EXPECT_FALSE(fs::exists(path + ".doubt"));
    }
  }
}

}  // namespace
}  // namespace tessera
