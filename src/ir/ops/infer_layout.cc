// Shape inference for layout and data-movement ops, several of which read a
// constant input (Reshape's shape, Slice's starts, ...).
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/strings.h"
#include "ir/ops/infer.h"
#include "ir/ops/op_registry.h"

namespace tessera {

Status infer_concat(Node& n) {
  const Shape& first = n.inputs[0]->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", 0), first.rank(), &axis)) return invalid_argument("axis is out of range");
  std::vector<int64_t> out = first.dims;
  out[axis] = 0;
  for (Value* v : n.inputs) {
    if (v == nullptr) return invalid_argument("Concat input is missing");
    if (v->dtype != n.inputs[0]->dtype) return invalid_argument(str_cat("input '", v->name, "' has another type"));
    const Shape& s = v->shape;
    if (s.rank() != first.rank())
      return invalid_argument(str_cat("input '", v->name, "' has rank ", s.rank(), ", expected ", first.rank()));
    for (int i = 0; i < s.rank(); ++i)
      if (i != axis && s.dims[i] != first.dims[i])
        return invalid_argument(str_cat("input '", v->name, "' has shape ", s.to_string(), ", expected ",
                                        first.to_string(), " except on axis ", axis));
    out[axis] += s.dims[axis];
  }
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_constant_of_shape(Node& n) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> dims, const_ints_input(n, 0, "shape"));
  for (int64_t d : dims)
    if (d < 0) return invalid_argument(str_cat("negative dimension ", d));
  DType dt = DType::kFloat32;
  if (n.has_attr("value")) dt = n.attrs.at("value").t.dtype();
  set_output(n, 0, dt, Shape(dims));
  return Status();
}

Status infer_expand(Node& n) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> dims, const_ints_input(n, 1, "shape"));
  TESSERA_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(n.inputs[0]->shape, Shape(dims)));
  set_output(n, 0, n.inputs[0]->dtype, out);
  return Status();
}

Status infer_flatten(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis > x.rank()) return invalid_argument("axis is out of range");
  int a = static_cast<int>(axis);
  set_output(n, 0, n.inputs[0]->dtype, Shape{dims_product(x.dims, 0, a), dims_product(x.dims, a, x.rank())});
  return Status();
}

Status infer_gather(Node& n) {
  const Shape& data = n.inputs[0]->shape;
  const Shape& idx = n.inputs[1]->shape;
  DType it = n.inputs[1]->dtype;
  if (it != DType::kInt64 && it != DType::kInt32) return invalid_argument("indices must be int32 or int64");
  int axis;
  if (!normalize_axis(n.attr_int("axis", 0), data.rank(), &axis)) return invalid_argument("axis is out of range");
  if (Value* iv = n.inputs[1]; iv->is_constant()) {
    for (int64_t i : iv->constant->to_int64s())
      if (i < -data.dims[axis] || i >= data.dims[axis])
        return out_of_range(str_cat("index ", i, " is out of range for axis ", axis, " of extent ", data.dims[axis]));
  }
  std::vector<int64_t> out(data.dims.begin(), data.dims.begin() + axis);
  out.insert(out.end(), idx.dims.begin(), idx.dims.end());
  out.insert(out.end(), data.dims.begin() + axis + 1, data.dims.end());
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Result<std::vector<int64_t>> pad_amounts(const Node& n) {
  int rank = n.inputs[0]->shape.rank();
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> pads, const_ints_input(n, 1, "pads"));
  if (static_cast<int>(pads.size()) != 2 * rank)
    return invalid_argument(str_cat("pads has ", pads.size(), " values, expected ", 2 * rank));
  if (n.input(3) != nullptr) return unimplemented("Pad with an axes input is not supported");
  return pads;
}

Status infer_pad(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> pads, pad_amounts(n));
  std::string mode = n.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return invalid_argument(str_cat("mode '", mode, "' is not constant, reflect or edge"));
  std::vector<int64_t> out(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    out[i] = x.dims[i] + pads[i] + pads[i + x.rank()];
    if (out[i] < 0) return invalid_argument(str_cat("pads make dimension ", i, " negative"));
    if (mode == "reflect" && (pads[i] >= x.dims[i] || pads[i + x.rank()] >= x.dims[i]) &&
        (pads[i] > 0 || pads[i + x.rank()] > 0))
      return invalid_argument(str_cat("reflect padding ", pads[i], "/", pads[i + x.rank()],
                                      " must be smaller than dimension ", i, " (", x.dims[i], ")"));
    if (mode == "edge" && x.dims[i] == 0 && out[i] > 0) return invalid_argument("edge padding of an empty dimension");
  }
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_range(Node& n) {
  for (int i = 0; i < 3; ++i) {
    Value* v = n.inputs[i];
    if (!v->is_constant()) return unimplemented(str_cat("input ", i, " must be a constant once shapes are bound"));
    if (v->shape.numel() != 1) return invalid_argument(str_cat("input ", i, " must be a scalar"));
  }
  double start = n.inputs[0]->constant->value_as_double(0);
  double limit = n.inputs[1]->constant->value_as_double(0);
  double delta = n.inputs[2]->constant->value_as_double(0);
  if (delta == 0) return invalid_argument("delta is zero");
  double count = std::ceil((limit - start) / delta);
  if (!(count < 1e12)) return invalid_argument("range is too long");
  int64_t len = std::max<int64_t>(0, static_cast<int64_t>(count));
  set_output(n, 0, n.inputs[0]->dtype, Shape{len});
  return Status();
}

Status infer_reshape(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> dims, const_ints_input(n, 1, "shape"));
  bool allowzero = n.attr_int("allowzero", 0) != 0;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allowzero) {
      if (static_cast<int>(i) >= x.rank()) return invalid_argument(str_cat("shape[", i, "] = 0 copies a missing dim"));
      dims[i] = x.dims[i];
    }
    if (dims[i] == -1) {
      if (infer_at >= 0) return invalid_argument("shape has more than one -1");
      infer_at = static_cast<int>(i);
      continue;
    }
    if (dims[i] < 0) return invalid_argument(str_cat("shape[", i, "] = ", dims[i], " is negative"));
    known *= dims[i];
  }
  int64_t total = x.numel();
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      return invalid_argument(str_cat("cannot reshape ", x.to_string(), " to ", Shape(dims).to_string()));
    dims[infer_at] = total / known;
  } else if (known != total) {
    return invalid_argument(str_cat("cannot reshape ", x.to_string(), " (", total, " elements) to ",
                                    Shape(dims).to_string(), " (", known, " elements)"));
  }
  set_output(n, 0, n.inputs[0]->dtype, Shape(dims));
  return Status();
}

Result<ResizeParams> resize_params(const Node& n) {
  const Shape& x = n.inputs[0]->shape;
  ResizeParams p;
  std::string mode = n.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear")
    return unimplemented(str_cat("Resize mode '", mode, "' is not supported (nearest, linear are)"));
  if (n.attr_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
    return unimplemented("coordinate_transformation_mode tf_crop_and_resize is not supported");
  if (n.has_attr("axes")) return unimplemented("Resize with axes is not supported");
  Value* scales = n.input(2);
  Value* sizes = n.input(3);
  if (sizes != nullptr && sizes->shape.numel() > 0) {
    TESSERA_ASSIGN_OR_RETURN(p.out, const_ints_input(n, 3, "sizes"));
    if (static_cast<int>(p.out.size()) != x.rank()) return invalid_argument("sizes has the wrong length");
    for (int i = 0; i < x.rank(); ++i) {
      if (p.out[i] < 0) return invalid_argument("sizes must be non-negative");
      p.scale.push_back(x.dims[i] == 0 ? 1.f : static_cast<float>(p.out[i]) / static_cast<float>(x.dims[i]));
    }
  } else if (scales != nullptr && scales->shape.numel() > 0) {
    if (!scales->is_constant()) return unimplemented("scales must be a constant once shapes are bound");
    if (scales->shape.numel() != x.rank()) return invalid_argument("scales has the wrong length");
    for (int i = 0; i < x.rank(); ++i) {
      float s = static_cast<float>(scales->constant->value_as_double(i));
      if (!(s > 0)) return invalid_argument("scales must be positive");
      p.scale.push_back(s);
      p.out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(x.dims[i]) * s)));
    }
  } else {
    return invalid_argument("Resize needs scales or sizes");
  }
  return p;
}

Status infer_resize(Node& n) {
  TESSERA_ASSIGN_OR_RETURN(ResizeParams p, resize_params(n));
  set_output(n, 0, n.inputs[0]->dtype, Shape(p.out));
  return Status();
}

Status infer_scatter_nd(Node& n) {
  const Shape& data = n.inputs[0]->shape;
  const Shape& idx = n.inputs[1]->shape;
  const Shape& upd = n.inputs[2]->shape;
  if (n.attr_string("reduction", "none") != "none")
    return unimplemented(str_cat("ScatterND reduction '", n.attr_string("reduction", ""), "' is not supported"));
  if (n.inputs[1]->dtype != DType::kInt64) return invalid_argument("indices must be int64");
  if (idx.rank() < 1) return invalid_argument("indices must have rank >= 1");
  int64_t k = idx.dims.back();
  if (k < 1 || k > data.rank()) return invalid_argument(str_cat("indices' last dim ", k, " exceeds data rank ", data.rank()));
  // updates = indices.shape[:-1] + data.shape[k:]
  std::vector<int64_t> want(idx.dims.begin(), idx.dims.end() - 1);
  want.insert(want.end(), data.dims.begin() + k, data.dims.end());
  if (upd.dims != want)
    return invalid_argument(str_cat("updates have shape ", upd.to_string(), ", expected ", Shape(want).to_string()));
  if (n.inputs[2]->dtype != n.inputs[0]->dtype) return invalid_argument("updates and data types differ");
  set_output(n, 0, n.inputs[0]->dtype, data);
  return Status();
}

Status infer_shape_op(Node& n) {
  int rank = n.inputs[0]->shape.rank();
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  set_output(n, 0, DType::kInt64, Shape{std::max<int64_t>(0, end - start)});
  return Status();
}

Result<SliceParams> slice_params(const Node& n) {
  const Shape& x = n.inputs[0]->shape;
  int rank = x.rank();
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> starts, const_ints_input(n, 1, "starts"));
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> ends, const_ints_input(n, 2, "ends"));
  std::vector<int64_t> axes, steps;
  if (n.input(3) != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(axes, const_ints_input(n, 3, "axes"));
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (n.input(4) != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(steps, const_ints_input(n, 4, "steps"));
  } else {
    steps.assign(starts.size(), 1);
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return invalid_argument("starts, ends, axes and steps have different lengths");
  SliceParams p;
  p.start.assign(rank, 0);
  p.step.assign(rank, 1);
  p.out = x.dims;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int ax;
    if (!normalize_axis(axes[i], rank, &ax)) return invalid_argument(str_cat("axis ", axes[i], " is out of range"));
    if (seen[ax]) return invalid_argument(str_cat("axis ", axes[i], " is repeated"));
    seen[ax] = true;
    int64_t dim = x.dims[ax], step = steps[i];
    if (step == 0) return invalid_argument("step is zero");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0 && e > std::numeric_limits<int64_t>::min() / 2) e += dim;
    int64_t count;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      count = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    p.start[ax] = count > 0 ? s : 0;
    p.step[ax] = step;
    p.out[ax] = count;
  }
  return p;
}

Status infer_slice(Node& n) {
  TESSERA_ASSIGN_OR_RETURN(SliceParams p, slice_params(n));
  set_output(n, 0, n.inputs[0]->dtype, Shape(p.out));
  return Status();
}

Result<std::vector<int64_t>> split_sizes(const Node& n, int* axis) {
  const Shape& x = n.inputs[0]->shape;
  if (!normalize_axis(n.attr_int("axis", 0), x.rank(), axis)) return invalid_argument("axis is out of range");
  int64_t dim = x.dims[*axis];
  std::vector<int64_t> sizes;
  if (n.input(1) != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(sizes, const_ints_input(n, 1, "split"));
  } else if (n.has_attr("split")) {
    sizes = n.attr_ints("split");
  } else {
    int64_t parts = static_cast<int64_t>(n.outputs.size());
    if (parts == 0) return invalid_argument("Split has no outputs");
    int64_t each = (dim + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - i * each)));
  }
  if (sizes.size() != n.outputs.size())
    return invalid_argument(str_cat("split has ", sizes.size(), " sizes for ", n.outputs.size(), " outputs"));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return invalid_argument("split sizes must be non-negative");
    total += s;
  }
  if (total != dim) return invalid_argument(str_cat("split sizes add to ", total, ", axis has ", dim));
  return sizes;
}

Status infer_split(Node& n) {
  int axis;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, split_sizes(n, &axis));
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int64_t> out = n.inputs[0]->shape.dims;
    out[axis] = sizes[i];
    set_output(n, i, n.inputs[0]->dtype, Shape(out));
  }
  return Status();
}

// Axes from the attribute (opset < 13) or the second input.
static Result<std::vector<int64_t>> axes_of(const Node& n) {
  if (n.input(1) != nullptr) return const_ints_input(n, 1, "axes");
  return n.attr_ints("axes");
}

Status infer_squeeze(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(n));
  std::vector<bool> drop(x.rank(), false);
  if (axes.empty()) {
    for (int i = 0; i < x.rank(); ++i) drop[i] = x.dims[i] == 1;
  }
  for (int64_t a : axes) {
    int ax;
    if (!normalize_axis(a, x.rank(), &ax)) return invalid_argument(str_cat("axis ", a, " is out of range"));
    if (x.dims[ax] != 1) return invalid_argument(str_cat("cannot squeeze axis ", a, " of extent ", x.dims[ax]));
    drop[ax] = true;
  }
  std::vector<int64_t> out;
  for (int i = 0; i < x.rank(); ++i)
    if (!drop[i]) out.push_back(x.dims[i]);
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_unsqueeze(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(n));
  int rank = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    int ax;
    if (!normalize_axis(a, rank, &ax)) return invalid_argument(str_cat("axis ", a, " is out of range"));
    if (inserted[ax]) return invalid_argument(str_cat("axis ", a, " is repeated"));
    inserted[ax] = true;
  }
  std::vector<int64_t> out;
  int j = 0;
  for (int i = 0; i < rank; ++i) out.push_back(inserted[i] ? 1 : x.dims[j++]);
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_tile(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> reps, const_ints_input(n, 1, "repeats"));
  if (static_cast<int>(reps.size()) != x.rank())
    return invalid_argument(str_cat("repeats has ", reps.size(), " values for rank ", x.rank()));
  std::vector<int64_t> out(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    if (reps[i] < 0) return invalid_argument("repeats must be non-negative");
    out[i] = x.dims[i] * reps[i];
  }
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

Status infer_transpose(Node& n) {
  const Shape& x = n.inputs[0]->shape;
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int>(perm.size()) != x.rank()) return invalid_argument("perm length differs from the input rank");
  std::vector<bool> used(x.rank(), false);
  std::vector<int64_t> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || used[p]) return invalid_argument("perm is not a permutation");
    used[p] = true;
    out.push_back(x.dims[p]);
  }
  set_output(n, 0, n.inputs[0]->dtype, Shape(out));
  return Status();
}

}  // namespace tessera
