// Graph passes, in the order the compiler runs them:
//
//   bind_shapes      give every input a static shape (from the model or
//                    --shape), infer every value's dtype and shape, and fold
//                    every node whose inputs are all constant — which takes
//                    care of the Shape -> Gather -> Concat -> Reshape chains
//                    PyTorch exports, because Shape folds as soon as its
//                    input's shape is known;
//   simplify         drop Identity/Dropout, folded and dead nodes;
//   plan_memory      assign every runtime value an offset in one arena,
//                    sharing bytes between values whose lifetimes do not
//                    overlap.
//
// Folding needs an implementation of the ops, which lives in a lower layer
// (kernels/); the caller passes it in as an Evaluator.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "tessera/status.h"

namespace tessera {

// Computes all outputs of `node` from its (constant) inputs.
using Evaluator = std::function<Status(const Node& node, std::vector<Tensor>* outputs)>;

struct BindOptions {
  std::map<std::string, Shape> input_shapes;  // overrides, by input name
  bool fold_constants = true;
  size_t max_folded_bytes = 64 << 20;  // larger results stay runtime work
};

Status bind_shapes(Graph& g, const BindOptions& options, const Evaluator& eval);

struct SimplifyStats {
  int identities_removed = 0;
  int folded_removed = 0;
  int dead_removed = 0;
};
SimplifyStats simplify(Graph& g);

// Arena placement of runtime values (not constants). Offsets are multiples
// of 64. `order` is the execution order of nodes; a value lives from the
// step that writes it to the last step that reads it; graph inputs live
// through the whole run (they are bound once and read by every run), graph
// outputs until after the last step.
struct MemoryPlan {
  size_t arena_bytes = 0;
  size_t naive_bytes = 0;  // sum of all sizes, for comparison
  std::unordered_map<const Value*, size_t> offset;
};
MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& order);

// The placement under both plans: `values` get offsets, largest first, each
// at the lowest offset not used by an already placed value it conflicts with
// (conflict(i, j): values i and j may be live at the same time).
MemoryPlan place_values(const std::vector<const Value*>& values,
                        const std::function<bool(size_t, size_t)>& conflict);
size_t value_bytes(const Value* v);  // rounded up to 64

}  // namespace tessera
