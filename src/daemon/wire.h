// The daemon's transport (docs/formats/protocol.md): Unix stream sockets
// carrying frames of a 4-byte little-endian length and one protobuf
// message (src/daemon/protocol.proto).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/protocol.pb.h"
#include "tessera/status.h"

namespace tessera::daemon {

inline constexpr uint32_t kProtocolVersion = 1;
// A frame longer than this is refused, and its connection closed.
inline constexpr size_t kMaxFrameBytes = size_t{16} << 20;

// The socket path of a "unix:///path" URI; InvalidArgument otherwise.
Result<std::string> unix_socket_path(const std::string& uri);

// A connected client socket (blocking, close-on-exec); Unavailable, naming
// the path, when nothing listens there.
Result<int> connect_unix(const std::string& path);
// A listening socket at `path` (non-blocking, close-on-exec), mode 0666:
// the tokens, not the file's mode, say who may use the daemon. A stale
// socket file nobody listens on is replaced; a live one is refused.
Result<int> listen_unix(const std::string& path);

// One frame, written whole (blocking; no SIGPIPE); `pass_fd` (when not
// -1) travels with it as SCM_RIGHTS.
Status write_frame(int fd, const google::protobuf::MessageLite& m, int pass_fd = -1);
// What arrived on a non-blocking socket: bytes into `in`, file
// descriptors passed with them appended to `fds` (close-on-exec). Returns
// false once the peer has closed (or the socket failed).
class FrameReader;
bool receive_available(int fd, FrameReader* in, std::vector<int>* fds);
// One frame, read whole and parsed (blocking). Unavailable when the peer
// has closed; DataLoss for a frame that is too long or does not parse.
// With `fds`, descriptors passed with it are appended there (else closed).
Status read_frame(int fd, google::protobuf::MessageLite* m, std::vector<int>* fds = nullptr);

// A reply's or completion's code as a StatusCode (one it does not know:
// Internal).
StatusCode status_code_of(int32_t code);

// Frames out of a non-blocking socket's bytes, as they arrive.
class FrameReader {
 public:
  void append(const char* data, size_t n) { buffer_.append(data, n); }
  // The next whole frame's payload into *payload: true; false when more
  // bytes are needed; DataLoss for a length over kMaxFrameBytes.
  Result<bool> next(std::string* payload);
  size_t buffered() const { return buffer_.size() - start_; }

 private:
  std::string buffer_;
  size_t start_ = 0;
};

}  // namespace tessera::daemon
