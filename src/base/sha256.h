// SHA-256 (FIPS 180-4): the daemon keeps tenants' tokens only as this
// hash, in lower-case hex.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

std::array<uint8_t, 32> sha256(std::string_view data);
std::string sha256_hex(std::string_view data);

// Whether two strings are equal, in a time that depends only on their
// lengths (comparing secrets' hashes).
bool equal_constant_time(std::string_view a, std::string_view b);

}  // namespace tessera
