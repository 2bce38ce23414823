// What the library says on stderr while it works (a host measured for the
// first time, a session that must share cores, a profile taken while the
// host was busy): human-readable lines, never machine-readable output.
//
//   tessera::log_set_level(tessera::LogLevel::kWarning);   // warnings and errors only
//
// Thread-safety: the level is one atomic; each line is written whole.
#pragma once

namespace tessera {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kQuiet };

// Lines below `level` are dropped. The default is kInfo.
void log_set_level(LogLevel level);
LogLevel log_level();

}  // namespace tessera
