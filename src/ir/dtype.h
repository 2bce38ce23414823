// Element types. float32 is the compute type; float16 and bfloat16 are
// storage types converted to float32 when a model is loaded; the integer and
// bool types carry indices, shapes and masks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

enum class DType : uint8_t {
  kUndefined = 0,
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt8,
  kUInt8,
  kBool,
};

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "float32", "int64", ...
// Parses a dtype_name(); kUndefined if unknown.
DType dtype_from_name(std::string_view name);
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
