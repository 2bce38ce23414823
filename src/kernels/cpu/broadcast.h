// Broadcast iteration for elementwise kernels.
//
// make_broadcast() left-pads every input shape to the output rank, gives
// broadcast dims a stride of 0, and merges adjacent dims that every input
// walks the same way, so that most calls end up with one or two dims.
// for_each_run() then cuts any flat output range into runs along the last
// dim, on which inputs advance by a fixed stride (0 or 1 after merging).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/shape.h"

namespace tessera {

inline constexpr int kMaxBroadcastInputs = 8;

struct BroadcastPlan {
  int rank = 0;
  int inputs = 0;
  std::vector<int64_t> dims;                 // merged output dims
  std::vector<std::vector<int64_t>> stride;  // [input][dim], elements
  int64_t numel = 0;
};

BroadcastPlan make_broadcast(const Shape& out, const std::vector<Shape>& ins);
// The same from explicit per-input element strides over the output dims
// (for transposes and slices, whose strides are permuted or scaled).
BroadcastPlan make_strided(const std::vector<int64_t>& out_dims, const std::vector<std::vector<int64_t>>& strides);

// Calls fn(out_offset, in_offsets, length, in_inner_strides) for each run
// covering output elements [begin, end).
template <typename Fn>
void for_each_run(const BroadcastPlan& p, int64_t begin, int64_t end, Fn&& fn) {
  if (begin >= end) return;
  const int r = p.rank;
  if (r == 0) {
    int64_t offs[kMaxBroadcastInputs] = {};
    int64_t strides[kMaxBroadcastInputs] = {};
    fn(int64_t{0}, offs, int64_t{1}, strides);
    return;
  }
  int64_t idx[16];
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % p.dims[d];
    rem /= p.dims[d];
  }
  int64_t offs[kMaxBroadcastInputs];
  int64_t inner[kMaxBroadcastInputs];
  for (int k = 0; k < p.inputs; ++k) {
    offs[k] = 0;
    for (int d = 0; d < r; ++d) offs[k] += idx[d] * p.stride[k][d];
    inner[k] = p.stride[k][r - 1];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = std::min(end - pos, p.dims[r - 1] - idx[r - 1]);
    fn(pos, offs, len, inner);
    pos += len;
    if (pos >= end) break;
    // Advance the multi-index past the run.
    for (int k = 0; k < p.inputs; ++k) offs[k] += len * inner[k];
    idx[r - 1] += len;
    for (int d = r - 1; d > 0 && idx[d] == p.dims[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
      for (int k = 0; k < p.inputs; ++k) offs[k] += p.stride[k][d - 1] - p.dims[d] * p.stride[k][d];
    }
  }
}

}  // namespace tessera
