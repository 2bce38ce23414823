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
#include <set>

#include "base/clock.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/strings.h"

namespace tessera::daemon {
namespace {

constexpr int kTickMs = 100;  // how often silence is checked

void set_error(Reply* r, const Status& st) {
  r->set_code(static_cast<int32_t>(st.code()));
  r->set_message(st.message());
}

}  // namespace

Server::~Server() {
  for (auto& [fd, c] : conns_) ::close(fd);
  for (int fd : {listen_fd_, epoll_fd_, signal_fd_, timer_fd_})
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::unlink(config_.socket.c_str());
}

Status Server::start(const HostMap& map) {
  map_ = map;
  pu_lease_.assign(static_cast<size_t>(map_.size()), 0);
  TESSERA_RETURN_IF_ERROR(faults_.open(config_.state_dir));
  TESSERA_ASSIGN_OR_RETURN(listen_fd_, listen_unix(config_.socket));
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
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
           " PU(s); faults in ", faults_.path());
  return Status();
}

Status Server::serve() {
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return internal_error(str_cat("epoll_wait: ", std::strerror(errno)));
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == signal_fd_) {
        signalfd_siginfo si;
        if (::read(signal_fd_, &si, sizeof si) > 0)
          log_info("tesserad: signal ", si.ssi_signo, ": closing ", conns_.size(), " connection(s) and ", leases_.size(),
                   " lease(s)");
        while (!conns_.empty()) drop(conns_.begin()->first, "", "");
        return Status();
      }
      if (fd == timer_fd_) {
        uint64_t ticks;
        (void)!::read(timer_fd_, &ticks, sizeof ticks);
        expire_silent();
      } else if (fd == listen_fd_) {
        accept_all();
      } else {
        auto it = conns_.find(fd);
        if (it != conns_.end() && !serve_connection(it->second)) drop(fd, "", "");
      }
    }
  }
}

void Server::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: all taken
    Connection c;
    c.fd = fd;
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
  char buf[65536];
  bool closed = false;
  for (;;) {
    const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
    if (r > 0) {
      c.in.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    closed = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  c.last_seen_ns = now_ns();
  std::string payload;
  for (;;) {
    Result<bool> got = c.in.next(&payload);
    if (!got.ok()) {
      faults_.add(c.tenant ? c.tenant->name : "", "cpu", "bad_message", str_cat(who(c), ": ", got.status().message()));
      Reply reply;
      set_error(&reply, got.status());
      (void)write_frame(c.fd, reply);
      return false;
    }
    if (!*got) break;
    Request req;
    Reply reply;
    if (!req.ParseFromString(payload)) {
      faults_.add(c.tenant ? c.tenant->name : "", "cpu", "bad_message",
                  str_cat(who(c), ": a frame of ", payload.size(), " bytes is not a request"));
      set_error(&reply, data_loss(str_cat("a frame of ", payload.size(), " bytes is not a request")));
      (void)write_frame(c.fd, reply);
      return false;
    }
    reply.set_id(req.id());
    const bool keep = handle(c, req, &reply);
    if (!write_frame(c.fd, reply).ok() || !keep) return false;
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
    faults_.add("", "cpu", "refused_request", str_cat(who(c), " sent a request before Hello"));
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
    case Request::kPing: return true;
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
    case Request::BODY_NOT_SET: break;
  }
  set_error(reply, invalid_argument("an empty or unknown request"));
  faults_.add(c.tenant->name, "cpu", "refused_request", str_cat(who(c), " sent an empty or unknown request"));
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
    faults_.add("", "cpu", "auth_refused", str_cat(who(c), ": no tenant has its token"));
    return;
  }
  if (!tenant->uids.empty() && std::find(tenant->uids.begin(), tenant->uids.end(), c.uid) == tenant->uids.end()) {
    set_error(reply, permission_denied(str_cat("uid ", c.uid, " may not act as tenant '", tenant->name, "' (its uids: ",
                                               str_join(tenant->uids, ", "), ")")));
    faults_.add(tenant->name, "cpu", "auth_refused", str_cat(who(c), ": uid not among the tenant's"));
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
  const TenantConfig& t = *c.tenant;
  if (t.mode == Mode::kCloud) {
    set_error(reply, unimplemented(str_cat("tenant '", t.name,
                                           "' is a cloud tenant; this daemon serves appliance tenants only so far")));
    return;
  }
  int sessions = 0, veus = 0;
  uint64_t memory = 0;
  for (const auto& [id, h] : leases_) {
    if (h.tenant != &t) continue;
    ++sessions;
    veus += static_cast<int>(h.cores.size());
    memory += h.memory_bytes;
  }
  if (sessions + 1 > t.max_sessions) {
    set_error(reply, resource_exhausted(str_cat("tenant '", t.name, "' holds ", sessions, " session(s); max_sessions is ",
                                                t.max_sessions)));
    return;
  }
  if (l.memory_bytes() > t.max_memory || memory + l.memory_bytes() > t.max_memory) {
    set_error(reply, resource_exhausted(str_cat("tenant '", t.name, "' would use ", memory + l.memory_bytes(),
                                                " bytes; max_memory is ", t.max_memory, " (", memory, " held)")));
    return;
  }
  const int room = t.max_veus - veus;
  const int wanted = l.veus() == 0 ? std::min(room, free_pus()) : static_cast<int>(std::min<uint32_t>(l.veus(), 1u << 20));
  if (l.veus() > 0 && wanted > room) {
    set_error(reply, resource_exhausted(str_cat("tenant '", t.name, "' asks for ", wanted, " vEU(s) holding ", veus,
                                                "; max_veus is ", t.max_veus)));
    return;
  }
  if (wanted <= 0 || wanted > free_pus()) {
    set_error(reply, resource_exhausted(str_cat("tenant '", t.name, "' asks for ", std::max(wanted, 1), " vEU(s); ",
                                                free_pus(), " of ", map_.size(), " core(s) are free",
                                                room <= 0 ? str_cat(" and it holds its max_veus (", t.max_veus, ")") : "")));
    return;
  }
  std::vector<int> cores = choose_cores(wanted);
  if (static_cast<int>(cores.size()) != wanted) {
    set_error(reply, internal_error("no set of free cores found"));
    return;
  }
  Held h;
  h.id = next_lease_++;
  h.fd = c.fd;
  h.tenant = &t;
  h.cores = cores;
  h.memory_bytes = l.memory_bytes();
  h.session = l.session().substr(0, 200);
  h.pid = c.pid;
  for (int p : cores) pu_lease_[static_cast<size_t>(p)] = h.id;
  Granted* g = reply->mutable_granted();
  g->set_lease(h.id);
  for (int p : cores) g->add_cores(p);
  log_info("tesserad: lease ", h.id, " to tenant '", t.name, "': cores ", str_join(cores, ","), " (", h.session, ")");
  leases_.emplace(h.id, std::move(h));
}

void Server::release(Connection& c, uint64_t id, Reply* reply) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.fd != c.fd) {
    set_error(reply, not_found(str_cat("no lease ", id, " on this connection")));
    faults_.add(c.tenant->name, "cpu", "refused_request", str_cat(who(c), " released lease ", id, ", not one of its own"));
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
  }
}

void Server::drop(int fd, const std::string& kind, const std::string& why) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  std::vector<uint64_t> mine;
  for (const auto& [id, h] : leases_)
    if (h.fd == fd) mine.push_back(id);
  if (!mine.empty() && !why.empty())
    faults_.add(it->second.tenant ? it->second.tenant->name : "", "cpu", kind, why);
  for (uint64_t id : mine) {
    for (int p : leases_[id].cores) pu_lease_[static_cast<size_t>(p)] = 0;
    leases_.erase(id);
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns_.erase(it);
}

void Server::expire_silent() {
  const int64_t now = now_ns(), limit = static_cast<int64_t>(config_.lease_timeout_s * 1e9);
  std::vector<std::pair<int, std::string>> silent;
  for (const auto& [fd, c] : conns_)
    if (now - c.last_seen_ns > limit)
      silent.emplace_back(fd, str_cat(who(c), " was silent for ", (now - c.last_seen_ns) / 1000000, " ms (lease_timeout_s ",
                                      config_.lease_timeout_s, "); its leases are reclaimed"));
  for (const auto& [fd, why] : silent) drop(fd, "lease_expired", why);
}

}  // namespace tessera::daemon
