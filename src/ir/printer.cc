#include "ir/printer.h"

#include <sstream>

#include "base/strings.h"
#include "ir/ops/op_registry.h"

namespace tessera {

GraphSummary graph_summarize(const Graph& g) {
  GraphSummary s;
  for (auto& n : g.nodes()) {
    if (n->dead) continue;
    ++s.nodes;
    ++s.op_counts[n->op_type];
    bool shapes = true;
    for (Value* v : n->inputs)
      if (v && !v->shape_known) shapes = false;
    for (Value* v : n->outputs)
      if (!v->shape_known) shapes = false;
    if (shapes) s.flops += op_flops(*n);
  }
  for (auto& v : g.values()) {
    if (!v->is_constant()) continue;
    s.parameters += v->constant->numel();
    s.parameter_bytes += static_cast<int64_t>(v->constant->nbytes());
  }
  return s;
}

std::string value_to_text(const Value& v) {
  return str_cat(dtype_name(v.dtype), " ", v.shape_known || v.is_input ? v.shape.to_string() : "?");
}

static std::string attr_to_text(const Attribute& a) {
  switch (a.kind) {
    case Attribute::Kind::kInt: return std::to_string(a.i);
    case Attribute::Kind::kFloat: return str_cat(a.f);
    case Attribute::Kind::kString: return str_cat("\"", a.s, "\"");
    case Attribute::Kind::kInts: return str_cat("[", str_join(a.ints, ","), "]");
    case Attribute::Kind::kFloats: return str_cat("[", str_join(a.floats, ","), "]");
    case Attribute::Kind::kStrings: return str_cat("[", str_join(a.strings, ","), "]");
    case Attribute::Kind::kTensor: return str_cat("tensor<", dtype_name(a.t.dtype()), " ", shape_string(a.t.shape()), ">");
  }
  return "?";
}

std::string graph_to_text(const Graph& g) {
  std::ostringstream os;
  os << "graph " << (g.name.empty() ? "(unnamed)" : g.name) << " opset " << g.opset << "\n";
  for (Value* v : g.inputs()) os << "  input %" << v->name << " : " << value_to_text(*v) << "\n";
  for (auto& n : g.nodes()) {
    if (n->dead) continue;
    os << "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i) os << (i ? ", %" : "%") << n->outputs[i]->name;
    os << " = " << n->op_type << "(";
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (i) os << ", ";
      os << (n->inputs[i] ? "%" + n->inputs[i]->name : "<none>");
    }
    os << ")";
    if (!n->attrs.empty()) {
      os << " {";
      bool first = true;
      for (auto& [k, a] : n->attrs) {
        os << (first ? "" : ", ") << k << "=" << attr_to_text(a);
        first = false;
      }
      os << "}";
    }
    if (!n->outputs.empty()) os << " : " << value_to_text(*n->outputs[0]);
    os << "\n";
  }
  for (Value* v : g.outputs()) os << "  output %" << v->name << " : " << value_to_text(*v) << "\n";
  return os.str();
}

}  // namespace tessera
