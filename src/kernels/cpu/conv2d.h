// The 2-D geometry of a Conv (1-D lifts to height 1), shared by the conv
// kernels (conv.cc, conv_kernels.cc, conv_transpose.cc, winograd.cc,
// direct_conv.cc, grouped_conv.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "ir/ops/op_registry.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/simd.h"
#include "tessera/status.h"

namespace tessera {

// An rTask of a GEMM-like conv does at least this much work by default:
// GEMM tiles smaller than this run far below the library's peak.
inline constexpr double kConvFlopsPerTask = 1 << 23;

struct Conv2d {
  int64_t batch, cin, cout, group;
  int64_t ih, iw, oh, ow, kh, kw;
  int64_t sh, sw, dh, dw, ph, pw;  // strides, dilations, top/left pads
};

// Zero-padded input rows: row() sets dst[k] = src[k] for k in [lo, hi)
// and 0 for the rest of [0, wp), reading src only in [lo, hi); zeros()
// sets all of [0, wp) to 0. The vectors that straddle lo or hi take masks
// made once, here: rows of small planes (7 to 30 floats) then cost a few
// loads and stores each, where a library call per edge cost more than the
// copy. The last vector of a row may write up to kPadRowSlack - 1 floats
// past wp: the buffer has that room at its end, and rows are filled in
// address order.
#if defined(TESSERA_SIMD)
inline constexpr int64_t kPadRowSlack = simd::Vec::kLanes;
class RowPadder {
 public:
  using Vec = simd::Vec;
  static constexpr int64_t kLanes = Vec::kLanes;
  RowPadder(int64_t wp, int64_t lo, int64_t hi) : wp_(wp), lo_(lo), hi_(hi) {
    const auto up = [](int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; };
    full0_ = std::min(up(lo), up(wp));
    full1_ = full0_ + std::max<int64_t>(0, (std::min(hi, wp) - full0_) / kLanes * kLanes);
    head_ = full0_ / kLanes;
    tail_ = std::max<int64_t>(0, up(wp - full1_) / kLanes);
    head_mask_ = lanes(lo, hi);
    tail_mask_[0] = lanes(lo - full1_, hi - full1_);
    tail_mask_[1] = lanes(lo - full1_ - kLanes, hi - full1_ - kLanes);
  }
  void row(float* dst, const float* src) const {
    if (head_ > 1 || tail_ > 2) {  // pads wider than a vector: masks made per vector
      for (int64_t k = 0; k < wp_; k += kLanes) Vec::store(dst + k, Vec::load(src + k, lanes(lo_ - k, hi_ - k)));
      return;
    }
    if (head_ == 1) Vec::store(dst, Vec::load(src, head_mask_));
    for (int64_t k = full0_; k < full1_; k += kLanes) Vec::store(dst + k, Vec::load(src + k));
    if (tail_ >= 1) Vec::store(dst + full1_, Vec::load(src + full1_, tail_mask_[0]));
    if (tail_ == 2) Vec::store(dst + full1_ + kLanes, Vec::load(src + full1_ + kLanes, tail_mask_[1]));
  }
  // Short rows as straight-line stores: a loop of them would become a
  // call to memset.
  void zeros(float* dst) const {
    const Vec::T z = Vec::zero();
    if (wp_ > 4 * kLanes) {
      std::fill(dst, dst + wp_, 0.f);
      return;
    }
    Vec::store(dst, z);
    if (wp_ > kLanes) Vec::store(dst + kLanes, z);
    if (wp_ > 2 * kLanes) Vec::store(dst + 2 * kLanes, z);
    if (wp_ > 3 * kLanes) Vec::store(dst + 3 * kLanes, z);
  }

 private:
  // Lanes j of a vector with a <= j < b.
  static Vec::Mask lanes(int64_t a, int64_t b) { return Vec::from_bits(lane_bits(a, b)); }

  int64_t wp_, lo_, hi_;
  int64_t full0_ = 0, full1_ = 0;  // [full0_, full1_): whole vectors of src
  int64_t head_ = 0, tail_ = 0;    // masked vectors before and after them
  Vec::Mask head_mask_, tail_mask_[2];
};
#else
inline constexpr int64_t kPadRowSlack = 0;
class RowPadder {
 public:
  RowPadder(int64_t wp, int64_t lo, int64_t hi) : wp_(wp), lo_(lo), hi_(hi) {}
  void row(float* dst, const float* src) const {
    for (int64_t k = 0; k < wp_; ++k) dst[k] = k >= lo_ && k < hi_ ? src[k] : 0.f;
  }
  void zeros(float* dst) const { std::fill(dst, dst + wp_, 0.f); }

 private:
  int64_t wp_, lo_, hi_;
};
#endif

Result<Conv2d> conv2d_from(const WindowGeometry& g, const Shape& x, int64_t cout, int64_t group);

// The general ways of computing a conv (conv.cc): im2col + sgemm (any
// conv), a GEMM on the input as it lies (1x1 stride 1 unpadded), and
// direct depthwise loops (one input and output channel per group; by rows
// or by channels, as the shapes suit). `w`: the constant weights, or null
// when they are an input. `out_planes` (the node's attribute, set by the
// compiler's mark_out_planes): a 1x1's rTasks take blocks of whole output
// planes before pixel blocks.
enum class ConvPath { kIm2col, kPointwise, kDepthwise };
std::unique_ptr<ROp> make_conv_op(const Conv2d& c, ConvPath path, bool has_bias, const Epilogue& epi, const float* w,
                                  const KernelParams& p, bool out_planes = false);

// Winograd F(2x2, 3x3) (winograd.cc): whether it takes a conv of this
// geometry, and the rOperator. `w` is the constant weight tensor
// [cout, cin / group, 3, 3]; the op keeps its own transformed copy.
bool winograd_fits(const Conv2d& c);
std::unique_ptr<ROp> make_winograd(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                   const KernelParams& p);

// Winograd F(4x4, 3x3) (winograd4.cc): the convs winograd_fits takes
// with at least 4x4 outputs, on 4x4 output tiles; fewer multiplies, more
// rounding.
bool winograd4_fits(const Conv2d& c);
std::unique_ptr<ROp> make_winograd4(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                    const KernelParams& p);

// Direct convolution for few input channels (direct_conv.cc: CNN stems,
// 1 to 4 input channels): whether it takes a conv of this geometry
// (never in a build without SIMD kernels), and the rOperator; `w` is the
// constant weight tensor [cout, cin, kh, kw], packed into the op.
bool direct_conv_fits(const Conv2d& c);
std::unique_ptr<ROp> make_direct_conv(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                      const KernelParams& p);

// Direct convolution for grouped convs with 2 to 64 channels per group
// (grouped_conv.cc: RegNet, ResNeXt): whether it takes a conv of this
// geometry (never in a build without SIMD kernels), and the rOperator;
// `w` is the constant weight tensor [cout, cin / group, kh, kw], packed
// into the op.
bool grouped_conv_fits(const Conv2d& c);
std::unique_ptr<ROp> make_grouped_conv(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                       const KernelParams& p);

}  // namespace tessera
