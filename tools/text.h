// Small text helpers of the command-line tools, which see only the public
// API (include/tessera/) and their own files.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/log.h"
#include "tessera/status.h"

namespace tessera::tools {

// Concatenates the arguments with operator<<.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename Container>
std::string join(const Container& items, std::string_view sep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& item : items) {
    if (!first) os << sep;
    os << item;
    first = false;
  }
  return os.str();
}

// A base-10 integer, exactly.
inline bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// "1x3x224x224" (or "1,3,224,224"; "scalar" for none).
inline Result<std::vector<int64_t>> parse_dims(const std::string& text) {
  std::vector<int64_t> dims;
  if (text.empty() || text == "scalar") return dims;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find_first_of("x,", start);
    int64_t d;
    if (!parse_int(std::string_view(text).substr(start, end - start), &d) || d < 0)
      return invalid_argument(cat("bad dimensions '", text, "' (expected e.g. 1x3x224x224)"));
    dims.push_back(d);
    if (end == std::string::npos) return dims;
    start = end + 1;
  }
}

// A count with a unit suffix: 11.7M, 1.8G.
inline std::string human_count(double value) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  for (; value >= 1000.0 && u < 5; ++u) value /= 1000.0;
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f", value);
  else std::snprintf(buf, sizeof buf, "%.2f%s", value, units[u]);
  return buf;
}

// Fixed-point with `digits` decimals.
inline std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

// A line of human-readable text on stderr, unless the log level is above
// kInfo (--quiet).
template <typename... Args>
void say(const Args&... args) {
  if (log_level() <= LogLevel::kInfo) std::fprintf(stderr, "%s\n", cat(args...).c_str());
}

}  // namespace tessera::tools
