// block_channels: convs that read and write activations in the
// channel-blocked layout (ir/ops/infer_blocked.cc), converted only where
// enough of them chain for the conversions to pay.
//
// A conv qualifies when its blocked kernel exists: a 1x1 conv without
// padding (group 1), a depthwise conv, or a grouped conv whose groups hold
// whole blocks (RegNet's 16 channels), without dilation, its weights
// constant, its input and output channels multiples of the block
// (a Conv or a TesseraFusedConv: the epilogue comes along, its residual
// blocked too). Qualifying convs joined by the values one writes and
// another reads (as input or residual) form groups; a group of at least
// `min_convs`, with at most one conversion (a value in or out) per
// kBlockedConvsPerConversion convs, becomes TesseraBlockedConvs. Each value entering a group is
// converted once (TesseraToBlocked, shared by its readers in the group);
// each value leaving it (read by another op or a graph output) is
// converted back once (TesseraFromBlocked, keeping the value and its
// name), and values inside it exist only blocked.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "base/strings.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"

namespace tessera {
namespace {

bool all_ones(const Node& n, const char* attr, int64_t want) {
  for (int64_t v : n.attr_ints(attr, {want, want}))
    if (v != want) return false;
  return true;
}

// Whether `n` has a blocked kernel for blocks of `b` channels.
bool blockable(const Node& n, int64_t b) {
  if (n.dead || (n.op_type != "Conv" && n.op_type != "TesseraFusedConv") || n.outputs.size() != 1) return false;
  const Value* x = n.inputs[0];
  const Value* w = n.inputs[1];
  if (x->dtype != DType::kFloat32 || !w->is_constant() || w->dtype != DType::kFloat32) return false;
  if (x->shape.rank() != 4 || w->shape.rank() != 4 || n.outputs[0]->shape.rank() != 4) return false;
  const int64_t c = x->shape[1], m = w->shape[0], group = n.attr_int("group", 1);
  if (c % b != 0 || m % b != 0 || !all_ones(n, "dilations", 1)) return false;
  if (const Value* r = n.input(3); r != nullptr && r->shape.rank() != 4) return false;
  const std::string pad = n.attr_string("auto_pad", "NOTSET");
  const bool depthwise = group == c && m == c && w->shape[1] == 1;
  const std::vector<int64_t> pads = n.attr_ints("pads", {0, 0, 0, 0});
  const bool pointwise = group == 1 && w->shape[2] == 1 && w->shape[3] == 1 && (pad == "NOTSET" || pad == "VALID") &&
                         std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
  const bool grouped = group > 1 && !depthwise && (c / group) % b == 0 && (m / group) % b == 0;
  return depthwise || pointwise || grouped;
}

// Union-find's root of i, halving the path.
int root(std::vector<int>& parent, int i) {
  while (parent[static_cast<size_t>(i)] != i) {
    int& up = parent[static_cast<size_t>(i)];
    up = parent[static_cast<size_t>(up)];
    i = up;
  }
  return i;
}

}  // namespace

Result<int> block_channels(Graph& g, int64_t block, int min_convs) {
  // 1. The qualifying convs, grouped by the values that join them.
  std::vector<Node*> convs;
  std::map<const Node*, int> index;
  for (const auto& n : g.nodes())
    if (blockable(*n, block)) {
      index[n.get()] = static_cast<int>(convs.size());
      convs.push_back(n.get());
    }
  std::vector<int> parent(convs.size());
  std::iota(parent.begin(), parent.end(), 0);
  for (size_t i = 0; i < convs.size(); ++i)
    for (const Value* in : {convs[i]->inputs[0], convs[i]->input(3)}) {
      if (in == nullptr || in->producer == nullptr) continue;
      auto it = index.find(in->producer);
      if (it != index.end()) parent[static_cast<size_t>(root(parent, static_cast<int>(i)))] = root(parent, it->second);
    }
  // Per group: its convs, and the values converted at its edges (read by
  // it and made elsewhere; made by it and read elsewhere or a graph output).
  std::map<int, int> group_size;
  std::map<int, std::set<const Value*>> edges;
  for (size_t i = 0; i < convs.size(); ++i) {
    const int r = root(parent, static_cast<int>(i));
    ++group_size[r];
    for (const Value* in : {convs[i]->inputs[0], convs[i]->input(3)})
      if (in != nullptr && (in->producer == nullptr || !index.count(in->producer))) edges[r].insert(in);
    const Value* y = convs[i]->outputs[0];
    bool outside = y->is_output;
    for (const Node* u : y->uses) outside = outside || (!u->dead && !index.count(u));
    if (outside) edges[r].insert(y);
  }
  std::vector<bool> take(convs.size(), false);
  int taken = 0;
  for (size_t i = 0; i < convs.size(); ++i) {
    const int r = root(parent, static_cast<int>(i));
    const int size = group_size[r], conversions = static_cast<int>(edges[r].size());
    if (size >= min_convs && conversions * kBlockedConvsPerConversion <= size) take[i] = true, ++taken;
  }
  if (taken == 0) return 0;

  // 2. Each taken conv becomes a TesseraBlockedConv, in graph order (a
  // producer before its readers).
  std::map<const Value*, Value*> blocked;  // value -> its blocked form
  auto to_blocked = [&](Value* v) -> Result<Value*> {
    if (auto it = blocked.find(v); it != blocked.end()) return it->second;
    Node* t = g.add_node("TesseraToBlocked", v->name + "/to_blocked", {v}, 1);
    Attribute a;
    a.i = block;
    t->attrs["block"] = a;
    TESSERA_RETURN_IF_ERROR(op_infer(*t));
    blocked[v] = t->outputs[0];
    return t->outputs[0];
  };
  std::vector<Node*> made;
  for (size_t i = 0; i < convs.size(); ++i) {
    if (!take[i]) continue;
    Node* n = convs[i];
    std::vector<Value*> inputs = n->inputs;
    TESSERA_ASSIGN_OR_RETURN(inputs[0], to_blocked(n->inputs[0]));
    if (n->input(3) != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(inputs[3], to_blocked(n->inputs[3]));
    }
    Node* b = g.add_node("TesseraBlockedConv", n->name, inputs, 1, {n->outputs[0]->name + "/blocked"});
    b->opset = n->opset;
    b->attrs = n->attrs;
    TESSERA_RETURN_IF_ERROR(op_infer(*b));
    blocked[n->outputs[0]] = b->outputs[0];
    made.push_back(b);
    n->dead = true;
  }
  // 3. Values that leave a group: back to NCHW, keeping their identity,
  // for readers outside it and graph outputs.
  for (size_t i = 0; i < convs.size(); ++i) {
    if (!take[i]) continue;
    Value* y = convs[i]->outputs[0];
    bool outside = y->is_output;
    for (const Node* u : y->uses) outside = outside || (!u->dead && u->op_type != "TesseraBlockedConv");
    if (!outside) continue;
    Node* f = g.add_node_producing("TesseraFromBlocked", y->name + "/from_blocked", {blocked[y]}, {y});
    TESSERA_RETURN_IF_ERROR(op_infer(*f));
  }
  g.compact();
  TESSERA_RETURN_IF_ERROR(g.sort_topologically());
  return taken;
}

}  // namespace tessera
