// Invariant checks: a broken invariant is a bug, so it aborts loudly with the
// file and line. Failures caused by input use Status instead (status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#define TESSERA_CHECK(cond)                                                             \
  do {                                                                                  \
    if (__builtin_expect(!(cond), 0)) {                                                 \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

#define TESSERA_CHECK_MSG(cond, ...)                                                    \
  do {                                                                                  \
    if (__builtin_expect(!(cond), 0)) {                                                 \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);     \
      std::fprintf(stderr, __VA_ARGS__);                                                \
      std::fputc('\n', stderr);                                                         \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

#ifdef NDEBUG
#define TESSERA_DCHECK(cond) ((void)0)
#else
#define TESSERA_DCHECK(cond) TESSERA_CHECK(cond)
#endif
