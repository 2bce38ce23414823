// Op definitions: what each supported ONNX op means, independent of any
// backend. For each op type: how to infer its outputs' dtypes and shapes
// from its inputs (reading constant inputs where the shape depends on data,
// as for Reshape or Slice), and an estimate of its FLOPs for `inspect`.
//
// Backends implement ops as rKernels (src/kernels/<backend>/); an op is
// supported when it has a definition here and a kernel there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "tessera/status.h"

namespace tessera {

// The largest single tensor Tessera will plan (bytes). Larger shapes come
// from malformed models or wrong --shape values, and are refused by name.
inline constexpr int64_t kMaxValueBytes = int64_t{4} << 30;

// The lowered recurrent ops (TesseraLstmCell, TesseraGruCell,
// TesseraRnnProj) name their weights' layout in attributes (panel_units,
// block_rows) chosen by the backend that lowers them; the IR checks the
// shapes against those, up to this size.
inline constexpr int64_t kMaxLayoutUnits = 1024;
// A carried projection (TesseraLstmCell's next_slice) is cut into this many
// slices, one per step of the layer below.
inline constexpr int64_t kCarrySlices = 8;

struct OpDef {
  std::string_view type;
  int min_inputs;
  int max_inputs;
  // Sets dtype and shape of every output. Input shapes are known and static.
  Status (*infer)(Node& n);
  // Floating-point operations for one run (multiply-add = 2); shapes bound.
  double (*flops)(const Node& n);
  // Variadic ops: every input given is required (none may be left empty),
  // not only the first min_inputs.
  bool all_required = false;
};

// nullptr when the op type is not defined.
const OpDef* op_find(std::string_view type);
// All defined op types, sorted.
std::vector<std::string> op_names();

// Validates input count and runs the op's inference; errors name the node.
Status op_infer(Node& n);
double op_flops(const Node& n);

// Numpy-style broadcast of two shapes; error names both.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Convolution/pooling geometry shared by shape inference and kernels.
struct WindowGeometry {
  int spatial = 0;                 // number of spatial dims
  std::vector<int64_t> kernel;     // per spatial dim
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;
  std::vector<int64_t> in;         // input spatial extents
  std::vector<int64_t> out;        // output spatial extents
};
// For Conv/MaxPool/AveragePool: `kernel` from the weight (Conv) or the
// kernel_shape attribute; resolves auto_pad and ceil_mode.
Result<WindowGeometry> window_geometry(const Node& n, const Shape& input, const std::vector<int64_t>& kernel);
// For ConvTranspose: output extents from pads/output_padding/output_shape.
Result<WindowGeometry> conv_transpose_geometry(const Node& n, const Shape& input, const std::vector<int64_t>& kernel);

// TesseraAttention's geometry, shared by shape inference and the kernel.
// By default Q [..., S, D], Kt [..., D, T], V [..., T, Dv] -> [..., S, Dv].
// With attribute heads = H (> 0), the per-head layout ops around it were
// absorbed: Q [B, S, H*D], K [B, T, H*D] (not transposed), V [B, T, H*Dv]
// -> [B, S, H*Dv], head h reading columns [h*D, (h+1)*D) of each row.
struct AttentionGeometry {
  int64_t heads = 0;             // 0: the default layout
  int64_t batch = 1;             // score matrices: product of batch dims (B*H with heads)
  int64_t s = 0, d = 0, t = 0, dv = 0;
  std::vector<int64_t> scores;   // the scores' shape: [..., S, T] ([B, H, S, T] with heads)
  std::vector<int64_t> out;      // the output's shape
};
Result<AttentionGeometry> attention_geometry(const Node& n);

// Reads input i as a constant int64 list; error if absent or not constant.
Result<std::vector<int64_t>> const_ints_input(const Node& n, size_t i, const char* what);

}  // namespace tessera

namespace tessera {

// Slice, resolved against the input shape: for every dim of the input, the
// first index, the step and the output extent (untouched dims: 0, 1, dim).
struct SliceParams {
  std::vector<int64_t> start, step, out;
};
Result<SliceParams> slice_params(const Node& n);

// Pad, resolved: per dim, elements added before and after (may be negative).
Result<std::vector<int64_t>> pad_amounts(const Node& n);

// Resize, resolved: output extents and per-dim scale (out / in unless scales
// were given).
struct ResizeParams {
  std::vector<int64_t> out;
  std::vector<float> scale;
};
Result<ResizeParams> resize_params(const Node& n);

// Split sizes along the axis, one per output.
Result<std::vector<int64_t>> split_sizes(const Node& n, int* axis);

}  // namespace tessera
