// Shape inference for convolution, pooling and recurrent ops.
#include "base/strings.h"
#include "ir/ops/infer.h"
#include "ir/ops/op_registry.h"

namespace tessera {

Status infer_conv(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  if (x.rank() < 3 || w.rank() != x.rank())
    return invalid_argument(str_cat("input ", x.to_string(), " and weight ", w.to_string(), " ranks do not match"));
  int64_t group = n.attr_int("group", 1);
  if (group < 1 || x[1] % group != 0 || w[0] % group != 0 || w[1] * group != x[1])
    return invalid_argument(str_cat("channels do not match: input ", x.to_string(), ", weight ", w.to_string(),
                                    ", group ", group));
  if (Value* b = n.input(2))
    if (b->shape.rank() != 1 || b->shape[0] != w[0])
      return invalid_argument(str_cat("bias has shape ", b->shape.to_string(), ", expected ", w[0]));
  std::vector<int64_t> kernel(w.dims.begin() + 2, w.dims.end());
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != kernel)
    return invalid_argument("kernel_shape does not match the weight");
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, x, kernel));
  std::vector<int64_t> out{x[0], w[0]};
  out.insert(out.end(), g.out.begin(), g.out.end());
  set_output(n, 0, DType::kFloat32, Shape(out));
  return Status();
}

Status infer_conv_transpose(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  if (x.rank() < 3 || w.rank() != x.rank())
    return invalid_argument(str_cat("input ", x.to_string(), " and weight ", w.to_string(), " ranks do not match"));
  int64_t group = n.attr_int("group", 1);
  if (group < 1 || w[0] != x[1] || x[1] % group != 0)
    return invalid_argument(str_cat("channels do not match: input ", x.to_string(), ", weight ", w.to_string()));
  int64_t m = w[1] * group;
  if (Value* b = n.input(2))
    if (b->shape.rank() != 1 || b->shape[0] != m)
      return invalid_argument(str_cat("bias has shape ", b->shape.to_string(), ", expected ", m));
  std::vector<int64_t> kernel(w.dims.begin() + 2, w.dims.end());
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, conv_transpose_geometry(n, x, kernel));
  std::vector<int64_t> out{x[0], m};
  out.insert(out.end(), g.out.begin(), g.out.end());
  set_output(n, 0, DType::kFloat32, Shape(out));
  return Status();
}

Status infer_pool(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  if (!n.has_attr("kernel_shape")) return invalid_argument("kernel_shape is required");
  if (n.outputs.size() > 1 && n.op_type == "MaxPool")
    return unimplemented("MaxPool with the Indices output is not supported");
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, x, n.attr_ints("kernel_shape")));
  if (n.op_type == "MaxPool" && n.attr_int("storage_order", 0) != 0)
    return unimplemented("MaxPool storage_order=1 is not supported");
  std::vector<int64_t> out{x[0], x[1]};
  out.insert(out.end(), g.out.begin(), g.out.end());
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_global_pool(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  if (x.rank() < 3) return invalid_argument("input must have rank >= 3");
  std::vector<int64_t> out{x[0], x[1]};
  for (int i = 2; i < x.rank(); ++i) out.push_back(1);
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

// Checks the common recurrent inputs; `gates` is 4 for LSTM, 3 for GRU.
static Status check_rnn(const Node& n, int gates, int64_t* hidden, int64_t* dirs) {
  if (n.attr_int("layout", 0) != 0) return unimplemented("layout=1 (batch first) is not supported");
  std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return invalid_argument(str_cat("direction '", direction, "' is not forward, reverse or bidirectional"));
  *dirs = direction == "bidirectional" ? 2 : 1;
  *hidden = n.attr_int("hidden_size", 0);
  const Shape& x = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  const Shape& r = n.inputs[2]->shape;
  if (x.rank() != 3) return invalid_argument(str_cat("X must be [seq, batch, input], got ", x.to_string()));
  if (*hidden <= 0) *hidden = w.rank() == 3 ? w[1] / gates : 0;
  int64_t h = *hidden;
  if (w.rank() != 3 || w[0] != *dirs || w[1] != gates * h || w[2] != x[2])
    return invalid_argument(str_cat("W has shape ", w.to_string(), ", expected ", *dirs, "x", gates * h, "x", x[2]));
  if (r.rank() != 3 || r[0] != *dirs || r[1] != gates * h || r[2] != h)
    return invalid_argument(str_cat("R has shape ", r.to_string(), ", expected ", *dirs, "x", gates * h, "x", h));
  if (Value* b = n.input(3))
    if (b->shape.rank() != 2 || b->shape[0] != *dirs || b->shape[1] != 2 * gates * h)
      return invalid_argument(str_cat("B has shape ", b->shape.to_string()));
  if (Value* s = n.input(4)) {
    if (!s->is_constant()) return unimplemented("sequence_lens must be a constant");
    for (int64_t len : s->constant->to_int64s())
      if (len != x[0]) return unimplemented("sequence_lens shorter than the sequence are not supported");
  }
  for (size_t i = 5; i < std::min<size_t>(n.inputs.size(), 7); ++i) {
    Value* v = n.input(i);
    if (v == nullptr) continue;
    if (n.op_type == "GRU" && i == 6) break;
    const Shape& s = v->shape;
    if (s.rank() != 3 || s[0] != *dirs || s[1] != x[1] || s[2] != h)
      return invalid_argument(str_cat("initial state '", v->name, "' has shape ", s.to_string()));
  }
  if (n.has_attr("clip")) return unimplemented("clip is not supported");
  if (n.has_attr("activations")) {
    std::vector<std::string> want = gates == 4 ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                               : std::vector<std::string>{"Sigmoid", "Tanh"};
    const auto& acts = n.attrs.at("activations").strings;
    for (size_t i = 0; i < acts.size(); ++i)
      if (acts[i] != want[i % want.size()]) return unimplemented(str_cat("activation '", acts[i], "' is not supported"));
  }
  return Status();
}

Status infer_lstm(Node& n) {
  int64_t h, dirs;
  TESSERA_RETURN_IF_ERROR(check_rnn(n, 4, &h, &dirs));
  if (n.input(7) != nullptr) return unimplemented("peephole weights (P) are not supported");
  if (n.attr_int("input_forget", 0) != 0) return unimplemented("input_forget is not supported");
  const Shape& x = n.inputs[0]->shape;
  set_output(n, 0, DType::kFloat32, Shape{x[0], dirs, x[1], h});
  set_output(n, 1, DType::kFloat32, Shape{dirs, x[1], h});
  set_output(n, 2, DType::kFloat32, Shape{dirs, x[1], h});
  return Status();
}

Status infer_gru(Node& n) {
  int64_t h, dirs;
  TESSERA_RETURN_IF_ERROR(check_rnn(n, 3, &h, &dirs));
  const Shape& x = n.inputs[0]->shape;
  set_output(n, 0, DType::kFloat32, Shape{x[0], dirs, x[1], h});
  set_output(n, 1, DType::kFloat32, Shape{dirs, x[1], h});
  return Status();
}

// TesseraLstmCell / TesseraGruCell: one time step of a forward LSTM or GRU
// (linear_before_reset = 1), made by the compiler (lower_rnn.cc).
// Inputs, LSTM: xp, h_prev, c_prev, Rp; GRU: xp, h_prev, Rp, Rb_h (absent
// states are zeros; Rb_h is optional). xp [rows, G*H] is a projection of
// the layer's inputs with biases folded in, its columns in panel order
// (ceil(H / U) panels of G * U, U = panel_units); the cell reads rows
// step * batch .. step * batch + batch - 1. Rp is R packed in panels
// [ceil(H / U), H, G * U] (the CPU's layout: kernels/cpu/rnn_cell.h).
// Attributes: hidden_size H, batch, step, panel_units U; with next_slice
// or xp_blocked, block_rows (rows per piece of the blocked projection);
// with next_slice, next_slices (default 1): the step carries slices
// next_slice .. next_slice + next_slices - 1.
// Outputs: h [1, 1, batch, H], for the LSTM c [batch, H], and with
// next_slice the pieces [next_slices, H / (8 U), block_rows, G * U].
Status infer_rnn_cell(Node& n) {
  const bool lstm = n.op_type == "TesseraLstmCell";
  const int64_t gates = lstm ? 4 : 3;
  const int64_t h = n.attr_int("hidden_size", 0), b = n.attr_int("batch", 0), step = n.attr_int("step", -1);
  constexpr int64_t kMax = int64_t{1} << 24;  // keeps every product below in int64
  if (h <= 0 || b <= 0 || h > kMax || b > kMax || step < 0 || step > kMax)
    return invalid_argument(str_cat("hidden_size ", h, ", batch ", b, " or step ", step, " out of range"));
  for (Value* v : n.inputs)
    if (v != nullptr && v->dtype != DType::kFloat32) return invalid_argument(str_cat(v->name, " is not float32"));
  const Value* xp = n.input(0);
  const Value* rp = n.input(lstm ? 3 : 2);
  if (xp == nullptr || rp == nullptr) return invalid_argument("the projection and packed R are required");
  const int64_t units = n.attr_int("panel_units", 0);
  if (units < 1 || units > kMaxLayoutUnits)
    return invalid_argument(str_cat("panel_units ", units, " out of range [1, ", kMaxLayoutUnits, "]"));
  const int64_t panels = (h + units - 1) / units;
  const int64_t next = n.attr_int("next_slice", -1), blocked = n.attr_int("xp_blocked", 0);
  const int64_t block_rows = n.attr_int("block_rows", 0), slices = n.attr_int("next_slices", 1);
  if (n.has_attr("next_slices") && (next < 0 || slices < 1 || slices > 2 || next + slices > kCarrySlices))
    return invalid_argument(str_cat("next_slices ", slices, " with next_slice ", next,
                                    ": a step carries 1 or 2 slices, ending at slice ", kCarrySlices - 1, " at most"));
  if ((next != -1 || blocked != 0) &&
      (!lstm || b != 1 || h % (kCarrySlices * units) != 0 || next < -1 || next >= kCarrySlices || blocked > 1 ||
       blocked < 0 || block_rows < 1 || block_rows > kMaxLayoutUnits))
    return invalid_argument(str_cat("next_slice ", next, " and xp_blocked ", blocked,
                                    " need an LSTM of batch 1, hidden_size a multiple of ", kCarrySlices * units,
                                    ", a slice in [0, ", kCarrySlices, ") and block_rows in [1, ", kMaxLayoutUnits,
                                    "], got ", block_rows));
  const int64_t kw = gates * units;
  if (blocked != 0) {
    const Shape& s = xp->shape;
    const int64_t pieces = (step / block_rows + 1) * kCarrySlices;
    const int64_t groups = panels / kCarrySlices;
    if (s.rank() != 4 || s[1] != groups || s[2] != block_rows || s[3] != kw || s[0] < pieces)
      return invalid_argument(str_cat("blocked projection ", xp->name, " has shape ", s.to_string(), ", expected [>= ",
                                      pieces, ", ", groups, ", ", block_rows, ", ", kw, "]"));
  } else if (xp->shape.rank() != 2 || xp->shape[1] != panels * kw || xp->shape[0] < (step + 1) * b)
    return invalid_argument(str_cat("projection ", xp->name, " has shape ", xp->shape.to_string(), ", too small for step ",
                                    step, " of batch ", b, " and ", panels, " panels of ", gates, "x", units, " gates"));
  const Shape want_rp{panels, h, gates * units};
  if (rp->shape != want_rp)
    return invalid_argument(str_cat("packed R ", rp->name, " has shape ", rp->shape.to_string(), ", expected ",
                                    want_rp.to_string()));
  const std::pair<size_t, int64_t> sized[] = {{1, b * h}, {2, lstm ? b * h : -1}, {3, lstm ? -1 : h}};
  for (auto [i, numel] : sized)
    if (numel >= 0 && n.input(i) != nullptr && n.input(i)->shape.numel() != numel)
      return invalid_argument(str_cat(n.input(i)->name, " has shape ", n.input(i)->shape.to_string(), ", expected ",
                                      numel, " values"));
  if (next >= 0) {
    if (n.inputs.size() != 14)
      return invalid_argument(str_cat("next_slice needs 14 inputs (the next layer's Wp, bias and 8 rows), got ",
                                      n.inputs.size()));
    for (size_t i = 4; i < 14; ++i)
      if (n.inputs[i] == nullptr) return invalid_argument(str_cat("input ", i, " is required with next_slice"));
    if (n.inputs[4]->shape != want_rp || n.inputs[5]->shape.numel() != panels * kw)
      return invalid_argument(str_cat("next Wp ", n.inputs[4]->name, " or bias ", n.inputs[5]->name,
                                      " does not match ", want_rp.to_string()));
    for (size_t i = 6; i < 14; ++i)
      if (n.inputs[i]->shape.numel() != h)
        return invalid_argument(str_cat("row ", n.inputs[i]->name, " has shape ", n.inputs[i]->shape.to_string(),
                                        ", expected ", h, " values"));
    set_output(n, 2, DType::kFloat32, Shape{slices, panels / kCarrySlices, block_rows, kw});
  } else if (n.inputs.size() > 4) {
    return invalid_argument(str_cat(n.inputs.size(), " inputs without next_slice, expected at most 4"));
  }
  set_output(n, 0, DType::kFloat32, Shape{1, 1, b, h});
  if (lstm) set_output(n, 1, DType::kFloat32, Shape{b, h});
  return Status();
}

// TesseraRnnProj: Wp [panels, I, gates x U], W packed in the cells' panel
// order (U = panel_units), bias [C] (C = panels x gates x U) in the same
// order, then the inputs x_0..x_n-1, equal in size, each a whole number of
// rows of I values (one X [seq, batch, I], or steps of the previous
// layer). Output: the rows stacked in order times Wp plus bias, [rows, C].
// Attributes: gates (4 LSTM, 3 GRU); panel_units U; prefetch_r (0 or 1):
// with 1, a last input Rp [panels, H, gates x U], the layer's packed R,
// which the kernel only pulls into cache; blocked (0 or 1): with 1, the
// output in the blocked layout of block_rows rows per piece that carried
// cells read.
Status infer_rnn_proj(Node& n) {
  const int64_t prefetch = n.attr_int("prefetch_r", 0);
  if (prefetch != 0 && prefetch != 1) return invalid_argument(str_cat("prefetch_r ", prefetch, ", expected 0 or 1"));
  if (n.inputs.size() < static_cast<size_t>(3 + prefetch))
    return invalid_argument(prefetch ? "expected Wp, bias, at least one input and Rp"
                                     : "expected Wp, bias and at least one input");
  for (Value* v : n.inputs) {
    if (v == nullptr) return invalid_argument("every input is required");
    if (v->dtype != DType::kFloat32) return invalid_argument(str_cat(v->name, " is not float32"));
  }
  const int64_t gates = n.attr_int("gates", 0);
  if (gates != 3 && gates != 4) return invalid_argument(str_cat("gates ", gates, ", expected 3 or 4"));
  const int64_t units = n.attr_int("panel_units", 0);
  if (units < 1 || units > kMaxLayoutUnits)
    return invalid_argument(str_cat("panel_units ", units, " out of range [1, ", kMaxLayoutUnits, "]"));
  const Shape& w = n.inputs[0]->shape;
  if (w.rank() != 3 || w[0] < 1 || w[1] < 1 || w[2] != gates * units)
    return invalid_argument(str_cat("Wp has shape ", w.to_string(), ", expected [panels, I, ", gates * units, "]"));
  const int64_t in = w[1], cols = w[0] * w[2];
  if (n.inputs[1]->shape.numel() != cols)
    return invalid_argument(str_cat("bias has shape ", n.inputs[1]->shape.to_string(), ", expected ", cols, " values"));
  const size_t parts = n.inputs.size() - 2 - static_cast<size_t>(prefetch);
  if (prefetch) {
    const Shape& r = n.inputs.back()->shape;
    if (r.rank() != 3 || r[0] != w[0] || r[1] < 1 || r[2] != w[2])
      return invalid_argument(str_cat("Rp has shape ", r.to_string(), ", expected [", w[0], ", H, ", w[2], "]"));
  }
  const int64_t numel = n.inputs[2]->shape.numel();
  for (size_t i = 2; i < 2 + parts; ++i)
    if (n.inputs[i]->shape.numel() != numel || numel % in != 0)
      return invalid_argument(str_cat(n.inputs[i]->name, " has shape ", n.inputs[i]->shape.to_string(),
                                      ", not a whole number of rows of ", in, " like every other input"));
  const int64_t rows = static_cast<int64_t>(parts) * (numel / in);
  const int64_t blocked = n.attr_int("blocked", 0), block_rows = n.attr_int("block_rows", 0);
  if (blocked != 0 && (blocked != 1 || w[0] % kCarrySlices != 0 || block_rows < 1 || block_rows > kMaxLayoutUnits))
    return invalid_argument(str_cat("blocked ", blocked, " needs the value 1, a multiple of ", kCarrySlices,
                                    " panels and block_rows in [1, ", kMaxLayoutUnits, "], got ", w[0], " panels and ",
                                    block_rows, " rows"));
  if (blocked != 0)  // the blocked layout (kernels/cpu/rnn_cell.h)
    set_output(n, 0, DType::kFloat32,
               Shape{(rows + block_rows - 1) / block_rows * block_rows, w[0] / kCarrySlices, block_rows, w[2]});
  else
    set_output(n, 0, DType::kFloat32, Shape{rows, cols});
  return Status();
}

double flops_rnn_cell(const Node& n) {
  const Shape& rp = n.inputs[n.op_type == "TesseraLstmCell" ? 3 : 2]->shape;
  const double gemv = 2.0 * static_cast<double>(n.attr_int("batch", 1)) * static_cast<double>(rp.numel());
  // With next_slice, 8 rows of the next layer's projection over 1/8 of its
  // panels per slice.
  return n.attr_int("next_slice", -1) >= 0 ? gemv * static_cast<double>(1 + n.attr_int("next_slices", 1)) : gemv;
}

double flops_rnn_proj(const Node& n) {
  const Shape& w = n.inputs[0]->shape;
  const size_t parts = n.inputs.size() - 2 - (n.attr_int("prefetch_r", 0) != 0 ? 1 : 0);
  return 2.0 * static_cast<double>(parts) * static_cast<double>(n.inputs[2]->shape.numel()) *
         static_cast<double>(w[0] * w[2]);
}

double flops_conv(const Node& n) {
  const Shape& w = n.inputs[1]->shape;
  double per_out = 2.0 * static_cast<double>(dims_product(w.dims, 1, w.rank()));
  return per_out * static_cast<double>(n.outputs[0]->shape.numel());
}

double flops_conv_transpose(const Node& n) {
  const Shape& w = n.inputs[1]->shape;
  return 2.0 * static_cast<double>(n.inputs[0]->shape.numel()) *
         static_cast<double>(dims_product(w.dims, 1, w.rank()));
}

double flops_pool(const Node& n) {
  double k = 1;
  for (int64_t d : n.attr_ints("kernel_shape")) k *= static_cast<double>(d);
  return k * static_cast<double>(n.outputs[0]->shape.numel());
}

double flops_rnn(const Node& n) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  const Shape& r = n.inputs[2]->shape;
  // Per step and direction: W x (gates*h x input) and R h (gates*h x h).
  return 2.0 * static_cast<double>(x[0]) * static_cast<double>(x[1]) * static_cast<double>(w[0]) *
         static_cast<double>(w[1]) * static_cast<double>(w[2] + r[2]);
}

// TesseraFusedConv / TesseraFusedGemm: Conv or Gemm with an epilogue made
// by the compiler's fusion pass: y = act(op(x, w, b) + residual). Inputs
// 0-2 are the op's own; input 3, when present, is the residual (same shape
// and dtype as the output). Attributes: the op's own plus "activation"
// (none, Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu,
// Silu)
// and "activation_alpha" / "activation_beta" (kernels/cpu/epilogue.h).
Status check_fused_epilogue(Node& n) {
  if (Value* r = n.input(3)) {
    const Value* y = n.outputs[0];
    if (r->dtype != y->dtype || !(r->shape == y->shape))
      return invalid_argument(str_cat("residual ", r->shape.to_string(), " does not match the output ",
                                      y->shape.to_string()));
  }
  static const char* kActs[] = {"none", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish",
                                "Gelu", "Silu"};
  std::string act = n.attr_string("activation", "none");
  for (const char* a : kActs)
    if (act == a) return Status();
  return invalid_argument(str_cat("unknown fused activation '", act, "'"));
}

Status infer_fused_conv(Node& n) {
  TESSERA_RETURN_IF_ERROR(infer_conv(n));
  return check_fused_epilogue(n);
}

// TesseraInvertedResidual (compiler/fuse.cc): a 1x1 expand conv (inputs 1,
// 2: weight [E, C, 1, 1], bias), a depthwise conv of the E channels
// (inputs 3, 4: weight [E, 1, kh, kw], bias; its geometry in the
// attributes kernel_shape, strides, pads, dilations, auto_pad, group = E)
// and a 1x1 project conv (inputs 5, 6: weight [O, E, 1, 1], bias) of
// input 0 [N, C, H, W], then input 7, a residual, when present. Each conv
// has its activation: "expand_activation" and "depthwise_activation"
// (none, Relu or Clip, with *_alpha and *_beta as the Clip bounds) and
// "activation" with the project's epilogue (as TesseraFusedConv's).
Status infer_inverted_residual(Node& n) {
  for (int i : {1, 3, 5})
    if (n.input(i) == nullptr) return invalid_argument(str_cat("input ", i, " (a conv's weight) is required"));
  for (const Value* v : n.inputs)
    if (v != nullptr && v->dtype != DType::kFloat32) return invalid_argument(str_cat(v->name, " is not float32"));
  const Shape& x = n.inputs[0]->shape;
  const Shape &w1 = n.inputs[1]->shape, &w2 = n.inputs[3]->shape, &w3 = n.inputs[5]->shape;
  if (x.rank() != 4 || w1.rank() != 4 || w2.rank() != 4 || w3.rank() != 4)
    return invalid_argument(str_cat("input ", x.to_string(), " and weights ", w1.to_string(), ", ", w2.to_string(),
                                    ", ", w3.to_string(), " must have rank 4"));
  const int64_t e = w1[0];
  if (w1[1] != x[1] || w1[2] != 1 || w1[3] != 1 || w2[0] != e || w2[1] != 1 || w3[1] != e || w3[2] != 1 ||
      w3[3] != 1 || e < 1 || w3[0] < 1 || n.attr_int("group", 1) != e)
    return invalid_argument(str_cat("weights ", w1.to_string(), ", ", w2.to_string(), ", ", w3.to_string(),
                                    " are not a 1x1, depthwise and 1x1 conv of input ", x.to_string()));
  for (int i : {2, 4, 6})
    if (Value* b = n.input(i))
      if (b->shape.rank() != 1 || b->shape[0] != (i == 6 ? w3[0] : e))
        return invalid_argument(str_cat("bias ", i, " has shape ", b->shape.to_string()));
  std::vector<int64_t> kernel{w2[2], w2[3]};
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != kernel)
    return invalid_argument("kernel_shape does not match the depthwise weight");
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, Shape{x[0], e, x[2], x[3]}, kernel));
  for (const char* a : {"expand_activation", "depthwise_activation"}) {
    const std::string act = n.attr_string(a, "none");
    if (act != "none" && act != "Relu" && act != "Clip")
      return invalid_argument(str_cat(a, " '", act, "' is not none, Relu or Clip"));
  }
  set_output(n, 0, DType::kFloat32, Shape{x[0], w3[0], g.out[0], g.out[1]});
  if (Value* r = n.input(7)) {
    if (r->dtype != DType::kFloat32 || !(r->shape == n.outputs[0]->shape))
      return invalid_argument(str_cat("residual ", r->shape.to_string(), " does not match the output ",
                                      n.outputs[0]->shape.to_string()));
  }
  Node view;  // the project's epilogue, checked as a fused conv's
  view.attrs = n.attrs;
  view.outputs = n.outputs;
  return check_fused_epilogue(view);
}

double flops_inverted_residual(const Node& n) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& w2 = n.inputs[3]->shape;
  const Shape& y = n.outputs[0]->shape;
  const double e = static_cast<double>(w2[0]), pixels_out = static_cast<double>(y[0] * y[2] * y[3]);
  return 2.0 * e *
         (static_cast<double>(x[0] * x[1] * x[2] * x[3]) +
          (static_cast<double>(w2[2] * w2[3]) + static_cast<double>(y[1])) * pixels_out);
}

// TesseraFusedPool: MaxPool or AveragePool (attribute "pool") with the same
// epilogue: input 0 pooled, input 3 (when present) the residual; inputs 1
// and 2 are absent.
Status infer_fused_pool(Node& n) {
  const std::string pool = n.attr_string("pool", "");
  if (pool != "MaxPool" && pool != "AveragePool")
    return invalid_argument(str_cat("unknown fused pool '", pool, "'"));
  if (n.input(1) != nullptr || n.input(2) != nullptr) return invalid_argument("inputs 1 and 2 must be absent");
  TESSERA_RETURN_IF_ERROR(infer_pool(n));
  return check_fused_epilogue(n);
}

Status infer_fused_gemm(Node& n) {
  TESSERA_RETURN_IF_ERROR(infer_gemm(n));
  return check_fused_epilogue(n);
}

// TesseraFusedMatMul: MatMul(A, B) + bias (input 2, one value per output
// column) + residual (input 3), then the activation, then a
// LayerNormalization of each output row when input 4 (its scale) is
// present: input 5 is its optional bias, "norm_epsilon" its epsilon. With
// the attribute "split" (widths), a Split of the columns: one output per
// width, no residual and no norm.
Status infer_fused_matmul(Node& n) {
  TESSERA_RETURN_IF_ERROR(infer_matmul(n));
  const Value* y = n.outputs[0];
  for (int i : {2, 4, 5}) {
    const Value* b = n.input(i);
    if (b == nullptr) continue;
    if (b->dtype != DType::kFloat32 || b->shape.rank() != 1 || y->shape.rank() < 1 ||
        b->shape[0] != y->shape[y->shape.rank() - 1])
      return invalid_argument(str_cat(i == 2 ? "bias " : i == 4 ? "norm scale " : "norm bias ",
                                      b->shape.to_string(), " is not one value per column of ", y->shape.to_string()));
  }
  if (n.input(5) != nullptr && n.input(4) == nullptr) return invalid_argument("norm bias without a norm scale");
  TESSERA_RETURN_IF_ERROR(check_fused_epilogue(n));
  // "split": the widths of the outputs, a Split of the columns.
  if (!n.has_attr("split")) return n.outputs.size() == 1 ? Status() : invalid_argument("one output without a split");
  const std::vector<int64_t> widths = n.attr_ints("split");
  const Shape full = y->shape;
  int64_t sum = 0;
  for (int64_t w : widths) {
    if (w < 1) return invalid_argument(str_cat("split width ", w));
    sum += w;
  }
  if (widths.size() != n.outputs.size() || sum != full[full.rank() - 1] || n.input(3) != nullptr ||
      n.input(4) != nullptr)
    return invalid_argument(str_cat("a split of ", full.to_string(), " into ", widths.size(), " widths summing to ", sum,
                                    " for ", n.outputs.size(), " outputs, without a residual or a norm"));
  for (size_t i = 0; i < widths.size(); ++i) {
    std::vector<int64_t> d = full.dims;
    d.back() = widths[i];
    set_output(n, i, DType::kFloat32, Shape(d));
  }
  return Status();
}

// TesseraAttention (made by the compiler's fusion pass):
// Softmax(Q x Kt {/ or *} scale + mask, last axis) x V, with Q [..., S, D],
// Kt [..., D, T], V [..., T, Dv], the same leading dims on all three, an
// optional scalar scale (input 3; "scale_op" says Div or Mul) and an
// optional mask (input 4) that broadcasts to [..., S, T].
Result<AttentionGeometry> attention_geometry(const Node& n) {
  const Value* q = n.inputs[0];
  const Value* kt = n.inputs[1];
  const Value* v = n.inputs[2];
  if (q->dtype != DType::kFloat32 || kt->dtype != DType::kFloat32 || v->dtype != DType::kFloat32)
    return invalid_argument("attention inputs must be float32");
  AttentionGeometry g;
  g.heads = n.attr_int("heads", 0);
  const int r = q->shape.rank();
  if (g.heads < 0) return invalid_argument(str_cat("attention heads ", g.heads));
  if (g.heads > 0) {
    const int64_t h = g.heads;
    if (r != 3 || kt->shape.rank() != 3 || v->shape.rank() != 3)
      return invalid_argument("attention by heads needs Q, K and V of rank 3");
    if (kt->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || kt->shape[1] != v->shape[1] ||
        q->shape[2] < h || v->shape[2] < h || q->shape[2] % h != 0 || v->shape[2] % h != 0 || kt->shape[2] != q->shape[2])
      return invalid_argument(str_cat("attention by ", h, " heads: Q ", q->shape.to_string(), ", K ",
                                      kt->shape.to_string(), ", V ", v->shape.to_string(), " do not match"));
    g.batch = q->shape[0] * h;
    g.s = q->shape[1];
    g.d = q->shape[2] / h;
    g.t = kt->shape[1];
    g.dv = v->shape[2] / h;
    g.scores = {q->shape[0], h, g.s, g.t};
    g.out = {q->shape[0], g.s, h * g.dv};
    return g;
  }
  if (r < 2 || kt->shape.rank() != r || v->shape.rank() != r)
    return invalid_argument("attention Q, K and V must have the same rank, at least 2");
  for (int i = 0; i < r - 2; ++i)
    if (kt->shape[i] != q->shape[i] || v->shape[i] != q->shape[i])
      return invalid_argument(str_cat("attention batch dims differ: Q ", q->shape.to_string(), ", K ",
                                      kt->shape.to_string(), ", V ", v->shape.to_string()));
  if (q->shape[r - 1] != kt->shape[r - 2] || kt->shape[r - 1] != v->shape[r - 2])
    return invalid_argument(str_cat("attention inner dims do not match: Q ", q->shape.to_string(), ", K ",
                                    kt->shape.to_string(), ", V ", v->shape.to_string()));
  g.batch = dims_product(q->shape.dims, 0, r - 2);
  g.s = q->shape[r - 2];
  g.d = q->shape[r - 1];
  g.t = kt->shape[r - 1];
  g.dv = v->shape[r - 1];
  g.scores = q->shape.dims;
  g.scores[r - 1] = g.t;
  g.out = q->shape.dims;
  g.out[r - 1] = g.dv;
  return g;
}

Status infer_attention(Node& n) {
  TESSERA_ASSIGN_OR_RETURN(AttentionGeometry g, attention_geometry(n));
  if (const Value* sc = n.input(3))
    if (sc->dtype != DType::kFloat32 || sc->shape.numel() != 1 || !sc->is_constant())
      return invalid_argument("attention scale must be a constant float scalar");
  std::string op = n.attr_string("scale_op", "Div");
  if (op != "Div" && op != "Mul") return invalid_argument(str_cat("attention scale_op '", op, "'"));
  if (const Value* m = n.input(4)) {
    if (m->dtype != DType::kFloat32) return invalid_argument("attention mask must be float32");
    TESSERA_ASSIGN_OR_RETURN(Shape b, broadcast_shapes(Shape(g.scores), m->shape));
    if (!(b == Shape(g.scores)))
      return invalid_argument(str_cat("attention mask ", m->shape.to_string(), " does not broadcast to the scores ",
                                      Shape(g.scores).to_string()));
  }
  n.outputs[0]->dtype = DType::kFloat32;
  n.outputs[0]->shape = Shape(g.out);
  n.outputs[0]->shape_known = true;
  return Status();
}

double flops_attention(const Node& n) {
  auto g = attention_geometry(n);
  if (!g.ok()) return 0;
  const double rows = static_cast<double>(g->batch * g->s);
  return rows * static_cast<double>(g->t) * (2.0 * static_cast<double>(g->d) + 2.0 * static_cast<double>(g->dv) + 5.0);
}

}  // namespace tessera
