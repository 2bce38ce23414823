// tesserad's cloud mode (server.h): models into the cache and inspected by
// a worker, a worker process per session and its supervision (restart
// after a crash, failing what it left unanswered), runs checked and
// forwarded or passed through the session's rings, and what the workers
// report of the runs they served.
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/clock.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/strings.h"
#include "daemon/ring.h"
#include "daemon/server.h"
#include "tessera/dtype.h"

namespace tessera::daemon {

void Server::answer(uint64_t client, Reply& reply) {
  auto it = serial_fd_.find(client);
  if (it == serial_fd_.end()) return;  // the client has gone
  Connection& c = conns_[it->second];
  if (c.awaiting > 0) --c.awaiting;
  c.last_seen_ns = now_ns();  // its silence counts from the answer
  if (!send_frame(it->second, reply).ok()) drop(it->second, "", "");
}

Server::CloudSession* Server::session_of(Connection& c, uint64_t id, const char* what, Reply* reply) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.client != c.serial) {
    set_error(reply, not_found(str_cat("no session ", id, " on this connection")));
    record(c.tenant->name, "cpu", "refused_request", str_cat(who(c), " asked to ", what, " session ", id,
                                                                   ", not one of its own"));
    return nullptr;
  }
  return &it->second;
}

void Server::load(Connection& c, const Request& req, Reply* reply) {
  const Load& l = req.load();
  if (c.tenant->mode != Mode::kCloud) {
    set_error(reply, failed_precondition(str_cat("tenant '", c.tenant->name,
                                                 "' is an appliance tenant: it compiles and runs in its own process")));
    return;
  }
  // The bytes, into the daemon's own copy (whatever the client does to its
  // file afterwards), named by their hash.
  std::string bytes;
  if (l.model_in_fd()) {
    if (c.fds.empty()) {
      set_error(reply, invalid_argument("Load says the model is in a file descriptor, but none came with it"));
      return;
    }
    const int fd = c.fds.front();
    c.fds.erase(c.fds.begin());
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > c.tenant->max_memory) {
      ::close(fd);
      set_error(reply, invalid_argument(str_cat("the model's descriptor must be a regular file of at most max_memory (",
                                                c.tenant->max_memory, ") bytes")));
      return;
    }
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t r = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (r <= 0) break;
      done += static_cast<size_t>(r);
    }
    ::close(fd);
    bytes.resize(done);
  } else {
    bytes = l.model();
  }
  if (bytes.empty()) {
    set_error(reply, invalid_argument("Load: the model has no bytes"));
    return;
  }
  const std::string hash = sha256_hex(bytes);
  const std::string dir = config_.state_dir + "/models";
  const std::string path = dir + "/" + hash + ".onnx";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::exists(path)) {
    const std::string tmp = str_cat(path, ".tmp");
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f || std::rename(tmp.c_str(), path.c_str()) != 0) {
      set_error(reply, internal_error(str_cat("cannot write ", path)));
      return;
    }
  }
  // Inspected in a worker: the daemon does not parse what tenants send.
  SessionOpen inspect;
  inspect.set_model_path(path);
  for (const TensorDesc& d : l.shapes()) *inspect.add_shapes() = d;
  Result<int> w = spawn_worker(inspect, 0, c.tenant->name);
  if (!w.ok()) {
    set_error(reply, w.status());
    return;
  }
  Worker& k = workers_[*w];
  k.model = hash;
  k.pending.push_back({c.serial, req.id(), Worker::Pending::kInspect, now_ns()});
  c.models[hash] = {path, l.name().substr(0, 200), {l.shapes().begin(), l.shapes().end()}, {}, {}};
  deferred_ = true;
}

void Server::open_session(Connection& c, const Request& req, Reply* reply) {
  const SessionOpen& o = req.open();
  auto m = c.models.find(o.model());
  if (m == c.models.end() || m->second.inputs.empty()) {
    set_error(reply, not_found(str_cat("no model '", o.model().substr(0, 80), "' loaded on this connection")));
    return;
  }
  if (!o.model_path().empty() || o.cores_size() > 0) {
    set_error(reply, invalid_argument("SessionOpen: model_path and cores are the daemon's to set"));
    record(c.tenant->name, "cpu", "refused_request", str_cat(who(c), " set model_path or cores in SessionOpen"));
    return;
  }
  std::error_code ec;
  const uint64_t bytes = std::filesystem::file_size(m->second.path, ec);
  Result<uint64_t> lease = grant(c, o.veus(), ec ? 0 : bytes, m->second.name);
  if (!lease.ok()) {
    set_error(reply, lease.status());
    return;
  }
  if (!(o.latency_ms() >= 0 && o.latency_ms() < 1e9)) {
    for (int p : leases_[*lease].cores) pu_lease_[static_cast<size_t>(p)] = 0;
    leases_.erase(*lease);
    set_error(reply, invalid_argument("SessionOpen: latency_ms must be a number of milliseconds from 0"));
    return;
  }
  leases_[*lease].objective_ms = o.latency_ms();
  SessionOpen start;
  start.set_model_path(m->second.path);
  start.set_latency_ms(o.latency_ms());
  start.set_no_adapt(o.no_adapt());
  for (int p : leases_[*lease].cores) start.add_cores(static_cast<int32_t>(p));
  start.set_veus(static_cast<uint32_t>(start.cores_size()));
  for (const TensorDesc& d : m->second.shapes) *start.add_shapes() = d;
  const uint64_t id = next_session_++;
  Result<int> w = spawn_worker(start, id, c.tenant->name);
  if (!w.ok()) {
    for (int p : leases_[*lease].cores) pu_lease_[static_cast<size_t>(p)] = 0;
    leases_.erase(*lease);
    set_error(reply, w.status());
    return;
  }
  CloudSession s;
  s.id = id;
  s.client = c.serial;
  s.tenant = c.tenant;
  s.lease = *lease;
  s.model = o.model();
  s.inputs = m->second.inputs;
  s.outputs = m->second.outputs;
  s.worker = *w;
  sessions_.emplace(id, std::move(s));
  workers_[*w].pending.push_back({c.serial, req.id(), Worker::Pending::kOpen, now_ns()});
  deferred_ = true;
}

void Server::run(Connection& c, const Request& req, Reply* reply) {
  CloudSession* s = session_of(c, req.run().session(), "run", reply);
  if (s == nullptr) return;
  // Every input the session takes, once, of its dtype and shape, with
  // exactly its bytes; nothing else.
  const auto& given = req.run().inputs();
  Status bad;
  for (const TensorDesc& in : s->inputs) {
    int seen = 0;
    for (const TensorData& d : given) {
      if (d.name() != in.name()) continue;
      ++seen;
      uint64_t n = dtype_size(static_cast<DType>(in.dtype()));
      for (int64_t x : in.shape()) n *= static_cast<uint64_t>(x);
      const bool same_shape = std::equal(d.shape().begin(), d.shape().end(), in.shape().begin(), in.shape().end());
      if (d.dtype() != in.dtype() || !same_shape)
        bad = invalid_argument(str_cat("input '", in.name(), "' must be ", dtype_name(static_cast<DType>(in.dtype())), " ",
                                       str_join(in.shape(), "x")));
      else if (d.data().size() != n)
        bad = invalid_argument(str_cat("input '", in.name(), "' has ", d.data().size(), " bytes; its dtype and shape make ", n));
    }
    if (seen != 1 && bad.ok())
      bad = invalid_argument(str_cat("input '", in.name(), "' is given ", seen, " times (once expected)"));
  }
  if (bad.ok() && given.size() != static_cast<int>(s->inputs.size()))
    bad = invalid_argument(str_cat("the session takes ", s->inputs.size(), " input(s); ", given.size(), " given"));
  if (!bad.ok()) {
    set_error(reply, bad);
    record(c.tenant->name, "cpu", "refused_request", str_cat(who(c), ", session ", s->id, ": ", bad.message()));
    return;
  }
  Worker& w = workers_[s->worker];
  const int64_t sent = now_ns();  // before: the worker may run on this core as soon as it is woken
  if (!send_frame(w.fd, req).ok()) {
    set_error(reply, unavailable(str_cat("session ", s->id, ": its worker is restarting; run again")));
    return;
  }
  w.pending.push_back({c.serial, req.id(), Worker::Pending::kRun, sent});
  deferred_ = true;
}

void Server::setup_rings(Connection& c, const Request& req, Reply* reply) {
  CloudSession* s = session_of(c, req.ring().session(), "set up rings for", reply);
  if (s == nullptr) return;
  if (c.fds.empty()) {
    set_error(reply, invalid_argument("RingSetup: the region's descriptor must come with it"));
    return;
  }
  const int fd = c.fds.front();
  c.fds.erase(c.fds.begin());
  if (s->ring_fd >= 0) {
    ::close(fd);
    set_error(reply, failed_precondition(str_cat("session ", s->id, " has its rings already")));
    return;
  }
  struct stat st{};
  const uint64_t size = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
  void* at = size > kRingDataOffset && size - kRingDataOffset <= c.tenant->max_memory
                 ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                 : MAP_FAILED;
  if (at == MAP_FAILED) {
    ::close(fd);
    set_error(reply, invalid_argument(str_cat("RingSetup: the region must be a file of ", kRingDataOffset,
                                              " bytes and a data area of at most max_memory (", c.tenant->max_memory, ")")));
    return;
  }
  s->ring_fd = fd;
  s->ring = static_cast<RingHeader*>(at);
  s->ring_bytes = size;
  if (Status sent = send_rings(*s, c.serial, req.id()); !sent.ok()) {
    set_error(reply, sent);
    return;
  }
  deferred_ = true;
}

Status Server::send_rings(CloudSession& s, uint64_t client, uint64_t request) {
  auto w = workers_.find(s.worker);
  if (w == workers_.end()) return unavailable(str_cat("session ", s.id, ": its worker is restarting; try again"));
  if (outbox_.count(w->first)) return unavailable(str_cat("session ", s.id, ": its worker is busy; try again"));
  Request req;
  req.mutable_ring()->set_session(s.id);
  if (Status st = write_frame(w->first, req, s.ring_fd); !st.ok()) return st;
  w->second.pending.push_back({client, request, Worker::Pending::kRing, now_ns()});
  return Status();
}

void Server::fail_rings(CloudSession& s, const std::string& why) {
  RingHeader* h = s.ring;
  if (h == nullptr) return;
  // What was submitted and not answered: an error each (at most a ring's
  // worth, whatever the client wrote into its counters).
  uint32_t head = h->sq_head.load(std::memory_order_acquire);
  const uint32_t tail = h->sq_tail.load(std::memory_order_acquire);
  for (uint32_t k = 0; k < kRingEntries && head != tail; ++k, ++head) {
    const uint32_t slot = h->cq_tail.load(std::memory_order_relaxed);
    RingCqe& c = h->cq[slot % kRingEntries];
    c.user_data = h->sq[head % kRingEntries].user_data;
    c.code = static_cast<int32_t>(StatusCode::kInternal);
    c.compute_ms = 0;
    std::snprintf(c.message, sizeof c.message, "%s", why.c_str());
    h->sq_head.store(head + 1, std::memory_order_release);
    ring_post(h->cq_tail, h->cq_sleeping, slot + 1);
  }
}

void Server::close_session(uint64_t id, bool kill_worker) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  auto w = workers_.find(it->second.worker);
  if (w != workers_.end()) {
    w->second.closing = true;
    w->second.session = 0;
    if (kill_worker) {
      ::kill(w->second.pid, SIGKILL);
    } else {
      Request bye;
      bye.mutable_close()->set_session(id);
      if (!send_frame(w->second.fd, bye).ok()) ::kill(w->second.pid, SIGKILL);
    }
  }
  auto l = leases_.find(it->second.lease);
  if (l != leases_.end()) {
    for (int p : l->second.cores) pu_lease_[static_cast<size_t>(p)] = 0;
    leases_.erase(l);
  }
  if (kill_worker) fail_rings(it->second, str_cat("session ", id, " was closed"));
  if (it->second.ring != nullptr) ::munmap(it->second.ring, it->second.ring_bytes);
  if (it->second.ring_fd >= 0) ::close(it->second.ring_fd);
  sessions_.erase(it);
}

Result<int> Server::spawn_worker(const SessionOpen& open, uint64_t session, const std::string& tenant) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return resource_exhausted(str_cat("socketpair: ", std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(sv[0]), ::close(sv[1]);
    return resource_exhausted(str_cat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {  // the worker: its socket as fd 3, nothing else inherited
    ::dup2(sv[1], 3);
    ::close_range(4, ~0u, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // Its cores are set by the session it opens (each vEU's thread pinned
    // to its core, the caller's at the first run, before the gate closes).
    ::execl(worker_exe_.c_str(), "tesserad", "--worker", "3", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(sv[1]);
  const int fd = sv[0];
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  Worker w;
  w.session = session;
  w.pid = pid;
  w.fd = fd;
  w.pidfd = pidfd;
  w.open = open;
  w.tenant = tenant;
  Request first;
  *first.mutable_open() = open;
  if (pidfd < 0 || !write_frame(fd, first).ok()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(fd);
    if (pidfd >= 0) ::close(pidfd);
    return internal_error("cannot start a worker");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  for (int f : {fd, pidfd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = f;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, f, &ev);
  }
  worker_pidfds_[pidfd] = fd;
  workers_.emplace(fd, std::move(w));
  return fd;
}

void Server::serve_worker(int fd) {
  Worker& w = workers_[fd];
  std::vector<int> stray;
  const bool open = receive_available(fd, &w.in, &stray);
  for (int f : stray) ::close(f);
  std::string payload;
  for (;;) {
    Result<bool> got = w.in.next(&payload);
    if (!got.ok() || !*got) break;
    Reply reply;
    if (!reply.ParseFromString(payload) || w.pending.empty()) break;
    const Worker::Pending p = w.pending.front();
    w.pending.pop_front();
    reply.set_id(p.request);
    if (p.kind == Worker::Pending::kInspect) {
      auto c = serial_fd_.count(p.client) ? conns_.find(serial_fd_[p.client]) : conns_.end();
      if (c != conns_.end()) {
        auto m = c->second.models.find(w.model);
        if (reply.code() != 0) {
          if (m != c->second.models.end()) c->second.models.erase(m);
        } else if (m != c->second.models.end()) {
          m->second.inputs = {reply.loaded().inputs().begin(), reply.loaded().inputs().end()};
          m->second.outputs = {reply.loaded().outputs().begin(), reply.loaded().outputs().end()};
          reply.mutable_loaded()->set_model(w.model);
        }
      }
      answer(p.client, reply);
    } else if (p.kind == Worker::Pending::kStats) {
      auto s = sessions_.find(w.session);
      if (s != sessions_.end()) {
        s->second.asking = false;
        if (reply.code() == 0) take_stats(s->second, reply.worker_stats());
      }
    } else if (p.kind == Worker::Pending::kRing) {
      if (reply.code() != 0 && p.client == 0)
        record(w.tenant, "cpu", "worker_restart_failed", str_cat("session ", w.session, ": its rings: ", reply.message()));
      if (p.client != 0) answer(p.client, reply);
    } else if (p.kind == Worker::Pending::kOpen) {
      auto s = sessions_.find(w.session);
      if (reply.code() != 0 || s == sessions_.end()) {
        if (p.client == 0 && s != sessions_.end())
          record(w.tenant, "cpu", "worker_restart_failed", str_cat("session ", w.session, ": ", reply.message()));
        if (s != sessions_.end()) close_session(s->first, true);
        if (p.client != 0) answer(p.client, reply);
        continue;
      }
      // What the session takes and gives, as compiled (dynamic dimensions
      // bound): what its runs are checked against.
      s->second.inputs = {reply.opened().inputs().begin(), reply.opened().inputs().end()};
      s->second.outputs = {reply.opened().outputs().begin(), reply.opened().outputs().end()};
      if (auto l = leases_.find(s->second.lease); l != leases_.end()) l->second.predicted_ms = reply.opened().predicted_ms();
      if (p.client == 0 && s->second.ring_fd >= 0) (void)send_rings(s->second, 0, 0);  // a restart: its rings again
      if (p.client != 0) {
        reply.mutable_opened()->set_session(s->first);
        answer(p.client, reply);
      }
    } else {
      auto s = sessions_.find(w.session);
      if (s != sessions_.end()) {
        const double latency = static_cast<double>(now_ns() - p.sent_ns) / 1e9;
        metrics_.run(w.tenant, "cloud", latency, reply.code() == 0);
        auto l = leases_.find(s->second.lease);
        if (l != leases_.end() && reply.code() == 0) {
          ++l->second.runs;
          l->second.busy_s += reply.result().compute_ms() / 1e3;
          l->second.latency_s += latency;
        }
      }
      answer(p.client, reply);
    }
  }
  if (!open) {  // it has gone, or is going: make sure, and let its pidfd tell
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    ::kill(w.pid, SIGKILL);
  }
}

void Server::reap_worker(int pidfd) {
  const int fd = worker_pidfds_[pidfd];
  worker_pidfds_.erase(pidfd);
  Worker w = std::move(workers_[fd]);
  workers_.erase(fd);
  int status = 0;
  ::waitpid(w.pid, &status, WNOHANG);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pidfd, nullptr);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(pidfd);
  ::close(fd);
  outbox_.erase(fd);
  const char* abbrev = WIFSIGNALED(status) ? sigabbrev_np(WTERMSIG(status)) : nullptr;
  const std::string how = WIFSIGNALED(status) ? str_cat("signal ", WTERMSIG(status), " (SIG", abbrev ? abbrev : "?", ": ",
                                                        strsignal(WTERMSIG(status)), ")")
                                              : str_cat("exit status ", WEXITSTATUS(status));
  // What it still owed: an error each.
  for (const Worker::Pending& p : w.pending) {
    Reply r;
    r.set_id(p.request);
    set_error(&r, internal_error(str_cat(p.kind == Worker::Pending::kInspect ? "the model's inspection" : "the session's worker",
                                         " ended (", how, ")",
                                         w.session != 0 && !w.closing ? "; it is restarting: run again" : "")));
    answer(p.client, r);
  }
  if (w.closing || w.session == 0) {
    if (w.session == 0 && WIFSIGNALED(status) && !w.closing)
      record(w.tenant, "cpu", "worker_crash", str_cat("inspecting a model: ", how));
    return;
  }
  auto s = sessions_.find(w.session);
  if (s == sessions_.end()) return;
  record(w.tenant, "cpu", "worker_crash", str_cat("session ", w.session, " (pid ", w.pid, "): ", how));
  fail_rings(s->second, str_cat("the session's worker ended (", how, "); it is restarting: run again"));
  if (++s->second.restarts > 10) {
    record(w.tenant, "cpu", "worker_restart_failed", str_cat("session ", w.session, ": 10 restarts; closed"));
    close_session(w.session, true);
    return;
  }
  Result<int> again = spawn_worker(w.open, w.session, w.tenant);
  if (!again.ok()) {
    record(w.tenant, "cpu", "worker_restart_failed", str_cat("session ", w.session, ": ", again.status().message()));
    close_session(w.session, true);
    return;
  }
  s->second.worker = *again;
  s->second.ring_stats.Clear();  // the new worker counts from zero
  s->second.asking = false;
  metrics_.restart(w.tenant);
  workers_[*again].pending.push_back({0, 0, Worker::Pending::kOpen, now_ns()});
}

void Server::ask_stats() {
  for (auto& [id, s] : sessions_) {
    if (s.ring == nullptr || s.asking) continue;
    auto w = workers_.find(s.worker);
    if (w == workers_.end()) continue;
    Request req;
    req.mutable_stats();
    if (!send_frame(w->first, req).ok()) continue;
    w->second.pending.push_back({0, 0, Worker::Pending::kStats, now_ns()});
    s.asking = true;
  }
}

void Server::take_stats(CloudSession& s, const WorkerStats& now) {
  const WorkerStats& was = s.ring_stats;
  if (now.runs() < was.runs() || now.buckets_size() != static_cast<int>(kLatencyBuckets)) return;
  std::vector<double> buckets(kLatencyBuckets);
  for (size_t b = 0; b < kLatencyBuckets; ++b) {
    const uint64_t before = was.buckets_size() > static_cast<int>(b) ? was.buckets(static_cast<int>(b)) : 0;
    buckets[b] = static_cast<double>(now.buckets(static_cast<int>(b)) - std::min(before, now.buckets(static_cast<int>(b))));
  }
  metrics_.runs_counted(s.tenant->name, buckets, now.latency_s() - was.latency_s(), now.runs() - was.runs(),
                        now.errors() >= was.errors() ? now.errors() - was.errors() : 0);
  auto l = leases_.find(s.lease);
  if (l != leases_.end()) {
    l->second.runs += now.runs() - was.runs();
    l->second.busy_s += now.busy_s() - was.busy_s();
    l->second.latency_s += now.latency_s() - was.latency_s();
  }
  s.ring_stats = now;
}

}  // namespace tessera::daemon
