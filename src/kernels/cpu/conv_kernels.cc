// The rKernels of Conv and TesseraFusedConv: each way of computing a
// conv (Winograd, grouped, direct, depthwise, pointwise, im2col + sgemm)
// is an rKernel of its own that says which nodes it takes (fits); the
// compiler starts from the first that fits, in the order of kKernels
// below, and the profiler and the policy choose among all that fit
// (compiler/variants.h).
#include <vector>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/conv2d.h"

namespace tessera {
namespace {

bool conv_is_depthwise(const Conv2d& c) { return c.cin / c.group == 1 && c.cout / c.group == 1; }
bool conv_is_pointwise(const Conv2d& c) {
  return !conv_is_depthwise(c) && c.kh == 1 && c.kw == 1 && c.sh == 1 && c.sw == 1 && c.ph == 0 && c.pw == 0 &&
         c.ih == c.oh && c.iw == c.ow;
}

// What every Conv rKernel reads from the node.
struct ConvSetup {
  Conv2d c;
  Epilogue epi;
  const float* weights = nullptr;  // constant fp32 weights, else null
  bool bias = false;
  bool out_planes = false;  // attribute out_planes: see make_conv_op
};

Result<ConvSetup> conv_setup(const Node& n) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  std::vector<int64_t> kernel(w.dims.begin() + 2, w.dims.end());
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, x, kernel));
  ConvSetup s;
  auto c = conv2d_from(g, x, w[0], n.attr_int("group", 1));
  if (!c.ok()) return c.status().with_context(n.label());
  s.c = *c;
  TESSERA_ASSIGN_OR_RETURN(s.epi, Epilogue::from_node(n));
  const Value* wv = n.inputs[1];
  if (wv->is_constant() && wv->dtype == DType::kFloat32) s.weights = wv->constant->data<float>();
  s.bias = n.input(2) != nullptr;
  s.out_planes = n.attr_int("out_planes", 0) != 0;
  return s;
}

Status does_not_fit(const Node& n, std::string_view kernel, std::string_view takes) {
  return invalid_argument(str_cat(n.label(), ": rKernel ", kernel, " computes ", takes, " only"));
}

bool fits_winograd(const Node& n) {
  auto s = conv_setup(n);
  return s.ok() && s->weights != nullptr && winograd_fits(s->c);
}
bool fits_winograd4(const Node& n) {
  auto s = conv_setup(n);
  return s.ok() && s->weights != nullptr && winograd4_fits(s->c);
}
bool fits_grouped(const Node& n) {
  auto s = conv_setup(n);
  return s.ok() && s->weights != nullptr && grouped_conv_fits(s->c);
}
bool fits_direct(const Node& n) {
  auto s = conv_setup(n);
  return s.ok() && s->weights != nullptr && direct_conv_fits(s->c);
}
bool fits_depthwise(const Node& n) {
  auto s = conv_setup(n);
  return s.ok() && conv_is_depthwise(s->c);
}
bool fits_pointwise(const Node& n) {
  auto s = conv_setup(n);
  return s.ok() && conv_is_pointwise(s->c);
}

Result<std::unique_ptr<ROp>> make_conv_winograd(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(n));
  if (s.weights == nullptr || !winograd_fits(s.c))
    return does_not_fit(n, "conv.winograd", "3x3 stride-1 convs with constant weights and enough channels per group");
  return make_winograd(s.c, s.weights, s.bias, s.epi, p);
}

Result<std::unique_ptr<ROp>> make_conv_winograd4(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(n));
  if (s.weights == nullptr || !winograd4_fits(s.c))
    return does_not_fit(n, "conv.winograd4",
                        "3x3 stride-1 convs of at least 4x4 outputs with constant weights and enough channels per group");
  return make_winograd4(s.c, s.weights, s.bias, s.epi, p);
}

Result<std::unique_ptr<ROp>> make_conv_grouped(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(n));
  if (s.weights == nullptr || !grouped_conv_fits(s.c))
    return does_not_fit(n, "conv.grouped", "grouped convs of 2 to 64 channels per group with constant weights");
  return make_grouped_conv(s.c, s.weights, s.bias, s.epi, p);
}

Result<std::unique_ptr<ROp>> make_conv_direct(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(n));
  if (s.weights == nullptr || !direct_conv_fits(s.c))
    return does_not_fit(n, "conv.direct", "dense convs of 1 to 4 input channels with constant weights");
  return make_direct_conv(s.c, s.weights, s.bias, s.epi, p);
}

Result<std::unique_ptr<ROp>> make_conv_path(const Node& n, const KernelParams& p, ConvPath path) {
  TESSERA_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(n));
  if (path == ConvPath::kDepthwise && !conv_is_depthwise(s.c))
    return does_not_fit(n, "conv.depthwise", "convs of one input and one output channel per group");
  if (path == ConvPath::kPointwise && !conv_is_pointwise(s.c))
    return does_not_fit(n, "conv.pointwise", "1x1 stride-1 unpadded convs");
  return make_conv_op(s.c, path, s.bias, s.epi, s.weights, p, s.out_planes);
}

Result<std::unique_ptr<ROp>> make_conv_depthwise(const Node& n, const KernelParams& p) {
  return make_conv_path(n, p, ConvPath::kDepthwise);
}
Result<std::unique_ptr<ROp>> make_conv_pointwise(const Node& n, const KernelParams& p) {
  return make_conv_path(n, p, ConvPath::kPointwise);
}
Result<std::unique_ptr<ROp>> make_conv_im2col(const Node& n, const KernelParams& p) {
  return make_conv_path(n, p, ConvPath::kIm2col);
}

// In the order the compiler tries them: the first that fits is where it
// starts. TesseraFusedConv (a Conv with its residual Add and activation)
// has the same rKernels, each with the epilogue applied per tile.
const RKernel kKernels[] = {
    {"Conv", "conv.winograd", "3x3 stride 1: Winograd F(2x2, 3x3), tiles of output channels and pixel blocks",
     make_conv_winograd, fits_winograd},
    {"Conv", "conv.winograd4", "3x3 stride 1: Winograd F(4x4, 3x3), fewer multiplies than F(2x2), more rounding",
     make_conv_winograd4, fits_winograd4},
    {"Conv", "conv.grouped", "grouped, 2-64 channels per group: direct, tiles of groups and rows", make_conv_grouped,
     fits_grouped},
    {"Conv", "conv.direct", "1-4 input channels (a stem): direct, tiles of output rows", make_conv_direct, fits_direct},
    {"Conv", "conv.depthwise", "one channel per group: direct loops, tiles of channel blocks and rows",
     make_conv_depthwise, fits_depthwise},
    {"Conv", "conv.pointwise", "1x1 stride 1: a GEMM on the input as it lies, tiles of channel and pixel blocks",
     make_conv_pointwise, fits_pointwise},
    {"Conv", "conv.im2col_gemm", "any conv: im2col then sgemm, tiles of (image, group, channel block, pixel block)",
     make_conv_im2col},
    {"TesseraFusedConv", "conv.winograd+epilogue", "conv.winograd with the epilogue fused", make_conv_winograd,
     fits_winograd},
    {"TesseraFusedConv", "conv.winograd4+epilogue", "conv.winograd4 with the epilogue fused", make_conv_winograd4,
     fits_winograd4},
    {"TesseraFusedConv", "conv.grouped+epilogue", "conv.grouped with the epilogue fused", make_conv_grouped,
     fits_grouped},
    {"TesseraFusedConv", "conv.direct+epilogue", "conv.direct with the epilogue fused", make_conv_direct, fits_direct},
    {"TesseraFusedConv", "conv.depthwise+epilogue", "conv.depthwise with the epilogue fused", make_conv_depthwise,
     fits_depthwise},
    {"TesseraFusedConv", "conv.pointwise+epilogue", "conv.pointwise with the epilogue fused", make_conv_pointwise,
     fits_pointwise},
    {"TesseraFusedConv", "conv.im2col_gemm+epilogue", "conv.im2col_gemm with the epilogue fused", make_conv_im2col},
};

}  // namespace

std::span<const RKernel> conv_kernels() { return kKernels; }

}  // namespace tessera
