#include "api/daemon_link.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "base/log.h"
#include "base/strings.h"

namespace tessera::detail {
namespace {

Result<std::string> token_of(const ConnectOptions& o) {
  if (!o.token.empty()) return o.token;
  if (const char* t = std::getenv("TESSERA_TOKEN"); t != nullptr && *t != '\0') return std::string(t);
  std::string file = o.token_file;
  if (file.empty())
    if (const char* f = std::getenv("TESSERA_TOKEN_FILE"); f != nullptr) file = f;
  if (file.empty())
    return permission_denied("no token: give one (ConnectOptions::token, --token, $TESSERA_TOKEN) or a file holding it "
                             "(--token-file, $TESSERA_TOKEN_FILE)");
  std::ifstream f(file);
  std::string line;
  if (!f || !std::getline(f, line)) return not_found(str_cat("cannot read a token from '", file, "'"));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.empty()) return invalid_argument(str_cat("the token file '", file, "' is empty"));
  return line;
}

std::string program_name() {
  std::ifstream f("/proc/self/comm");
  std::string name;
  std::getline(f, name);
  return str_cat(name.empty() ? "tessera" : name, "[", ::getpid(), "]");
}

}  // namespace

Result<std::shared_ptr<DaemonLink>> DaemonLink::open(const std::string& uri, const ConnectOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(std::string path, daemon::unix_socket_path(uri));
  std::shared_ptr<DaemonLink> link(new DaemonLink());
  link->path_ = path;
  TESSERA_ASSIGN_OR_RETURN(link->fd_, daemon::connect_unix(path));  // first: is anyone there
  TESSERA_ASSIGN_OR_RETURN(std::string token, token_of(options));
  daemon::Request req;
  daemon::Hello* h = req.mutable_hello();
  h->set_version(daemon::kProtocolVersion);
  h->set_token(token);
  h->set_client(options.client.empty() ? program_name() : options.client);
  TESSERA_ASSIGN_OR_RETURN(daemon::Reply reply, link->call(std::move(req)));
  link->welcome_ = reply.welcome();
  link->heartbeat_ = std::thread([l = link.get()] { l->heartbeat(); });
  return link;
}

DaemonLink::~DaemonLink() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (fd_ >= 0) ::close(fd_);
}

Result<daemon::Reply> DaemonLink::call(daemon::Request request, int pass_fd) {
  std::lock_guard<std::mutex> lock(mu_);
  request.set_id(next_id_++);
  Status st = daemon::write_frame(fd_, request, pass_fd);
  daemon::Reply reply;
  if (st.ok()) st = daemon::read_frame(fd_, &reply);
  if (!st.ok()) return Status(st.code(), str_cat("daemon at ", path_, ": ", st.message()));
  if (reply.id() != request.id())
    return data_loss(str_cat("daemon at ", path_, ": reply ", reply.id(), " to request ", request.id()));
  if (reply.code() != 0) {
    return Status(daemon::status_code_of(reply.code()), str_cat("daemon at ", path_, ": ", reply.message()));
  }
  return reply;
}

void DaemonLink::heartbeat() {
  const auto period = std::chrono::milliseconds(std::max<uint32_t>(welcome_.lease_timeout_ms() / 4, 10));
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, period, [&] { return stopping_; })) {
    std::function<void(daemon::Ping*)> stats = ping_stats_;
    lock.unlock();
    daemon::Request ping;
    ping.mutable_ping();
    if (stats) stats(ping.mutable_ping());
    Result<daemon::Reply> r = call(std::move(ping));
    lock.lock();
    if (!r.ok()) {
      log_warning("the connection to the daemon is lost (", r.status().message(), "); its leases are gone");
      return;
    }
  }
}

}  // namespace tessera::detail
