// mark_out_planes: which 1x1 convs cut their rTasks into whole output
// planes (program.h).
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/program.h"

namespace tessera {
namespace {

using Readers = std::unordered_map<const Value*, std::vector<const Node*>>;

bool is_conv(const Node& n) { return n.op_type == "Conv" || n.op_type == "TesseraFusedConv"; }

// A dense 1x1 at stride 1, unpadded: the pointwise rKernel's convs.
bool is_1x1(const Node& n) {
  if (!is_conv(n) || n.outputs.size() != 1 || n.inputs.size() < 2 || n.inputs[1] == nullptr ||
      n.attr_int("group", 1) != 1)
    return false;
  const Shape& w = n.inputs[1]->shape;
  if (w.rank() != 4 || w.dims[2] != 1 || w.dims[3] != 1) return false;
  for (int64_t s : n.attr_ints("strides", {1, 1}))
    if (s != 1) return false;
  for (int64_t p : n.attr_ints("pads", {0, 0, 0, 0}))
    if (p != 0) return false;
  return true;
}

// Whether a 1x1 can give two rTasks whole planes (blocks of at least 16
// output channels).
bool splits_planes(const Node& n) { return n.inputs[1]->shape.dims[0] >= 32; }

// Whether reader `c` cuts its work by pixel blocks, reading a piece of
// every plane of its input: a dense conv other than a 1x1 (im2col,
// Winograd, direct), or a 1x1 that keeps pixel blocks. Everything else
// takes planes or ranges (activations, elementwise ops, pools, depthwise
// and grouped convs by groups) or reads its whole input (a 1x1 cut by
// output planes, MatMul, Gemm).
bool cuts_pixels(const Node& c, const std::unordered_set<const Node*>& marked) {
  if (!is_conv(c) || c.attr_int("group", 1) != 1) return false;
  if (!is_1x1(c)) return true;
  const Shape& y = c.outputs[0]->shape;
  const int64_t pixels = y.rank() == 4 ? y.dims[2] * y.dims[3] : 0;
  return !(marked.count(&c) != 0 && splits_planes(c)) && c.inputs[1]->shape.dims[0] <= pixels;
}

// Whether a reader of `v` cuts by pixels; a Concat that holds `v` in place
// passes the question on to its own readers (one that copies counts as
// cutting by pixels).
bool read_by_pixels(const Readers& readers, const Value* v, const std::unordered_set<const Node*>& marked,
                    int depth) {
  auto r = readers.find(v);
  if (r == readers.end()) return false;
  for (const Node* c : r->second) {
    if (c->op_type == "TesseraConcat" || c->op_type == "Concat") {
      const std::vector<int64_t> flags = c->attr_ints("in_place");
      bool in_place = false;
      for (size_t i = 0; i < c->inputs.size() && i < flags.size(); ++i)
        in_place = in_place || (c->inputs[i] == v && flags[i] != 0);
      if (!in_place || depth >= 4 || c->outputs.size() != 1 || read_by_pixels(readers, c->outputs[0], marked, depth + 1))
        return true;
      continue;
    }
    if (cuts_pixels(*c, marked)) return true;
  }
  return false;
}

}  // namespace

int mark_out_planes(Graph& g) {
  // Readers from the node list: earlier passes rewire inputs directly.
  Readers readers;
  std::vector<Node*> order;
  for (auto& np : g.nodes()) {
    if (np->dead) continue;
    order.push_back(np.get());
    for (const Value* v : np->inputs)
      if (v != nullptr) {
        std::vector<const Node*>& r = readers[v];
        if (r.empty() || r.back() != np.get()) r.push_back(np.get());
      }
  }
  // Readers first (nodes are in topological order): whether a 1x1 reader
  // cuts pixels depends on its own mark.
  std::unordered_set<const Node*> marked;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node& n = **it;
    if (!is_1x1(n) || !splits_planes(n) || read_by_pixels(readers, n.outputs[0], marked, 0)) continue;
    Attribute a;
    a.kind = Attribute::Kind::kInt;
    a.i = 1;
    n.attrs["out_planes"] = a;
    marked.insert(&n);
  }
  return static_cast<int>(marked.size());
}

}  // namespace tessera
