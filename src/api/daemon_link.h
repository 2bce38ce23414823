// A client's connection to tesserad (docs/formats/protocol.md): the
// handshake, one request at a time, and a heartbeat thread that keeps the
// connection's leases alive while the process is.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/wire.h"
#include "tessera/daemon.h"
#include "tessera/status.h"

namespace tessera::detail {

class DaemonLink {
 public:
  // Connects to `uri` ("unix:///path") and says Hello with the token.
  static Result<std::shared_ptr<DaemonLink>> open(const std::string& uri, const ConnectOptions& options);
  ~DaemonLink();
  DaemonLink(const DaemonLink&) = delete;
  DaemonLink& operator=(const DaemonLink&) = delete;

  // One request and its reply; the reply's error as a Status naming the
  // daemon.
  // `pass_fd` (when not -1) travels with the request (SCM_RIGHTS).
  Result<daemon::Reply> call(daemon::Request request, int pass_fd = -1);
  const daemon::Welcome& welcome() const { return welcome_; }
  // What each ping carries besides being one (appliance sessions' counts);
  // called on the heartbeat thread. Set before the first ping matters.
  void set_ping_stats(std::function<void(daemon::Ping*)> f) {
    std::lock_guard<std::mutex> lock(stop_mu_);
    ping_stats_ = std::move(f);
  }
  const std::string& path() const { return path_; }

 private:
  DaemonLink() = default;
  void heartbeat();

  std::string path_;
  int fd_ = -1;
  daemon::Welcome welcome_;
  std::mutex mu_;  // one request in flight
  uint64_t next_id_ = 1;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::function<void(daemon::Ping*)> ping_stats_;  // guarded by stop_mu_
  std::thread heartbeat_;
};

}  // namespace tessera::detail
