// Human-readable diagnostics on stderr. Machine-readable output (--json) goes
// to stdout and never through here.
//
// Thread-safety: each call writes one line with one fprintf; safe from any
// thread.
#pragma once

#include "base/strings.h"
#include "tessera/log.h"

namespace tessera {

// LogLevel, log_set_level and log_level: tessera/log.h.
void log_line(LogLevel level, const std::string& line);

template <typename... Args>
void log_info(const Args&... args) { log_line(LogLevel::kInfo, str_cat(args...)); }
template <typename... Args>
void log_warning(const Args&... args) { log_line(LogLevel::kWarning, str_cat(args...)); }
template <typename... Args>
void log_debug(const Args&... args) { log_line(LogLevel::kDebug, str_cat(args...)); }

}  // namespace tessera
