// Shape inference for elementwise, linear-algebra, reduction and
// normalization ops.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "base/strings.h"
#include "ir/ops/infer.h"
#include "ir/ops/op_registry.h"

namespace tessera {

void set_output(Node& n, size_t i, DType dtype, Shape shape) {
  if (i >= n.outputs.size()) return;
  Value* o = n.outputs[i];
  o->dtype = dtype;
  o->shape = std::move(shape);
  o->shape_known = true;
}

Status infer_same(Node& n) {
  set_output(n, 0, n.inputs[0]->dtype, n.inputs[0]->shape);
  return Status();
}

Status infer_same_bool(Node& n) {
  if (n.inputs[0]->dtype != DType::kBool) return invalid_argument("input must be bool");
  set_output(n, 0, DType::kBool, n.inputs[0]->shape);
  return Status();
}

Status infer_cast(Node& n) {
  int64_t to = n.attr_int("to", 0);
  DType dt;
  switch (to) {
    case 1: case 10: case 11: case 16: dt = DType::kFloat32; break;  // storage floats compute as float32
    case 7: dt = DType::kInt64; break;
    case 6: dt = DType::kInt32; break;
    case 3: dt = DType::kInt8; break;
    case 2: dt = DType::kUInt8; break;
    case 9: dt = DType::kBool; break;
    default: return unimplemented(str_cat("Cast to ONNX type ", to, " is not supported"));
  }
  set_output(n, 0, dt, n.inputs[0]->shape);
  return Status();
}

Status infer_dropout(Node& n) {
  if (n.inputs.size() > 2 && n.inputs[2] != nullptr) {
    // Training mode is the identity only when the ratio is 0.
    Value* t = n.inputs[2];
    Value* ratio = n.input(1);
    bool training = !t->is_constant() || t->constant->value_as_int64(0) != 0;
    bool zero_ratio = ratio != nullptr && ratio->is_constant() && ratio->constant->numel() == 1 &&
                      ratio->constant->value_as_double(0) == 0.0;
    if (training && !zero_ratio)
      return unimplemented("Dropout in training mode is not supported (Tessera runs inference)");
  }
  set_output(n, 0, n.inputs[0]->dtype, n.inputs[0]->shape);
  set_output(n, 1, DType::kBool, n.inputs[0]->shape);
  return Status();
}

static Result<Shape> broadcast_all(const Node& n, size_t first) {
  Shape s = n.inputs[first]->shape;
  for (size_t i = first + 1; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == nullptr) continue;
    TESSERA_ASSIGN_OR_RETURN(s, broadcast_shapes(s, n.inputs[i]->shape));
  }
  return s;
}

static Status check_same_dtypes(const Node& n, size_t first) {
  for (size_t i = first + 1; i < n.inputs.size(); ++i) {
    if (n.inputs[i] != nullptr && n.inputs[i]->dtype != n.inputs[first]->dtype)
      return invalid_argument(str_cat("inputs '", n.inputs[first]->name, "' (", dtype_name(n.inputs[first]->dtype),
                                      ") and '", n.inputs[i]->name, "' (", dtype_name(n.inputs[i]->dtype),
                                      ") have different types"));
  }
  return Status();
}

Status infer_broadcast(Node& n) {
  if (n.op_type != "Pow") TESSERA_RETURN_IF_ERROR(check_same_dtypes(n, 0));
  TESSERA_ASSIGN_OR_RETURN(Shape s, broadcast_all(n, 0));
  set_output(n, 0, n.inputs[0]->dtype, s);
  return Status();
}

Status infer_broadcast_bool(Node& n) {
  TESSERA_RETURN_IF_ERROR(check_same_dtypes(n, 0));
  TESSERA_ASSIGN_OR_RETURN(Shape s, broadcast_all(n, 0));
  set_output(n, 0, DType::kBool, s);
  return Status();
}

Status infer_where(Node& n) {
  if (n.inputs[0]->dtype != DType::kBool) return invalid_argument("condition must be bool");
  TESSERA_RETURN_IF_ERROR(check_same_dtypes(n, 1));
  TESSERA_ASSIGN_OR_RETURN(Shape s, broadcast_all(n, 0));
  set_output(n, 0, n.inputs[1]->dtype, s);
  return Status();
}

Status infer_matmul(Node& n) {
  Shape a = n.inputs[0]->shape, b = n.inputs[1]->shape;
  if (a.rank() == 0 || b.rank() == 0) return invalid_argument("MatMul inputs must have rank >= 1");
  TESSERA_RETURN_IF_ERROR(check_same_dtypes(n, 0));
  bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
  if (a_vec) a = Shape{1, a.dims[0]};
  if (b_vec) b = Shape{b.dims[0], 1};
  int64_t k = a.dims[a.rank() - 1];
  if (b.dims[b.rank() - 2] != k)
    return invalid_argument(str_cat("inner dimensions differ: ", n.inputs[0]->shape.to_string(), " x ",
                                    n.inputs[1]->shape.to_string()));
  Shape ab(std::vector<int64_t>(a.dims.begin(), a.dims.end() - 2));
  Shape bb(std::vector<int64_t>(b.dims.begin(), b.dims.end() - 2));
  TESSERA_ASSIGN_OR_RETURN(Shape batch, broadcast_shapes(ab, bb));
  std::vector<int64_t> out = batch.dims;
  if (!a_vec) out.push_back(a.dims[a.rank() - 2]);
  if (!b_vec) out.push_back(b.dims[b.rank() - 1]);
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_gemm(Node& n) {
  const Shape& a = n.inputs[0]->shape;
  const Shape& b = n.inputs[1]->shape;
  if (a.rank() != 2 || b.rank() != 2) return invalid_argument("Gemm inputs A and B must be 2-D");
  bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
  if (k != kb)
    return invalid_argument(str_cat("inner dimensions differ: A ", a.to_string(), " B ", b.to_string()));
  Shape out{m, nn};
  if (Value* c = n.input(2)) {
    TESSERA_ASSIGN_OR_RETURN(Shape bc, broadcast_shapes(out, c->shape));
    if (!(bc == out)) return invalid_argument(str_cat("C ", c->shape.to_string(), " does not broadcast to ", out.to_string()));
  }
  set_output(n, 0, DType::kFloat32, out);
  return Status();
}

Result<EinsumSpec> parse_einsum(const std::string& equation, const std::vector<int>& ranks) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  if (eq.find("...") != std::string::npos) return unimplemented("Einsum with '...' is not supported");
  EinsumSpec spec;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  spec.operands = str_split(lhs, ',');
  if (spec.operands.size() != ranks.size())
    return invalid_argument(str_cat("equation '", equation, "' names ", spec.operands.size(), " operands, node has ",
                                    ranks.size()));
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (char c : spec.operands[i])
      if (!std::isalpha(static_cast<unsigned char>(c))) return invalid_argument(str_cat("bad equation '", equation, "'"));
    if (static_cast<int>(spec.operands[i].size()) != ranks[i])
      return invalid_argument(str_cat("operand ", i, " has rank ", ranks[i], " but equation term '", spec.operands[i],
                                      "'"));
  }
  if (arrow != std::string::npos) {
    spec.output = eq.substr(arrow + 2);
  } else {  // implicit: letters appearing once, alphabetically
    std::map<char, int> count;
    for (auto& op : spec.operands)
      for (char c : op) ++count[c];
    for (auto& [c, k] : count)
      if (k == 1) spec.output += c;
  }
  return spec;
}

Status infer_einsum(Node& n) {
  std::vector<int> ranks;
  for (Value* v : n.inputs) ranks.push_back(v->shape.rank());
  TESSERA_ASSIGN_OR_RETURN(EinsumSpec spec, parse_einsum(n.attr_string("equation", ""), ranks));
  std::map<char, int64_t> extent;
  for (size_t i = 0; i < spec.operands.size(); ++i) {
    for (size_t j = 0; j < spec.operands[i].size(); ++j) {
      char c = spec.operands[i][j];
      int64_t d = n.inputs[i]->shape.dims[j];
      auto it = extent.find(c);
      if (it != extent.end() && it->second != d)
        return invalid_argument(str_cat("index '", c, "' has extents ", it->second, " and ", d));
      extent[c] = d;
    }
  }
  std::vector<int64_t> out;
  for (char c : spec.output) {
    auto it = extent.find(c);
    if (it == extent.end()) return invalid_argument(str_cat("output index '", c, "' appears in no operand"));
    out.push_back(it->second);
  }
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Result<std::vector<int>> reduce_axes(const Node& n, int rank, bool* noop) {
  std::vector<int64_t> axes;
  *noop = false;
  if (n.input(1) != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(axes, const_ints_input(n, 1, "axes"));
  } else {
    axes = n.attr_ints("axes");
  }
  std::set<int> out;
  if (axes.empty()) {
    if (n.attr_int("noop_with_empty_axes", 0) != 0) {
      *noop = true;
      return std::vector<int>{};
    }
    for (int i = 0; i < rank; ++i) out.insert(i);
  }
  for (int64_t a : axes) {
    int ax;
    if (!normalize_axis(a, rank, &ax)) return invalid_argument(str_cat("axis ", a, " is out of range for rank ", rank));
    out.insert(ax);
  }
  return std::vector<int>(out.begin(), out.end());
}

Status infer_reduce(Node& n) {
  const Shape& in = n.inputs[0]->shape;
  bool noop;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int> axes, reduce_axes(n, in.rank(), &noop));
  bool keep = n.attr_int("keepdims", 1) != 0;
  std::vector<int64_t> out;
  for (int i = 0; i < in.rank(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (reduced && (n.op_type == "ReduceMax" || n.op_type == "ReduceMin") && in.dims[i] == 0)
      return invalid_argument(str_cat(n.op_type, " over an empty axis ", i, " has no identity"));
    if (!reduced) out.push_back(in.dims[i]);
    else if (keep) out.push_back(1);
  }
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_argmax(Node& n) {
  const Shape& in = n.inputs[0]->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", 0), std::max(in.rank(), 1), &axis) || in.rank() == 0)
    return invalid_argument("axis is out of range");
  if (in.dims[axis] == 0) return invalid_argument("ArgMax over an empty axis");
  std::vector<int64_t> out;
  for (int i = 0; i < in.rank(); ++i) {
    if (i != axis) out.push_back(in.dims[i]);
    else if (n.attr_int("keepdims", 1) != 0) out.push_back(1);
  }
  set_output(n, 0, DType::kInt64, Shape(out));
  return Status();
}

Status infer_batch_norm(Node& n) {
  if (n.attr_int("training_mode", 0) != 0)
    return unimplemented("BatchNormalization in training mode is not supported (Tessera runs inference)");
  const Shape& x = n.inputs[0]->shape;
  if (x.rank() < 2) return invalid_argument("input must have rank >= 2");
  for (int i = 1; i < 5; ++i) {
    const Shape& p = n.inputs[i]->shape;
    if (p.rank() != 1 || p.dims[0] != x.dims[1])
      return invalid_argument(str_cat("parameter '", n.inputs[i]->name, "' has shape ", p.to_string(), ", expected ",
                                      x.dims[1]));
  }
  if (n.outputs.size() > 1) return unimplemented("BatchNormalization with running-statistics outputs (training)");
  set_output(n, 0, n.inputs[0]->dtype, x);
  return Status();
}

Status infer_layer_norm(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", -1), x.rank(), &axis)) return invalid_argument("axis is out of range");
  std::vector<int64_t> stat = x.dims;
  for (int i = axis; i < x.rank(); ++i) stat[i] = 1;
  set_output(n, 0, n.inputs[0]->dtype, x);
  set_output(n, 1, DType::kFloat32, Shape(stat));
  set_output(n, 2, DType::kFloat32, Shape(stat));
  return Status();
}

// FLOPs.
double flops_zero(const Node&) { return 0; }
double flops_out_numel(const Node& n) { return static_cast<double>(n.outputs[0]->shape.numel()); }
double flops_in_numel(const Node& n) { return static_cast<double>(n.inputs[0]->shape.numel()); }

double flops_matmul(const Node& n) {
  const Shape& a = n.inputs[0]->shape;
  double outputs = 0;  // several when a fused MatMul writes a Split of its columns
  for (const Value* o : n.outputs) outputs += static_cast<double>(o->shape.numel());
  return 2.0 * outputs * static_cast<double>(a.dims.back());
}

double flops_gemm(const Node& n) {
  const Shape& a = n.inputs[0]->shape;
  int64_t k = n.attr_int("transA", 0) ? a[0] : a[1];
  return 2.0 * static_cast<double>(n.outputs[0]->shape.numel()) * static_cast<double>(k);
}

double flops_einsum(const Node& n) {
  // Product of all distinct index extents, times two.
  std::map<char, int64_t> extent;
  std::vector<int> ranks;
  for (Value* v : n.inputs) ranks.push_back(v->shape.rank());
  auto spec = parse_einsum(n.attr_string("equation", ""), ranks);
  if (!spec.ok()) return 0;
  for (size_t i = 0; i < spec->operands.size(); ++i)
    for (size_t j = 0; j < spec->operands[i].size(); ++j) extent[spec->operands[i][j]] = n.inputs[i]->shape.dims[j];
  double f = 2;
  for (auto& [c, d] : extent) f *= static_cast<double>(d);
  return f;
}

// TesseraFusedElementwise: a chain of float elementwise ops made by the
// compiler's fusion pass; every input broadcasts to the output.
Status infer_fused_elementwise(Node& n) {
  Shape out = n.inputs[0]->shape;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == nullptr) return invalid_argument("fused elementwise inputs cannot be absent");
    TESSERA_ASSIGN_OR_RETURN(out, broadcast_shapes(out, n.inputs[i]->shape));
  }
  for (const Value* v : n.inputs)
    if (v->dtype != DType::kFloat32) return invalid_argument("fused elementwise inputs must be float32");
  n.outputs[0]->dtype = DType::kFloat32;
  n.outputs[0]->shape = out;
  n.outputs[0]->shape_known = true;
  return Status();
}

double flops_fused_elementwise(const Node& n) {
  return static_cast<double>(n.outputs[0]->shape.numel()) * static_cast<double>(n.attr_ints("sides").size());
}

}  // namespace tessera
