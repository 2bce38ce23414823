// Tensor: a dtype, a static shape and 64-byte aligned host storage.
//
// Storage is shared (copying a Tensor shares its bytes; clone() copies them),
// which lets initializers, folded constants and outputs move between layers
// without copies. Ownership: the last Tensor holding the storage frees it;
// a Tensor made with Tensor::wrap() borrows memory owned by someone else.
//
// Thread-safety: a value type; concurrent reads are safe, writes to shared
// storage are the caller's to order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/shape.h"

namespace tessera {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled storage for shape (must be static).
  Tensor(DType dtype, Shape shape);
  // Borrows `data`; the caller keeps it alive longer than every copy.
  static Tensor wrap(DType dtype, Shape shape, void* data);
  // Borrows `data`, keeping `owner` (e.g. a file mapping) alive for as long
  // as any copy exists. The bytes must not be written.
  static Tensor view(DType dtype, Shape shape, const void* data, std::shared_ptr<void> owner);
  // A scalar or a 1-D tensor holding `values`.
  static Tensor from_floats(const std::vector<float>& values, Shape shape);
  static Tensor from_int64s(const std::vector<int64_t>& values, Shape shape);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return dtype_ != DType::kUndefined; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() { return static_cast<T*>(data_); }
  template <typename T>
  const T* data() const { return static_cast<const T*>(data_); }

  Tensor clone() const;
  // Same bytes, new shape with equal numel.
  Tensor reshaped(Shape shape) const;
  // Element i converted to double / int64 (any numeric dtype).
  double value_as_double(int64_t i) const;
  int64_t value_as_int64(int64_t i) const;
  // All elements as int64 (for shape-like inputs).
  std::vector<int64_t> to_int64s() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

// Allocates `bytes` (rounded up) aligned to 64; frees with aligned_free.
void* aligned_alloc64(size_t bytes);
void aligned_free64(void* p);

}  // namespace tessera
