// Small string helpers used across layers.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// Concatenates the arguments with operator<<: str_cat("node '", name, "'").
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Joins items with a separator using operator<<.
template <typename Container>
std::string str_join(const Container& items, std::string_view sep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& item : items) {
    if (!first) os << sep;
    os << item;
    first = false;
  }
  return os.str();
}

std::vector<std::string> str_split(std::string_view s, char sep);

// Parses a base-10 integer; false when s is not exactly one.
bool parse_int64(std::string_view s, int64_t* out);

// Formats a count with a unit suffix: 11.7M, 1.8G.
std::string human_count(double value);

// Fixed-point with `digits` decimals: str_fixed(3.14159, 2) == "3.14".
std::string str_fixed(double value, int digits);

}  // namespace tessera
