// The seccomp filters of a cloud session's worker process (libseccomp),
// in two stages that stack: while it compiles and loads the model, every
// system call that reaches outside the process (sockets, ptrace, other
// processes' memory and signals, mounts, namespaces, kernel modules,
// keyrings, BPF) fails with EPERM; once loaded, only what a run needs is
// allowed and anything else kills the worker (SIGSYS), which the daemon
// records as a fault. Both apply to every thread of the process.
#pragma once

#include "tessera/status.h"

namespace tessera::daemon {

// Also sets no_new_privs (the filters need it, and exec can then never
// gain privileges).
Status sandbox_for_loading();
Status sandbox_for_running();

}  // namespace tessera::daemon
