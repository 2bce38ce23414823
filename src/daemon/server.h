// tesserad's core (server.cc; cloud mode in cloud.cc): one thread, one
// epoll loop over the listening socket, the clients' connections, the
// workers, a timer and SIGTERM. It authenticates tenants,
// cuts the host's cores into vDevices for them (appliance leases: the
// client runs its Plan in its own process on exactly those cores), holds
// every lease to its connection (a client that dies or goes silent loses
// them), and records faults. docs/daemon.md explains the model.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/faults.h"
#include "daemon/metrics.h"
#include "daemon/wire.h"
#include "tessera/host_map.h"

namespace tessera::daemon {

// A reply's error: its code and message.
inline void set_error(Reply* r, const Status& st) {
  r->set_code(static_cast<int32_t>(st.code()));
  r->set_message(st.message());
}

class Server {
 public:
  explicit Server(DaemonConfig config) : config_(std::move(config)) {}
  ~Server();
  // Reads the fault records, obtains the host map, listens on the socket.
  Status start(const HostMap& map);
  // Serves until SIGTERM or SIGINT (blocked in the calling thread and read
  // through a signalfd), then closes every connection; the leases go with
  // them.
  Status serve();
  // One turn of the loop: waits up to `timeout_ms` (-1: until something
  // happens) and serves what happened. False once a signal has ended it.
  Result<bool> step(int timeout_ms);
  // A connected socket (non-blocking) served as if accepted on the
  // daemon's socket; the fuzzer feeds requests through it.
  void adopt(int fd);
  // The program started as `PROGRAM --worker FD` for workers (default:
  // this one).
  void set_worker_program(std::string path) { worker_exe_ = std::move(path); }

 private:
  struct ModelInfo {  // a model a cloud connection has loaded
    std::string path, name;
    std::vector<TensorDesc> shapes, inputs, outputs;
  };
  struct Connection {
    uint64_t serial = 0;  // never reused (fds are): replies find their client by it
    std::vector<int> fds;  // received with its frames, not yet taken by a request
    std::map<std::string, ModelInfo> models;  // by content hash
    int fd = -1;
    uint32_t uid = 0;
    int pid = 0;
    std::string client;
    const TenantConfig* tenant = nullptr;  // after a good Hello
    int64_t last_seen_ns = 0;
    int awaiting = 0;  // requests the daemon answers later (not silence while it does)
    FrameReader in;
  };
  struct Held {  // a lease granted
    uint64_t id = 0;
    int fd = -1;  // the connection holding it
    const TenantConfig* tenant = nullptr;
    std::vector<int> cores;
    uint64_t memory_bytes = 0;
    std::string session;
    int pid = 0;
    int64_t granted_ns = 0;
    // What its session ran: counted here (cloud) or reported by the
    // client's pings (appliance).
    uint64_t runs = 0;
    double busy_s = 0, latency_s = 0;
    double objective_ms = 0, predicted_ms = 0;  // admission by schedule
  };

  // A cloud session: its lease, what it takes and gives, and its worker.
  struct CloudSession {
    uint64_t id = 0;
    uint64_t client = 0;  // Connection::serial
    const TenantConfig* tenant = nullptr;
    uint64_t lease = 0;
    std::string model;
    std::vector<TensorDesc> inputs, outputs;
    int worker = -1;  // its worker's socket
    int restarts = 0;
    // Its rings (ring.h), when the client registered them: the region's
    // descriptor (given again to a restarted worker) and the daemon's own
    // mapping, to fail what a crashed worker left unanswered.
    int ring_fd = -1;
    struct RingHeader* ring = nullptr;
    uint64_t ring_bytes = 0;
    WorkerStats ring_stats;  // its current worker's last report
    bool asking = false;     // a StatsQuery is out
  };
  // A worker process: a session's, or one inspecting a model (session 0).
  struct Worker {
    uint64_t session = 0;
    pid_t pid = -1;
    int fd = -1, pidfd = -1;
    FrameReader in;
    SessionOpen open;  // what it was started with
    std::string tenant;
    std::string model;  // inspect: the hash it inspects
    struct Pending {
      uint64_t client;  // Connection::serial; 0: the daemon's own (a restart)
      uint64_t request;
      enum Kind { kInspect, kOpen, kRun, kRing, kStats } kind;
      int64_t sent_ns;
    };
    std::deque<Pending> pending;  // requests it has, in order
    bool closing = false;  // the daemon ended it
  };

  // A frame to a client or worker, without blocking: what the socket does
  // not take now waits in its outbox and goes when it can (EPOLLOUT). A
  // peer that lets more than kMaxOutbox wait is dropped.
  Status send_frame(int fd, const google::protobuf::MessageLite& m);
  bool flush(int fd);
  static constexpr size_t kMaxOutbox = size_t{64} << 20;

  void accept_all();
  // Reads what the connection sent and answers each whole request; false
  // when the connection is to be closed.
  bool serve_connection(Connection& c);
  // One request; false to close the connection after the reply.
  bool handle(Connection& c, const Request& req, Reply* reply);
  void hello(Connection& c, const Hello& h, Reply* reply);
  void lease(Connection& c, const Lease& l, Reply* reply);
  void release(Connection& c, uint64_t id, Reply* reply);
  void status(const Connection& c, ServerStatus* out) const;
  // Cloud mode.
  void load(Connection& c, const Request& req, Reply* reply);
  void open_session(Connection& c, const Request& req, Reply* reply);
  void run(Connection& c, const Request& req, Reply* reply);
  void setup_rings(Connection& c, const Request& req, Reply* reply);
  // Gives the session's region to its worker (a pending `kRing` for `client`).
  Status send_rings(CloudSession& s, uint64_t client, uint64_t request);
  // Answers every submission on the session's rings not yet answered with
  // an error saying `why` (its worker died, or the session closed).
  void fail_rings(CloudSession& s, const std::string& why);
  void close_session(uint64_t id, bool kill_worker);
  CloudSession* session_of(Connection& c, uint64_t id, const char* what, Reply* reply);
  Result<int> spawn_worker(const SessionOpen& open, uint64_t session, const std::string& tenant);
  void serve_worker(int fd);
  void reap_worker(int pidfd);
  void answer(uint64_t client, Reply& reply);
  // A lease of `veus` cores for tenant `t` (quotas checked).
  Result<uint64_t> grant(Connection& c, uint32_t veus, uint64_t memory_bytes, const std::string& session);
  // Closes a connection and reclaims its leases; `why` (when not empty)
  // is recorded as a fault of `kind` if it held any.
  void drop(int fd, const std::string& kind, const std::string& why);
  void expire_silent();
  // The gauges from the daemon's state; on the tick (once a second) also
  // the device's utilization over the last second.
  void update_gauges(bool tick);
  // Asks each ring session's worker what ran (once a second); its answer
  // goes into the lease's counts and the metrics.
  void ask_stats();
  void take_stats(CloudSession& s, const WorkerStats& now);
  // A fault: recorded (faults.jsonl) and counted (metrics).
  void record(const std::string& tenant, const std::string& device, const std::string& kind, const std::string& message);
  // Free PUs for `n` vEUs, near one another by the host map (a vDevice does
  // not straddle what is slow to cross).
  std::vector<int> choose_cores(int n) const;
  int free_pus() const;
  std::string admission_refusal(const Held& h, double predicted_ms) const;
  std::string who(const Connection& c) const;

  DaemonConfig config_;
  FaultLog faults_;
  Metrics metrics_;
  int64_t gauged_ns_ = 0;
  double gauged_busy_s_ = 0, utilization_ = 0;
  HostMap map_;
  int listen_fd_ = -1, epoll_fd_ = -1, signal_fd_ = -1, timer_fd_ = -1;
  std::map<int, Connection> conns_;
  std::map<uint64_t, Held> leases_;
  std::vector<uint64_t> pu_lease_;  // per PU: the lease holding it, 0 free
  std::map<uint64_t, CloudSession> sessions_;
  std::map<int, Worker> workers_;    // by socket
  std::map<int, int> worker_pidfds_;  // pidfd -> its worker's socket
  std::map<uint64_t, int> serial_fd_;  // Connection::serial -> fd
  uint64_t next_serial_ = 1, next_session_ = 1;
  std::map<int, std::string> outbox_;  // per fd: bytes the socket has not taken yet
  bool deferred_ = false;
  std::string worker_exe_ = "/proc/self/exe";  // the request being handled is answered later
  uint64_t next_lease_ = 1;
  int64_t started_ns_ = 0;
};

}  // namespace tessera::daemon
