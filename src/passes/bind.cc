#include <algorithm>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "passes/passes.h"

namespace tessera {
namespace {

Status bind_input(Value* v, const BindOptions& options) {
  auto it = options.input_shapes.find(v->name);
  if (it != options.input_shapes.end()) {
    const Shape& given = it->second;
    if (!v->shape.dims.empty() && given.rank() != v->shape.rank())
      return invalid_argument(str_cat("the shape given for input '", v->name, "', ", given.to_string(), ", has rank ",
                                      given.rank(), "; the model declares ", v->shape.to_string()));
    for (int i = 0; i < v->shape.rank(); ++i) {
      if (v->shape.dims[i] >= 0 && v->shape.dims[i] != given.dims[i])
        return invalid_argument(str_cat("the shape given for input '", v->name, "', ", given.to_string(),
                                        ": dimension ", i, " is fixed to ", v->shape.dims[i], " by the model"));
    }
    v->shape = Shape(given.dims);
  } else {
    for (int i = 0; i < v->shape.rank(); ++i) {
      if (v->shape.dims[i] >= 0) continue;
      std::string sym = v->shape.symbols[i].empty() ? "" : str_cat(" ('", v->shape.symbols[i], "')");
      std::string example = v->shape.to_string();
      std::vector<int64_t> ex = v->shape.dims;
      for (auto& d : ex)
        if (d < 0) d = 1;
      return invalid_argument(str_cat("input '", v->name, "' has a dynamic dimension ", i, sym, " (shape ",
                                      v->shape.to_string(), "); bind its size when compiling, e.g. ", v->name, "=",
                                      Shape(ex).to_string()));
    }
  }
  double bytes = static_cast<double>(dtype_size(v->dtype));
  for (int64_t d : v->shape.dims) bytes *= static_cast<double>(d);
  if (bytes > static_cast<double>(kMaxValueBytes))
    return resource_exhausted(str_cat("input '", v->name, "' of shape ", v->shape.to_string(), " would take ",
                                      bytes / (1 << 30), " GiB, over the ", kMaxValueBytes >> 30,
                                      " GiB limit for one tensor"));
  v->shape_known = true;
  return Status();
}

bool all_inputs_constant(const Node& n) {
  for (Value* in : n.inputs)
    if (in != nullptr && !in->is_constant()) return false;
  return true;
}

}  // namespace

Status bind_shapes(Graph& g, const BindOptions& options, const Evaluator& eval) {
  for (auto& [name, shape] : options.input_shapes) {
    Value* v = g.find_value(name);
    if (v == nullptr || !v->is_input) {
      std::vector<std::string> names;
      for (Value* in : g.inputs()) names.push_back(in->name);
      return invalid_argument(str_cat("a shape is given for '", name, "', which is not an input of the model (inputs: ",
                                      str_join(names, ", "), ")"));
    }
  }
  for (Value* v : g.inputs()) TESSERA_RETURN_IF_ERROR(bind_input(v, options));
  for (auto& np : g.nodes()) {
    Node& n = *np;
    TESSERA_RETURN_IF_ERROR(op_infer(n));
    if (!options.fold_constants) continue;
    if (n.op_type == "Shape") {  // depends only on a static shape: always fold
      const Shape& s = n.inputs[0]->shape;
      int64_t len = n.outputs[0]->shape.dims[0];
      int64_t start = n.attr_int("start", 0);
      if (start < 0) start += s.rank();
      start = std::clamp<int64_t>(start, 0, s.rank());
      std::vector<int64_t> dims(s.dims.begin() + start, s.dims.begin() + start + len);
      n.outputs[0]->constant = Tensor::from_int64s(dims, Shape{len});
      continue;
    }
    if (!all_inputs_constant(n)) continue;
    size_t bytes = 0;
    for (Value* o : n.outputs) bytes += static_cast<size_t>(o->shape.numel()) * dtype_size(o->dtype);
    if (bytes > options.max_folded_bytes) continue;
    std::vector<Tensor> outs;
    TESSERA_RETURN_IF_ERROR(eval(n, &outs).with_context(str_cat("folding ", n.label())));
    for (size_t i = 0; i < n.outputs.size() && i < outs.size(); ++i) n.outputs[i]->constant = std::move(outs[i]);
  }
  return Status();
}

SimplifyStats simplify(Graph& g) {
  SimplifyStats st;
  for (auto& np : g.nodes()) {
    Node& n = *np;
    bool passthrough = n.op_type == "Identity" || n.op_type == "Dropout";
    if (passthrough && !n.outputs[0]->is_output && !n.outputs[0]->is_constant()) {
      if (n.outputs.size() > 1 && g.use_count(n.outputs[1]) > 0) continue;  // Dropout mask in use
      g.replace_uses(n.outputs[0], n.inputs[0]);
      n.dead = true;
      ++st.identities_removed;
    }
  }
  for (auto& np : g.nodes()) {
    Node& n = *np;
    if (n.dead) continue;
    bool folded = std::all_of(n.outputs.begin(), n.outputs.end(), [](Value* o) { return o->is_constant(); });
    if (folded && !n.outputs.empty()) {
      n.dead = true;
      ++st.folded_removed;
    }
  }
  // Dead code: walk backwards, keeping nodes that feed an output.
  for (int changed = 1; changed;) {
    changed = 0;
    for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
      Node& n = **it;
      if (n.dead) continue;
      bool used = false;
      for (Value* o : n.outputs) used = used || o->is_output || g.use_count(o) > 0;
      if (!used) {
        n.dead = true;
        ++st.dead_removed;
        changed = 1;
      }
    }
  }
  g.compact();
  return st;
}

}  // namespace tessera
