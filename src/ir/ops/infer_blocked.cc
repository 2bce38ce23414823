// The channel-blocked layout's ops (compiler/block_channels.cc makes
// them): a 4-D activation [N, C, H, W] held as [N, C / b, H, W, b], the
// channels in blocks of b (attribute "block"), so that one vector holds b
// channels of one pixel. Element (n, c, h, w) lies at
// (((n * C / b + c / b) * H + h) * W + w) * b + c % b.
//
//   TesseraToBlocked    [N, C, H, W] -> [N, C/b, H, W, b]   (b divides C)
//   TesseraFromBlocked  [N, C/b, H, W, b] -> [N, C, H, W]
//   TesseraBlockedConv  a Conv or TesseraFusedConv (its attributes, its
//                       weight and bias as inputs 1 and 2, its residual as
//                       input 3) whose input, output and residual are
//                       blocked: a 1x1 conv without padding (group 1), a
//                       depthwise conv (group = C = M), or a grouped conv
//                       whose groups hold whole blocks in and out
#include "base/strings.h"
#include "ir/ops/infer.h"
#include "ir/ops/op_registry.h"

namespace tessera {
namespace {

// The block size of a blocked value [N, C/b, H, W, b]; 0 where it is not one.
int64_t block_of(const Shape& s) { return s.rank() == 5 && s[4] > 0 ? s[4] : 0; }

Status check_float(const Node& n) {
  for (const Value* v : n.inputs)
    if (v != nullptr && v->dtype != DType::kFloat32)
      return invalid_argument(str_cat(v->name, " is ", dtype_name(v->dtype), "; the blocked layout holds float32"));
  return Status();
}

}  // namespace

Status infer_to_blocked(Node& n) {
  TESSERA_RETURN_IF_ERROR(check_float(n));
  const Shape& x = n.inputs[0]->shape;
  const int64_t b = n.attr_int("block", 8);
  if (x.rank() != 4) return invalid_argument(str_cat("input ", x.to_string(), " is not [N, C, H, W]"));
  if (b < 1 || b > 64 || x[1] % b != 0)
    return invalid_argument(str_cat("block ", b, " does not divide the ", x[1], " channels of ", x.to_string()));
  set_output(n, 0, DType::kFloat32, Shape{x[0], x[1] / b, x[2], x[3], b});
  return Status();
}

Status infer_from_blocked(Node& n) {
  TESSERA_RETURN_IF_ERROR(check_float(n));
  const Shape& x = n.inputs[0]->shape;
  if (block_of(x) == 0) return invalid_argument(str_cat("input ", x.to_string(), " is not [N, C/b, H, W, b]"));
  set_output(n, 0, DType::kFloat32, Shape{x[0], x[1] * x[4], x[2], x[3]});
  return Status();
}

Status infer_blocked_conv(Node& n) {
  TESSERA_RETURN_IF_ERROR(check_float(n));
  const Shape& xb = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  const int64_t b = block_of(xb);
  if (b == 0) return invalid_argument(str_cat("input ", xb.to_string(), " is not [N, C/b, H, W, b]"));
  if (w.rank() != 4) return invalid_argument(str_cat("weight ", w.to_string(), " is not [M, C/group, kh, kw]"));
  const Shape x{xb[0], xb[1] * b, xb[2], xb[3]};
  const int64_t group = n.attr_int("group", 1), c = x[1], m = w[0];
  if (m % b != 0) return invalid_argument(str_cat("block ", b, " does not divide the ", m, " output channels"));
  const bool depthwise = group == c && m == c && w[1] == 1;
  const bool pointwise = group == 1 && w[1] == c && w[2] == 1 && w[3] == 1;
  const bool grouped = group > 1 && c % group == 0 && m % group == 0 && w[1] * group == c && (c / group) % b == 0 &&
                       (m / group) % b == 0;
  if (!depthwise && !pointwise && !grouped)
    return invalid_argument(str_cat("weight ", w.to_string(), ", group ", group, " on ", c,
                                    " channels: the blocked conv takes a 1x1, a depthwise conv, or groups of whole "
                                    "blocks"));
  if (Value* bias = n.input(2))
    if (bias->shape.rank() != 1 || bias->shape[0] != m)
      return invalid_argument(str_cat("bias has shape ", bias->shape.to_string(), ", expected ", m));
  std::vector<int64_t> kernel{w[2], w[3]};
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != kernel)
    return invalid_argument("kernel_shape does not match the weight");
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, x, kernel));
  if (pointwise && !depthwise) {
    for (int d = 0; d < 2; ++d)
      if (g.pads_begin[d] != 0 || g.pads_end[d] != 0)
        return invalid_argument("the blocked 1x1 conv takes no padding");
  }
  for (int d = 0; d < 2; ++d)
    if (g.dilations[d] != 1) return invalid_argument("the blocked conv takes no dilation");
  set_output(n, 0, DType::kFloat32, Shape{x[0], m / b, g.out[0], g.out[1], b});
  return check_fused_epilogue(n);
}

}  // namespace tessera
