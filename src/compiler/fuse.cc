// Epilogue fusion: Conv or Gemm, then (optionally) an Add of a same-shape
// tensor (a residual), then (optionally) an activation, become one
// TesseraFusedConv / TesseraFusedGemm whose rTasks apply the Add and the
// activation to their own output tile while it is in cache
// (kernels/cpu/epilogue.h). Each fused op saves one or two full passes
// (read and write) over the tensor, and one or two steps of the Plan.
#include <limits>

#include "base/strings.h"
#include "compiler/program.h"

namespace tessera {
namespace {

// The one live node reading `v` (once), or nullptr.
Node* sole_consumer(const Graph& g, const Value* v) {
  if (v->is_output) return nullptr;
  Node* found = nullptr;
  for (auto& np : g.nodes()) {
    if (np->dead) continue;
    for (const Value* in : np->inputs) {
      if (in != v) continue;
      if (found != nullptr) return nullptr;
      found = np.get();
    }
  }
  return found;
}

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

}  // namespace

Result<int> fuse_epilogues(Graph& g) {
  int fused = 0;
  const size_t original = g.nodes().size();
  for (size_t i = 0; i < original; ++i) {
    Node& n = *g.nodes()[i];
    if (n.dead || (n.op_type != "Conv" && n.op_type != "Gemm") || n.outputs.size() != 1) continue;
    Value* y = n.outputs[0];
    if (y->dtype != DType::kFloat32) continue;
    std::vector<Node*> absorbed;
    Value* residual = nullptr;
    Node* c = sole_consumer(g, y);
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
    if (c != nullptr && activation(*c, y, &act, &alpha, &beta)) {
      absorbed.push_back(c);
      y = c->outputs[0];
    }
    if (absorbed.empty()) continue;
    n.dead = true;
    for (Node* a : absorbed) a->dead = true;
    std::vector<Value*> inputs = {n.input(0), n.input(1), n.input(2)};
    if (residual != nullptr) inputs.push_back(residual);
    while (!inputs.empty() && inputs.back() == nullptr) inputs.pop_back();
    Node* f = g.add_node_producing(n.op_type == "Conv" ? "TesseraFusedConv" : "TesseraFusedGemm", n.name, inputs, {y});
    f->attrs = n.attrs;
    f->opset = n.opset;
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
    ++fused;
  }
  if (fused == 0) return 0;
  g.compact();
  TESSERA_RETURN_IF_ERROR(g.sort_topologically());
  return fused;
}

}  // namespace tessera
