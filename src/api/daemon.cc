// A Runtime connected to tesserad (tessera/daemon.h): leases for sessions,
// the daemon's status and fault records.
#include <nlohmann/json.hpp>

#include "api/state.h"
#include "base/sha256.h"
#include "base/strings.h"

namespace tessera {

using detail::RuntimeState;

std::string token_hash(std::string_view token) { return sha256_hex(token); }

namespace detail {

Result<std::vector<int>> RuntimeState::lease(int wanted, uint64_t memory_bytes, const std::string& session,
                                             uint64_t* id) {
  daemon::Request req;
  daemon::Lease* l = req.mutable_lease();
  l->set_veus(static_cast<uint32_t>(std::max(0, wanted)));
  l->set_memory_bytes(memory_bytes);
  l->set_session(session);
  TESSERA_ASSIGN_OR_RETURN(daemon::Reply reply, daemon->call(std::move(req)));
  *id = reply.granted().lease();
  std::vector<int> cores(reply.granted().cores().begin(), reply.granted().cores().end());
  if (cores.empty()) return internal_error(str_cat("daemon at ", daemon->path(), ": a lease of no cores"));
  return cores;
}

void RuntimeState::end_lease(uint64_t id) {
  daemon::Request req;
  req.mutable_release()->set_lease(id);
  (void)daemon->call(std::move(req));  // a daemon gone has reclaimed it already
}

}  // namespace detail

namespace {

Status no_daemon(const std::string& uri) {
  return failed_precondition(str_cat("'", uri, "' is not a daemon; connect to one (unix:///path) for its status and faults"));
}

}  // namespace

Result<ServerStatus> Runtime::status() const {
  if (!s_ || !s_->daemon) return no_daemon(s_ ? s_->uri : "");
  daemon::Request req;
  req.mutable_status();
  TESSERA_ASSIGN_OR_RETURN(daemon::Reply reply, s_->daemon->call(std::move(req)));
  const daemon::ServerStatus& r = reply.status();
  const daemon::Welcome& w = s_->daemon->welcome();
  ServerStatus out;
  out.tenant = w.tenant();
  out.mode = w.mode();
  out.admin = w.admin();
  out.version = static_cast<int>(r.version());
  out.pid = r.pid();
  out.uptime_s = r.uptime_s();
  out.faults = r.faults();
  for (const daemon::TenantStatus& t : r.tenants())
    out.tenants.push_back({t.name(), t.mode(), static_cast<int>(t.sessions()), static_cast<int>(t.veus()),
                           static_cast<int>(t.connections()), t.memory_bytes(), static_cast<int>(t.max_veus()),
                           static_cast<int>(t.max_sessions()), t.max_memory()});
  for (const daemon::DeviceStatus& d : r.devices()) {
    DeviceStatus ds{d.name(), d.kind(), {d.pus().begin(), d.pus().end()}, static_cast<int>(d.free_veus()), {}};
    for (const daemon::VDevice& v : d.vdevices())
      ds.vdevices.push_back({v.lease(), {v.cores().begin(), v.cores().end()}, v.tenant(), v.session(), v.memory_bytes(), v.pid()});
    out.devices.push_back(std::move(ds));
  }
  return out;
}

Result<std::vector<FaultInfo>> Runtime::faults() const {
  if (!s_ || !s_->daemon) return no_daemon(s_ ? s_->uri : "");
  daemon::Request req;
  req.mutable_faults();
  TESSERA_ASSIGN_OR_RETURN(daemon::Reply reply, s_->daemon->call(std::move(req)));
  std::vector<FaultInfo> out;
  for (const daemon::Fault& f : reply.faults().faults())
    out.push_back({f.id(), f.time(), f.tenant(), f.device(), f.kind(), f.message()});
  return out;
}

Status Runtime::clear_fault(uint64_t id) {
  if (!s_ || !s_->daemon) return no_daemon(s_ ? s_->uri : "");
  daemon::Request req;
  req.mutable_fault_clear()->set_id(id);
  return s_->daemon->call(std::move(req)).status();
}

std::string status_to_json(const ServerStatus& s) {
  nlohmann::json j = {{"tenant", s.tenant}, {"mode", s.mode}, {"admin", s.admin}, {"version", s.version},
                      {"pid", s.pid},       {"uptime_s", s.uptime_s}, {"faults", s.faults}};
  j["tenants"] = nlohmann::json::array();
  for (const TenantStatus& t : s.tenants)
    j["tenants"].push_back({{"name", t.name}, {"mode", t.mode}, {"sessions", t.sessions}, {"veus", t.veus},
                            {"memory_bytes", t.memory_bytes}, {"connections", t.connections}, {"max_veus", t.max_veus},
                            {"max_memory", t.max_memory}, {"max_sessions", t.max_sessions}});
  j["devices"] = nlohmann::json::array();
  for (const DeviceStatus& d : s.devices) {
    nlohmann::json dj = {{"name", d.name}, {"kind", d.kind}, {"pus", d.pus}, {"free_veus", d.free_veus}};
    dj["vdevices"] = nlohmann::json::array();
    for (const VDeviceStatus& v : d.vdevices)
      dj["vdevices"].push_back({{"lease", v.lease}, {"cores", v.cores}, {"tenant", v.tenant}, {"session", v.session},
                                {"memory_bytes", v.memory_bytes}, {"pid", v.pid}});
    j["devices"].push_back(std::move(dj));
  }
  return j.dump();
}

std::string faults_to_json(const std::vector<FaultInfo>& faults) {
  nlohmann::json j = nlohmann::json::array();
  for (const FaultInfo& f : faults)
    j.push_back({{"id", f.id}, {"time", f.time}, {"tenant", f.tenant}, {"device", f.device}, {"kind", f.kind},
                 {"message", f.message}});
  return j.dump();
}

}  // namespace tessera
