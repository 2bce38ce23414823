// libFuzzer target: bytes from a client of tesserad, through the daemon's
// framing, decoding and validation (src/daemon/server.cc), on a daemon of
// its own serving a connection that is the fuzzer's. Inputs whose first
// byte is odd begin with a good Hello (of an appliance or, third bit set,
// a cloud tenant), so that what only a known tenant reaches is fuzzed too.
// Cloud workers are /bin/false: they end at once, and the daemon's
// handling of that is fuzzed with the rest.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/log.h"
#include "base/sha256.h"
#include "daemon/config.h"
#include "daemon/server.h"
#include "daemon/wire.h"

namespace {

using namespace tessera;

daemon::Server* server() {
  static daemon::Server* s = [] {
    log_set_level(LogLevel::kQuiet);
    static const std::string dir =
        (std::filesystem::temp_directory_path() / ("tesserad-fuzz-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    // The socket and state go with the process (libFuzzer ends by exit()).
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    const std::string text = "[daemon]\nsocket = \"" + dir + "/d.sock\"\nstate_dir = \"" + dir +
                             "/state\"\n[[tenant]]\nname = \"a\"\ntoken_sha256 = \"" + sha256_hex("a") +
                             "\"\nmax_veus = 1\n[[tenant]]\nname = \"c\"\ntoken_sha256 = \"" + sha256_hex("c") +
                             "\"\nmode = \"cloud\"\n[[tenant]]\nname = \"r\"\ntoken_sha256 = \"" + sha256_hex("r") +
                             "\"\nadmin = true\n";
    Result<daemon::DaemonConfig> c = daemon::parse_config(text, dir + "/t.toml");
    if (!c.ok()) std::abort();
    HostMap map;
    map.pus.resize(2);
    auto* s = new daemon::Server(std::move(*c));
    s->set_worker_program("/bin/false");
    if (!s->start(map).ok()) std::abort();
    return s;
  }();
  return s;
}

std::string frame(const daemon::Request& r) {
  std::string b = r.SerializeAsString(), f(4, '\0');
  for (int i = 0; i < 4; ++i) f[static_cast<size_t>(i)] = static_cast<char>((b.size() >> (8 * i)) & 0xFF);
  return f + b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  daemon::Server* s = server();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  std::string bytes;
  if (size > 0 && (data[0] & 1)) {
    daemon::Request hello;
    hello.set_id(1);
    hello.mutable_hello()->set_version(daemon::kProtocolVersion);
    hello.mutable_hello()->set_token((data[0] & 4) ? "c" : "a");
    bytes = frame(hello);
    ++data, --size;
  }
  bytes.append(reinterpret_cast<const char*>(data), size);
  s->adopt(sv[0]);
  // What fits the socket's buffer goes in at once, the rest as it drains;
  // then end of file, and the daemon's answers are read until it closes.
  size_t done = 0;
  for (int turns = 0; turns < 400; ++turns) {
    if (done < bytes.size()) {
      const ssize_t w = ::send(sv[1], bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (w > 0) done += static_cast<size_t>(w);
    } else if (done == bytes.size()) {
      ::shutdown(sv[1], SHUT_WR);
      ++done;
    }
    char sink[65536];
    ssize_t r;
    while ((r = ::recv(sv[1], sink, sizeof sink, MSG_DONTWAIT)) > 0) {
    }
    if (r == 0) break;  // the daemon has closed the connection
    if (!s->step(done > bytes.size() ? 1 : 0).ok()) std::abort();
  }
  ::close(sv[1]);
  for (int i = 0; i < 4; ++i) (void)s->step(0);  // the daemon sees the close
  return 0;
}
