// Shapes. A dimension is a non-negative extent, or kDynamic with an optional
// symbolic name (ONNX dim_param) until input shapes are bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

inline constexpr int64_t kDynamic = -1;

struct Shape {
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;  // same length as dims, "" where none

  Shape() = default;
  Shape(std::vector<int64_t> d) : dims(std::move(d)), symbols(dims.size()) {}  // NOLINT
  Shape(std::initializer_list<int64_t> d) : dims(d), symbols(dims.size()) {}

  int rank() const { return static_cast<int>(dims.size()); }
  int64_t operator[](int i) const { return dims[i]; }
  bool is_static() const;
  // Product of the dims; 1 for a scalar; only meaningful when static.
  int64_t numel() const;
  // "1x3x224x224"; dynamic dims print their symbol or "?"; "scalar" for rank 0.
  std::string to_string() const;
  bool operator==(const Shape& o) const { return dims == o.dims; }
  // A static Shape is a tensor's shape (tessera/tensor.h).
  operator const std::vector<int64_t>&() const { return dims; }  // NOLINT: implicit by design
};

// Product of dims in [begin, end).
int64_t dims_product(const std::vector<int64_t>& dims, int begin, int end);
// Normalizes a possibly negative axis against rank; false if out of range.
bool normalize_axis(int64_t axis, int rank, int* out);

}  // namespace tessera
