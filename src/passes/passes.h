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

// In-place Concat. When every dimension of a Concat's output before the
// axis is 1, each part is one contiguous byte range of the output; a part
// whose range starts and ends on a 64-byte boundary can be written there
// by the node that makes it, and the Concat then has nothing to copy for
// it. place_concats_in_place turns Concats with such parts into
// TesseraConcat (attribute `in_place`: 1 or 0 per input) and returns how
// many; the memory planners place each in-place part at its Alias.
// A part qualifies when it is a runtime value made by a node (neither a
// constant, a graph input nor a graph output), appears once among the
// Concat's inputs, is in place in no other Concat, and does not itself
// hold in-place parts (no nesting).
struct Alias {
  const Value* base = nullptr;  // the Concat's output
  size_t offset = 0;            // bytes into it
};
using AliasMap = std::unordered_map<const Value*, Alias>;
int place_concats_in_place(Graph& g);
// The aliases g's TesseraConcats ask for, each checked against the rules
// above (graphs read from files are not trusted); the error names the node
// and the part.
Result<AliasMap> value_aliases(const Graph& g);
// Byte offset of input `i` inside the output of Concat-like node `n`, or
// -1 when that part cannot be in place there (layout or alignment).
int64_t concat_part_offset(const Node& n, size_t i);

// Arena placement of runtime values (not constants). Offsets are multiples
// of 64. `order` is the execution order of nodes; a value lives from the
// step that writes it to the last step that reads it; graph inputs live
// through the whole run (they are bound once and read by every run), graph
// outputs until after the last step.
struct MemoryPlan {
  size_t arena_bytes = 0;
  size_t naive_bytes = 0;  // sum of all slot sizes (value_slot_bytes), for comparison
  std::unordered_map<const Value*, size_t> offset;
};
// In-place Concat parts (`aliases`) share their Concat output's lifetime and
// take their offset from its place.
MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& order, const AliasMap& aliases);

// The placement under both plans: `values` get offsets, largest first, each
// at the lowest offset not used by an already placed value it conflicts with
// (conflict(i, j): values i and j may be live at the same time) and, for
// values of a page or more, at one of 16 positions within a 4 KB page
// chosen by the value's index (see memory_plan.cc: 4K aliasing), for
// values of 64 KB or more.
MemoryPlan place_values(const std::vector<const Value*>& values,
                        const std::function<bool(size_t, size_t)>& conflict);
size_t value_bytes(const Value* v);  // rounded up to 64
// value_bytes plus the most its colouring can pad it (4 KB for values of
// 64 KB or more): the arena never exceeds the sum of these.
size_t value_slot_bytes(const Value* v);
// Gives each in-place part its place inside its (already placed) base and
// counts it in naive_bytes.
void place_aliases(MemoryPlan* plan, const AliasMap& aliases);

}  // namespace tessera
