#include "ir/ops/op_registry.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "ir/ops/infer.h"

namespace tessera {
namespace {

constexpr OpDef kOps[] = {
    // Elementwise, unary.
    {"Abs", 1, 1, infer_same, flops_out_numel},
    {"Cast", 1, 1, infer_cast, flops_zero},
    {"Clip", 1, 3, infer_same, flops_out_numel},
    {"Dropout", 1, 3, infer_dropout, flops_zero},
    {"Elu", 1, 1, infer_same, flops_out_numel},
    {"Erf", 1, 1, infer_same, flops_out_numel},
    {"Exp", 1, 1, infer_same, flops_out_numel},
    {"HardSigmoid", 1, 1, infer_same, flops_out_numel},
    {"HardSwish", 1, 1, infer_same, flops_out_numel},
    {"Identity", 1, 1, infer_same, flops_zero},
    {"LeakyRelu", 1, 1, infer_same, flops_out_numel},
    {"Log", 1, 1, infer_same, flops_out_numel},
    {"Neg", 1, 1, infer_same, flops_out_numel},
    {"Not", 1, 1, infer_same_bool, flops_out_numel},
    {"Reciprocal", 1, 1, infer_same, flops_out_numel},
    {"Relu", 1, 1, infer_same, flops_out_numel},
    {"Sigmoid", 1, 1, infer_same, flops_out_numel},
    {"Softplus", 1, 1, infer_same, flops_out_numel},
    {"Sqrt", 1, 1, infer_same, flops_out_numel},
    {"Tanh", 1, 1, infer_same, flops_out_numel},
    // Elementwise, binary and variadic (numpy broadcasting).
    {"Add", 2, 2, infer_broadcast, flops_out_numel},
    {"And", 2, 2, infer_broadcast_bool, flops_out_numel},
    {"Div", 2, 2, infer_broadcast, flops_out_numel},
    {"Equal", 2, 2, infer_broadcast_bool, flops_out_numel},
    {"Greater", 2, 2, infer_broadcast_bool, flops_out_numel},
    {"Less", 2, 2, infer_broadcast_bool, flops_out_numel},
    {"Max", 1, 64, infer_broadcast, flops_out_numel, /*all_required=*/true},
    {"Min", 1, 64, infer_broadcast, flops_out_numel, /*all_required=*/true},
    {"Mod", 2, 2, infer_broadcast, flops_out_numel},
    {"Mul", 2, 2, infer_broadcast, flops_out_numel},
    {"Pow", 2, 2, infer_broadcast, flops_out_numel},
    {"Sub", 2, 2, infer_broadcast, flops_out_numel},
    {"Where", 3, 3, infer_where, flops_zero},
    // Linear algebra.
    {"Einsum", 1, 2, infer_einsum, flops_einsum, /*all_required=*/true},
    {"Gemm", 2, 3, infer_gemm, flops_gemm},
    {"MatMul", 2, 2, infer_matmul, flops_matmul},
    // Convolution and pooling.
    {"AveragePool", 1, 1, infer_pool, flops_pool},
    {"Conv", 2, 3, infer_conv, flops_conv},
    {"ConvTranspose", 2, 3, infer_conv_transpose, flops_conv_transpose},
    {"GlobalAveragePool", 1, 1, infer_global_pool, flops_in_numel},
    {"MaxPool", 1, 1, infer_pool, flops_pool},
    // Normalization.
    {"BatchNormalization", 5, 5, infer_batch_norm, flops_out_numel},
    {"InstanceNormalization", 3, 3, infer_same, flops_out_numel},
    {"LayerNormalization", 2, 3, infer_layer_norm, flops_out_numel},
    {"LogSoftmax", 1, 1, infer_same, flops_out_numel},
    {"Softmax", 1, 1, infer_same, flops_out_numel},
    // Reductions and scans.
    {"ArgMax", 1, 1, infer_argmax, flops_in_numel},
    {"CumSum", 2, 2, infer_same, flops_out_numel},
    {"ReduceMax", 1, 2, infer_reduce, flops_in_numel},
    {"ReduceMean", 1, 2, infer_reduce, flops_in_numel},
    {"ReduceMin", 1, 2, infer_reduce, flops_in_numel},
    {"ReduceSum", 1, 2, infer_reduce, flops_in_numel},
    // Layout and data movement.
    {"Concat", 1, 1024, infer_concat, flops_zero, /*all_required=*/true},
    {"ConstantOfShape", 1, 1, infer_constant_of_shape, flops_zero},
    {"Expand", 2, 2, infer_expand, flops_zero},
    {"Flatten", 1, 1, infer_flatten, flops_zero},
    {"Gather", 2, 2, infer_gather, flops_zero},
    {"Pad", 2, 4, infer_pad, flops_zero},
    {"Range", 3, 3, infer_range, flops_zero},
    {"Reshape", 2, 2, infer_reshape, flops_zero},
    {"Resize", 1, 4, infer_resize, flops_out_numel},
    {"ScatterND", 3, 3, infer_scatter_nd, flops_zero},
    {"Shape", 1, 1, infer_shape_op, flops_zero},
    {"Slice", 3, 5, infer_slice, flops_zero},
    {"Split", 1, 2, infer_split, flops_zero},
    {"Squeeze", 1, 2, infer_squeeze, flops_zero},
    {"Tile", 2, 2, infer_tile, flops_zero},
    {"Transpose", 1, 1, infer_transpose, flops_zero},
    {"Trilu", 1, 2, infer_same, flops_zero},
    {"Unsqueeze", 1, 2, infer_unsqueeze, flops_zero},
    // Recurrent.
    {"GRU", 3, 6, infer_gru, flops_rnn},
    {"LSTM", 3, 8, infer_lstm, flops_rnn},
    // Internal ops, made by compiler lowering (never in ONNX files).
    {"TesseraAttention", 3, 5, infer_attention, flops_attention},
    {"TesseraBlockedConv", 2, 4, infer_blocked_conv, flops_conv},
    {"TesseraFromBlocked", 1, 1, infer_from_blocked, flops_zero},
    {"TesseraToBlocked", 1, 1, infer_to_blocked, flops_zero},
    {"TesseraConcat", 1, 1024, infer_concat, flops_zero, /*all_required=*/true},
    {"TesseraFusedConv", 2, 4, infer_fused_conv, flops_conv},
    {"TesseraFusedElementwise", 1, 8, infer_fused_elementwise, flops_fused_elementwise, /*all_required=*/true},
    {"TesseraFusedGemm", 2, 4, infer_fused_gemm, flops_gemm},
    {"TesseraFusedMatMul", 2, 6, infer_fused_matmul, flops_matmul},
    {"TesseraFusedPool", 1, 4, infer_fused_pool, flops_pool},
    {"TesseraInvertedResidual", 2, 8, infer_inverted_residual, flops_inverted_residual},
    {"TesseraLstmCell", 1, 14, infer_rnn_cell, flops_rnn_cell},
    {"TesseraGruCell", 1, 4, infer_rnn_cell, flops_rnn_cell},
    {"TesseraRnnProj", 3, 1 << 20, infer_rnn_proj, flops_rnn_proj},
};

}  // namespace

const OpDef* op_find(std::string_view type) {
  for (const OpDef& d : kOps)
    if (d.type == type) return &d;
  return nullptr;
}

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const OpDef& d : kOps) names.emplace_back(d.type);
  std::sort(names.begin(), names.end());
  return names;
}

Status op_infer(Node& n) {
  const OpDef* d = op_find(n.op_type);
  if (d == nullptr) return unimplemented(str_cat(n.label(), ": op type '", n.op_type, "' is not supported"));
  int count = static_cast<int>(n.inputs.size());
  if (count < d->min_inputs || count > d->max_inputs)
    return invalid_argument(str_cat(n.label(), " has ", count, " inputs; ", n.op_type, " takes ", d->min_inputs,
                                    d->min_inputs == d->max_inputs ? "" : str_cat(" to ", d->max_inputs)));
  for (int i = 0; i < (d->all_required ? count : d->min_inputs); ++i)
    if (n.inputs[i] == nullptr) return invalid_argument(str_cat(n.label(), ": required input ", i, " is missing"));
  for (Value* in : n.inputs) {
    if (in == nullptr) continue;
    if (!in->shape_known || !in->shape.is_static())
      return internal_error(str_cat(n.label(), ": input '", in->name, "' has no static shape"));
  }
  Status st = d->infer(n);
  if (!st.ok()) return st.message().rfind(n.label(), 0) == 0 ? st : st.with_context(n.label());
  for (Value* o : n.outputs) {
    if (!o->shape_known) continue;
    double bytes = static_cast<double>(dtype_size(o->dtype));
    for (int64_t dim : o->shape.dims) {
      if (dim < 0) return internal_error(str_cat(n.label(), ": inferred a negative dimension for '", o->name, "'"));
      bytes *= static_cast<double>(dim);
    }
    if (bytes > static_cast<double>(kMaxValueBytes))
      return resource_exhausted(str_cat(n.label(), ": output '", o->name, "' would be ", o->shape.to_string(), " (",
                                        bytes / (1 << 30), " GiB), over the ", kMaxValueBytes >> 30,
                                        " GiB limit for one tensor"));
  }
  return Status();
}

double op_flops(const Node& n) {
  const OpDef* d = op_find(n.op_type);
  return d == nullptr ? 0.0 : d->flops(n);
}

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(rank);
  for (int i = 0; i < rank; ++i) {
    int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else
      return invalid_argument(str_cat("shapes ", a.to_string(), " and ", b.to_string(), " do not broadcast"));
  }
  return Shape(out);
}

Result<std::vector<int64_t>> const_ints_input(const Node& n, size_t i, const char* what) {
  Value* v = n.input(i);
  if (v == nullptr) return invalid_argument(str_cat(n.label(), ": input ", i, " (", what, ") is missing"));
  if (!v->is_constant())
    return unimplemented(str_cat(n.label(), ": input ", i, " (", what, ", '", v->name,
                                 "') must be a constant once input shapes are bound; it depends on input data"));
  return v->constant->to_int64s();
}

Result<WindowGeometry> window_geometry(const Node& n, const Shape& input, const std::vector<int64_t>& kernel) {
  WindowGeometry g;
  g.spatial = input.rank() - 2;
  if (g.spatial < 1) return invalid_argument(str_cat("input rank ", input.rank(), " is below 3"));
  if (static_cast<int>(kernel.size()) != g.spatial)
    return invalid_argument(str_cat("kernel has ", kernel.size(), " spatial dims, input has ", g.spatial));
  g.kernel = kernel;
  g.strides = n.attr_ints("strides", std::vector<int64_t>(g.spatial, 1));
  g.dilations = n.attr_ints("dilations", std::vector<int64_t>(g.spatial, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * g.spatial, 0));
  if (static_cast<int>(g.strides.size()) != g.spatial || static_cast<int>(g.dilations.size()) != g.spatial ||
      static_cast<int>(pads.size()) != 2 * g.spatial)
    return invalid_argument("strides, dilations or pads do not match the number of spatial dims");
  // Bounds that keep every extent below computable in int64 (a real model
  // is far inside them; a forged one gets an error, not an overflow).
  constexpr int64_t kMaxExtent = int64_t{1} << 30;
  for (int i = 0; i < g.spatial; ++i) {
    if (g.strides[i] < 1 || g.dilations[i] < 1 || g.kernel[i] < 1 || pads[i] < 0 || pads[i + g.spatial] < 0)
      return invalid_argument("strides, dilations and kernel must be >= 1 and pads >= 0");
    if (g.strides[i] > kMaxExtent || g.dilations[i] > kMaxExtent || g.kernel[i] > kMaxExtent ||
        pads[i] > kMaxExtent || pads[i + g.spatial] > kMaxExtent || input.dims[2 + i] > kMaxExtent)
      return invalid_argument(str_cat("strides, dilations, kernel, pads or input extent above ", kMaxExtent));
  }
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  bool ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  for (int i = 0; i < g.spatial; ++i) {
    int64_t in = input.dims[2 + i];
    int64_t k_eff = (g.kernel[i] - 1) * g.dilations[i] + 1;
    int64_t pb = pads[i], pe = pads[i + g.spatial], out;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = (in + g.strides[i] - 1) / g.strides[i];
      int64_t total = std::max<int64_t>(0, (out - 1) * g.strides[i] + k_eff - in);
      pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (auto_pad == "VALID") {
      pb = pe = 0;
      out = in >= k_eff ? (in - k_eff) / g.strides[i] + 1 : 0;
    } else if (auto_pad == "NOTSET") {
      int64_t span = in + pb + pe - k_eff;
      if (span < 0) return invalid_argument(str_cat("kernel (", k_eff, ") is larger than the padded input (", in + pb + pe, ")"));
      out = (ceil_mode ? (span + g.strides[i] - 1) / g.strides[i] : span / g.strides[i]) + 1;
      // With ceil_mode the last window must start inside the input or left pad.
      if (ceil_mode && (out - 1) * g.strides[i] >= in + pb) --out;
    } else {
      return invalid_argument(str_cat("auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"));
    }
    g.in.push_back(in);
    g.out.push_back(out);
    g.pads_begin.push_back(pb);
    g.pads_end.push_back(pe);
  }
  return g;
}

Result<WindowGeometry> conv_transpose_geometry(const Node& n, const Shape& input, const std::vector<int64_t>& kernel) {
  WindowGeometry g;
  g.spatial = input.rank() - 2;
  if (g.spatial < 1 || static_cast<int>(kernel.size()) != g.spatial)
    return invalid_argument("input and weight ranks do not match");
  g.kernel = kernel;
  g.strides = n.attr_ints("strides", std::vector<int64_t>(g.spatial, 1));
  g.dilations = n.attr_ints("dilations", std::vector<int64_t>(g.spatial, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * g.spatial, 0));
  std::vector<int64_t> out_pad = n.attr_ints("output_padding", std::vector<int64_t>(g.spatial, 0));
  std::vector<int64_t> out_shape = n.attr_ints("output_shape");
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (static_cast<int>(g.strides.size()) != g.spatial || static_cast<int>(g.dilations.size()) != g.spatial ||
      static_cast<int>(pads.size()) != 2 * g.spatial || static_cast<int>(out_pad.size()) != g.spatial)
    return invalid_argument("strides, dilations, pads or output_padding do not match the number of spatial dims");
  for (int i = 0; i < g.spatial; ++i) {
    if (g.strides[i] < 1 || g.dilations[i] < 1 || pads[i] < 0 || pads[i + g.spatial] < 0)
      return invalid_argument("strides and dilations must be >= 1 and pads >= 0");
    constexpr int64_t kMaxExtent = int64_t{1} << 30;  // as in window_geometry: no int64 overflow below
    if (g.strides[i] > kMaxExtent || g.dilations[i] > kMaxExtent || kernel[i] < 1 || kernel[i] > kMaxExtent ||
        pads[i] > kMaxExtent || pads[i + g.spatial] > kMaxExtent || out_pad[i] < 0 || out_pad[i] > kMaxExtent ||
        input.dims[2 + i] > kMaxExtent)
      return invalid_argument(str_cat("strides, dilations, kernel, pads or input extent outside 0 to ", kMaxExtent));
    int64_t in = input.dims[2 + i];
    int64_t k_eff = (kernel[i] - 1) * g.dilations[i] + 1;
    int64_t full = g.strides[i] * (in - 1) + out_pad[i] + k_eff;
    int64_t pb = pads[i], pe = pads[i + g.spatial], out;
    if (!out_shape.empty()) {
      if (static_cast<int>(out_shape.size()) < g.spatial) return invalid_argument("output_shape is too short");
      out = out_shape[out_shape.size() - g.spatial + i];
      int64_t total = full - out;
      if (total < 0) return invalid_argument("output_shape is larger than the convolution can produce");
      pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = in * g.strides[i];
      int64_t total = std::max<int64_t>(0, full - out);
      pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      if (auto_pad == "VALID") pb = pe = 0;
      out = full - pb - pe;
    }
    if (out < 0) return invalid_argument("pads exceed the output extent");
    g.in.push_back(in);
    g.out.push_back(out);
    g.pads_begin.push_back(pb);
    g.pads_end.push_back(pe);
  }
  return g;
}

}  // namespace tessera
