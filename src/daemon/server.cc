#include "daemon/server.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "base/clock.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/strings.h"

namespace tessera::daemon {
namespace {

constexpr int kTickMs = 100;  // how often silence is checked

}  // namespace

void Server::record(const std::string& tenant, const std::string& device, const std::string& kind,
                    const std::string& message) {
  faults_.add(tenant, device, kind, message);
  metrics_.fault(tenant, kind);
}

Server::~Server() {
  for (auto& [fd, c] : conns_) ::close(fd);
  for (int fd : {listen_fd_, epoll_fd_, signal_fd_, timer_fd_})
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::unlink(config_.socket.c_str());
}

Status Server::start(const HostMap& map) {
  map_ = map;
  pu_lease_.assign(static_cast<size_t>(map_.size()), 0);
  // SIGTERM and SIGINT come through the signalfd: blocked before any
  // thread starts (the metrics exporter's inherit the mask).
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  TESSERA_RETURN_IF_ERROR(faults_.open(config_.state_dir));
  TESSERA_RETURN_IF_ERROR(metrics_.serve(config_.metrics));
  TESSERA_ASSIGN_OR_RETURN(listen_fd_, listen_unix(config_.socket));
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  signal_fd_ = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (epoll_fd_ < 0 || signal_fd_ < 0 || timer_fd_ < 0)
    return internal_error(str_cat("epoll, signalfd or timerfd: ", std::strerror(errno)));
  itimerspec tick{};
  tick.it_interval.tv_nsec = tick.it_value.tv_nsec = kTickMs * 1000000L;
  ::timerfd_settime(timer_fd_, 0, &tick, nullptr);
  for (int fd : {listen_fd_, signal_fd_, timer_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  started_ns_ = now_ns();
  log_info("tesserad: listening on ", config_.socket, "; ", config_.tenants.size(), " tenant(s); ", map_.size(),
           " PU(s); faults in ", faults_.path(), config_.metrics.empty() ? "" : "; metrics on http://" + config_.metrics + "/metrics");
  return Status();
}

Status Server::serve() {
  for (;;) {
    Result<bool> more = step(-1);
    if (!more.ok()) return more.status();
    if (!*more) return Status();
  }
}

Result<bool> Server::step(int timeout_ms) {
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_fd_, events, 64, timeout_ms);
  if (n < 0 && errno == EINTR) return true;
  if (n < 0) return internal_error(str_cat("epoll_wait: ", std::strerror(errno)));
  for (int i = 0; i < n; ++i) {
    const int fd = events[i].data.fd;
    if ((events[i].events & EPOLLOUT) && !flush(fd)) {
      if (conns_.count(fd)) drop(fd, "", "");
      else if (workers_.count(fd)) ::kill(workers_[fd].pid, SIGKILL);
      continue;
    }
    if (!(events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) continue;
    if (fd == signal_fd_) {
      signalfd_siginfo si;
      if (::read(signal_fd_, &si, sizeof si) > 0)
        log_info("tesserad: signal ", si.ssi_signo, ": closing ", conns_.size(), " connection(s) and ", leases_.size(),
                 " lease(s)");
      while (!conns_.empty()) drop(conns_.begin()->first, "", "");
      return false;
    }
    if (fd == timer_fd_) {
      uint64_t ticks;
      (void)!::read(timer_fd_, &ticks, sizeof ticks);
      expire_silent();
      if (now_ns() - gauged_ns_ >= 1000000000) ask_stats(), update_gauges(true);
    } else if (fd == listen_fd_) {
      accept_all();
    } else if (workers_.count(fd)) {
      serve_worker(fd);
    } else if (worker_pidfds_.count(fd)) {
      reap_worker(fd);
    } else {
      auto it = conns_.find(fd);
      if (it != conns_.end() && !serve_connection(it->second)) drop(fd, "", "");
    }
  }
  if (n > 0) update_gauges(false);  // what the events changed, seen by the next scrape
  return true;
}

Status Server::send_frame(int fd, const google::protobuf::MessageLite& m) {
  std::string bytes(4, '\0');
  if (!m.AppendToString(&bytes)) return internal_error("a message did not serialize");
  const size_t n = bytes.size() - 4;
  if (n > kMaxFrameBytes) return out_of_range(str_cat("a reply of ", n, " bytes is over the ", kMaxFrameBytes, " limit"));
  for (int i = 0; i < 4; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  std::string& out = outbox_[fd];
  if (out.size() + bytes.size() > kMaxOutbox)
    return resource_exhausted(str_cat("a peer that reads nothing: ", out.size(), " bytes wait for it"));
  const bool was_empty = out.empty();
  out += bytes;
  if (!was_empty) return Status();
  if (!flush(fd)) return unavailable("the peer has gone");
  return Status();
}

bool Server::flush(int fd) {
  auto it = outbox_.find(fd);
  if (it == outbox_.end()) return true;
  std::string& out = it->second;
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t w = ::send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w <= 0) {
      outbox_.erase(it);
      return false;
    }
    done += static_cast<size_t>(w);
  }
  out.erase(0, done);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
  ev.data.fd = fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  if (out.empty()) outbox_.erase(it);
  return true;
}

void Server::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: all taken
    adopt(fd);
  }
}

void Server::adopt(int fd) {
  {
    Connection c;
    c.fd = fd;
    c.serial = next_serial_++;
    serial_fd_[c.serial] = fd;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) c.uid = cred.uid, c.pid = cred.pid;
    c.last_seen_ns = now_ns();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    conns_.emplace(fd, std::move(c));
  }
}

std::string Server::who(const Connection& c) const {
  return str_cat(c.client.empty() ? "a client" : "client '" + c.client + "'", " (pid ", c.pid, ", uid ", c.uid, ")");
}

bool Server::serve_connection(Connection& c) {
  const bool closed = !receive_available(c.fd, &c.in, &c.fds);
  c.last_seen_ns = now_ns();
  if (c.fds.size() > 4) {  // descriptors nobody asked for
    record(c.tenant ? c.tenant->name : "", "cpu", "bad_message",
                str_cat(who(c), " sent ", c.fds.size(), " file descriptors unasked"));
    return false;
  }
  std::string payload;
  for (;;) {
    Result<bool> got = c.in.next(&payload);
    if (!got.ok()) {
      record(c.tenant ? c.tenant->name : "", "cpu", "bad_message", str_cat(who(c), ": ", got.status().message()));
      Reply reply;
      set_error(&reply, got.status());
      (void)send_frame(c.fd, reply);
      return false;
    }
    if (!*got) break;
    Request req;
    Reply reply;
    if (!req.ParseFromString(payload)) {
      record(c.tenant ? c.tenant->name : "", "cpu", "bad_message",
                  str_cat(who(c), ": a frame of ", payload.size(), " bytes is not a request"));
      set_error(&reply, data_loss(str_cat("a frame of ", payload.size(), " bytes is not a request")));
      (void)send_frame(c.fd, reply);
      return false;
    }
    reply.set_id(req.id());
    deferred_ = false;
    const bool keep = handle(c, req, &reply);
    if (deferred_) ++c.awaiting;
    else if (!send_frame(c.fd, reply).ok()) return false;
    if (!keep) return false;
  }
  if (closed) {
    // The peer has gone: with leases held, it died (a client that ends
    // well releases them first).
    int held = 0;
    for (const auto& [id, l] : leases_) held += l.fd == c.fd;
    if (held > 0)
      drop(c.fd, "client_died", str_cat(who(c), " closed its connection holding ", held, " lease(s); reclaimed"));
    return false;
  }
  return true;
}

bool Server::handle(Connection& c, const Request& req, Reply* reply) {
  if (c.tenant == nullptr && req.body_case() != Request::kHello) {
    set_error(reply, failed_precondition("the first request on a connection must be Hello"));
    record("", "cpu", "refused_request", str_cat(who(c), " sent a request before Hello"));
    return false;
  }
  switch (req.body_case()) {
    case Request::kHello:
      if (c.tenant != nullptr) {
        set_error(reply, failed_precondition("Hello was already said on this connection"));
        return true;
      }
      hello(c, req.hello(), reply);
      return reply->code() == 0;
    case Request::kLease: lease(c, req.lease(), reply); return true;
    case Request::kRelease: release(c, req.release().lease(), reply); return true;
    case Request::kPing:
      for (const LeaseStats& st : req.ping().stats()) {
        auto l = leases_.find(st.lease());
        if (l == leases_.end() || l->second.fd != c.fd || c.tenant->mode != Mode::kAppliance) continue;
        if (st.runs() > l->second.runs) metrics_.runs_reported(c.tenant->name, st.runs() - l->second.runs);
        l->second.runs = std::max(l->second.runs, st.runs());
        l->second.busy_s = std::max(l->second.busy_s, st.busy_s());
        l->second.latency_s = std::max(l->second.latency_s, st.latency_s());
      }
      return true;
    case Request::kStatus: status(c, reply->mutable_status()); return true;
    case Request::kFaults:
      for (const FaultRecord& f : faults_.records()) {
        if (!c.tenant->admin && f.tenant != c.tenant->name) continue;
        Fault* o = reply->mutable_faults()->add_faults();
        o->set_id(f.id), o->set_time(f.time), o->set_tenant(f.tenant), o->set_device(f.device), o->set_kind(f.kind),
            o->set_message(f.message);
      }
      if (!reply->has_faults()) reply->mutable_faults();
      return true;
    case Request::kFaultClear:
      if (!c.tenant->admin) {
        set_error(reply, permission_denied(str_cat("tenant '", c.tenant->name, "' is not an admin; faults are cleared by one")));
        return true;
      }
      if (Status st = faults_.clear(req.fault_clear().id()); !st.ok()) set_error(reply, st);
      return true;
    case Request::kLoad: load(c, req, reply); return true;
    case Request::kOpen: open_session(c, req, reply); return true;
    case Request::kRun: run(c, req, reply); return true;
    case Request::kRing: setup_rings(c, req, reply); return true;
    case Request::kAdmit: {
      auto l = leases_.find(req.admit().lease());
      if (l == leases_.end() || l->second.fd != c.fd) {
        set_error(reply, not_found(str_cat("no lease ", req.admit().lease(), " on this connection")));
        record(c.tenant->name, "cpu", "refused_request", str_cat(who(c), " asked to admit a lease not its own"));
        return true;
      }
      const double predicted = req.admit().predicted_ms();
      l->second.predicted_ms = predicted;
      if (l->second.objective_ms > 0 && !(predicted <= l->second.objective_ms))
        set_error(reply, resource_exhausted(admission_refusal(l->second, predicted)));
      return true;
    }
    case Request::kClose:
      if (session_of(c, req.close().session(), "close", reply) != nullptr) close_session(req.close().session(), false);
      return true;
    case Request::kCrash: {
      if (!config_.fault_injection) {
        set_error(reply, permission_denied("fault injection is off (the config's [testing] fault_injection)"));
        return true;
      }
      CloudSession* s = session_of(c, req.crash().session(), "crash", reply);
      if (s != nullptr) (void)send_frame(s->worker, req);
      return true;
    }
    case Request::kStats:  // the daemon's to its workers
    case Request::BODY_NOT_SET: break;
  }
  set_error(reply, invalid_argument("an empty or unknown request"));
  record(c.tenant->name, "cpu", "refused_request", str_cat(who(c), " sent an empty or unknown request"));
  return true;
}

void Server::hello(Connection& c, const Hello& h, Reply* reply) {
  c.client = h.client().substr(0, 200);
  if (h.version() != kProtocolVersion) {
    set_error(reply, failed_precondition(str_cat("this daemon speaks protocol version ", kProtocolVersion,
                                                 "; the client speaks ", h.version())));
    return;
  }
  const std::string hash = sha256_hex(h.token());
  const TenantConfig* tenant = nullptr;
  for (const TenantConfig& t : config_.tenants)
    if (equal_constant_time(hash, t.token_sha256)) tenant = &t;
  if (tenant == nullptr) {
    set_error(reply, permission_denied("no tenant has this token"));
    record("", "cpu", "auth_refused", str_cat(who(c), ": no tenant has its token"));
    return;
  }
  if (!tenant->uids.empty() && std::find(tenant->uids.begin(), tenant->uids.end(), c.uid) == tenant->uids.end()) {
    set_error(reply, permission_denied(str_cat("uid ", c.uid, " may not act as tenant '", tenant->name, "' (its uids: ",
                                               str_join(tenant->uids, ", "), ")")));
    record(tenant->name, "cpu", "auth_refused", str_cat(who(c), ": uid not among the tenant's"));
    return;
  }
  c.tenant = tenant;
  Welcome* w = reply->mutable_welcome();
  w->set_version(kProtocolVersion);
  w->set_tenant(tenant->name);
  w->set_mode(mode_name(tenant->mode));
  w->set_lease_timeout_ms(static_cast<uint32_t>(config_.lease_timeout_s * 1000));
  w->set_admin(tenant->admin);
  w->set_device("cpu");
  w->set_veus(static_cast<uint32_t>(tenant->max_veus));
  log_info("tesserad: ", who(c), " is tenant '", tenant->name, "'");
}

std::string Server::admission_refusal(const Held& h, double predicted_ms) const {
  return str_cat("tenant '", h.tenant->name, "': the Plan of '", h.session, "' on ", h.cores.size(),
                 " vEU(s) (cores ", str_join(h.cores, ","), ") is predicted to take ", predicted_ms,
                 " ms; the objective is ", h.objective_ms, " ms");
}

int Server::free_pus() const { return static_cast<int>(std::count(pu_lease_.begin(), pu_lease_.end(), 0)); }

std::vector<int> Server::choose_cores(int n) const {
  // From each free seed, grow the set by the free PU nearest to it (the
  // sum of read costs both ways); keep the tightest set.
  const int pus = map_.size();
  auto dist = [&](int a, int b) {
    Result<double> ab = map_.distance({Place::Kind::kPu, a}, {Place::Kind::kPu, b});
    Result<double> ba = map_.distance({Place::Kind::kPu, b}, {Place::Kind::kPu, a});
    return (ab.ok() ? *ab : 0) + (ba.ok() ? *ba : 0);
  };
  std::vector<int> best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int seed = 0; seed < pus; ++seed) {
    if (pu_lease_[static_cast<size_t>(seed)] != 0) continue;
    std::vector<int> set = {seed};
    double cost = 0;
    while (static_cast<int>(set.size()) < n) {
      int pick = -1;
      double pick_cost = std::numeric_limits<double>::infinity();
      for (int p = 0; p < pus; ++p) {
        if (pu_lease_[static_cast<size_t>(p)] != 0 || std::find(set.begin(), set.end(), p) != set.end()) continue;
        double c = 0;
        for (int q : set) c += dist(p, q);
        if (c < pick_cost) pick = p, pick_cost = c;
      }
      if (pick < 0) return {};
      set.push_back(pick);
      cost += pick_cost;
    }
    if (cost < best_cost) best = set, best_cost = cost;
  }
  std::sort(best.begin(), best.end());
  return best;
}

void Server::lease(Connection& c, const Lease& l, Reply* reply) {
  if (c.tenant->mode == Mode::kCloud) {
    set_error(reply, failed_precondition(str_cat("tenant '", c.tenant->name,
                                                 "' is a cloud tenant: its sessions run in the daemon's workers")));
    return;
  }
  if (!(l.latency_ms() >= 0 && l.latency_ms() < 1e9)) {
    set_error(reply, invalid_argument("Lease: latency_ms must be a number of milliseconds from 0"));
    return;
  }
  Result<uint64_t> id = grant(c, l.veus(), l.memory_bytes(), l.session());
  if (!id.ok()) {
    set_error(reply, id.status());
    return;
  }
  leases_[*id].objective_ms = l.latency_ms();
  Granted* g = reply->mutable_granted();
  g->set_lease(*id);
  for (int p : leases_[*id].cores) g->add_cores(p);
}

Result<uint64_t> Server::grant(Connection& c, uint32_t want, uint64_t memory_bytes, const std::string& name) {
  const TenantConfig& t = *c.tenant;
  int sessions = 0, veus = 0;
  uint64_t memory = 0;
  for (const auto& [id, h] : leases_) {
    if (h.tenant != &t) continue;
    ++sessions;
    veus += static_cast<int>(h.cores.size());
    memory += h.memory_bytes;
  }
  if (sessions + 1 > t.max_sessions)
    return resource_exhausted(str_cat("tenant '", t.name, "' holds ", sessions, " session(s); max_sessions is ",
                                      t.max_sessions));
  if (memory_bytes > t.max_memory || memory + memory_bytes > t.max_memory)
    return resource_exhausted(str_cat("tenant '", t.name, "' would use ", memory + memory_bytes, " bytes; max_memory is ",
                                      t.max_memory, " (", memory, " held)"));
  const int room = t.max_veus - veus;
  const int wanted = want == 0 ? std::min(room, free_pus()) : static_cast<int>(std::min<uint32_t>(want, 1u << 20));
  if (want > 0 && wanted > room)
    return resource_exhausted(str_cat("tenant '", t.name, "' asks for ", wanted, " vEU(s) holding ", veus,
                                      "; max_veus is ", t.max_veus));
  if (wanted <= 0 || wanted > free_pus())
    return resource_exhausted(str_cat("tenant '", t.name, "' asks for ", std::max(wanted, 1), " vEU(s); ", free_pus(),
                                      " of ", map_.size(), " core(s) are free",
                                      room <= 0 ? str_cat(" and it holds its max_veus (", t.max_veus, ")") : ""));
  std::vector<int> cores = choose_cores(wanted);
  if (static_cast<int>(cores.size()) != wanted) return internal_error("no set of free cores found");
  Held h;
  h.id = next_lease_++;
  h.fd = c.fd;
  h.tenant = &t;
  h.cores = cores;
  h.memory_bytes = memory_bytes;
  h.session = name.substr(0, 200);
  h.pid = c.pid;
  h.granted_ns = now_ns();
  for (int p : cores) pu_lease_[static_cast<size_t>(p)] = h.id;
  log_info("tesserad: lease ", h.id, " to tenant '", t.name, "': cores ", str_join(cores, ","), " (", h.session, ")");
  const uint64_t id = h.id;
  leases_.emplace(id, std::move(h));
  return id;
}

void Server::release(Connection& c, uint64_t id, Reply* reply) {
  auto it = leases_.find(id);
  bool cloud = false;
  for (const auto& [sid, cs] : sessions_) cloud = cloud || cs.lease == id;
  if (it == leases_.end() || it->second.fd != c.fd || cloud) {
    set_error(reply, not_found(str_cat("no lease ", id, " on this connection")));
    record(c.tenant->name, "cpu", "refused_request", str_cat(who(c), " released lease ", id, ", not one of its own"));
    return;
  }
  for (int p : it->second.cores) pu_lease_[static_cast<size_t>(p)] = 0;
  log_info("tesserad: lease ", id, " released");
  leases_.erase(it);
}

void Server::status(const Connection& c, ServerStatus* out) const {
  out->set_version(kProtocolVersion);
  out->set_pid(::getpid());
  out->set_uptime_s(static_cast<double>(now_ns() - started_ns_) / 1e9);
  uint64_t faults = 0;
  for (const FaultRecord& f : faults_.records()) faults += c.tenant->admin || f.tenant == c.tenant->name;
  out->set_faults(faults);
  for (const TenantConfig& t : config_.tenants) {
    if (!c.tenant->admin && &t != c.tenant) continue;
    TenantStatus* s = out->add_tenants();
    s->set_name(t.name);
    s->set_mode(mode_name(t.mode));
    s->set_max_veus(static_cast<uint32_t>(t.max_veus));
    s->set_max_memory(t.max_memory);
    s->set_max_sessions(static_cast<uint32_t>(t.max_sessions));
    uint32_t sessions = 0, veus = 0, connections = 0;
    uint64_t memory = 0;
    for (const auto& [id, h] : leases_)
      if (h.tenant == &t) ++sessions, veus += static_cast<uint32_t>(h.cores.size()), memory += h.memory_bytes;
    for (const auto& [fd, k] : conns_) connections += k.tenant == &t;
    s->set_sessions(sessions), s->set_veus(veus), s->set_memory_bytes(memory), s->set_connections(connections);
  }
  DeviceStatus* d = out->add_devices();
  d->set_name("cpu");
  d->set_kind("cpu");
  for (int p = 0; p < map_.size(); ++p) d->add_pus(p);
  d->set_free_veus(static_cast<uint32_t>(free_pus()));
  for (const auto& [id, h] : leases_) {
    if (!c.tenant->admin && h.tenant != c.tenant) continue;
    VDevice* v = d->add_vdevices();
    v->set_lease(id);
    for (int p : h.cores) v->add_cores(p);
    v->set_tenant(h.tenant->name);
    v->set_session(h.session);
    v->set_memory_bytes(h.memory_bytes);
    v->set_pid(h.pid);
    v->set_mode(mode_name(h.tenant->mode));
    v->set_runs(h.runs);
    v->set_busy_s(h.busy_s);
    v->set_latency_s(h.latency_s);
    v->set_age_s(static_cast<double>(now_ns() - h.granted_ns) / 1e9);
    v->set_objective_ms(h.objective_ms);
    v->set_predicted_ms(h.predicted_ms);
  }
}

void Server::drop(int fd, const std::string& kind, const std::string& why) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  int held = 0;
  for (const auto& [id, h] : leases_) held += h.fd == fd;
  if (held > 0 && !why.empty()) record(it->second.tenant ? it->second.tenant->name : "", "cpu", kind, why);
  std::vector<uint64_t> theirs;
  for (const auto& [id, cs] : sessions_)
    if (cs.client == it->second.serial) theirs.push_back(id);
  for (uint64_t id : theirs) close_session(id, true);
  for (int f : it->second.fds) ::close(f);
  serial_fd_.erase(it->second.serial);
  std::vector<uint64_t> mine;
  for (const auto& [id, h] : leases_)
    if (h.fd == fd) mine.push_back(id);
  for (uint64_t id : mine) {
    for (int p : leases_[id].cores) pu_lease_[static_cast<size_t>(p)] = 0;
    leases_.erase(id);
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  outbox_.erase(fd);
  conns_.erase(it);
}

void Server::update_gauges(bool tick) {
  const int64_t now = now_ns();
  double busy = 0;
  int leased = 0;
  for (const TenantConfig& t : config_.tenants) {
    int sessions = 0, veus = 0, connections = 0;
    uint64_t memory = 0;
    for (const auto& [id, h] : leases_)
      if (h.tenant == &t) ++sessions, veus += static_cast<int>(h.cores.size()), memory += h.memory_bytes;
    for (const auto& [fd, c] : conns_) connections += c.tenant == &t;
    metrics_.tenant(t.name, mode_name(t.mode), sessions, connections, veus, memory, t.max_memory);
  }
  for (const auto& [id, h] : leases_) busy += h.busy_s, leased += static_cast<int>(h.cores.size());
  if (!tick) {  // counts changed; utilization waits for the tick
    metrics_.device("cpu", map_.size(), leased, utilization_);
    return;
  }
  // The busy time of leases that ended is gone from the sum: count only growth.
  const double elapsed = gauged_ns_ > 0 ? static_cast<double>(now - gauged_ns_) / 1e9 : 0;
  const double grown = std::max(0.0, busy - gauged_busy_s_);
  utilization_ = elapsed > 0 && leased > 0 ? std::min(1.0, grown / (elapsed * leased)) : 0;
  metrics_.device("cpu", map_.size(), leased, utilization_);
  gauged_ns_ = now;
  gauged_busy_s_ = busy;
}

void Server::expire_silent() {
  const int64_t now = now_ns(), limit = static_cast<int64_t>(config_.lease_timeout_s * 1e9);
  std::vector<std::pair<int, std::string>> silent;
  for (const auto& [fd, c] : conns_)
    if (c.awaiting == 0 && now - c.last_seen_ns > limit)
      silent.emplace_back(fd, str_cat(who(c), " was silent for ", (now - c.last_seen_ns) / 1000000, " ms (lease_timeout_s ",
                                      config_.lease_timeout_s, "); its leases are reclaimed"));
  for (const auto& [fd, why] : silent) drop(fd, "lease_expired", why);
}

}  // namespace tessera::daemon
