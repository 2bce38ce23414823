#include "daemon/wire.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/strings.h"

namespace tessera::daemon {
namespace {

Status fill_address(const std::string& path, sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a->sun_path)
    return invalid_argument(str_cat("socket path '", path, "' must have 1 to ", sizeof a->sun_path - 1, " bytes"));
  std::memcpy(a->sun_path, path.data(), path.size());
  return Status();
}

uint32_t load_le32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

}  // namespace

Result<std::string> unix_socket_path(const std::string& uri) {
  constexpr std::string_view kScheme = "unix://";
  if (uri.compare(0, kScheme.size(), kScheme) != 0 || uri.size() == kScheme.size())
    return invalid_argument(str_cat("'", uri, "' is not a unix:///path URI"));
  return uri.substr(kScheme.size());
}

Result<int> connect_unix(const std::string& path) {
  sockaddr_un a;
  TESSERA_RETURN_IF_ERROR(fill_address(path, &a));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable(str_cat("socket: ", std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    return unavailable(str_cat("no daemon at ", path, ": ", std::strerror(e)));
  }
  return fd;
}

Result<int> listen_unix(const std::string& path) {
  sockaddr_un a;
  TESSERA_RETURN_IF_ERROR(fill_address(path, &a));
  // A socket file left by a daemon that died: replaced; a live one: refused.
  if (::access(path.c_str(), F_OK) == 0) {
    Result<int> probe = connect_unix(path);
    if (probe.ok()) {
      ::close(*probe);
      return failed_precondition(str_cat("a daemon already listens on ", path));
    }
    ::unlink(path.c_str());
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return internal_error(str_cat("socket: ", std::strerror(errno)));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::chmod(path.c_str(), 0666) != 0 ||
      ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    return failed_precondition(str_cat("cannot listen on ", path, ": ", std::strerror(e)));
  }
  return fd;
}

Status write_frame(int fd, const google::protobuf::MessageLite& m, int pass_fd) {
  std::string bytes(4, '\0');
  if (!m.AppendToString(&bytes)) return internal_error("a message did not serialize");
  const size_t n = bytes.size() - 4;
  if (n > kMaxFrameBytes) return out_of_range(str_cat("a message of ", n, " bytes is over the ", kMaxFrameBytes, " limit"));
  for (int i = 0; i < 4; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  size_t done = 0;
  if (pass_fd >= 0) {  // the descriptor rides on the frame's first bytes
    iovec iov{bytes.data(), bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    ssize_t w;
    do w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w <= 0) return unavailable(str_cat("the connection closed while writing: ", std::strerror(errno)));
    done = static_cast<size_t>(w);
  }
  while (done < bytes.size()) {
    const ssize_t w = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return unavailable(str_cat("the connection closed while writing: ", std::strerror(errno)));
    done += static_cast<size_t>(w);
  }
  return Status();
}

namespace {

// recvmsg into p[0, n): descriptors passed with the bytes go to `fds`
// (close-on-exec), or are closed where nobody asked for them.
ssize_t receive(int fd, char* p, size_t n, int flags, std::vector<int>* fds) {
  iovec iov{p, n};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t r = ::recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
  if (r < 0) return r;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds != nullptr) fds->push_back(got);
      else ::close(got);
    }
  }
  return r;
}

Status read_exact(int fd, char* p, size_t n, std::vector<int>* fds) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = receive(fd, p + done, n - done, 0, fds);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return unavailable("the daemon closed the connection");
    if (r < 0) return unavailable(str_cat("the connection failed: ", std::strerror(errno)));
    done += static_cast<size_t>(r);
  }
  return Status();
}

}  // namespace

Status read_frame(int fd, google::protobuf::MessageLite* m, std::vector<int>* fds) {
  char head[4];
  TESSERA_RETURN_IF_ERROR(read_exact(fd, head, 4, fds));
  const uint32_t n = load_le32(head);
  if (n > kMaxFrameBytes) return data_loss(str_cat("a frame of ", n, " bytes is over the ", kMaxFrameBytes, " limit"));
  std::string payload(n, '\0');
  TESSERA_RETURN_IF_ERROR(read_exact(fd, payload.data(), n, fds));
  if (!m->ParseFromString(payload)) return data_loss(str_cat("a frame of ", n, " bytes is not a valid message"));
  return Status();
}

bool receive_available(int fd, FrameReader* in, std::vector<int>* fds) {
  char buf[65536];
  for (;;) {
    const ssize_t r = receive(fd, buf, sizeof buf, MSG_DONTWAIT, fds);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    if (r == 0) return false;
    in->append(buf, static_cast<size_t>(r));
  }
}

StatusCode status_code_of(int32_t code) {
  return code > 0 && code <= static_cast<int32_t>(StatusCode::kPermissionDenied) ? static_cast<StatusCode>(code)
                                                                                 : StatusCode::kInternal;
}

Result<bool> FrameReader::next(std::string* payload) {
  if (buffer_.size() - start_ < 4) return false;
  const uint32_t n = load_le32(buffer_.data() + start_);
  if (n > kMaxFrameBytes) return data_loss(str_cat("a frame of ", n, " bytes is over the ", kMaxFrameBytes, " limit"));
  if (buffer_.size() - start_ - 4 < n) return false;
  payload->assign(buffer_, start_ + 4, n);
  start_ += 4 + n;
  if (start_ == buffer_.size()) buffer_.clear(), start_ = 0;
  else if (start_ > (size_t{1} << 20)) buffer_.erase(0, start_), start_ = 0;
  return true;
}

}  // namespace tessera::daemon
