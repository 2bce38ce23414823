// What the Executable's writer and loader share (docs/formats/executable.md):
// the file's sanity limits, the roles it stores, the enums it stores by
// value, pinned, and its checksum. Internal to compiler/executable_*.cc.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>

#include "compiler/plan.h"
#include "ir/graph.h"

namespace tessera::exe_format {

// Sanity limits: far above any real model, low enough that a forged count
// cannot make the loader allocate without bound before the bytes run out.
inline constexpr uint32_t kMaxRankInFile = 16;
inline constexpr uint32_t kMaxStringBytes = 1 << 20;
inline constexpr int kMaxVeus = 256;

enum class Role : uint8_t { kRuntime = 0, kInput = 1, kConstant = 2 };

// Enums the file stores by value (docs/formats/executable.md): renumbering
// one changes what every file means, so each value is pinned here.
static_assert(static_cast<int>(DType::kFloat32) == 1 && static_cast<int>(DType::kFloat16) == 2 &&
              static_cast<int>(DType::kBFloat16) == 3 && static_cast<int>(DType::kInt64) == 4 &&
              static_cast<int>(DType::kInt32) == 5 && static_cast<int>(DType::kInt8) == 6 &&
              static_cast<int>(DType::kUInt8) == 7 && static_cast<int>(DType::kBool) == 8);
static_assert(static_cast<int>(Instr::Kind::kRun) == 0 && static_cast<int>(Instr::Kind::kSignal) == 1 &&
              static_cast<int>(Instr::Kind::kWait) == 2);
static_assert(static_cast<int>(Policy::kWavefront) == 1 && static_cast<int>(Policy::kCriticalPath) == 2 &&
              static_cast<int>(Policy::kRandom) == 3);
static_assert(static_cast<int>(Attribute::Kind::kInt) == 0 && static_cast<int>(Attribute::Kind::kFloat) == 1 &&
              static_cast<int>(Attribute::Kind::kString) == 2 && static_cast<int>(Attribute::Kind::kInts) == 3 &&
              static_cast<int>(Attribute::Kind::kFloats) == 4 && static_cast<int>(Attribute::Kind::kStrings) == 5 &&
              static_cast<int>(Attribute::Kind::kTensor) == 6);

inline uint32_t crc32_of(const void* data, size_t size) {
  uLong c = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {  // zlib takes uInt lengths
    uInt n = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    c = crc32(c, p, n);
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace tessera::exe_format
