// Lowering of LSTM and GRU layers to one rOperator per time step, so that
// the scheduler can overlap stacked layers as a diagonal wavefront: layer
// l+1's steps depend only on layer l's steps and their own predecessors
// (the LSTM-TC case in the Rammer paper).
//
// A forward LSTM (no sequence_lens, peepholes, clip or input_forget) or
// GRU (linear_before_reset = 1, as PyTorch exports it), layout 0, with
// constant weights, becomes:
//   - TesseraRnnProj nodes: the input projection X W^T + biases as GEMMs,
//     W packed so that the output columns follow R's panels. If X is the
//     (squeezed) Y of a layer lowered before it, the projection reads that
//     layer's h_t directly: one per chunk of `chunk` steps, so
//     layer l+1 starts once layer l has done one chunk (0: one projection
//     of all steps once layer l is done). Otherwise one projection of all
//     of X. With `carry` and no chunks, a stacked LSTM layer's projection
//     is computed by the steps of the layer below (next_slice), all but
//     its last rows (fewer than 8), which one projection adds; both write
//     the blocked layout its cells read (xp_blocked), joined by an
//     in-place Concat;
//   - one TesseraLstmCell / TesseraGruCell per step: h_prev R^T on R packed
//     in panels (kernels/cpu/rnn_cell.h), then the gate math;
//   - Y = Concat of the steps' h_t; Y_h (and Y_c) = Reshapes of the last
//     step's state. These reuse the layer's output values, so consumers and
//     graph outputs are untouched; a Y only the next layer read goes dead.
// Other recurrent nodes keep their whole-sequence rKernel.
#include <algorithm>
#include <cstring>
#include <map>

#include "base/strings.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/rnn_cell.h"

namespace tessera {
namespace {

// Longer sequences keep the whole-sequence rKernel: a Program of one op
// per step would be too large to schedule.
constexpr int64_t kMaxLoweredSteps = 4096;

bool lowerable(const Node& n) {
  const bool lstm = n.op_type == "LSTM";
  if (!lstm && n.op_type != "GRU") return false;
  if (n.attr_string("direction", "forward") != "forward" || n.attr_int("layout", 0) != 0) return false;
  if (n.has_attr("clip") || n.has_attr("activations")) return false;
  if (lstm && (n.attr_int("input_forget", 0) != 0 || n.input(7) != nullptr)) return false;  // peepholes
  if (!lstm && n.attr_int("linear_before_reset", 0) == 0) return false;
  if (n.input(4) != nullptr) return false;  // sequence_lens
  const Shape& x = n.inputs[0]->shape;
  if (!n.inputs[1]->is_constant() || !n.inputs[2]->is_constant()) return false;  // weights are packed at compile time
  if (n.input(3) != nullptr && !n.inputs[3]->is_constant()) return false;
  return x.rank() == 3 && x[0] >= 1 && x[0] <= kMaxLoweredSteps && x[1] >= 1 && n.inputs[1]->shape[0] == 1;
}

// The projection's bias [G*H]: Wb + Rb, except for the GRU's h gate, whose
// Rb the reset gate scales inside the cell.
Tensor projection_bias(const Value* b, int64_t gates, int64_t hidden, bool lstm) {
  const int64_t gh = gates * hidden;
  Tensor out(DType::kFloat32, Shape{gh});
  float* o = out.data<float>();
  const float* bb = b != nullptr ? b->constant->data<float>() : nullptr;
  for (int64_t j = 0; j < gh; ++j)
    o[j] = bb == nullptr ? 0.f : bb[j] + (lstm || j < 2 * hidden ? bb[gh + j] : 0.f);
  return out;
}

Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

// A lowered layer: its steps' cells and h values.
struct LoweredLayer {
  bool lstm = false;
  int64_t hidden = 0, batch = 0;
  std::vector<Node*> cells;
  std::vector<Value*> hs;
};

// Rows of a layer's projection its steps carry: whole blocks of 8 rows,
// block b by steps 8b + 8 .. 8b + 15, one slice each; and the last whole
// block by the 4 steps after it, two slices each, where seq % 8 >= 4
// leaves them. The projection after the layer, on the critical path, then
// adds fewer than 8 rows, where it would add 8 to 15 (LSTM-TC, per vEU:
// the last 4 steps 5.3 -> 7.9 us each, the projection 50 -> 34 us).
constexpr int64_t kDoubleSteps = kCarrySlices / 2;
int64_t single_blocks(int64_t seq) { return std::max<int64_t>(0, seq / 8 - 1); }
bool double_block(int64_t seq) { return seq >= 8 && seq % 8 >= kDoubleSteps; }
int64_t carried_rows(int64_t seq) { return (single_blocks(seq) + (double_block(seq) ? 1 : 0)) * 8; }

// Whether `below`'s steps can carry the projection of the LSTM layer
// above it (hidden_size `hidden`, input `input`, batch `batch`): see
// RnnCellOp in kernels/cpu/rnn_cell.cc, next_slice.
bool can_carry(const LoweredLayer& below, bool lstm, int64_t hidden, int64_t input, int64_t batch, int64_t seq) {
  return lstm && below.lstm && batch == 1 && below.batch == 1 && below.hidden == hidden && input == hidden &&
         hidden % kRnnCarryHidden == 0 && carried_rows(seq) > 0;
}

// Gives steps 8 .. of `below` the projection of the layer above (packed
// weights wp, bias): step 8b + 8 + j computes piece 8b + j, rows 8b ..
// 8b + 7 of the panels q with q % 8 == j; the last block's steps 8b + 8 +
// i (double_block) pieces 8b + 2i and 8b + 2i + 1. Returns the pieces in
// order.
Result<std::vector<Value*>> carry_projection(Graph& g, const LoweredLayer& below, Value* wp, Value* bias,
                                             const std::string& base) {
  std::vector<Value*> pieces;
  const int64_t seq = static_cast<int64_t>(below.cells.size());
  auto carry = [&](int64_t t, int64_t b, int64_t slice, int64_t slices) -> Status {
    Node* cell = below.cells[static_cast<size_t>(t)];
    g.add_input(cell, wp);
    g.add_input(cell, bias);
    for (int64_t r = 0; r < 8; ++r) g.add_input(cell, below.hs[static_cast<size_t>(8 * b + r)]);
    cell->attrs["next_slice"] = int_attr(slice);
    if (slices > 1) cell->attrs["next_slices"] = int_attr(slices);
    cell->attrs["block_rows"] = int_attr(kRnnBlockRows);
    Value* piece = g.add_value(str_cat(base, "/piece", 8 * b + slice), DType::kFloat32, Shape{});
    piece->producer = cell;
    cell->outputs.push_back(piece);
    TESSERA_RETURN_IF_ERROR(op_infer(*cell).with_context(cell->name));
    pieces.push_back(piece);
    return Status();
  };
  const int64_t singles = single_blocks(seq);
  for (int64_t t = 8; t < 8 * singles + 8; ++t) TESSERA_RETURN_IF_ERROR(carry(t, t / 8 - 1, t % 8, 1));
  if (double_block(seq))
    for (int64_t i = 0; i < kDoubleSteps; ++i)
      TESSERA_RETURN_IF_ERROR(carry(8 * singles + 8 + i, singles, 2 * i, 2));
  return pieces;
}

}  // namespace

// Returns the number of recurrent nodes lowered.
Result<int> lower_recurrent(Graph& g, int64_t chunk_steps, bool carry) {
  // Y value of a lowered layer -> its cells and per-step h values.
  std::map<const Value*, LoweredLayer> steps_of;
  int lowered = 0;
  const size_t count = g.nodes().size();
  for (size_t idx = 0; idx < count; ++idx) {
    Node& n = *g.nodes()[idx];
    if (n.dead || !lowerable(n)) continue;
    const bool lstm = n.op_type == "LSTM";
    const int64_t gates = lstm ? 4 : 3;
    const Shape& xs = n.inputs[0]->shape;
    const int64_t seq = xs[0], batch = xs[1];
    const int64_t hidden = n.inputs[2]->shape[2];
    Value* w = n.inputs[1];
    Value* b = n.input(3);
    Value* h = n.input(5);
    Value* c = lstm ? n.input(6) : nullptr;
    // Is X the squeezed Y of a lowered layer?
    const LoweredLayer* below = nullptr;
    Value* x = n.inputs[0];
    if (x->producer && x->producer->op_type == "Squeeze" && !x->producer->dead) {
      auto it = steps_of.find(x->producer->inputs[0]);
      if (it != steps_of.end() && static_cast<int64_t>(it->second.hs.size()) == seq) below = &it->second;
    }
    const std::vector<Value*>* chained = below != nullptr ? &below->hs : nullptr;
    const std::string base = n.name;
    const int64_t input = w->shape[2];
    Value* wp = g.add_constant(str_cat(base, "/packed_w"),
                               pack_rnn_projection(w->constant->data<float>(), gates, hidden, input));
    Tensor folded = projection_bias(b, gates, hidden, lstm);
    Value* bias =
        g.add_constant(str_cat(base, "/proj_bias"), pack_rnn_gate_vector(folded.data<float>(), gates, hidden));
    Value* rp = g.add_constant(str_cat(base, "/packed_r"),
                               pack_rnn_recurrence(n.inputs[2]->constant->data<float>(), gates, hidden));
    Value* rb = nullptr;
    if (!lstm && b != nullptr) {
      Tensor t(DType::kFloat32, Shape{hidden});
      std::memcpy(t.data<float>(), b->constant->data<float>() + 5 * hidden,
                  static_cast<size_t>(hidden) * sizeof(float));
      rb = g.add_constant(str_cat(base, "/rb_h"), std::move(t));
    }
    // Projections: one of all of X, or one per chunk of the chained steps,
    // or, carried by the steps below, all but the last rows, which one
    // projection adds in the same blocked layout.
    const bool carried = carry && chunk_steps == 0 && chained != nullptr &&
                         can_carry(*below, lstm, hidden, input, batch, seq);
    const int64_t chunk = chained && chunk_steps > 0 ? std::min(chunk_steps, seq) : seq;
    std::vector<Value*> proj;
    if (carried) {
      TESSERA_ASSIGN_OR_RETURN(std::vector<Value*> pieces, carry_projection(g, *below, wp, bias, base));
      std::vector<Value*> ins = {wp, bias};
      ins.insert(ins.end(), chained->begin() + carried_rows(seq), chained->end());
      ins.push_back(rp);
      Node* tail = g.add_node("TesseraRnnProj", str_cat(base, "/proj", carried_rows(seq)), ins, 1);
      tail->attrs["gates"] = int_attr(gates);
      tail->attrs["panel_units"] = int_attr(kRnnPanelUnits);
      tail->attrs["prefetch_r"] = int_attr(1);
      tail->attrs["blocked"] = int_attr(1);
      tail->attrs["block_rows"] = int_attr(kRnnBlockRows);
      tail->opset = n.opset;
      TESSERA_RETURN_IF_ERROR(op_infer(*tail));
      pieces.push_back(tail->outputs[0]);
      Node* cat = g.add_node("Concat", str_cat(base, "/xp"), pieces, 1);
      cat->attrs["axis"] = int_attr(0);
      TESSERA_RETURN_IF_ERROR(op_infer(*cat));
      proj.push_back(cat->outputs[0]);
    }
    for (int64_t t0 = 0; t0 < seq && !carried; t0 += chunk) {
      std::vector<Value*> ins = {wp, bias};
      if (chained) ins.insert(ins.end(), chained->begin() + t0, chained->begin() + std::min(seq, t0 + chunk));
      else ins.push_back(x);
      // The projection before the first step also pulls R into cache.
      if (t0 == 0) ins.push_back(rp);
      Node* p = g.add_node("TesseraRnnProj", chained ? str_cat(base, "/proj", t0) : str_cat(base, "/proj"), ins, 1);
      p->attrs["gates"] = int_attr(gates);
      p->attrs["panel_units"] = int_attr(kRnnPanelUnits);
      if (t0 == 0) p->attrs["prefetch_r"] = int_attr(1);
      p->opset = n.opset;
      TESSERA_RETURN_IF_ERROR(op_infer(*p));
      proj.push_back(p->outputs[0]);
    }
    LoweredLayer layer{lstm, hidden, batch, {}, {}};
    std::vector<Value*>& hs = layer.hs;
    Value* h_prev = h;
    Value* c_prev = c;
    for (int64_t t = 0; t < seq; ++t) {
      Value* xin = proj[static_cast<size_t>(t / chunk)];
      std::vector<Value*> ins = lstm ? std::vector<Value*>{xin, h_prev, c_prev, rp}
                                     : std::vector<Value*>{xin, h_prev, rp, rb};
      Node* cell = g.add_node(lstm ? "TesseraLstmCell" : "TesseraGruCell", str_cat(base, "/step", t), ins,
                              lstm ? 2 : 1);
      cell->attrs["hidden_size"] = int_attr(hidden);
      cell->attrs["batch"] = int_attr(batch);
      cell->attrs["step"] = int_attr(t % chunk);
      cell->attrs["panel_units"] = int_attr(kRnnPanelUnits);
      if (carried) cell->attrs["xp_blocked"] = int_attr(1);
      if (carried) cell->attrs["block_rows"] = int_attr(kRnnBlockRows);
      cell->opset = n.opset;
      TESSERA_RETURN_IF_ERROR(op_infer(*cell));
      hs.push_back(cell->outputs[0]);
      layer.cells.push_back(cell);
      h_prev = cell->outputs[0];
      if (lstm) c_prev = cell->outputs[1];
    }
    // Outputs: reuse the layer's values.
    n.dead = true;
    std::vector<Value*> outs = n.outputs;
    if (!outs.empty() && outs[0] != nullptr) {
      Node* cat = g.add_node_producing("Concat", str_cat(base, "/Y"), hs, {outs[0]});
      cat->attrs["axis"] = int_attr(0);
      TESSERA_RETURN_IF_ERROR(op_infer(*cat));
      steps_of[outs[0]] = std::move(layer);
    }
    Value* state_shape = g.add_constant(str_cat(base, "/state_shape"),
                                        Tensor::from_int64s({1, batch, hidden}, Shape{3}));
    if (outs.size() > 1 && outs[1] != nullptr) {
      Node* yh = g.add_node_producing("Reshape", str_cat(base, "/Y_h"), {h_prev, state_shape}, {outs[1]});
      TESSERA_RETURN_IF_ERROR(op_infer(*yh));
    }
    if (outs.size() > 2 && outs[2] != nullptr) {
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
