#include "daemon/config.h"

#include <fstream>
#include <set>
#include <sstream>

#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include "base/strings.h"

namespace tessera::daemon {

const char* mode_name(Mode m) { return m == Mode::kCloud ? "cloud" : "appliance"; }

Result<uint64_t> parse_bytes(const std::string& text) {
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"KiB", uint64_t{1} << 10}, {"MiB", uint64_t{1} << 20}, {"GiB", uint64_t{1} << 30}, {"TiB", uint64_t{1} << 40},
      {"KB", 1000},               {"MB", 1000000},            {"GB", 1000000000},         {"B", 1}};
  uint64_t scale = 1;
  std::string digits = text;
  for (const auto& [unit, s] : kUnits) {
    const std::string u(unit);
    if (digits.size() > u.size() && digits.compare(digits.size() - u.size(), u.size(), u) == 0) {
      digits.resize(digits.size() - u.size());
      scale = s;
      break;
    }
  }
  int64_t n = 0;
  if (!parse_int64(digits, &n) || n < 0 || static_cast<uint64_t>(n) > UINT64_MAX / scale)
    return invalid_argument(str_cat("'", text, "' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB)"));
  return static_cast<uint64_t>(n) * scale;
}

namespace {

// Errors name the file, the line and the key.
struct Reader {
  const std::string& path;
  std::string where(const toml::node& n, const std::string& key) const {
    return str_cat(path, ":", n.source().begin.line, ": '", key, "'");
  }
  std::string where(const toml::table& t, const std::string& key) const {
    const toml::node* n = t.get(key);
    return n ? where(*n, key) : str_cat(path, ":", t.source().begin.line, ": '", key, "'");
  }
};

Status only_keys(const Reader& r, const toml::table& t, const std::string& section, std::set<std::string> allowed) {
  for (const auto& [k, v] : t)
    if (!allowed.count(std::string(k.str())))
      return invalid_argument(str_cat(r.where(v, std::string(k.str())), " is not a key of [", section, "] (keys: ",
                                      str_join(allowed, ", "), ")"));
  return Status();
}

Result<std::string> get_string(const Reader& r, const toml::table& t, const std::string& key, const std::string& def,
                               bool required) {
  const toml::node* n = t.get(key);
  if (n == nullptr) {
    if (required) return invalid_argument(str_cat(r.path, ":", t.source().begin.line, ": '", key, "' is required"));
    return def;
  }
  if (!n->is_string()) return invalid_argument(str_cat(r.where(*n, key), " must be a string"));
  return std::string(*n->value<std::string>());
}

Result<int64_t> get_int(const Reader& r, const toml::table& t, const std::string& key, int64_t def, int64_t lo,
                        int64_t hi) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return def;
  if (!n->is_integer()) return invalid_argument(str_cat(r.where(*n, key), " must be an integer"));
  const int64_t v = *n->value<int64_t>();
  if (v < lo || v > hi) return invalid_argument(str_cat(r.where(*n, key), " must be in [", lo, ", ", hi, "], not ", v));
  return v;
}

Result<bool> get_bool(const Reader& r, const toml::table& t, const std::string& key, bool def) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return def;
  if (!n->is_boolean()) return invalid_argument(str_cat(r.where(*n, key), " must be true or false"));
  return *n->value<bool>();
}

Status read_tenant(const Reader& r, const toml::table& t, TenantConfig* out) {
  TESSERA_RETURN_IF_ERROR(only_keys(r, t, "[tenant]",
                                    {"name", "token_sha256", "mode", "uids", "max_veus", "max_memory", "max_sessions",
                                     "admin"}));
  TESSERA_ASSIGN_OR_RETURN(out->name, get_string(r, t, "name", "", true));
  if (out->name.empty()) return invalid_argument(str_cat(r.where(t, "name"), " must not be empty"));
  TESSERA_ASSIGN_OR_RETURN(out->token_sha256, get_string(r, t, "token_sha256", "", true));
  bool hex = out->token_sha256.size() == 64;
  for (char c : out->token_sha256) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex)
    return invalid_argument(str_cat(r.where(t, "token_sha256"), " of tenant '", out->name,
                                    "' must be 64 lower-case hex digits (`tessera token hash` prints them)"));
  TESSERA_ASSIGN_OR_RETURN(std::string mode, get_string(r, t, "mode", "appliance", false));
  if (mode == "appliance") out->mode = Mode::kAppliance;
  else if (mode == "cloud") out->mode = Mode::kCloud;
  else return invalid_argument(str_cat(r.where(t, "mode"), " must be \"appliance\" or \"cloud\", not \"", mode, "\""));
  if (const toml::node* n = t.get("uids")) {
    const toml::array* a = n->as_array();
    if (a == nullptr) return invalid_argument(str_cat(r.where(*n, "uids"), " must be a list of integers"));
    for (const toml::node& e : *a) {
      if (!e.is_integer() || *e.value<int64_t>() < 0 || *e.value<int64_t>() > UINT32_MAX)
        return invalid_argument(str_cat(r.where(e, "uids"), " must hold uids (integers from 0)"));
      out->uids.push_back(static_cast<uint32_t>(*e.value<int64_t>()));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(int64_t veus, get_int(r, t, "max_veus", 1, 1, 4096));
  out->max_veus = static_cast<int>(veus);
  TESSERA_ASSIGN_OR_RETURN(int64_t sessions, get_int(r, t, "max_sessions", 8, 1, 1 << 20));
  out->max_sessions = static_cast<int>(sessions);
  if (const toml::node* n = t.get("max_memory")) {
    if (n->is_integer() && *n->value<int64_t>() >= 0) {
      out->max_memory = static_cast<uint64_t>(*n->value<int64_t>());
    } else if (n->is_string()) {
      Result<uint64_t> b = parse_bytes(*n->value<std::string>());
      if (!b.ok()) return invalid_argument(str_cat(r.where(*n, "max_memory"), ": ", b.status().message()));
      out->max_memory = *b;
    } else {
      return invalid_argument(str_cat(r.where(*n, "max_memory"), " must be a size (\"2GiB\") or a number of bytes"));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(out->admin, get_bool(r, t, "admin", false));
  return Status();
}

}  // namespace

Result<DaemonConfig> parse_config(const std::string& text, const std::string& path) {
  toml::parse_result parsed = toml::parse(text, path);
  if (!parsed) {
    const toml::parse_error& e = parsed.error();
    return invalid_argument(str_cat(path, ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description()));
  }
  const toml::table& root = parsed.table();
  Reader r{path};
  DaemonConfig c;
  c.path = path;
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (key != "daemon" && key != "tenant" && key != "testing")
      return invalid_argument(str_cat(r.where(v, key), " is not a section of the config ([daemon], [[tenant]], [testing])"));
  }
  if (const toml::node* d = root.get("daemon")) {
    const toml::table* t = d->as_table();
    if (t == nullptr) return invalid_argument(str_cat(r.where(*d, "daemon"), " must be a table"));
    TESSERA_RETURN_IF_ERROR(only_keys(r, *t, "daemon", {"socket", "metrics", "state_dir", "lease_timeout_s"}));
    TESSERA_ASSIGN_OR_RETURN(c.socket, get_string(r, *t, "socket", c.socket, false));
    TESSERA_ASSIGN_OR_RETURN(c.metrics, get_string(r, *t, "metrics", "", false));
    TESSERA_ASSIGN_OR_RETURN(c.state_dir, get_string(r, *t, "state_dir", c.state_dir, false));
    if (const toml::node* n = t->get("lease_timeout_s")) {
      if (!n->is_number()) return invalid_argument(str_cat(r.where(*n, "lease_timeout_s"), " must be a number of seconds"));
      c.lease_timeout_s = n->is_integer() ? static_cast<double>(*n->value<int64_t>()) : *n->value<double>();
      if (!(c.lease_timeout_s >= 0.1 && c.lease_timeout_s <= 86400))
        return invalid_argument(str_cat(r.where(*n, "lease_timeout_s"), " must be from 0.1 to 86400 seconds"));
    }
  }
  if (const toml::node* n = root.get("tenant")) {
    const toml::array* a = n->as_array();
    if (a == nullptr || !a->is_array_of_tables())
      return invalid_argument(str_cat(r.where(*n, "tenant"), " must be [[tenant]] tables"));
    std::set<std::string> names, hashes;
    for (const toml::node& e : *a) {
      TenantConfig tc;
      TESSERA_RETURN_IF_ERROR(read_tenant(r, *e.as_table(), &tc));
      if (!names.insert(tc.name).second)
        return invalid_argument(str_cat(r.where(e, "name"), ": tenant '", tc.name, "' is listed twice"));
      if (!hashes.insert(tc.token_sha256).second)
        return invalid_argument(str_cat(r.where(e, "token_sha256"), ": tenant '", tc.name,
                                        "' has another tenant's token; each token names one tenant"));
      c.tenants.push_back(std::move(tc));
    }
  }
  if (c.tenants.empty()) return invalid_argument(str_cat(path, ": no [[tenant]]; nobody could use the daemon"));
  if (const toml::node* n = root.get("testing")) {
    const toml::table* t = n->as_table();
    if (t == nullptr) return invalid_argument(str_cat(r.where(*n, "testing"), " must be a table"));
    TESSERA_RETURN_IF_ERROR(only_keys(r, *t, "testing", {"fault_injection"}));
    TESSERA_ASSIGN_OR_RETURN(c.fault_injection, get_bool(r, *t, "fault_injection", false));
  }
  return c;
}

Result<DaemonConfig> load_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) return not_found(str_cat("cannot read the config file '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace tessera::daemon
