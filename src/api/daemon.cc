// A Runtime connected to tesserad (tessera/daemon.h): leases for sessions,
// the daemon's status and fault records.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>

#include "api/state.h"
#include "base/clock.h"
#include "base/log.h"
#include "daemon/ring.h"
#include "base/sha256.h"
#include "base/strings.h"

namespace tessera {

using detail::RuntimeState;

std::string token_hash(std::string_view token) { return sha256_hex(token); }

namespace detail {

Result<std::vector<int>> RuntimeState::lease(int wanted, uint64_t memory_bytes, const std::string& session,
                                             double latency_ms, uint64_t* id) {
  daemon::Request req;
  daemon::Lease* l = req.mutable_lease();
  l->set_latency_ms(latency_ms);
  l->set_veus(static_cast<uint32_t>(std::max(0, wanted)));
  l->set_memory_bytes(memory_bytes);
  l->set_session(session);
  TESSERA_ASSIGN_OR_RETURN(daemon::Reply reply, daemon->call(std::move(req)));
  *id = reply.granted().lease();
  std::vector<int> cores(reply.granted().cores().begin(), reply.granted().cores().end());
  if (cores.empty()) return internal_error(str_cat("daemon at ", daemon->path(), ": a lease of no cores"));
  return cores;
}

bool is_cloud(const RuntimeState& rt) { return rt.daemon && rt.daemon->welcome().mode() == "cloud"; }

Status not_in_cloud(const char* what) {
  return failed_precondition(str_cat(what, ": a cloud tenant's models compile and run in the daemon's workers"));
}

namespace {

std::vector<TensorInfo> infos_of(const google::protobuf::RepeatedPtrField<daemon::TensorDesc>& ds) {
  std::vector<TensorInfo> out;
  for (const daemon::TensorDesc& d : ds) {
    TensorInfo t;
    t.name = d.name();
    t.dtype = static_cast<DType>(d.dtype());
    t.shape = {d.shape().begin(), d.shape().end()};
    t.symbols.assign(t.shape.size(), "");
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<ModelState>> compile_remote(const std::shared_ptr<RuntimeState>& rt, const std::string& path,
                                                   const CompileOptions& options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(str_cat("cannot open '", path, "': ", std::strerror(errno)));
  daemon::Request req;
  daemon::Load* l = req.mutable_load();
  l->set_model_in_fd(true);
  l->set_name(path);
  for (const auto& [name, shape] : options.shapes) {
    daemon::TensorDesc* d = l->add_shapes();
    d->set_name(name);
    for (int64_t x : shape) d->add_shape(x);
  }
  Result<daemon::Reply> reply = rt->daemon->call(std::move(req), fd);
  ::close(fd);
  if (!reply.ok()) return reply.status().with_context(path);
  auto m = std::make_shared<ModelState>();
  m->runtime = rt;
  m->path = path;
  m->options = options;
  m->remote = reply->loaded().model();
  m->inputs = infos_of(reply->loaded().inputs());
  m->outputs = infos_of(reply->loaded().outputs());
  return m;
}

Result<std::shared_ptr<SessionState>> open_remote(const std::shared_ptr<ModelState>& m, const SessionOptions& so) {
  if (so.device != "cpu") return invalid_argument(str_cat("device '", so.device, "': a cloud daemon's sessions run on its cpu"));
  if (!so.cores.empty())
    return invalid_argument(str_cat("SessionOptions: cores ", str_join(so.cores, ","), " are given, but the daemon at ",
                                    m->runtime->daemon->path(), " chooses a session's cores"));
  if (so.veus < 0 || so.veus > 1024) return invalid_argument(str_cat("SessionOptions: veus ", so.veus, " is out of range"));
  daemon::Request req;
  req.mutable_open()->set_model(m->remote);
  req.mutable_open()->set_veus(static_cast<uint32_t>(so.veus));
  req.mutable_open()->set_latency_ms(so.latency_ms);
  req.mutable_open()->set_no_adapt(!so.adapt);
  TESSERA_ASSIGN_OR_RETURN(daemon::Reply reply, m->runtime->daemon->call(std::move(req)));
  auto st = std::make_shared<SessionState>();
  st->model = m;
  st->runtime = m->runtime;
  st->options = so;
  st->device = "cpu";
  st->remote = reply.opened().session();
  st->slots = {reply.opened().cores().begin(), reply.opened().cores().end()};
  st->veus = reply.opened().veus();
  st->inputs = infos_of(reply.opened().inputs());
  st->outputs = infos_of(reply.opened().outputs());
  st->bound.assign(st->outputs.size(), Tensor());
  st->bound_outputs.assign(st->outputs.size(), nullptr);
  st->bound_inputs.assign(st->inputs.size(), nullptr);
  if (Status rings = setup_rings(*st); !rings.ok())
    log_info("session ", st->remote, " runs through the daemon's socket: ", rings.message());
  return st;
}

namespace {

uint64_t bytes_of(const TensorInfo& t) {
  uint64_t n = dtype_size(t.dtype);
  for (int64_t x : t.shape) n *= static_cast<uint64_t>(x);
  return n;
}

}  // namespace

// The session's rings: a memfd laid out as daemon/ring.h says, the data
// area holding every input and then every output (64-byte aligned),
// registered with the daemon, which gives it to the session's worker.
Status setup_rings(SessionState& st) {
  if (st.inputs.size() > daemon::kRingMaxTensors || st.outputs.size() > daemon::kRingMaxTensors)
    return unimplemented(str_cat("more than ", daemon::kRingMaxTensors, " inputs or outputs"));
  uint64_t at = 0;
  for (const TensorInfo& t : st.inputs) st.ring_in.push_back(at), at += (bytes_of(t) + 63) / 64 * 64;
  for (const TensorInfo& t : st.outputs) st.ring_out.push_back(at), at += (bytes_of(t) + 63) / 64 * 64;
  const size_t size = daemon::kRingDataOffset + std::max<uint64_t>(at, 64);
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, "tessera-rings", MFD_CLOEXEC));
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) ::close(fd);
    return resource_exhausted(str_cat("a ", size, "-byte region: ", std::strerror(errno)));
  }
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    ::close(fd);
    return resource_exhausted(str_cat("mapping a ", size, "-byte region: ", std::strerror(errno)));
  }
  auto* h = new (map) daemon::RingHeader();
  h->magic = daemon::kRingMagic;
  h->version = daemon::kRingVersion;
  h->entries = daemon::kRingEntries;
  h->data_offset = daemon::kRingDataOffset;
  h->data_bytes = size - daemon::kRingDataOffset;
  daemon::Request req;
  req.mutable_ring()->set_session(st.remote);
  Result<daemon::Reply> r = st.runtime->daemon->call(std::move(req), fd);
  ::close(fd);
  if (!r.ok()) {
    ::munmap(map, size);
    st.ring_in.clear(), st.ring_out.clear();
    return r.status();
  }
  st.ring = map;
  st.ring_bytes = size;
  return Status();
}

void close_remote(SessionState& s) {
  daemon::Request req;
  req.mutable_close()->set_session(s.remote);
  (void)s.runtime->daemon->call(std::move(req));  // a daemon gone has closed it already
  if (s.ring != nullptr) ::munmap(s.ring, s.ring_bytes);
}

Status SessionState::execute_ring(const NamedTensors& given, double queue_ms, NamedTensors& out) {
  auto* h = static_cast<daemon::RingHeader*>(ring);
  char* data = static_cast<char*>(ring) + daemon::kRingDataOffset;
  const int64_t t0 = now_ns();
  // Inputs into the data area, in the session's order; each given once.
  uint64_t in_bytes = 0;
  if (given.size() != inputs.size())
    return invalid_argument(str_cat("the session takes ", inputs.size(), " input(s); ", given.size(), " given"));
  const uint32_t tail = h->sq_tail.load(std::memory_order_relaxed);
  daemon::RingSqe& e = h->sq[tail % daemon::kRingEntries];
  e.user_data = tail;
  e.inputs = static_cast<uint32_t>(inputs.size());
  e.outputs = static_cast<uint32_t>(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor* t = given.find(inputs[i].name);
    if (t == nullptr) return invalid_argument(str_cat("input '", inputs[i].name, "' is not given"));
    if (t->dtype() != inputs[i].dtype || t->shape() != inputs[i].shape)
      return invalid_argument(str_cat("input '", inputs[i].name, "' must be ", dtype_name(inputs[i].dtype), " ",
                                      shape_string(inputs[i])));
    std::memcpy(data + ring_in[i], t->raw(), t->nbytes());
    e.in[i] = {ring_in[i], t->nbytes()};
    in_bytes += t->nbytes();
  }
  for (size_t i = 0; i < outputs.size(); ++i) e.out[i] = {ring_out[i], bytes_of(outputs[i])};
  const int64_t t1 = now_ns();
  daemon::ring_post(h->sq_tail, h->sq_sleeping, tail + 1);
  // The completion: spin a little, then sleep; a worker that dies has its
  // entries failed by the daemon, and a daemon gone ends the wait.
  const uint32_t head = h->cq_head.load(std::memory_order_relaxed);
  while (!daemon::ring_wait(h->cq_tail, h->cq_sleeping, head, 50000, 200)) {
    daemon::Request ping;
    ping.mutable_ping();
    if (Result<daemon::Reply> alive = runtime->daemon->call(std::move(ping)); !alive.ok()) return alive.status();
  }
  const daemon::RingCqe c = h->cq[head % daemon::kRingEntries];
  h->cq_head.store(head + 1, std::memory_order_release);
  const int64_t t2 = now_ns();
  if (c.user_data != tail) return data_loss(str_cat("session ", remote, ": a completion for another submission"));
  if (c.code != 0) {
    return Status(daemon::status_code_of(c.code), str_cat("daemon at ", runtime->daemon->path(), ": session ", remote, ": ",
                              std::string(c.message, strnlen(c.message, sizeof c.message))));
  }
  uint64_t out_bytes = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor* into = output_into(i, out);
    std::memcpy(into->raw(), data + ring_out[i], into->nbytes());
    out_bytes += into->nbytes();
  }
  const int64_t t3 = now_ns();
  record(t0, t1, t2, t3, queue_ms, in_bytes, out_bytes);
  last.wait_ms.clear();
  counters->runs.fetch_add(1, std::memory_order_relaxed);
  return Status();
}

Status SessionState::execute_remote(const NamedTensors& given, double queue_ms, NamedTensors& out) {
  if (ring != nullptr) return execute_ring(given, queue_ms, out);
  const int64_t t0 = now_ns();
  daemon::Request req;
  daemon::Run* run = req.mutable_run();
  run->set_session(remote);
  uint64_t in_bytes = 0;
  for (const auto& [name, t] : given) {
    daemon::TensorData* d = run->add_inputs();
    d->set_name(name);
    d->set_dtype(static_cast<int32_t>(t.dtype()));
    for (int64_t x : t.shape()) d->add_shape(x);
    d->set_data(static_cast<const char*>(t.raw()), t.nbytes());
    in_bytes += t.nbytes();
  }
  const int64_t t1 = now_ns();
  TESSERA_ASSIGN_OR_RETURN(daemon::Reply reply, runtime->daemon->call(std::move(req)));
  const int64_t t2 = now_ns();
  uint64_t out_bytes = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorInfo& o = outputs[i];
    const daemon::TensorData* d = nullptr;
    for (const daemon::TensorData& x : reply.result().outputs())
      if (x.name() == o.name) d = &x;
    Tensor* into = output_into(i, out);
    if (d == nullptr || d->data().size() != into->nbytes())
      return data_loss(str_cat("daemon at ", runtime->daemon->path(), ": output '", o.name, "' came back malformed"));
    std::memcpy(into->raw(), d->data().data(), d->data().size());
    out_bytes += d->data().size();
  }
  const int64_t t3 = now_ns();
  record(t0, t1, t2, t3, queue_ms, in_bytes, out_bytes);  // compute: the daemon and its worker, as seen here
  last.wait_ms.clear();
  return Status();
}

Status RuntimeState::admit(uint64_t id, double predicted_ms) {
  daemon::Request req;
  req.mutable_admit()->set_lease(id);
  req.mutable_admit()->set_predicted_ms(predicted_ms);
  return daemon->call(std::move(req)).status();
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
      ds.vdevices.push_back({v.lease(), {v.cores().begin(), v.cores().end()}, v.tenant(), v.session(), v.memory_bytes(),
                             v.pid(), v.mode(), v.runs(), v.busy_s(), v.latency_s(), v.age_s(), v.objective_ms(),
                             v.predicted_ms()});
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
                                {"memory_bytes", v.memory_bytes}, {"pid", v.pid}, {"mode", v.mode}, {"runs", v.runs},
                                {"busy_s", v.busy_s}, {"latency_s", v.latency_s}, {"age_s", v.age_s},
                                {"objective_ms", v.objective_ms}, {"predicted_ms", v.predicted_ms}});
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
