#include "base/log.h"

#include <atomic>
#include <cstdio>

namespace tessera {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
}  // namespace

void log_set_level(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

void log_line(LogLevel level, const std::string& line) {
  if (level < log_level()) return;
  const char* prefix = level == LogLevel::kWarning ? "warning: " : level == LogLevel::kError ? "error: " : "";
  std::fprintf(stderr, "%s%s\n", prefix, line.c_str());
}

}  // namespace tessera
