// Element types: the public DType (tessera/dtype.h) and what the compiler
// needs beyond it: its classes and the float16/bfloat16 conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessera/dtype.h"

namespace tessera {

inline bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}
inline bool dtype_is_integer(DType t) {
  return t == DType::kInt64 || t == DType::kInt32 || t == DType::kInt8 || t == DType::kUInt8;
}

// IEEE binary16 and bfloat16 conversions (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace tessera
