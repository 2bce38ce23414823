// tesserad's core: one thread, one epoll loop over the listening socket,
// the clients' connections, a timer and SIGTERM. It authenticates tenants,
// cuts the host's cores into vDevices for them (appliance leases: the
// client runs its Plan in its own process on exactly those cores), holds
// every lease to its connection (a client that dies or goes silent loses
// them), and records faults. docs/daemon.md explains the model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/faults.h"
#include "daemon/wire.h"
#include "tessera/host_map.h"

namespace tessera::daemon {

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

 private:
  struct Connection {
    int fd = -1;
    uint32_t uid = 0;
    int pid = 0;
    std::string client;
    const TenantConfig* tenant = nullptr;  // after a good Hello
    int64_t last_seen_ns = 0;
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
  };

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
  // Closes a connection and reclaims its leases; `why` (when not empty)
  // is recorded as a fault of `kind` if it held any.
  void drop(int fd, const std::string& kind, const std::string& why);
  void expire_silent();
  // Free PUs for `n` vEUs, near one another by the host map (a vDevice does
  // not straddle what is slow to cross).
  std::vector<int> choose_cores(int n) const;
  int free_pus() const;
  std::string who(const Connection& c) const;

  DaemonConfig config_;
  FaultLog faults_;
  HostMap map_;
  int listen_fd_ = -1, epoll_fd_ = -1, signal_fd_ = -1, timer_fd_ = -1;
  std::map<int, Connection> conns_;
  std::map<uint64_t, Held> leases_;
  std::vector<uint64_t> pu_lease_;  // per PU: the lease holding it, 0 free
  uint64_t next_lease_ = 1;
  int64_t started_ns_ = 0;
};

}  // namespace tessera::daemon
