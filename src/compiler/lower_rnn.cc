// Lowering of LSTM to one rOperator per time step, so that the scheduler
// can run stacked layers as a diagonal wavefront: layer l+1's step t
// depends only on layer l's step t and its own step t-1 (the LSTM-TC case
// in the Rammer paper).
//
// A forward LSTM (no sequence_lens, peepholes or clip; layout 0) becomes:
//   - if its input X is the (squeezed) Y of an LSTM lowered before it: one
//     TesseraLstmCell per step reading that layer's h_t directly;
//   - otherwise: one TesseraRnnProj computing X W^T + b for every step in
//     one GEMM, and one TesseraLstmCell per step reading its row;
//   - Y = Concat of the steps' h_t; Y_h and Y_c = Reshapes of the last
//     step's h and c. These reuse the LSTM's output values, so consumers and
//     graph outputs are untouched; a Y only the next layer read goes dead.
// Other recurrent nodes keep their whole-sequence rKernel.
#include <algorithm>
#include <cstring>
#include <map>

#include "base/strings.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/kernel.h"

namespace tessera {
namespace {

bool lowerable(const Node& n) {
  if (n.op_type != "LSTM") return false;
  if (n.attr_string("direction", "forward") != "forward" || n.attr_int("layout", 0) != 0) return false;
  if (n.has_attr("clip") || n.attr_int("input_forget", 0) != 0) return false;
  if (n.input(4) != nullptr || n.input(7) != nullptr) return false;  // sequence_lens, peepholes
  const Shape& x = n.inputs[0]->shape;
  if (!n.inputs[1]->is_constant() || !n.inputs[2]->is_constant()) return false;  // weights are packed at compile time
  if (n.input(3) != nullptr && !n.inputs[3]->is_constant()) return false;
  return x.rank() == 3 && x[0] >= 1 && x[1] >= 1;
}

// The packed order of a layer's gate rows for `blocks` blocks of hidden
// units (cut as task_range cuts them, so the cell's rTask k finds its block
// at rows 4*u0 .. 4*u1): block by block, gate by gate (i, o, f, c), unit by
// unit. Calls fn(packed_row, original_row) for every row.
template <typename Fn>
void for_each_packed_row(int64_t hidden, int64_t blocks, Fn&& fn) {
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t u0, u1;
    task_range(hidden, blocks, blk, &u0, &u1);
    const int64_t nu = u1 - u0;
    for (int gate = 0; gate < 4; ++gate)
      for (int64_t j = 0; j < nu; ++j) fn(4 * u0 + gate * nu + j, gate * hidden + u0 + j);
  }
}

// Rows [W row | R row] (or just the R row when with_w is false).
Tensor pack_weights(const Tensor& w, const Tensor& r, int64_t hidden, int64_t blocks, bool with_w) {
  const int64_t in = with_w ? w.shape()[2] : 0;
  const int64_t k = in + hidden;
  Tensor out(DType::kFloat32, Shape{4 * hidden, k});
  for_each_packed_row(hidden, blocks, [&](int64_t dst_row, int64_t src) {
    float* dst = out.data<float>() + dst_row * k;
    if (with_w) std::memcpy(dst, w.data<float>() + src * in, static_cast<size_t>(in) * sizeof(float));
    std::memcpy(dst + in, r.data<float>() + src * hidden, static_cast<size_t>(hidden) * sizeof(float));
  });
  return out;
}

// Wb + Rb in the same order.
Tensor pack_bias(const Tensor& b, int64_t hidden, int64_t blocks) {
  Tensor out(DType::kFloat32, Shape{4 * hidden});
  for_each_packed_row(hidden, blocks, [&](int64_t dst_row, int64_t src) {
    out.data<float>()[dst_row] = b.data<float>()[src] + b.data<float>()[4 * hidden + src];
  });
  return out;
}

Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

}  // namespace

// Returns the number of LSTM nodes lowered.
Result<int> lower_recurrent(Graph& g) {
  // Y value of a lowered LSTM -> its per-step h values.
  std::map<const Value*, std::vector<Value*>> steps_of;
  int lowered = 0;
  const size_t count = g.nodes().size();
  for (size_t idx = 0; idx < count; ++idx) {
    Node& n = *g.nodes()[idx];
    if (n.dead || !lowerable(n)) continue;
    const Shape& xs = n.inputs[0]->shape;
    const int64_t seq = xs[0], batch = xs[1];
    const int64_t hidden = n.inputs[2]->shape[2];
    Value* w = n.inputs[1];
    Value* r = n.inputs[2];
    Value* b = n.input(3);
    Value* h = n.input(5);
    Value* c = n.input(6);
    // Is X the squeezed Y of a lowered LSTM?
    const std::vector<Value*>* chained = nullptr;
    Value* x = n.inputs[0];
    if (x->producer && x->producer->op_type == "Squeeze" && !x->producer->dead) {
      auto it = steps_of.find(x->producer->inputs[0]);
      if (it != steps_of.end() && static_cast<int64_t>(it->second.size()) == seq) chained = &it->second;
    }
    Value* proj = nullptr;
    const std::string base = n.name;
    if (chained == nullptr) {
      Node* p = g.add_node("TesseraRnnProj", str_cat(base, "/proj"), b ? std::vector<Value*>{x, w, b}
                                                                      : std::vector<Value*>{x, w}, 1);
      TESSERA_RETURN_IF_ERROR(op_infer(*p));
      proj = p->outputs[0];
    }
    // Blocks of hidden units per step: each a GEMM of >= 64 units.
    const int64_t blocks = std::clamp<int64_t>(hidden / 64, 1, 8);
    Value* wp = g.add_constant(str_cat(base, "/packed_weights"),
                               pack_weights(*w->constant, *r->constant, hidden, blocks, chained != nullptr));
    Value* bp = chained && b ? g.add_constant(str_cat(base, "/packed_bias"), pack_bias(*b->constant, hidden, blocks))
                             : nullptr;
    std::vector<Value*> hs;
    Value* h_prev = h;
    Value* c_prev = c;
    for (int64_t t = 0; t < seq; ++t) {
      Value* xin = chained ? (*chained)[static_cast<size_t>(t)] : proj;
      std::vector<Value*> ins = {xin, h_prev, c_prev, wp};
      if (bp) ins.push_back(bp);
      Node* cell = g.add_node("TesseraLstmCell", str_cat(base, "/step", t), ins, 2);
      cell->attrs["hidden_size"] = int_attr(hidden);
      cell->attrs["batch"] = int_attr(batch);
      cell->attrs["step"] = int_attr(chained ? -1 : t);
      cell->attrs["blocks"] = int_attr(blocks);
      cell->opset = n.opset;
      TESSERA_RETURN_IF_ERROR(op_infer(*cell));
      hs.push_back(cell->outputs[0]);
      h_prev = cell->outputs[0];
      c_prev = cell->outputs[1];
    }
    // Outputs: reuse the LSTM's values.
    n.dead = true;
    std::vector<Value*> outs = n.outputs;
    if (!outs.empty()) {
      Node* cat = g.add_node_producing("Concat", str_cat(base, "/Y"), hs, {outs[0]});
      cat->attrs["axis"] = int_attr(0);
      TESSERA_RETURN_IF_ERROR(op_infer(*cat));
      steps_of[outs[0]] = hs;
    }
    Value* state_shape = g.add_constant(str_cat(base, "/state_shape"),
                                        Tensor::from_int64s({1, batch, hidden}, Shape{3}));
    if (outs.size() > 1) {
      Node* yh = g.add_node_producing("Reshape", str_cat(base, "/Y_h"), {h_prev, state_shape}, {outs[1]});
      TESSERA_RETURN_IF_ERROR(op_infer(*yh));
    }
    if (outs.size() > 2) {
      Node* yc = g.add_node_producing("Reshape", str_cat(base, "/Y_c"), {c_prev, state_shape}, {outs[2]});
      TESSERA_RETURN_IF_ERROR(op_infer(*yc));
    }
    ++lowered;
  }
  if (lowered > 0) {
    TESSERA_RETURN_IF_ERROR(g.sort_topologically());
    simplify(g);  // drops Y/Squeeze chains only the next lowered layer read
  }
  return lowered;
}

}  // namespace tessera
