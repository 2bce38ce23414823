#include "daemon/sandbox.h"

#include <seccomp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/strings.h"

// Sanitizer builds: their runtimes probe memory through a pipe (pipe2)
// and LeakSanitizer stops the world with ptrace; both are allowed there,
// and only there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSERA_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TESSERA_SANITIZED 1
#endif
#endif
#ifndef TESSERA_SANITIZED
#define TESSERA_SANITIZED 0
#endif

namespace tessera::daemon {
namespace {

// A libseccomp context freed on every path.
struct Filter {
  scmp_filter_ctx ctx;
  explicit Filter(uint32_t def) : ctx(seccomp_init(def)) {}
  ~Filter() {
    if (ctx) seccomp_release(ctx);
  }
};

Status check(int rc, const char* what) {
  if (rc < 0) return internal_error(str_cat("seccomp: ", what, ": ", std::strerror(-rc)));
  return Status();
}

// A comparison on a call's first argument. libseccomp's SCMP_A0 macro is a C
// compound literal, which C++ compilers warn about.
scmp_arg_cmp first_argument(scmp_compare op, pid_t value) {
  scmp_arg_cmp c{};
  c.arg = 0;
  c.op = op;
  c.datum_a = static_cast<scmp_datum_t>(value);
  c.datum_b = 0;
  return c;
}

Status load(Filter& f) {
  if (f.ctx == nullptr) return internal_error("seccomp: cannot make a filter");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return internal_error(str_cat("prctl(PR_SET_NO_NEW_PRIVS): ", std::strerror(errno)));
  TESSERA_RETURN_IF_ERROR(check(seccomp_attr_set(f.ctx, SCMP_FLTATR_CTL_TSYNC, 1), "every thread"));
  return check(seccomp_load(f.ctx), "load");
}

}  // namespace

Status sandbox_for_loading() {
  Filter f(SCMP_ACT_ALLOW);
  const int denied[] = {
      SCMP_SYS(socket),        SCMP_SYS(connect),         SCMP_SYS(bind),          SCMP_SYS(listen),
      SCMP_SYS(accept),        SCMP_SYS(accept4),         SCMP_SYS(ptrace),        SCMP_SYS(process_vm_readv),
      SCMP_SYS(process_vm_writev), SCMP_SYS(kill),        SCMP_SYS(mount),         SCMP_SYS(umount2),
      SCMP_SYS(pivot_root),    SCMP_SYS(chroot),          SCMP_SYS(setns),         SCMP_SYS(unshare),
      SCMP_SYS(kexec_load),    SCMP_SYS(reboot),          SCMP_SYS(init_module),   SCMP_SYS(finit_module),
      SCMP_SYS(delete_module), SCMP_SYS(keyctl),          SCMP_SYS(add_key),       SCMP_SYS(request_key),
      SCMP_SYS(bpf),           SCMP_SYS(perf_event_open), SCMP_SYS(userfaultfd),   SCMP_SYS(setuid),
      SCMP_SYS(setgid),        SCMP_SYS(setreuid),        SCMP_SYS(setregid),      SCMP_SYS(setresuid),
      SCMP_SYS(setresgid),     SCMP_SYS(pidfd_getfd),   SCMP_SYS(open_by_handle_at),
  };
  for (int sys : denied) {
    if (TESSERA_SANITIZED && sys == SCMP_SYS(ptrace)) continue;
    TESSERA_RETURN_IF_ERROR(check(seccomp_rule_add(f.ctx, SCMP_ACT_ERRNO(EPERM), sys, 0), "rule"));
  }
  // Signals only to this process's own threads.
  TESSERA_RETURN_IF_ERROR(check(seccomp_rule_add(f.ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1,
                                                 first_argument(SCMP_CMP_NE, ::getpid())),
                                "tgkill"));
  return load(f);
}

Status sandbox_for_running() {
  Filter f(SCMP_ACT_KILL_PROCESS);
  const int allowed[] = {
      // the daemon's socket
      SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
      SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(close),
      // memory
      SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mprotect), SCMP_SYS(madvise), SCMP_SYS(brk), SCMP_SYS(mremap),
      // threads: waits, hand-offs, pinning, time
      SCMP_SYS(futex), SCMP_SYS(sched_yield), SCMP_SYS(sched_getaffinity), SCMP_SYS(sched_setaffinity),
      SCMP_SYS(clock_gettime), SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(gettimeofday),
      SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(getrandom), SCMP_SYS(set_robust_list), SCMP_SYS(rseq),
      SCMP_SYS(restart_syscall), SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask), SCMP_SYS(newfstatat),
      SCMP_SYS(fstat), SCMP_SYS(lseek),
      // ending
      SCMP_SYS(exit), SCMP_SYS(exit_group),
  };
  for (int sys : allowed) TESSERA_RETURN_IF_ERROR(check(seccomp_rule_add(f.ctx, SCMP_ACT_ALLOW, sys, 0), "rule"));
  if (TESSERA_SANITIZED) TESSERA_RETURN_IF_ERROR(check(seccomp_rule_add(f.ctx, SCMP_ACT_ALLOW, SCMP_SYS(pipe2), 0), "rule"));
  TESSERA_RETURN_IF_ERROR(check(seccomp_rule_add(f.ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                                                 first_argument(SCMP_CMP_EQ, ::getpid())),
                                "tgkill"));
  return load(f);
}

}  // namespace tessera::daemon
