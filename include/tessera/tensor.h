// Tensor: a dtype, a shape and the bytes of its elements (C order).
//
//   tessera::Tensor x(tessera::DType::kFloat32, {1, 3, 224, 224});   // owned, zero-filled
//   float* p = x.data<float>();
//   tessera::Tensor y = tessera::Tensor::wrap(tessera::DType::kFloat32, {2, 2}, buffer);  // borrows
//   tessera::Result<tessera::Tensor> z = tessera::Tensor::load_npy("x.npy");
//
// Ownership: a Tensor owns its bytes (allocated 64-byte aligned by its
// constructor, or handed over with a deleter by adopt()) or borrows them
// (wrap(), view()). Copying a Tensor shares the bytes, never copies them;
// the last owning copy frees them; clone() copies. A borrowed Tensor's
// bytes must outlive every copy of it.
//
// Thread-safety: a value type; concurrent reads are safe, writes to shared
// bytes are the caller's to order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/status.h"

namespace tessera {

class Tensor {
 public:
  Tensor() = default;
  // Owned, zero-filled, 64-byte aligned bytes for `shape` (every dim >= 0;
  // {} is a scalar).
  Tensor(DType dtype, std::vector<int64_t> shape);

  // Borrows `data`; the caller keeps it alive longer than every copy.
  static Tensor wrap(DType dtype, std::vector<int64_t> shape, void* data);
  // Takes `data` over: `deleter(data)` runs when the last copy goes.
  static Tensor adopt(DType dtype, std::vector<int64_t> shape, void* data, std::function<void(void*)> deleter);
  // Borrows read-only `data`, keeping `owner` (a file mapping, say) alive
  // for as long as any copy exists. The bytes must not be written.
  static Tensor view(DType dtype, std::vector<int64_t> shape, const void* data, std::shared_ptr<void> owner);
  // A float32 or int64 tensor of `shape` holding `values` (as many as its
  // elements).
  static Tensor from_floats(const std::vector<float>& values, std::vector<int64_t> shape);
  static Tensor from_int64s(const std::vector<int64_t>& values, std::vector<int64_t> shape);

  // NumPy .npy files (format 1.0-3.0, little-endian, C order): float16 and
  // float64 arrays load as float32 (float64 narrowed); writes format 1.0.
  static Result<Tensor> load_npy(const std::string& path);
  Status save_npy(const std::string& path) const;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return dtype_ != DType::kUndefined; }
  // Whether the bytes belong to someone else (wrap()).
  bool borrowed() const { return data_ != nullptr && storage_ == nullptr; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() { return static_cast<T*>(data_); }
  template <typename T>
  const T* data() const { return static_cast<const T*>(data_); }

  // A copy of the bytes, owned.
  Tensor clone() const;
  // The same bytes under another shape of as many elements.
  Tensor reshaped(std::vector<int64_t> shape) const;
  // Element i converted to double / int64 (any dtype but kUndefined).
  double value_as_double(int64_t i) const;
  int64_t value_as_int64(int64_t i) const;
  // All elements as int64 (for shape-like tensors).
  std::vector<int64_t> to_int64s() const;

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> shape_;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

// "1x3x224x224"; "scalar" for rank 0.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace tessera
