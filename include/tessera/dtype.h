// Element types of tensors.
//
// float32 is the compute type; float16 and bfloat16 are storage types a
// model's weights may come in (converted to float32 when it is loaded);
// the integer and bool types carry indices, shapes and masks. bool is one
// byte per element, 0 or 1.
//
// Thread-safety: plain functions of their arguments.
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

// Bytes per element (0 for kUndefined).
size_t dtype_size(DType t);
// "float32", "float16", "bfloat16", "int64", "int32", "int8", "uint8",
// "bool"; "undefined".
std::string_view dtype_name(DType t);
// Parses a dtype_name(); kUndefined if unknown.
DType dtype_from_name(std::string_view name);

}  // namespace tessera
