// The 2-D geometry of a Conv (1-D lifts to height 1), shared by the conv
// kernels (conv.cc, conv_kernels.cc, conv_transpose.cc, winograd.cc,
// direct_conv.cc, grouped_conv.cc).
#pragma once

#include <cstdint>
#include <memory>

#include "ir/ops/op_registry.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/kernel.h"
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

Result<Conv2d> conv2d_from(const WindowGeometry& g, const Shape& x, int64_t cout, int64_t group);

// The general ways of computing a conv (conv.cc): im2col + sgemm (any
// conv), a GEMM on the input as it lies (1x1 stride 1 unpadded), and
// direct depthwise loops (one input and output channel per group; by rows
// or by channels, as the shapes suit). `w`: the constant weights, or null
// when they are an input.
enum class ConvPath { kIm2col, kPointwise, kDepthwise };
std::unique_ptr<ROp> make_conv_op(const Conv2d& c, ConvPath path, bool has_bias, const Epilogue& epi, const float* w,
                                  const KernelParams& p);

// Winograd F(2x2, 3x3) (winograd.cc): whether it takes a conv of this
// geometry, and the rOperator. `w` is the constant weight tensor
// [cout, cin / group, 3, 3]; the op keeps its own transformed copy.
bool winograd_fits(const Conv2d& c);
std::unique_ptr<ROp> make_winograd(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
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
