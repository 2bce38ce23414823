// A cloud session's worker: a process of its own (tesserad --worker FD),
// started and supervised by the daemon, talking to it over the socket FD
// (frames of Request and Reply). Its first request is a SessionOpen:
//  - with no cores, it inspects the model (Loaded: inputs, outputs) and
//    exits;
//  - with cores, it compiles the model from the daemon's cache (or loads
//    the Executable compiled earlier for as many vEUs, shared by content
//    hash), opens a session pinned to those cores, answers Opened, and
//    serves Run requests until SessionClose or end of file.
// It compiles under the loading sandbox and runs under the running one
// (sandbox.h).
#pragma once

namespace tessera::daemon {

int worker_main(int fd);

}  // namespace tessera::daemon
