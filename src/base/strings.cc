#include "base/strings.h"

#include <charconv>
#include <cstdio>

namespace tessera {

std::vector<std::string> str_split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

bool parse_int64(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::string human_count(double value) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (value >= 1000.0 && u < 5) {
    value /= 1000.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f", value);
  else std::snprintf(buf, sizeof buf, "%.2f%s", value, units[u]);
  return buf;
}

std::string str_fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

}  // namespace tessera
