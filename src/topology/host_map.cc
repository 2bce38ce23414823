#include "topology/host_map.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/paths.h"
#include "base/strings.h"
#include "topology/calibrate.h"

namespace tessera {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string_view sharing_name(Sharing s) {
  switch (s) {
    case Sharing::kSelf: return "self";
    case Sharing::kCore: return "core";
    case Sharing::kL2: return "l2";
    case Sharing::kL3: return "l3";
    case Sharing::kNone: return "none";
  }
  return "?";
}

bool sharing_parse(std::string_view name, Sharing* out) {
  for (Sharing s : {Sharing::kSelf, Sharing::kCore, Sharing::kL2, Sharing::kL3, Sharing::kNone})
    if (sharing_name(s) == name) {
      *out = s;
      return true;
    }
  return false;
}

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex32(uint64_t h) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>((h >> 32) ^ (h & 0xffffffffu)));
  return buf;
}

}  // namespace

// ------------------------------------------------------------ questions ---

namespace {

// Entry i of per-size matrices `m`, interpolated on log size (clamped to
// the sizes measured).
double at_size(const std::vector<double>& sizes, const std::vector<std::vector<double>>& m, size_t i, double kb) {
  if (sizes.size() == 1 || kb <= sizes.front()) return m.front()[i];
  if (kb >= sizes.back()) return m.back()[i];
  size_t s = 1;
  while (sizes[s] < kb) ++s;
  const double f = std::log(kb / sizes[s - 1]) / std::log(sizes[s] / sizes[s - 1]);
  return m[s - 1][i] * (1 - f) + m[s][i] * f;
}

}  // namespace

double HostMap::cache_kept_kb() const {
  if (llc_held_kb > 0) return llc_kb > 0 ? std::min(llc_held_kb, llc_kb) : llc_held_kb;
  return llc_kb;
}

double HostMap::read_cost(int reader, int writer, double kb) const {
  return at_size(sizes_kb, read_ns_per_kb, static_cast<size_t>(reader * size() + writer), kb);
}

double HostMap::crossing_ns_per_kb(int reader, int writer, double kb) const {
  if (reader == writer) return 0;
  return std::max(0.0, read_cost(reader, writer, kb) - read_cost(reader, reader, kb));
}

double HostMap::rewrite_premium_ns_per_kb(int writer, int reader, double kb) const {
  if (reader == writer) return 0;
  const double again = at_size(sizes_kb, rewrite_ns_per_kb, static_cast<size_t>(writer * size() + reader), kb) -
                       at_size(sizes_kb, rewrite_ns_per_kb, static_cast<size_t>(writer * size() + writer), kb);
  return std::max(0.0, again);
}

Result<double> HostMap::distance(const Place& from, const Place& to) const {
  auto pu_ok = [&](int p) { return p >= 0 && p < size(); };
  if (from.kind == Place::Kind::kDevice || to.kind == Place::Kind::kDevice)
    return not_found("the host map knows no devices yet");
  if (from.kind == Place::Kind::kPu && to.kind == Place::Kind::kPu) {
    if (!pu_ok(from.index) || !pu_ok(to.index))
      return out_of_range(str_cat("PU ", pu_ok(from.index) ? to.index : from.index, " is not in the host map (",
                                  size(), " PUs)"));
    return read_cost(to.index, from.index, kTypicalKb);
  }
  if (from.kind == Place::Kind::kNuma && to.kind == Place::Kind::kNuma) {
    if (from.index == to.index) return 0.0;
    return not_found(str_cat("the distance between NUMA nodes ", from.index, " and ", to.index, " was not measured"));
  }
  const Place& pu = from.kind == Place::Kind::kPu ? from : to;
  const Place& node = from.kind == Place::Kind::kPu ? to : from;
  if (!pu_ok(pu.index)) return out_of_range(str_cat("PU ", pu.index, " is not in the host map (", size(), " PUs)"));
  const HostPu& p = pus[static_cast<size_t>(pu.index)];
  if (p.numa != node.index || p.mem_gbps <= 0)
    return not_found(str_cat("reading the memory of NUMA node ", node.index, " from PU ", p.os_index, " was not measured"));
  return 1e6 / 1024 / p.mem_gbps;
}

double HostMap::age_days(int64_t now_unix) const {
  if (measured_at <= 0) return 0;
  return static_cast<double>(now_unix - measured_at) / 86400.0;
}

namespace {

// Half-octave classes of FMA rate centred away from the usual rates (118
// and 200 GFLOP/s fall in the middle of theirs): a host moved to a machine
// of other FMA width or clock gets another digest.
int fma_class(double gflops) {
  return gflops > 0 ? static_cast<int>(std::floor(2 * std::log2(gflops) + 0.5)) : -1;
}

}  // namespace

std::string HostMap::digest() const {
  std::ostringstream s;
  s << size();
  for (const HostPu& p : pus) s << "|f" << fma_class(p.fma_gflops);
  for (int a = 0; a < size(); ++a)
    for (int b = 0; b < size(); ++b) {
      s << "|" << sharing_name(share(a, b));
      if (a == b) continue;
      // Classes with their edges between the states hosts are seen in
      // (cross reads 1.4-1.8x or 4-5x local; hand-offs of 25-80 ns within
      // a core complex, 200-300 across, microseconds when the hypervisor
      // runs two vCPUs in turns), so re-measuring one state gives one digest.
      const double ratio = read_cost(a, b, kTypicalKb) / read_cost(a, a, kTypicalKb);
      const double h = handoff_ns[static_cast<size_t>(a * size() + b)];
      s << ":" << (ratio < kDearCrossing ? "cheap" : "dear");
      s << ":" << (h < kNearHandoffNs ? "near" : h < kFarHandoffNs ? "mid" : "far");
    }
  return hex32(fnv1a(s.str()));
}

std::string HostMap::sharing_digest() const {
  std::ostringstream s;
  s << size();
  for (Sharing x : sharing) s << "|" << sharing_name(x);
  return hex32(fnv1a(s.str()));
}

Status HostMap::validate() const {
  const int n = size();
  if (n < 1 || n > 4096) return invalid_argument(str_cat("pus: ", n, " PUs (expected 1 to 4096)"));
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  if (sizes_kb.empty()) return invalid_argument("sizes_kb: no sizes");
  for (size_t s = 0; s < sizes_kb.size(); ++s)
    if (!std::isfinite(sizes_kb[s]) || sizes_kb[s] <= 0 || (s > 0 && sizes_kb[s] <= sizes_kb[s - 1]))
      return invalid_argument("sizes_kb: sizes must be positive and ascending");
  auto matrices = [&](const char* name, const std::vector<std::vector<double>>& m, bool positive) -> Status {
    if (m.size() != sizes_kb.size())
      return invalid_argument(str_cat(name, ": ", m.size(), " matrices for ", sizes_kb.size(), " sizes"));
    for (const auto& x : m) {
      if (x.size() != nn) return invalid_argument(str_cat(name, ": a matrix is not ", n, " x ", n));
      for (double v : x)
        if (!std::isfinite(v) || v < 0 || (positive && v == 0) || v > 1e9)
          return invalid_argument(str_cat(name, ": ", v, " is not a cost in ns per KB"));
    }
    return Status();
  };
  TESSERA_RETURN_IF_ERROR(matrices("read_cost_by_size", read_ns_per_kb, true));
  TESSERA_RETURN_IF_ERROR(matrices("rewrite_cost_by_size", rewrite_ns_per_kb, false));
  if (handoff_ns.size() != nn) return invalid_argument(str_cat("handoff_ns: not ", n, " x ", n));
  for (double v : handoff_ns)
    if (!std::isfinite(v) || v < 0 || v > 1e9) return invalid_argument(str_cat("handoff_ns: ", v, " is not a latency in ns"));
  if (fma_together.size() != nn) return invalid_argument(str_cat("fma_together: not ", n, " x ", n));
  for (double v : fma_together)
    if (!std::isfinite(v) || v < 0 || v > 4) return invalid_argument(str_cat("fma_together: ", v, " is not a ratio"));
  if (sharing.size() != nn) return invalid_argument(str_cat("sharing: not ", n, " x ", n));
  if (!(llc_kb >= 0 && llc_kb < 1e9)) return invalid_argument("llc_kb: expected KB from 0 (unknown) to 1e9");
  if (!(llc_held_kb >= 0 && llc_held_kb < 1e9))
    return invalid_argument("llc_held_kb: expected KB from 0 (not measured) to 1e9");
  for (const HostPu& p : pus)
    if (!std::isfinite(p.fma_gflops) || p.fma_gflops < 0 || !std::isfinite(p.mem_gbps) || p.mem_gbps < 0)
      return invalid_argument(str_cat("pus: PU ", p.os_index, " has a rate that is not a number"));
  return Status();
}

HostMap host_map_uniform(int n, double local_ns_per_kb, double remote_ns_per_kb, double handoff) {
  HostMap m;
  m.key = "uniform";
  m.cpu = "uniform";
  m.groups_from = "given";
  for (int p = 0; p < n; ++p) {
    HostPu pu;
    pu.os_index = static_cast<unsigned>(p);
    pu.core = p;
    m.pus.push_back(pu);
  }
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  m.sizes_kb = {HostMap::kTypicalKb};
  m.read_ns_per_kb.assign(1, std::vector<double>(nn, remote_ns_per_kb));
  m.rewrite_ns_per_kb.assign(1, std::vector<double>(nn, 0));
  m.handoff_ns.assign(nn, handoff);
  m.fma_together.assign(nn, 1);
  m.sharing.assign(nn, Sharing::kNone);
  for (int p = 0; p < n; ++p) {
    const size_t d = static_cast<size_t>(p * n + p);
    m.read_ns_per_kb[0][d] = local_ns_per_kb;
    m.handoff_ns[d] = 0;
    m.sharing[d] = Sharing::kSelf;
  }
  return m;
}

std::string host_profile_tag(const HostMap& m) {
  return str_cat(m.size(), "pu-", m.sharing_digest(), "-f", fma_class(m.pus[0].fma_gflops));
}

std::vector<std::string> host_map_conclusions(const HostMap& m) {
  std::vector<std::string> out;
  const int n = m.size();
  const double kept = m.cache_kept_kb();
  const std::string held =
      m.llc_held_kb > 0 && m.llc_kb > 0 && m.llc_held_kb < m.llc_kb
          ? str_cat(" the caches keep between runs (measured; the last-level cache is ", str_fixed(m.llc_kb / 1024, 1),
                    " MiB, shared with whatever else runs on the machine)")
          : m.llc_held_kb > 0 ? " the caches keep between runs (measured)" : " last-level cache";
  out.push_back(kept > 0 ? str_cat("a model whose weights and activations exceed the ", str_fixed(kept / 1024, 1),
                                   " MiB", held,
                                   " reads its weights from memory in every run: its ops are profiled with "
                                   "their weights evicted from the caches")
                         : "the last-level cache's size is unknown: every model's ops are profiled with their "
                           "weights in cache");
  if (n == 1) {
    out.push_back("one PU: every Plan runs on one vEU; nothing crosses");
    return out;
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (Sharing s : {Sharing::kCore, Sharing::kL2, Sharing::kL3, Sharing::kNone}) {
    std::vector<double> cross, hand;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        if (m.share(a, b) == s) {
          cross.push_back(std::max(m.crossing_ns_per_kb(a, b, HostMap::kTypicalKb), m.crossing_ns_per_kb(b, a, HostMap::kTypicalKb)));
          hand.push_back(m.handoff_ns[static_cast<size_t>(a * n + b)]);
        }
    if (cross.empty()) continue;
    const double x = med(cross), h = med(hand);
    const char* what = s == Sharing::kCore  ? "share a core (SMT siblings)"
                       : s == Sharing::kL2 ? "share an L2"
                       : s == Sharing::kL3 ? "share an L3"
                                            : "share no cache";
    const double kb = HostMap::kTypicalKb;
    const double moved_us = (kb + kb / 2) * x / 1e3, split_us = 2 * (2 * h / 1e3 + moved_us);
    out.push_back(str_cat(cross.size(), cross.size() == 1 ? " pair of PUs " : " pairs of PUs ", what,
                          ": data crossing costs +", str_fixed(x, 1), " ns/KB over local (",
                          str_fixed(kb * x / 1e3, 2), " us per ", kb, " KB), a hand-off ", str_fixed(h / 1e3, 2),
                          " us; an op is split across them when that saves more: a 2-way split of an op reading ",
                          kb, " KB made on one vEU pays above ~", str_fixed(split_us, 1), " us"));
  }
  if (m.noisy) out.push_back("the host was noisy while measured: costs may move; `tessera topo --refresh` measures again");
  return out;
}

std::string host_shape_key(const CpuTopology& t) {
  return str_cat(cpu_id(), "-", measure_isa(), "-", t.pus, "pu-", hex32(fnv1a(t.shape())));
}

// --------------------------------------------------------------- JSON ---

namespace {

Json matrix_json(const std::vector<double>& v, int n) {
  Json rows = Json::array();
  for (int a = 0; a < n; ++a) {
    Json row = Json::array();
    for (int b = 0; b < n; ++b) row.push_back(std::round(v[static_cast<size_t>(a * n + b)] * 1000) / 1000);
    rows.push_back(row);
  }
  return rows;
}

// Reads JSON values with errors that name the source and the field.
class Reader {
 public:
  Reader(const std::string& source) : source_(source) {}
  Status error(const std::string& field, const std::string& what) const {
    return invalid_argument(str_cat(source_, ": ", field, ": ", what));
  }
  Status number(const Json& j, const std::string& field, double* out) const {
    if (!j.is_number()) return error(field, "expected a number");
    *out = j.get<double>();
    if (!std::isfinite(*out)) return error(field, "not a finite number");
    return Status();
  }
  Status integer(const Json& j, const std::string& field, int64_t lo, int64_t hi, int64_t* out) const {
    if (!j.is_number_integer()) return error(field, "expected an integer");
    *out = j.get<int64_t>();
    if (*out < lo || *out > hi) return error(field, str_cat(*out, " is out of range (", lo, " to ", hi, ")"));
    return Status();
  }
  // An n x n matrix of numbers, rows first, into `out` (n * n).
  Status matrix(const Json& j, const std::string& field, int n, std::vector<double>* out) const {
    if (!j.is_array() || static_cast<int>(j.size()) != n) return error(field, str_cat("expected ", n, " rows"));
    out->assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
    for (int a = 0; a < n; ++a) {
      const Json& row = j[static_cast<size_t>(a)];
      if (!row.is_array() || static_cast<int>(row.size()) != n)
        return error(str_cat(field, "[", a, "]"), str_cat("expected ", n, " numbers"));
      for (int b = 0; b < n; ++b)
        TESSERA_RETURN_IF_ERROR(number(row[static_cast<size_t>(b)], str_cat(field, "[", a, "][", b, "]"),
                                       &(*out)[static_cast<size_t>(a * n + b)]));
    }
    return Status();
  }
  // A list of n x n matrices, one per size.
  Status matrices(const Json& j, const std::string& field, int n, size_t sizes,
                  std::vector<std::vector<double>>* out) const {
    if (!j.is_array() || j.size() != sizes) return error(field, str_cat("expected ", sizes, " matrices, one per size"));
    out->resize(sizes);
    for (size_t s = 0; s < sizes; ++s)
      TESSERA_RETURN_IF_ERROR(matrix(j[s], str_cat(field, "[", s, "]"), n, &(*out)[s]));
    return Status();
  }

 private:
  std::string source_;
};

Status parse_pus(const Reader& r, const Json& j, HostMap* m) {
  if (!j.is_array() || j.empty() || j.size() > 4096) return r.error("pus", "expected a list of 1 to 4096 PUs");
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& e = j[i];
    const std::string f = str_cat("pus[", i, "]");
    if (!e.is_object()) return r.error(f, "expected an object");
    HostPu p;
    int64_t v = static_cast<int64_t>(i);
    if (e.contains("os_index")) TESSERA_RETURN_IF_ERROR(r.integer(e["os_index"], f + ".os_index", 0, 1 << 20, &v));
    p.os_index = static_cast<unsigned>(v);
    for (auto [name, dst] : {std::pair{"core", &p.core}, std::pair{"l2", &p.l2}, std::pair{"l3", &p.l3},
                             std::pair{"numa", &p.numa}}) {
      if (!e.contains(name)) continue;
      TESSERA_RETURN_IF_ERROR(r.integer(e[name], f + "." + name, -1, 1 << 20, &v));
      *dst = static_cast<int>(v);
    }
    for (auto [name, dst] : {std::pair{"fma_gflops", &p.fma_gflops}, std::pair{"mem_gbps", &p.mem_gbps}})
      if (e.contains(name)) TESSERA_RETURN_IF_ERROR(r.number(e[name], f + "." + name, dst));
    m->pus.push_back(p);
  }
  return Status();
}

// The optional fields default to: one size (read_cost's), no extra cost
// for rewrites, no hand-off cost, cores not shared, sharing "none".
Status parse_costs(const Reader& r, const Json& j, HostMap* m) {
  const int n = m->size();
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  if (j.contains("sizes_kb")) {
    const Json& s = j["sizes_kb"];
    if (!s.is_array() || s.empty() || s.size() > 64) return r.error("sizes_kb", "expected a list of 1 to 64 sizes");
    for (size_t i = 0; i < s.size(); ++i) {
      double v;
      TESSERA_RETURN_IF_ERROR(r.number(s[i], str_cat("sizes_kb[", i, "]"), &v));
      m->sizes_kb.push_back(v);
    }
  } else {
    m->sizes_kb = {HostMap::kTypicalKb};
  }
  if (j.contains("read_cost_by_size")) {
    TESSERA_RETURN_IF_ERROR(r.matrices(j["read_cost_by_size"], "read_cost_by_size", n, m->sizes_kb.size(), &m->read_ns_per_kb));
  } else {
    if (!j.contains("read_cost")) return r.error("read_cost", "missing (a PUs x PUs matrix of ns per KB)");
    if (m->sizes_kb.size() != 1) return r.error("read_cost_by_size", "missing (sizes_kb lists several sizes)");
    m->read_ns_per_kb.resize(1);
    TESSERA_RETURN_IF_ERROR(r.matrix(j["read_cost"], "read_cost", n, &m->read_ns_per_kb[0]));
  }
  if (j.contains("rewrite_cost_by_size"))
    TESSERA_RETURN_IF_ERROR(
        r.matrices(j["rewrite_cost_by_size"], "rewrite_cost_by_size", n, m->sizes_kb.size(), &m->rewrite_ns_per_kb));
  else
    m->rewrite_ns_per_kb.assign(m->sizes_kb.size(), std::vector<double>(nn, 0));
  m->handoff_ns.assign(nn, 0);
  if (j.contains("handoff_ns")) TESSERA_RETURN_IF_ERROR(r.matrix(j["handoff_ns"], "handoff_ns", n, &m->handoff_ns));
  m->fma_together.assign(nn, 1);
  if (j.contains("fma_together")) TESSERA_RETURN_IF_ERROR(r.matrix(j["fma_together"], "fma_together", n, &m->fma_together));
  m->sharing.assign(nn, Sharing::kNone);
  for (int p = 0; p < n; ++p) m->sharing[static_cast<size_t>(p * n + p)] = Sharing::kSelf;
  if (j.contains("sharing")) {
    const Json& s = j["sharing"];
    if (!s.is_array() || static_cast<int>(s.size()) != n) return r.error("sharing", str_cat("expected ", n, " rows"));
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        const Json& row = s[static_cast<size_t>(a)];
        const std::string f = str_cat("sharing[", a, "][", b, "]");
        if (!row.is_array() || static_cast<int>(row.size()) != n || !row[static_cast<size_t>(b)].is_string())
          return r.error(f, "expected one of self, core, l2, l3, none");
        if (!sharing_parse(row[static_cast<size_t>(b)].get<std::string>(), &m->sharing[static_cast<size_t>(a * n + b)]))
          return r.error(f, str_cat("'", row[static_cast<size_t>(b)].get<std::string>(), "' is not one of self, core, l2, l3, none"));
      }
  }
  return Status();
}

}  // namespace

std::string host_map_to_json(const HostMap& m) {
  const int n = m.size();
  Json j;
  j["format"] = "tessera host map";
  j["version"] = HostMap::kVersion;
  j["key"] = m.key;
  j["cpu"] = m.cpu;
  j["measured_at"] = m.measured_at;
  j["measure_s"] = std::round(m.measure_s * 100) / 100;
  j["groups_from"] = m.groups_from;
  j["noisy"] = m.noisy;
  j["notes"] = m.notes;
  Json pus = Json::array();
  for (const HostPu& p : m.pus)
    pus.push_back({{"os_index", p.os_index}, {"core", p.core}, {"l2", p.l2}, {"l3", p.l3}, {"numa", p.numa},
                   {"fma_gflops", std::round(p.fma_gflops * 10) / 10}, {"mem_gbps", std::round(p.mem_gbps * 10) / 10}});
  j["pus"] = pus;
  j["llc_kb"] = m.llc_kb;
  j["llc_held_kb"] = m.llc_held_kb;
  j["sizes_kb"] = m.sizes_kb;
  // The typical size's matrix, for readers that want one number per pair.
  std::vector<double> typical(static_cast<size_t>(n) * static_cast<size_t>(n));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) typical[static_cast<size_t>(a * n + b)] = m.read_cost(a, b, HostMap::kTypicalKb);
  j["read_cost"] = matrix_json(typical, n);
  Json by = Json::array(), re = Json::array();
  for (const auto& x : m.read_ns_per_kb) by.push_back(matrix_json(x, n));
  for (const auto& x : m.rewrite_ns_per_kb) re.push_back(matrix_json(x, n));
  j["read_cost_by_size"] = by;
  j["rewrite_cost_by_size"] = re;
  j["handoff_ns"] = matrix_json(m.handoff_ns, n);
  j["fma_together"] = matrix_json(m.fma_together, n);
  Json sh = Json::array();
  for (int a = 0; a < n; ++a) {
    Json row = Json::array();
    for (int b = 0; b < n; ++b) row.push_back(std::string(sharing_name(m.share(a, b))));
    sh.push_back(row);
  }
  j["sharing"] = sh;
  return j.dump(1) + "\n";
}

Result<HostMap> host_map_from_json(std::string_view text, const std::string& source) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  Reader r(source);
  if (j.is_discarded()) return r.error("(file)", "not valid JSON");
  if (!j.is_object()) return r.error("(file)", "expected a JSON object");
  int64_t version = 0;
  if (!j.contains("version")) return r.error("version", "missing");
  TESSERA_RETURN_IF_ERROR(r.integer(j["version"], "version", 0, INT32_MAX, &version));
  if (version != HostMap::kVersion)
    return r.error("version", str_cat(version, " (this Tessera reads version ", HostMap::kVersion,
                                      "; measure again with `tessera topo --refresh`)"));
  HostMap m;
  for (auto [name, dst] : {std::pair{"key", &m.key}, std::pair{"cpu", &m.cpu}, std::pair{"groups_from", &m.groups_from}}) {
    if (!j.contains(name)) continue;
    if (!j[name].is_string()) return r.error(name, "expected a string");
    *dst = j[name].get<std::string>();
  }
  if (j.contains("measured_at")) TESSERA_RETURN_IF_ERROR(r.integer(j["measured_at"], "measured_at", 0, INT64_MAX / 2, &m.measured_at));
  if (j.contains("measure_s")) TESSERA_RETURN_IF_ERROR(r.number(j["measure_s"], "measure_s", &m.measure_s));
  if (j.contains("noisy")) {
    if (!j["noisy"].is_boolean()) return r.error("noisy", "expected true or false");
    m.noisy = j["noisy"].get<bool>();
  }
  if (j.contains("notes")) {
    if (!j["notes"].is_array()) return r.error("notes", "expected a list of strings");
    for (const Json& s : j["notes"]) {
      if (!s.is_string()) return r.error("notes", "expected a list of strings");
      m.notes.push_back(s.get<std::string>());
    }
  }
  if (j.contains("llc_kb")) {
    TESSERA_RETURN_IF_ERROR(r.number(j["llc_kb"], "llc_kb", &m.llc_kb));
    if (!(m.llc_kb >= 0 && m.llc_kb < 1e9)) return r.error("llc_kb", "expected KB from 0 (unknown) to 1e9");
  }
  if (j.contains("llc_held_kb")) {
    TESSERA_RETURN_IF_ERROR(r.number(j["llc_held_kb"], "llc_held_kb", &m.llc_held_kb));
    if (!(m.llc_held_kb >= 0 && m.llc_held_kb < 1e9))
      return r.error("llc_held_kb", "expected KB from 0 (not measured) to 1e9");
  }
  if (!j.contains("pus")) return r.error("pus", "missing (a list of PUs)");
  TESSERA_RETURN_IF_ERROR(parse_pus(r, j["pus"], &m));
  TESSERA_RETURN_IF_ERROR(parse_costs(r, j, &m));
  if (Status st = m.validate(); !st.ok()) return st.with_context(source);
  return m;
}

Result<HostMap> host_map_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(str_cat("cannot read host map '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return host_map_from_json(text.str(), str_cat("host map '", path, "'"));
}

Status host_map_write(const std::string& path, const HostMap& m) {
  if (!write_file_atomic(path, host_map_to_json(m))) return not_found(str_cat("cannot write host map '", path, "'"));
  return Status();
}

std::string host_map_cache_path(const std::string& dir) {
  return (fs::path(cache_dir(dir)) / str_cat("hostmap-", host_shape_key(cpu_topology()), ".json")).string();
}

namespace {

// A map disagrees with the host only when kFingerprintTries fingerprints
// in a row do (and one that disagrees as a moment would is stale only
// once the disagreement lasts: MapDoubt).
constexpr int kFingerprintTries = 3;

// `*moment`: the last disagreement's (host_map_matches).
bool fingerprint_agrees(const HostMap& m, const CpuTopology& t, std::string* why, bool* moment) {
  for (int k = 0; k < kFingerprintTries; ++k)
    if (host_map_matches(m, host_fingerprint(t), why, moment)) return true;
  return false;
}

MapDoubt read_doubt(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return map_doubt_parse(text);
}

}  // namespace

std::string map_doubt_text(const MapDoubt& d) { return str_cat(d.first_s, " ", d.last_s, " ", d.count); }

MapDoubt map_doubt_parse(const std::string& text) {
  MapDoubt d;
  std::istringstream in(text);
  if (!(in >> d.first_s >> d.last_s >> d.count) || d.count < 0 || d.first_s > d.last_s) d = MapDoubt();
  return d;
}

bool map_doubt_settles(MapDoubt* d, int64_t now_s) {
  if (d->count <= 0 || now_s < d->last_s || now_s - d->last_s > kDoubtGapS) *d = {now_s, now_s, 0};
  d->last_s = now_s;
  ++d->count;
  return d->count >= kDoubtProcesses && now_s - d->first_s >= kDoubtSpanS;
}

Result<HostMap> host_map_obtain(const HostMapOptions& o) {
  std::string file = o.file;
  if (file.empty())
    if (const char* env = std::getenv("TESSERA_HOST_MAP"); env && *env) file = env;
  if (!file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(HostMap m, host_map_read(file));
    m.origin = str_cat("file ", file);
    return m;
  }
  const CpuTopology& t = cpu_topology();
  const std::string path = host_map_cache_path(o.cache_dir);
  const std::string doubt_path = path + ".doubt";
  auto as_cached = [&](HostMap m) {
    m.origin = "cache";
    if (m.llc_kb == 0) m.llc_kb = t.llc_kb;  // a map written before the field
    return m;
  };
  std::string stale;
  bool moment = false;
  if (!o.refresh && fs::exists(path)) {
    Result<HostMap> cached = host_map_read(path);
    if (!cached.ok()) {
      stale = cached.status().message();
    } else if (cached->key != host_shape_key(t) || cached->size() != t.pus) {
      stale = "it describes another host shape";
    } else if (cached->measured_at > 0 && cached->llc_held_kb == 0) {
      stale = "it predates measuring what the caches keep between runs";
    } else if (!o.verify || fingerprint_agrees(*cached, t, &stale, &moment)) {
      std::error_code ec;
      if (o.verify) fs::remove(doubt_path, ec);  // agreeing, it ends a streak of doubts
      return as_cached(std::move(*cached));
    } else if (moment) {
      // A slower hand-off, or PUs now sharing a core, may be a moment of
      // this host: the map holds until the disagreement lasts (MapDoubt).
      // The other way round, the map was measured in a moment.
      MapDoubt d = read_doubt(doubt_path);
      const int64_t now = static_cast<int64_t>(std::time(nullptr));
      if (!map_doubt_settles(&d, now)) {
        write_file_atomic(doubt_path, map_doubt_text(d) + "\n");
        cached->notes.push_back(str_cat("the host is not as this map describes right now (", stale,
                                        "): used as cached, and measured again once ", kDoubtProcesses,
                                        " processes over ", kDoubtSpanS / 60, " minutes find it so (",
                                        d.count, " so far)"));
        return as_cached(std::move(*cached));
      }
      std::error_code ec;
      fs::remove(doubt_path, ec);
      stale += str_cat(", in ", d.count, " processes over ", (now - d.first_s) / 60, " minutes");
    }
  }
  MeasureOptions mo;
  mo.progress = o.progress;
  if (o.reps > 0) mo.reps = o.reps;
  HostMap m = host_map_measure(t, mo);
  if (!stale.empty()) m.notes.push_back(str_cat("measured again: the cached map no longer held (", stale, ")"));
  m.origin = "measured";
  if (!write_file_atomic(path, host_map_to_json(m)))
    m.notes.push_back(str_cat("could not write the cache ", path));
  return m;
}

}  // namespace tessera
