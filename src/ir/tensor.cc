#include "ir/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/check.h"

namespace tessera {

void* aligned_alloc64(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  TESSERA_CHECK_MSG(p != nullptr, "out of memory allocating %zu bytes", rounded);
  return p;
}

void* aligned_alloc_pages(size_t bytes) {
  constexpr size_t kPage = 4096;
  const size_t rounded = std::max<size_t>(1, (bytes + kPage - 1) / kPage) * kPage;
  void* p = std::aligned_alloc(kPage, rounded);
  TESSERA_CHECK_MSG(p != nullptr, "out of memory allocating %zu bytes", rounded);
  return p;
}

void aligned_free64(void* p) { std::free(p); }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) { return Shape(shape).to_string(); }

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) TESSERA_CHECK_MSG(d >= 0, "a tensor's dims must be >= 0");
  size_t n = nbytes();
  void* p = aligned_alloc64(n);
  std::memset(p, 0, n);
  storage_ = std::shared_ptr<void>(p, aligned_free64);
  data_ = p;
}

Tensor Tensor::wrap(DType dtype, std::vector<int64_t> shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

Tensor Tensor::adopt(DType dtype, std::vector<int64_t> shape, void* data, std::function<void(void*)> deleter) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = std::shared_ptr<void>(data, std::move(deleter));
  t.data_ = data;
  return t;
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> shape, const void* data, std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = std::move(owner);
  t.data_ = const_cast<void*>(data);
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, std::vector<int64_t> shape) {
  Tensor t(DType::kFloat32, std::move(shape));
  TESSERA_CHECK(static_cast<size_t>(t.numel()) == values.size());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::from_int64s(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  Tensor t(DType::kInt64, std::move(shape));
  TESSERA_CHECK(static_cast<size_t>(t.numel()) == values.size());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * 8);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(t.raw(), data_, nbytes());
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  TESSERA_CHECK(Shape(shape).numel() == numel());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

double Tensor::value_as_double(int64_t i) const {
  switch (dtype_) {
    case DType::kFloat32: return data<float>()[i];
    case DType::kFloat16: return half_to_float(data<uint16_t>()[i]);
    case DType::kBFloat16: return bfloat16_to_float(data<uint16_t>()[i]);
    case DType::kInt64: return static_cast<double>(data<int64_t>()[i]);
    case DType::kInt32: return data<int32_t>()[i];
    case DType::kInt8: return data<int8_t>()[i];
    case DType::kUInt8: return data<uint8_t>()[i];
    case DType::kBool: return data<uint8_t>()[i] ? 1.0 : 0.0;
    case DType::kUndefined: break;
  }
  TESSERA_CHECK_MSG(false, "value of an undefined tensor");
  return 0;
}

int64_t Tensor::value_as_int64(int64_t i) const {
  switch (dtype_) {
    case DType::kInt64: return data<int64_t>()[i];
    case DType::kInt32: return data<int32_t>()[i];
    case DType::kInt8: return data<int8_t>()[i];
    case DType::kUInt8: return data<uint8_t>()[i];
    case DType::kBool: return data<uint8_t>()[i] ? 1 : 0;
    default: return static_cast<int64_t>(value_as_double(i));
  }
}

std::vector<int64_t> Tensor::to_int64s() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[i] = value_as_int64(i);
  return v;
}

}  // namespace tessera
