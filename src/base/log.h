// Human-readable diagnostics on stderr. Machine-readable output (--json) goes
// to stdout and never through here.
//
// Thread-safety: each call writes one line with one fprintf; safe from any
// thread.
#pragma once

#include "base/strings.h"

namespace tessera {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kQuiet };

void log_set_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& line);

template <typename... Args>
void log_info(const Args&... args) { log_line(LogLevel::kInfo, str_cat(args...)); }
template <typename... Args>
void log_warning(const Args&... args) { log_line(LogLevel::kWarning, str_cat(args...)); }
template <typename... Args>
void log_debug(const Args&... args) { log_line(LogLevel::kDebug, str_cat(args...)); }

}  // namespace tessera
