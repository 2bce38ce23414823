#include "kernels/cpu/broadcast.h"

#include "base/check.h"

namespace tessera {

BroadcastPlan make_broadcast(const Shape& out, const std::vector<Shape>& ins) {
  TESSERA_CHECK(ins.size() <= static_cast<size_t>(kMaxBroadcastInputs));
  const int rank = out.rank();
  const int k = static_cast<int>(ins.size());
  // Full-rank strides.
  std::vector<std::vector<int64_t>> stride(k, std::vector<int64_t>(rank, 0));
  for (int i = 0; i < k; ++i) {
    const Shape& s = ins[i];
    int64_t st = 1;
    for (int d = rank - 1; d >= 0; --d) {
      int sd = d - (rank - s.rank());
      if (sd < 0) break;
      if (s.dims[sd] != 1) stride[i][d] = st;
      st *= s.dims[sd];
    }
  }
  return make_strided(out.dims, stride);
}

BroadcastPlan make_strided(const std::vector<int64_t>& out_dims, const std::vector<std::vector<int64_t>>& stride) {
  const int rank = static_cast<int>(out_dims.size());
  const int k = static_cast<int>(stride.size());
  TESSERA_CHECK(k <= kMaxBroadcastInputs);
  Shape out(out_dims);
  // Merge dim d into d+1 when every input is contiguous across the pair or
  // broadcast across both. Size-1 output dims are dropped.
  BroadcastPlan p;
  p.inputs = k;
  p.numel = out.numel();
  p.stride.assign(k, {});
  for (int d = 0; d < rank; ++d) {
    if (out.dims[d] == 1 && rank > 1) continue;
    bool merge = !p.dims.empty();
    if (merge) {
      for (int i = 0; i < k; ++i) {
        int64_t prev = p.stride[i].back();
        int64_t cur = stride[i][d];
        bool both_zero = prev == 0 && cur == 0;
        bool contiguous = cur != 0 && prev == cur * out.dims[d];
        if (!both_zero && !contiguous) merge = false;
      }
    }
    if (merge) {
      p.dims.back() *= out.dims[d];
      for (int i = 0; i < k; ++i) p.stride[i].back() = stride[i][d];
    } else {
      p.dims.push_back(out.dims[d]);
      for (int i = 0; i < k; ++i) p.stride[i].push_back(stride[i][d]);
    }
  }
  if (p.dims.empty() && rank > 0) {  // all dims were 1
    p.dims.push_back(1);
    for (int i = 0; i < k; ++i) p.stride[i].push_back(0);
  }
  p.rank = static_cast<int>(p.dims.size());
  TESSERA_CHECK(p.rank <= 16);
  return p;
}

}  // namespace tessera
