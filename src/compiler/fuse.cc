// Fusion passes.
//
// Epilogues: Conv, Gemm, MatMul, MaxPool or AveragePool (then, for MatMul,
// optionally an Add of a constant bias per output column), then optionally
// an Add of a same-shape tensor (a residual), then optionally an activation
// (one op, GELU's five as PyTorch exports them, or SiLU's Sigmoid and Mul), then, for MatMul,
// optionally a LayerNormalization over the last axis or a Split of the last
// axis (each output written in place), become one TesseraFusedConv /
// TesseraFusedGemm / TesseraFusedMatMul / TesseraFusedPool whose rTasks
// apply the Adds and the activation to their own output tile while it is
// in cache (kernels/cpu/epilogue.h). Each fused op saves one or more full passes
// (read and write) over the tensor, and as many steps of the Plan.
//
// Inverted residual blocks: a 1x1 conv (+ Relu or Clip), a depthwise conv
// (+ Relu or Clip) and a 1x1 conv (+ residual, activation), each the only
// reader of the last, become one TesseraInvertedResidual whose rTasks work
// strips of output rows, the expanded channels only ever in scratch
// (kernels/cpu/inverted_residual.cc).
//
// Elementwise chains: float elementwise ops, each the only reader of the
// previous one's output and all of the same output shape, become one
// TesseraFusedElementwise that runs the whole chain on a block of outputs
// in a local buffer (GELU's Div-Erf-Add-Mul-Mul, scale-and-shift chains).
//
// Activations after a Concat: act(Concat(x...)) becomes Concat(act(x)...)
// when every x is read only by the Concat and made by an op that takes the
// activation in (Conv, Gemm, MatMul, an elementwise op), so that the
// epilogue or chain passes fuse it there instead of a separate pass over
// the concatenated tensor (NASNet-like cells: Relu after each cell's
// Concat). Results are unchanged: the activation is elementwise.
//
// Attention: MatMul(Q, Kt) -> Div or Mul by a constant scalar -> Add of a
// mask -> Softmax over the last axis -> MatMul(., V), each step the only
// reader of the last, becomes one TesseraAttention whose rTasks keep their
// block of the score matrix in scratch.
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "base/strings.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"

namespace tessera {
namespace {

// After a pass marked `fused` groups dead and appended their fused nodes:
// drops the dead and restores topological order.
Result<int> finish(Graph& g, int fused) {
  if (fused == 0) return 0;
  g.compact();
  TESSERA_RETURN_IF_ERROR(g.sort_topologically());
  return fused;
}

// The one live node reading `v` (once), or nullptr.
Node* sole_consumer(const Graph& g, const Value* v) { return g.sole_consumer(v); }

// If `n` is an activation the epilogue implements, reading `y`: its name
// and parameters.
bool activation(const Node& n, const Value* y, std::string* act, float* alpha, float* beta) {
  if (n.inputs.empty() || n.inputs[0] != y || n.outputs.size() != 1) return false;
  const std::string& t = n.op_type;
  *alpha = 0;
  *beta = 0;
  if (t == "Relu" || t == "Sigmoid" || t == "Tanh" || t == "HardSwish") {
    if (n.inputs.size() != 1) return false;
  } else if (t == "LeakyRelu") {
    *alpha = n.attr_float("alpha", 0.01f);
  } else if (t == "HardSigmoid") {
    *alpha = n.attr_float("alpha", 0.2f);
    *beta = n.attr_float("beta", 0.5f);
  } else if (t == "Clip") {
    *alpha = std::numeric_limits<float>::lowest();
    *beta = std::numeric_limits<float>::max();
    for (size_t i = 1; i < 3; ++i) {
      const Value* b = n.input(i);
      if (b == nullptr) continue;
      if (!b->is_constant() || b->dtype != DType::kFloat32 || b->shape.numel() != 1) return false;
      (i == 1 ? *alpha : *beta) = b->constant->data<float>()[0];
    }
  } else {
    return false;
  }
  *act = t;
  return true;
}

// A float32 constant holding one value, or nullptr.
const float* scalar_constant(const Value* v) {
  if (v == nullptr || !v->is_constant() || v->dtype != DType::kFloat32 || v->shape.numel() != 1) return nullptr;
  return v->constant->data<float>();
}

// The live nodes reading `y`, a node once per input that names it.
std::vector<Node*> live_readers(const Graph& g, const Value* y) {
  std::vector<Node*> readers;
  for (auto& np : g.nodes()) {
    if (np->dead) continue;
    for (const Value* in : np->inputs)
      if (in == y) readers.push_back(np.get());
  }
  return readers;
}

// PyTorch's exact GELU as exported, reading `y`: Div(y, c) -> Erf ->
// Add(., 1) -> Mul(y, .) -> Mul(., h) with c and h scalar constants, y read
// by the Div and the first Mul only and each other result only by the next
// op. On a match fills the five nodes (in order), c and h.
bool gelu(const Graph& g, const Value* y, std::vector<Node*>* nodes, float* c, float* h) {
  if (y->is_output) return false;
  const std::vector<Node*> readers = live_readers(g, y);
  if (readers.size() != 2) return false;
  Node* div = readers[0]->op_type == "Div" ? readers[0] : readers[1];
  Node* mul = div == readers[0] ? readers[1] : readers[0];
  if (div->op_type != "Div" || div->inputs.size() != 2 || div->inputs[0] != y) return false;
  const float* divisor = scalar_constant(div->inputs[1]);
  if (divisor == nullptr) return false;
  Node* erf = sole_consumer(g, div->outputs[0]);
  if (erf == nullptr || erf->op_type != "Erf" || erf->inputs.size() != 1) return false;
  Node* add = sole_consumer(g, erf->outputs[0]);
  if (add == nullptr || add->op_type != "Add" || add->inputs.size() != 2) return false;
  const float* one = scalar_constant(add->inputs[0] == erf->outputs[0] ? add->inputs[1] : add->inputs[0]);
  if (one == nullptr || *one != 1.f) return false;
  if (sole_consumer(g, add->outputs[0]) != mul || mul->op_type != "Mul" || mul->inputs.size() != 2) return false;
  if (!((mul->inputs[0] == y && mul->inputs[1] == add->outputs[0]) ||
        (mul->inputs[1] == y && mul->inputs[0] == add->outputs[0])))
    return false;
  Node* last = sole_consumer(g, mul->outputs[0]);
  if (last == nullptr || last->op_type != "Mul" || last->inputs.size() != 2) return false;
  const float* half = scalar_constant(last->inputs[0] == mul->outputs[0] ? last->inputs[1] : last->inputs[0]);
  if (half == nullptr) return false;
  for (const Node* n : {div, erf, add, mul, last})
    if (n->outputs.size() != 1 || n->outputs[0]->dtype != DType::kFloat32 || !(n->outputs[0]->shape == y->shape))
      return false;
  *nodes = {div, erf, add, mul, last};
  *c = *divisor;
  *h = *half;
  return true;
}

// SiLU as exported, reading `y`: Sigmoid(y) and Mul of y and it (either
// order), y read by those two only and the Sigmoid's result by the Mul
// only. On a match fills the two nodes (in order).
bool silu(const Graph& g, const Value* y, std::vector<Node*>* nodes) {
  if (y->is_output) return false;
  const std::vector<Node*> readers = live_readers(g, y);
  if (readers.size() != 2) return false;
  Node* sig = readers[0]->op_type == "Sigmoid" ? readers[0] : readers[1];
  Node* mul = sig == readers[0] ? readers[1] : readers[0];
  if (sig->op_type != "Sigmoid" || sig->inputs.size() != 1 || sig->outputs.size() != 1) return false;
  const Value* s = sig->outputs[0];
  if (s->is_output || sole_consumer(g, s) != mul || mul->op_type != "Mul" || mul->inputs.size() != 2 ||
      mul->outputs.size() != 1)
    return false;
  if (!((mul->inputs[0] == y && mul->inputs[1] == s) || (mul->inputs[1] == y && mul->inputs[0] == s))) return false;
  for (const Node* n : {sig, mul})
    if (n->outputs[0]->dtype != DType::kFloat32 || !(n->outputs[0]->shape == y->shape)) return false;
  *nodes = {sig, mul};
  return true;
}

// The LayerNormalization reading `y` (its only reader) over y's last axis,
// with a float scale and optional bias of one value per element of that
// axis, and only its first output: what a MatMul's epilogue can take in.
Node* row_layer_norm(const Graph& g, const Value* y) {
  Node* n = sole_consumer(g, y);
  const int r = y->shape.rank();
  if (n == nullptr || n->op_type != "LayerNormalization" || n->inputs.size() < 2 || n->inputs[0] != y ||
      n->outputs.size() != 1 || r < 1 || n->attr_int("stash_type", 1) != 1)
    return nullptr;
  const int64_t axis = n->attr_int("axis", -1);
  if (axis != -1 && axis != r - 1) return nullptr;
  for (size_t i = 1; i < n->inputs.size(); ++i) {
    const Value* p = n->inputs[i];
    if (p == nullptr) continue;
    if (p->dtype != DType::kFloat32 || p->shape.rank() != 1 || p->shape[0] != y->shape[r - 1]) return nullptr;
  }
  return n->inputs[1] == nullptr ? nullptr : n;
}

// The Split reading `y` (its only reader) into at least two sections of
// y's last axis, every output present: what a MatMul can write directly.
// Fills the widths.
Node* column_split(const Graph& g, const Value* y, std::vector<int64_t>* widths) {
  Node* n = sole_consumer(g, y);
  if (n == nullptr || n->op_type != "Split" || n->inputs[0] != y || n->outputs.size() < 2 || y->shape.rank() < 2)
    return nullptr;
  int axis;
  auto sizes = split_sizes(*n, &axis);
  if (!sizes.ok() || axis != y->shape.rank() - 1 || sizes->size() != n->outputs.size()) return nullptr;
  for (size_t i = 0; i < sizes->size(); ++i)
    if ((*sizes)[i] < 1 || n->outputs[i] == nullptr) return nullptr;
  *widths = *sizes;
  return n;
}

// Whether the fusion passes can take an activation appended to `n`'s
// output into `n` itself: a Conv, Gemm or MatMul epilogue (directly or
// after the residual Add it absorbs), or an elementwise chain.
bool absorbs_activation(const Node& n);

}  // namespace

Result<int> push_activations_through_concat(Graph& g, int* created) {
  int pushed = 0;
  // Each value's live producer, from the node list (Value::producer is not
  // kept up to date across the passes that replace nodes).
  std::unordered_map<const Value*, Node*> producer;
  for (auto& np : g.nodes())
    if (!np->dead)
      for (Value* o : np->outputs) producer[o] = np.get();
  auto made_by = [&](const Value* v) -> Node* {
    auto it = producer.find(v);
    return it == producer.end() || it->second->dead ? nullptr : it->second;
  };
  const size_t original = g.nodes().size();
  for (size_t i = 0; i < original; ++i) {
    Node& act = *g.nodes()[i];
    std::string kind;
    float alpha, beta;
    if (act.dead || act.inputs.empty() || act.outputs.size() != 1) continue;
    Value* y = act.inputs[0];
    Node* made = made_by(y);
    if (made == nullptr || made->op_type != "Concat" || y->dtype != DType::kFloat32) continue;
    if (!activation(act, y, &kind, &alpha, &beta) || sole_consumer(g, y) != &act) continue;
    Node& cat = *made;
    bool ok = !cat.inputs.empty();
    for (const Value* x : cat.inputs) {
      const Node* p = made_by(x);
      ok = ok && p != nullptr && sole_consumer(g, x) == &cat && absorbs_activation(*p);
    }
    if (!ok) continue;
    // act(concat(x...)) = concat(act(x)...): the activation per input, the
    // Concat producing the activation's output.
    std::vector<Value*> parts;
    for (size_t k = 0; k < cat.inputs.size(); ++k) {
      Value* x = cat.inputs[k];
      std::vector<Value*> ins = act.inputs;
      ins[0] = x;
      Node* a = g.add_node(act.op_type, str_cat(act.name, "/", k), ins, 1);
      a->attrs = act.attrs;
      a->opset = act.opset;
      a->outputs[0]->dtype = x->dtype;
      a->outputs[0]->shape = x->shape;
      parts.push_back(a->outputs[0]);
      producer[a->outputs[0]] = a;
      if (created != nullptr) ++*created;
    }
    Value* out = act.outputs[0];
    cat.dead = true;
    act.dead = true;
    Node* c = g.add_node_producing("Concat", cat.name, parts, {out});
    producer[out] = c;
    c->attrs = cat.attrs;
    c->opset = cat.opset;
    ++pushed;
  }
  return finish(g, pushed);
}

Result<int> fuse_epilogues(Graph& g) {
  int fused = 0;
  const size_t original = g.nodes().size();
  for (size_t i = 0; i < original; ++i) {
    Node& n = *g.nodes()[i];
    const bool matmul = n.op_type == "MatMul";
    const bool pool = n.op_type == "MaxPool" || n.op_type == "AveragePool";
    if (n.dead || (n.op_type != "Conv" && n.op_type != "Gemm" && !matmul && !pool) || n.outputs.size() != 1) continue;
    Value* y = n.outputs[0];
    if (y->dtype != DType::kFloat32) continue;
    if (matmul && (n.inputs[0]->shape.rank() < 2 || n.inputs[1]->shape.rank() < 2)) continue;
    std::vector<Node*> absorbed;
    Value* residual = nullptr;
    Value* bias = matmul || pool ? nullptr : n.input(2);
    Node* c = sole_consumer(g, y);
    // MatMul: first its bias, a constant with one value per output column.
    if (matmul && c != nullptr && c->op_type == "Add" && c->inputs.size() == 2 && c->outputs[0]->shape == y->shape) {
      Value* other = c->inputs[0] == y ? c->inputs[1] : c->inputs[0];
      if (other != y && other->is_constant() && other->dtype == DType::kFloat32 && other->shape.rank() == 1 &&
          other->shape[0] == y->shape[y->shape.rank() - 1]) {
        bias = other;
        absorbed.push_back(c);
        y = c->outputs[0];
        c = sole_consumer(g, y);
      }
    }
    if (c != nullptr && c->op_type == "Add" && c->inputs.size() == 2 && c->outputs.size() == 1) {
      Value* other = c->inputs[0] == y ? c->inputs[1] : c->inputs[0];
      if (other != y && other->dtype == DType::kFloat32 && other->shape == y->shape &&
          c->outputs[0]->shape == y->shape) {
        residual = other;
        absorbed.push_back(c);
        y = c->outputs[0];
        c = sole_consumer(g, y);
      }
    }
    std::string act = "none";
    float alpha = 0, beta = 0;
    std::vector<Node*> act_nodes;
    if (c != nullptr && activation(*c, y, &act, &alpha, &beta)) {
      absorbed.push_back(c);
      y = c->outputs[0];
    } else if (c == nullptr && gelu(g, y, &act_nodes, &alpha, &beta)) {
      act = "Gelu";
      absorbed.insert(absorbed.end(), act_nodes.begin(), act_nodes.end());
      y = act_nodes.back()->outputs[0];
    } else if (c == nullptr && silu(g, y, &act_nodes)) {
      act = "Silu";
      absorbed.insert(absorbed.end(), act_nodes.begin(), act_nodes.end());
      y = act_nodes.back()->outputs[0];
    }
    // MatMul: last, a LayerNormalization of its rows (the tiles keep whole
    // rows; the unfused kernel's row function).
    Node* norm = matmul ? row_layer_norm(g, y) : nullptr;
    if (norm != nullptr) {
      absorbed.push_back(norm);
      y = norm->outputs[0];
    }
    // MatMul: or a Split of its columns, each section written to its own
    // output in place (not with a residual or a norm: those need the rows).
    std::vector<int64_t> widths;
    Node* split = matmul && norm == nullptr && residual == nullptr ? column_split(g, y, &widths) : nullptr;
    if (split != nullptr) absorbed.push_back(split);
    if (absorbed.empty()) continue;
    n.dead = true;
    for (Node* a : absorbed) a->dead = true;
    std::vector<Value*> inputs = {n.input(0), pool ? nullptr : n.input(1), bias, residual};
    if (norm != nullptr) {
      inputs.push_back(norm->inputs[1]);
      inputs.push_back(norm->input(2));
    }
    while (!inputs.empty() && inputs.back() == nullptr) inputs.pop_back();
    const char* type = n.op_type == "Conv" ? "TesseraFusedConv"
                       : matmul            ? "TesseraFusedMatMul"
                       : pool              ? "TesseraFusedPool"
                                           : "TesseraFusedGemm";
    Node* f = g.add_node_producing(type, n.name, inputs, split != nullptr ? split->outputs : std::vector<Value*>{y});
    f->attrs = n.attrs;
    f->opset = n.opset;
    if (pool) {
      Attribute k;
      k.kind = Attribute::Kind::kString;
      k.s = n.op_type;
      f->attrs["pool"] = k;
    }
    Attribute a;
    a.kind = Attribute::Kind::kString;
    a.s = act;
    f->attrs["activation"] = a;
    Attribute fa;
    fa.kind = Attribute::Kind::kFloat;
    fa.f = alpha;
    f->attrs["activation_alpha"] = fa;
    fa.f = beta;
    f->attrs["activation_beta"] = fa;
    if (norm != nullptr) {
      fa.f = norm->attr_float("epsilon", 1e-5f);
      f->attrs["norm_epsilon"] = fa;
    }
    if (split != nullptr) {
      Attribute w;
      w.kind = Attribute::Kind::kInts;
      w.ints = widths;
      f->attrs["split"] = w;
    }
    ++fused;
  }
  return finish(g, fused);
}

namespace {

// A Conv or fused Conv (Relu or Clip, or no activation, and no residual
// when `plain`) of rank-4 float tensors with a float weight.
bool conv_stage(const Node* n, bool plain) {
  if (n == nullptr || n->dead || (n->op_type != "Conv" && n->op_type != "TesseraFusedConv")) return false;
  if (n->outputs.size() != 1 || n->outputs[0]->dtype != DType::kFloat32 || n->inputs[0]->shape.rank() != 4 ||
      n->inputs[1]->dtype != DType::kFloat32 || n->inputs[1]->shape.rank() != 4)
    return false;
  if (!plain) return true;
  const std::string act = n->attr_string("activation", "none");
  return n->input(3) == nullptr && (act == "none" || act == "Relu" || act == "Clip");
}

// A 1x1 conv with a constant weight and nothing but its pixels to map:
// no stride, padding, dilation or groups.
bool pointwise(const Node& n) {
  const Value* w = n.inputs[1];
  if (!w->is_constant() || w->shape[2] != 1 || w->shape[3] != 1 || n.attr_int("group", 1) != 1) return false;
  const Shape& x = n.inputs[0]->shape;
  const Shape& y = n.outputs[0]->shape;
  if (n.attr_string("auto_pad", "NOTSET") != "NOTSET" && n.attr_string("auto_pad", "NOTSET") != "VALID") return false;
  for (int64_t v : n.attr_ints("pads"))
    if (v != 0) return false;
  for (const char* a : {"strides", "dilations"})
    for (int64_t v : n.attr_ints(a))
      if (v != 1) return false;
  return y[2] == x[2] && y[3] == x[3];
}

}  // namespace

Result<int> fuse_inverted_residuals(Graph& g) {
  int fused = 0;
  const size_t original = g.nodes().size();
  for (size_t i = 0; i < original; ++i) {
    Node* expand = g.nodes()[i].get();
    if (!conv_stage(expand, true) || !pointwise(*expand) || expand->inputs[0]->shape[1] > kInvertedResidualMaxInput ||
        expand->inputs[0]->shape[2] < kInvertedResidualMinHeight)
      continue;
    const int64_t e = expand->inputs[1]->shape[0];
    Node* dw = sole_consumer(g, expand->outputs[0]);
    if (!conv_stage(dw, true) || dw->attr_int("group", 1) != e || dw->inputs[1]->shape[0] != e ||
        dw->inputs[1]->shape[1] != 1 || dw->inputs[0] != expand->outputs[0])
      continue;
    Node* project = sole_consumer(g, dw->outputs[0]);
    if (!conv_stage(project, false) || project->inputs[0] != dw->outputs[0] || !pointwise(*project)) continue;
    expand->dead = dw->dead = project->dead = true;
    std::vector<Value*> inputs = {expand->inputs[0], expand->inputs[1], expand->input(2), dw->inputs[1],
                                  dw->input(2),      project->inputs[1], project->input(2), project->input(3)};
    while (inputs.back() == nullptr) inputs.pop_back();
    Node* f = g.add_node_producing("TesseraInvertedResidual", project->name, inputs, project->outputs);
    f->opset = project->opset;
    for (const char* a : {"kernel_shape", "strides", "pads", "dilations", "auto_pad", "group"})
      if (dw->has_attr(a)) f->attrs[a] = dw->attrs.at(a);
    for (const char* a : {"activation", "activation_alpha", "activation_beta"}) {
      if (expand->has_attr(a)) f->attrs[std::string("expand_") + a] = expand->attrs.at(a);
      if (dw->has_attr(a)) f->attrs[std::string("depthwise_") + a] = dw->attrs.at(a);
      if (project->has_attr(a)) f->attrs[a] = project->attrs.at(a);
    }
    ++fused;
  }
  return finish(g, fused);
}

namespace {

bool chain_op(const Node& n) {
  static const char* kOps[] = {"Abs", "Neg", "Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu",
                               "LeakyRelu", "Elu", "HardSigmoid", "HardSwish", "Softplus", "Add", "Sub", "Mul",
                               "Div", "Min", "Max", "Clip"};
  bool known = false;
  for (const char* op : kOps) known = known || n.op_type == op;
  if (!known || n.dead || n.outputs.size() != 1 || n.outputs[0]->dtype != DType::kFloat32) return false;
  for (const Value* v : n.inputs)
    if (v == nullptr || v->dtype != DType::kFloat32) return false;
  const bool binary = n.op_type == "Add" || n.op_type == "Sub" || n.op_type == "Mul" || n.op_type == "Div" ||
                      n.op_type == "Min" || n.op_type == "Max";
  if (binary) return n.inputs.size() == 2;
  if (n.op_type == "Clip") {
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (!n.inputs[i]->is_constant() || n.inputs[i]->shape.numel() != 1) return false;
    return n.inputs.size() <= 3;
  }
  return n.inputs.size() == 1;
}

bool absorbs_activation(const Node& n) {
  if (n.outputs.size() != 1 || n.outputs[0]->dtype != DType::kFloat32) return false;
  return n.op_type == "Conv" || n.op_type == "Gemm" || n.op_type == "MatMul" || chain_op(n);
}

// The unary kernels' attribute defaults (elementwise.cc's make_unary).
void chain_attrs(const Node& n, float* alpha, float* beta) {
  *alpha = 0;
  *beta = 0;
  if (n.op_type == "LeakyRelu") *alpha = n.attr_float("alpha", 0.01f);
  else if (n.op_type == "Elu") *alpha = n.attr_float("alpha", 1.0f);
  else if (n.op_type == "HardSigmoid") {
    *alpha = n.attr_float("alpha", 0.2f);
    *beta = n.attr_float("beta", 0.5f);
  } else if (n.op_type == "Clip") {
    *alpha = std::numeric_limits<float>::lowest();
    *beta = std::numeric_limits<float>::max();
    if (n.input(1)) *alpha = n.inputs[1]->constant->data<float>()[0];
    if (n.input(2)) *beta = n.inputs[2]->constant->data<float>()[0];
  }
}

constexpr size_t kMaxChainInputs = 8;  // kernels/cpu/broadcast.h's kMaxBroadcastInputs

}  // namespace

Result<int> fuse_elementwise_chains(Graph& g) {
  int fused = 0;
  const size_t original = g.nodes().size();
  for (size_t i = 0; i < original; ++i) {
    Node* head = g.nodes()[i].get();
    if (!chain_op(*head)) continue;
    const Shape& shape = head->outputs[0]->shape;
    std::vector<Value*> inputs = {head->inputs[0]};
    Attribute ops, sides, left, alphas, betas;
    ops.kind = Attribute::Kind::kStrings;
    sides.kind = left.kind = Attribute::Kind::kInts;
    alphas.kind = betas.kind = Attribute::Kind::kFloats;
    auto add_side = [&](Value* v) -> int {
      for (size_t k = 0; k < inputs.size(); ++k)
        if (inputs[k] == v) return static_cast<int>(k);
      inputs.push_back(v);
      return static_cast<int>(inputs.size()) - 1;
    };
    auto append = [&](const Node& n, Value* running) {
      const bool binary = n.inputs.size() == 2 && n.op_type != "Clip";
      int side = -1;
      bool side_left = false;
      if (binary) {
        side_left = n.inputs[1] == running;
        side = add_side(side_left ? n.inputs[0] : n.inputs[1]);
      }
      float a, b;
      chain_attrs(n, &a, &b);
      ops.strings.push_back(n.op_type);
      sides.ints.push_back(side);
      left.ints.push_back(side_left ? 1 : 0);
      alphas.floats.push_back(a);
      betas.floats.push_back(b);
    };
    // The head's first input starts the chain (loaded, broadcast).
    append(*head, head->inputs[0]);
    std::vector<Node*> chain = {head};
    while (true) {
      Value* y = chain.back()->outputs[0];
      Node* c = sole_consumer(g, y);
      if (c == nullptr || !chain_op(*c) || !(c->outputs[0]->shape == shape)) break;
      // The running value must be exactly one of its operands.
      if (c->inputs.size() == 2 && c->op_type != "Clip" && c->inputs[0] == c->inputs[1]) break;
      if (c->inputs[0] != y && (c->inputs.size() < 2 || c->inputs[1] != y || c->op_type == "Clip")) break;
      Value* other = c->inputs.size() == 2 && c->op_type != "Clip" ? (c->inputs[0] == y ? c->inputs[1] : c->inputs[0])
                                                                   : nullptr;
      if (other != nullptr && std::find(inputs.begin(), inputs.end(), other) == inputs.end() &&
          inputs.size() >= kMaxChainInputs)
        break;
      append(*c, y);
      chain.push_back(c);
    }
    if (chain.size() < 2) continue;
    for (Node* n : chain) n->dead = true;
    Node* f = g.add_node_producing("TesseraFusedElementwise", head->name, inputs, {chain.back()->outputs[0]});
    f->opset = head->opset;
    f->attrs["ops"] = ops;
    f->attrs["sides"] = sides;
    f->attrs["left"] = left;
    f->attrs["alphas"] = alphas;
    f->attrs["betas"] = betas;
    ++fused;
  }
  return finish(g, fused);
}

namespace {

bool same_batch(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank() || a.rank() < 2) return false;
  for (int i = 0; i < a.rank() - 2; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

namespace {

// The live node producing `v`, or nullptr.
Node* live_producer(const Graph& g, const Value* v) {
  for (auto& np : g.nodes())
    if (!np->dead)
      for (const Value* o : np->outputs)
        if (o == v) return np.get();
  return nullptr;
}

// Multi-head attention as PyTorch exports it splits each head out of rows
// of heads: x = Transpose(Reshape(X [B, S, H*D] -> [B, S, H, D]), perm).
// If `x` is that, read only by `reader` and each step only by the next: X,
// with H in *heads and the two nodes appended to *nodes.
Value* rows_of_heads(const Graph& g, Value* x, const std::vector<int64_t>& perm, const Node* reader, int64_t* heads,
                     std::vector<Node*>* nodes) {
  if (sole_consumer(g, x) != reader) return nullptr;
  Node* tr = live_producer(g, x);
  if (tr == nullptr || tr->op_type != "Transpose" || tr->attr_ints("perm") != perm) return nullptr;
  Value* split = tr->inputs[0];
  Node* rs = live_producer(g, split);
  if (rs == nullptr || rs->op_type != "Reshape" || sole_consumer(g, split) != tr) return nullptr;
  Value* rows = rs->inputs[0];
  const Shape& a = rows->shape;
  const Shape& b = split->shape;
  if (rows->dtype != DType::kFloat32 || a.rank() != 3 || b.rank() != 4 || a[0] != b[0] || a[1] != b[1] ||
      a[2] != b[2] * b[3] || b[2] < 1)
    return nullptr;
  *heads = b[2];
  nodes->push_back(tr);
  nodes->push_back(rs);
  return rows;
}

// The inverse after the attention: y [B, H, S, Dv] -> Transpose(0, 2, 1, 3)
// -> Reshape to [B, S, H*Dv], each read only by the next: the Reshape's
// output, with the two nodes appended to *nodes.
Value* heads_to_rows(const Graph& g, Value* y, std::vector<Node*>* nodes) {
  Node* tr = sole_consumer(g, y);
  if (tr == nullptr || tr->op_type != "Transpose" || tr->attr_ints("perm") != std::vector<int64_t>{0, 2, 1, 3})
    return nullptr;
  Node* rs = sole_consumer(g, tr->outputs[0]);
  if (rs == nullptr || rs->op_type != "Reshape" || rs->inputs[0] != tr->outputs[0]) return nullptr;
  const Shape& a = y->shape;
  const Shape& b = rs->outputs[0]->shape;
  if (a.rank() != 4 || b.rank() != 3 || b[0] != a[0] || b[1] != a[2] || b[2] != a[1] * a[3]) return nullptr;
  nodes->push_back(tr);
  nodes->push_back(rs);
  return rs->outputs[0];
}

}  // namespace

Result<int> fuse_attention(Graph& g) {
  int fused = 0;
  const size_t original = g.nodes().size();
  for (size_t i = 0; i < original; ++i) {
    Node* mm1 = g.nodes()[i].get();
    if (mm1->dead || mm1->op_type != "MatMul" || mm1->inputs.size() != 2) continue;
    Value* q = mm1->inputs[0];
    Value* kt = mm1->inputs[1];
    Value* cur = mm1->outputs[0];
    if (cur->dtype != DType::kFloat32 || q->dtype != DType::kFloat32 || kt->dtype != DType::kFloat32 ||
        !same_batch(q->shape, cur->shape) || !same_batch(kt->shape, cur->shape))
      continue;
    const int rank = cur->shape.rank();
    std::vector<Node*> absorbed;
    Value* scale = nullptr;
    std::string scale_op = "Div";
    Node* c = sole_consumer(g, cur);
    if (c != nullptr && (c->op_type == "Div" || c->op_type == "Mul") && c->inputs.size() == 2) {
      const bool left = c->inputs[0] == cur;
      Value* other = left ? c->inputs[1] : c->inputs[0];
      if ((left || c->op_type == "Mul") && other != cur && other->is_constant() &&
          other->dtype == DType::kFloat32 && other->shape.numel() == 1 && c->outputs[0]->shape == cur->shape) {
        scale = other;
        scale_op = c->op_type;
        absorbed.push_back(c);
        cur = c->outputs[0];
        c = sole_consumer(g, cur);
      }
    }
    Value* mask = nullptr;
    if (c != nullptr && c->op_type == "Add" && c->inputs.size() == 2 && c->outputs[0]->shape == cur->shape) {
      Value* other = c->inputs[0] == cur ? c->inputs[1] : c->inputs[0];
      auto b = broadcast_shapes(cur->shape, other->shape);
      if (other != cur && other->dtype == DType::kFloat32 && b.ok() && *b == cur->shape) {
        mask = other;
        absorbed.push_back(c);
        cur = c->outputs[0];
        c = sole_consumer(g, cur);
      }
    }
    if (c == nullptr || c->op_type != "Softmax" || c->inputs[0] != cur) continue;
    int64_t axis = c->attr_int("axis", c->opset >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    if (axis != rank - 1) continue;
    Node* mm2 = sole_consumer(g, c->outputs[0]);
    if (mm2 == nullptr || mm2->op_type != "MatMul" || mm2->inputs[0] != c->outputs[0]) continue;
    Value* v = mm2->inputs[1];
    if (v->dtype != DType::kFloat32 || !same_batch(v->shape, cur->shape) || v->shape[rank - 2] != cur->shape[rank - 1])
      continue;
    absorbed.push_back(c);
    absorbed.push_back(mm2);
    // The heads split out of rows and merged back: read and written in
    // place instead (AttentionGeometry::heads).
    Value* out = mm2->outputs[0];
    std::vector<Node*> layout;
    int64_t hq = 0, hk = 0, hv = 0;
    Value* rq = rows_of_heads(g, q, {0, 2, 1, 3}, mm1, &hq, &layout);
    Value* rk = rq ? rows_of_heads(g, kt, {0, 2, 3, 1}, mm1, &hk, &layout) : nullptr;
    Value* rv = rk ? rows_of_heads(g, v, {0, 2, 1, 3}, mm2, &hv, &layout) : nullptr;
    Value* rows_out = rv ? heads_to_rows(g, out, &layout) : nullptr;
    const bool by_heads = rows_out != nullptr && hq == hk && hk == hv && q != kt && q != v && kt != v;
    if (by_heads) {
      q = rq;
      kt = rk;
      v = rv;
      out = rows_out;
      absorbed.insert(absorbed.end(), layout.begin(), layout.end());
    }
    mm1->dead = true;
    for (Node* a : absorbed) a->dead = true;
    std::vector<Value*> inputs = {q, kt, v, scale, mask};
    while (inputs.back() == nullptr) inputs.pop_back();
    Node* f = g.add_node_producing("TesseraAttention", mm1->name, inputs, {out});
    f->opset = mm1->opset;
    if (by_heads) {
      Attribute h;
      h.kind = Attribute::Kind::kInt;
      h.i = hq;
      f->attrs["heads"] = h;
    }
    Attribute a;
    a.kind = Attribute::Kind::kString;
    a.s = scale_op;
    f->attrs["scale_op"] = a;
    ++fused;
  }
  return finish(g, fused);
}

}  // namespace tessera
