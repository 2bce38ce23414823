#include "ir/shape.h"

namespace tessera {

bool Shape::is_static() const {
  for (int64_t d : dims)
    if (d < 0) return false;
  return true;
}

int64_t Shape::numel() const { return dims_product(dims, 0, rank()); }

std::string Shape::to_string() const {
  if (dims.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += "x";
    if (dims[i] >= 0) s += std::to_string(dims[i]);
    else s += (i < symbols.size() && !symbols[i].empty()) ? symbols[i] : "?";
  }
  return s;
}

int64_t dims_product(const std::vector<int64_t>& dims, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= dims[i];
  return p;
}

bool normalize_axis(int64_t axis, int rank, int* out) {
  if (axis < -rank || axis >= rank) return false;
  *out = static_cast<int>(axis < 0 ? axis + rank : axis);
  return true;
}

}  // namespace tessera
