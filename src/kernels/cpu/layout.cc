// Layout and data-movement rKernels: reshapes (a copy), Transpose, Slice,
// Expand (strided copies), Concat, Split, Gather, Tile, Pad, Trilu, and the
// generators Shape, ConstantOfShape and Range. An rTask is a contiguous
// block of output elements (or of outer rows for Concat/Split/Gather).
#include <algorithm>
#include <cstring>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/kernel.h"

namespace tessera {
namespace {

constexpr int64_t kGrain = 32768;  // elements per task

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.rank());
  int64_t acc = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= s.dims[d];
  }
  return st;
}

// Copies bytes verbatim: Reshape, Flatten, Squeeze, Unsqueeze.
class ByteCopyOp : public ROp {
 public:
  ByteCopyOp(size_t bytes, const KernelParams& p) : bytes_(static_cast<int64_t>(bytes)) {
    tasks_ = choose_tasks(bytes_, kGrain * 4, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(bytes_, tasks_, task, &b, &e);
    if (e > b && args.out[0] != args.in[0])
      std::memcpy(static_cast<char*>(args.out[0]) + b, static_cast<const char*>(args.in[0]) + b, e - b);
  }

 private:
  int64_t bytes_;
};

Result<std::unique_ptr<ROp>> make_byte_copy(const Node& n, const KernelParams& p) {
  const Value* o = n.outputs[0];
  return std::unique_ptr<ROp>(new ByteCopyOp(static_cast<size_t>(o->shape.numel()) * dtype_size(o->dtype), p));
}

// out[i] = in[base + strided offset of i]: Transpose, Slice, Expand.
template <typename T>
class StridedCopyOp : public ROp {
 public:
  StridedCopyOp(BroadcastPlan plan, int64_t base, const KernelParams& p) : plan_(std::move(plan)), base_(base) {
    tasks_ = choose_tasks(plan_.numel, kGrain, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(plan_.numel, tasks_, task, &b, &e);
    const T* x = static_cast<const T*>(args.in[0]) + base_;
    T* y = static_cast<T*>(args.out[0]);
    for_each_run(plan_, b, e, [&](int64_t o, const int64_t* offs, int64_t len, const int64_t* st) {
      const T* src = x + offs[0];
      T* dst = y + o;
      if (st[0] == 1) {
        std::memcpy(dst, src, static_cast<size_t>(len) * sizeof(T));
      } else {
        const int64_t s = st[0];
        for (int64_t i = 0; i < len; ++i) dst[i] = src[i * s];
      }
    });
  }

 private:
  BroadcastPlan plan_;
  int64_t base_;
};

Result<std::unique_ptr<ROp>> strided_copy(const Node& n, const std::vector<int64_t>& out_dims,
                                          std::vector<int64_t> strides, int64_t base, const KernelParams& p) {
  BroadcastPlan plan = make_strided(out_dims, {std::move(strides)});
  switch (dtype_size(n.outputs[0]->dtype)) {
    case 1: return std::unique_ptr<ROp>(new StridedCopyOp<uint8_t>(std::move(plan), base, p));
    case 2: return std::unique_ptr<ROp>(new StridedCopyOp<uint16_t>(std::move(plan), base, p));
    case 4: return std::unique_ptr<ROp>(new StridedCopyOp<uint32_t>(std::move(plan), base, p));
    case 8: return std::unique_ptr<ROp>(new StridedCopyOp<uint64_t>(std::move(plan), base, p));
    default: return unimplemented(str_cat(n.label(), ": element size"));
  }
}

Result<std::unique_ptr<ROp>> make_transpose(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> in_st = strides_of(x), st;
  for (int64_t d : perm) st.push_back(in_st[d]);
  return strided_copy(n, n.outputs[0]->shape.dims, st, 0, p);
}

Result<std::unique_ptr<ROp>> make_slice(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(SliceParams sp, slice_params(n));
  std::vector<int64_t> in_st = strides_of(n.inputs[0]->shape), st;
  int64_t base = 0;
  for (size_t d = 0; d < in_st.size(); ++d) {
    base += sp.start[d] * in_st[d];
    st.push_back(in_st[d] * sp.step[d]);
  }
  return strided_copy(n, sp.out, st, base, p);
}

Result<std::unique_ptr<ROp>> make_expand(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& out = n.outputs[0]->shape;
  std::vector<int64_t> in_st = strides_of(x), st(out.rank(), 0);
  for (int d = 0; d < x.rank(); ++d) {
    int od = d + out.rank() - x.rank();
    st[od] = x.dims[d] == 1 ? 0 : in_st[d];
  }
  return strided_copy(n, out.dims, st, 0, p);
}

// Concat and Split are one copy in opposite directions. The joined tensor
// is viewed as [outer, sum of slabs]: each outer row holds one slab (axis
// extent x inner bytes) per part. An rTask is a contiguous byte range of the
// joined tensor, so even a batch-1 concat along channels (one outer row)
// splits into as many rTasks as its size warrants.
class SlabCopyOp : public ROp {
 public:
  enum class Dir { kConcat, kSplit };
  SlabCopyOp(Dir dir, int64_t outer, std::vector<int64_t> slab, const KernelParams& p)
      : dir_(dir), outer_(outer), slab_(std::move(slab)) {
    row_ = 0;
    for (int64_t s : slab_) row_ += s;
    tasks_ = choose_tasks(outer_ * row_, kGrain * 4, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(outer_ * row_, tasks_, task, &b, &e);
    while (b < e) {
      const int64_t r = b / row_;
      int64_t in_row = b - r * row_;
      size_t part = 0;
      while (in_row >= slab_[part]) in_row -= slab_[part++];  // slabs of 0 bytes are skipped here
      const int64_t n = std::min(slab_[part] - in_row, e - b);
      const int64_t part_off = r * slab_[part] + in_row;
      if (dir_ == Dir::kConcat)
        std::memcpy(static_cast<char*>(args.out[0]) + b, static_cast<const char*>(args.in[part]) + part_off, n);
      else
        std::memcpy(static_cast<char*>(args.out[part]) + part_off, static_cast<const char*>(args.in[0]) + b, n);
      b += n;
    }
  }

 private:
  Dir dir_;
  int64_t outer_, row_;
  std::vector<int64_t> slab_;  // bytes per outer row, per part
};

Result<std::unique_ptr<ROp>> make_concat(const Node& n, const KernelParams& p) {
  const Shape& out = n.outputs[0]->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", 0), out.rank(), &axis)) return invalid_argument(str_cat(n.label(), ": axis"));
  int64_t inner = dims_product(out.dims, axis + 1, out.rank()) * static_cast<int64_t>(dtype_size(n.outputs[0]->dtype));
  std::vector<int64_t> slab;
  for (Value* v : n.inputs) slab.push_back(v->shape.dims[axis] * inner);
  return std::unique_ptr<ROp>(new SlabCopyOp(SlabCopyOp::Dir::kConcat, dims_product(out.dims, 0, axis), slab, p));
}

// TesseraConcat: a Concat some of whose parts their producers wrote in
// place, straight into the output (passes.h, "In-place Concat"); it copies
// the others. Its output is one outer row, so each part it copies is one
// byte range; an rTask is a contiguous range of the bytes it copies. With
// every part in place it is one rTask that does nothing, left in the Plan
// as the point the output's readers wait on.
class ConcatRestOp : public ROp {
 public:
  struct Part {
    size_t input;
    int64_t dst, bytes;
  };
  ConcatRestOp(std::vector<Part> parts, const KernelParams& p) : parts_(std::move(parts)) {
    for (const Part& part : parts_) total_ += part.bytes;
    tasks_ = choose_tasks(total_, kGrain * 4, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e, at = 0;
    task_range(total_, tasks_, task, &b, &e);
    for (const Part& part : parts_) {
      const int64_t lo = std::max(b, at), hi = std::min(e, at + part.bytes);
      if (lo < hi)
        std::memcpy(static_cast<char*>(args.out[0]) + part.dst + (lo - at),
                    static_cast<const char*>(args.in[part.input]) + (lo - at), static_cast<size_t>(hi - lo));
      at += part.bytes;
    }
  }

 private:
  std::vector<Part> parts_;
  int64_t total_ = 0;
};

Result<std::unique_ptr<ROp>> make_concat_rest(const Node& n, const KernelParams& p) {
  const Shape& out = n.outputs[0]->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", 0), out.rank(), &axis)) return invalid_argument(str_cat(n.label(), ": axis"));
  const std::vector<int64_t> in_place = n.attr_ints("in_place");
  if (in_place.size() != n.inputs.size())
    return invalid_argument(str_cat(n.label(), ": attribute 'in_place' needs one entry per input"));
  if (dims_product(out.dims, 0, axis) != 1)
    return invalid_argument(str_cat(n.label(), ": in-place parts need every dimension before the axis to be 1"));
  const int64_t inner = dims_product(out.dims, axis + 1, out.rank()) * static_cast<int64_t>(dtype_size(n.outputs[0]->dtype));
  std::vector<ConcatRestOp::Part> parts;
  int64_t dst = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const int64_t bytes = n.inputs[i]->shape.dims[axis] * inner;
    if (in_place[i] == 0 && bytes > 0) parts.push_back({i, dst, bytes});
    dst += bytes;
  }
  return std::unique_ptr<ROp>(new ConcatRestOp(std::move(parts), p));
}

Result<std::unique_ptr<ROp>> make_split(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  int axis;
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, split_sizes(n, &axis));
  int64_t inner = dims_product(x.dims, axis + 1, x.rank()) * static_cast<int64_t>(dtype_size(n.inputs[0]->dtype));
  std::vector<int64_t> slab;
  for (int64_t s : sizes) slab.push_back(s * inner);
  return std::unique_ptr<ROp>(new SlabCopyOp(SlabCopyOp::Dir::kSplit, dims_product(x.dims, 0, axis), slab, p));
}

// Gather: data viewed as [outer, axis, inner], output as [outer, I, inner].
// Indices come from data at run time; an out-of-range index yields zeros
// (the rows cannot fail mid-run) and is counted, and the executor reports
// it after the run.
class GatherOp : public ROp {
 public:
  GatherOp(int64_t outer, int64_t axis_len, int64_t count, int64_t inner_bytes, bool idx64, const KernelParams& p)
      : outer_(outer), axis_len_(axis_len), count_(count), inner_(inner_bytes), idx64_(idx64) {
    tasks_ = choose_tasks(outer * count, std::max<int64_t>(1, kGrain * 4 / std::max<int64_t>(inner_bytes, 1)), p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(outer_ * count_, tasks_, task, &b, &e);
    const char* x = static_cast<const char*>(args.in[0]);
    char* y = static_cast<char*>(args.out[0]);
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / count_, j = r % count_;
      int64_t idx = idx64_ ? static_cast<const int64_t*>(args.in[1])[j] : static_cast<const int32_t*>(args.in[1])[j];
      if (idx < 0) idx += axis_len_;
      char* dst = y + r * inner_;
      if (idx < 0 || idx >= axis_len_) {
        std::memset(dst, 0, static_cast<size_t>(inner_));
        continue;
      }
      std::memcpy(dst, x + (o * axis_len_ + idx) * inner_, static_cast<size_t>(inner_));
    }
  }

 private:
  int64_t outer_, axis_len_, count_, inner_;
  bool idx64_;
};

Result<std::unique_ptr<ROp>> make_gather(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", 0), x.rank(), &axis)) return invalid_argument(str_cat(n.label(), ": axis"));
  int64_t inner = dims_product(x.dims, axis + 1, x.rank()) * static_cast<int64_t>(dtype_size(n.inputs[0]->dtype));
  return std::unique_ptr<ROp>(new GatherOp(dims_product(x.dims, 0, axis), x.dims[axis], n.inputs[1]->shape.numel(),
                                           inner, n.inputs[1]->dtype == DType::kInt64, p));
}

// ScatterND (reduction none): a copy of data with slices replaced. Later
// updates to the same slice win, as in ONNX's reference; so the op is one
// rTask. Indices out of range are skipped (they cannot fail mid-run).
class ScatterNdOp : public ROp {
 public:
  ScatterNdOp(size_t data_bytes, std::vector<int64_t> dims, int64_t k, int64_t count, int64_t slice_bytes)
      : data_bytes_(data_bytes), dims_(std::move(dims)), k_(k), count_(count), slice_(slice_bytes) {}
  void run(int64_t, const TaskArgs& args) const override {
    const char* data = static_cast<const char*>(args.in[0]);
    const int64_t* idx = static_cast<const int64_t*>(args.in[1]);
    const char* upd = static_cast<const char*>(args.in[2]);
    char* y = static_cast<char*>(args.out[0]);
    if (data_bytes_ > 0) std::memcpy(y, data, data_bytes_);
    for (int64_t j = 0; j < count_; ++j) {
      int64_t off = 0;
      bool ok = true;
      for (int64_t d = 0; d < k_; ++d) {
        int64_t i = idx[j * k_ + d];
        if (i < 0) i += dims_[d];
        if (i < 0 || i >= dims_[d]) ok = false;
        off = off * dims_[d] + i;
      }
      if (!ok) continue;
      std::memcpy(y + off * slice_, upd + j * slice_, static_cast<size_t>(slice_));
    }
  }

 private:
  size_t data_bytes_;
  std::vector<int64_t> dims_;
  int64_t k_, count_, slice_;
};

Result<std::unique_ptr<ROp>> make_scatter_nd(const Node& n, const KernelParams&) {
  const Shape& data = n.inputs[0]->shape;
  const Shape& idx = n.inputs[1]->shape;
  int64_t k = idx.dims.back();
  int64_t es = static_cast<int64_t>(dtype_size(n.inputs[0]->dtype));
  return std::unique_ptr<ROp>(new ScatterNdOp(static_cast<size_t>(data.numel() * es), data.dims, k,
                                              dims_product(idx.dims, 0, idx.rank() - 1),
                                              dims_product(data.dims, static_cast<int>(k), data.rank()) * es));
}

// Tile and Pad: each output element maps to one input element (or the pad
// value) by per-dim index arithmetic. An rTask is a block of output rows
// (last dim).
class IndexMapOp : public ROp {
 public:
  enum class Mode { kTile, kConstant, kReflect, kEdge };
  IndexMapOp(Mode mode, Shape in, Shape out, std::vector<int64_t> pad_before, size_t elem, bool has_pad_value,
             const KernelParams& p)
      : mode_(mode), in_(std::move(in)), out_(std::move(out)), before_(std::move(pad_before)), elem_(elem),
        has_pad_value_(has_pad_value) {
    in_st_ = strides_of(in_);
    rows_ = out_.rank() == 0 ? 1 : out_.numel() / std::max<int64_t>(1, out_.dims.back());
    cols_ = out_.rank() == 0 ? 1 : out_.dims.back();
    if (out_.numel() == 0) rows_ = 0;
    tasks_ = choose_tasks(rows_, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols_, 1)), p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(rows_, tasks_, task, &b, &e);
    const char* x = static_cast<const char*>(args.in[0]);
    const char* pad_value = has_pad_value_ ? static_cast<const char*>(args.in[2]) : nullptr;
    char* y = static_cast<char*>(args.out[0]);
    const int r = out_.rank();
    for (int64_t row = b; row < e; ++row) {
      // Offset of this row's input start, or -1 if a leading index pads.
      int64_t rem = row, base = 0;
      bool padded = false;
      for (int d = r - 2; d >= 0; --d) {
        int64_t i = rem % out_.dims[d];
        rem /= out_.dims[d];
        int64_t src;
        if (!map(d, i, &src)) padded = true;
        else base += src * in_st_[d];
      }
      char* dst = y + row * cols_ * static_cast<int64_t>(elem_);
      for (int64_t c = 0; c < cols_; ++c) {
        int64_t src;
        char* out_el = dst + c * static_cast<int64_t>(elem_);
        if (padded || (r > 0 && !map(r - 1, c, &src))) {
          if (pad_value) std::memcpy(out_el, pad_value, elem_);
          else std::memset(out_el, 0, elem_);
        } else {
          std::memcpy(out_el, x + (base + (r > 0 ? src : 0)) * static_cast<int64_t>(elem_), elem_);
        }
      }
    }
  }

 private:
  // Input index for output index i along dim d; false for constant padding.
  bool map(int d, int64_t i, int64_t* src) const {
    int64_t n = in_.dims[d];
    if (mode_ == Mode::kTile) {
      *src = i % n;
      return true;
    }
    int64_t j = i - before_[d];
    if (j >= 0 && j < n) {
      *src = j;
      return true;
    }
    if (mode_ == Mode::kConstant) return false;
    if (mode_ == Mode::kEdge) {
      *src = j < 0 ? 0 : n - 1;
      return true;
    }
    // Reflect without repeating the edge: period 2(n-1).
    if (n == 1) {
      *src = 0;
      return true;
    }
    int64_t period = 2 * (n - 1);
    j = ((j % period) + period) % period;
    *src = j < n ? j : period - j;
    return true;
  }

  Mode mode_;
  Shape in_, out_;
  std::vector<int64_t> before_;
  size_t elem_;
  bool has_pad_value_;
  std::vector<int64_t> in_st_;
  int64_t rows_, cols_;
};

Result<std::unique_ptr<ROp>> make_tile(const Node& n, const KernelParams& p) {
  return std::unique_ptr<ROp>(new IndexMapOp(IndexMapOp::Mode::kTile, n.inputs[0]->shape, n.outputs[0]->shape, {},
                                             dtype_size(n.outputs[0]->dtype), false, p));
}

Result<std::unique_ptr<ROp>> make_pad(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> pads, pad_amounts(n));
  std::string mode = n.attr_string("mode", "constant");
  auto m = mode == "reflect" ? IndexMapOp::Mode::kReflect
           : mode == "edge"  ? IndexMapOp::Mode::kEdge
                             : IndexMapOp::Mode::kConstant;
  pads.resize(n.inputs[0]->shape.rank());
  if (n.input(2) != nullptr && n.inputs[2]->shape.numel() != 1)
    return invalid_argument(str_cat(n.label(), ": constant_value must be a scalar"));
  return std::unique_ptr<ROp>(
      new IndexMapOp(m, n.inputs[0]->shape, n.outputs[0]->shape, pads, dtype_size(n.outputs[0]->dtype),
                     m == IndexMapOp::Mode::kConstant && n.input(2) != nullptr, p));
}

// Trilu over the last two dims; k comes from the (optional) second input.
class TriluOp : public ROp {
 public:
  TriluOp(bool upper, bool has_k, int64_t mats, int64_t rows, int64_t cols, size_t elem, const KernelParams& p)
      : upper_(upper), has_k_(has_k), mats_(mats), rows_(rows), cols_(cols), elem_(elem) {
    tasks_ = choose_tasks(mats * rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(mats_ * rows_, tasks_, task, &b, &e);
    int64_t k = has_k_ ? *static_cast<const int64_t*>(args.in[1]) : 0;
    const char* x = static_cast<const char*>(args.in[0]);
    char* y = static_cast<char*>(args.out[0]);
    const int64_t es = static_cast<int64_t>(elem_);
    for (int64_t r = b; r < e; ++r) {
      int64_t i = r % rows_;
      for (int64_t j = 0; j < cols_; ++j) {
        bool keep = upper_ ? j - i >= k : j - i <= k;
        char* dst = y + (r * cols_ + j) * es;
        if (keep) std::memcpy(dst, x + (r * cols_ + j) * es, elem_);
        else std::memset(dst, 0, elem_);
      }
    }
  }

 private:
  bool upper_, has_k_;
  int64_t mats_, rows_, cols_;
  size_t elem_;
};

Result<std::unique_ptr<ROp>> make_trilu(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  if (x.rank() < 2) return invalid_argument(str_cat(n.label(), ": input must have rank >= 2"));
  if (n.input(1) != nullptr && n.inputs[1]->dtype != DType::kInt64)
    return invalid_argument(str_cat(n.label(), ": k must be int64"));
  return std::unique_ptr<ROp>(new TriluOp(n.attr_int("upper", 1) != 0, n.input(1) != nullptr,
                                          dims_product(x.dims, 0, x.rank() - 2), x[x.rank() - 2], x[x.rank() - 1],
                                          dtype_size(n.inputs[0]->dtype), p));
}

// Shape (normally folded at bind time; kept for completeness).
class ShapeOp : public ROp {
 public:
  explicit ShapeOp(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  void run(int64_t, const TaskArgs& args) const override {
    if (!dims_.empty()) std::memcpy(args.out[0], dims_.data(), dims_.size() * sizeof(int64_t));
  }

 private:
  std::vector<int64_t> dims_;
};

Result<std::unique_ptr<ROp>> make_shape(const Node& n, const KernelParams&) {
  const Shape& s = n.inputs[0]->shape;
  int64_t len = n.outputs[0]->shape[0];
  int64_t start = n.attr_int("start", 0);
  if (start < 0) start += s.rank();
  start = std::clamp<int64_t>(start, 0, s.rank());
  return std::unique_ptr<ROp>(new ShapeOp(std::vector<int64_t>(s.dims.begin() + start, s.dims.begin() + start + len)));
}

// Fills the output with one value: ConstantOfShape.
class FillOp : public ROp {
 public:
  FillOp(Tensor value, int64_t n, const KernelParams& p) : value_(std::move(value)), n_(n) {
    tasks_ = choose_tasks(n, kGrain, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(n_, tasks_, task, &b, &e);
    size_t es = value_.nbytes();
    char* y = static_cast<char*>(args.out[0]);
    for (int64_t i = b; i < e; ++i) std::memcpy(y + i * static_cast<int64_t>(es), value_.raw(), es);
  }

 private:
  Tensor value_;
  int64_t n_;
};

Result<std::unique_ptr<ROp>> make_constant_of_shape(const Node& n, const KernelParams& p) {
  Tensor v = n.has_attr("value") ? n.attrs.at("value").t : Tensor::from_floats({0.f}, Shape{1});
  if (v.numel() != 1) return invalid_argument(str_cat(n.label(), ": value must hold one element"));
  return std::unique_ptr<ROp>(new FillOp(v.reshaped(Shape{1}).clone(), n.outputs[0]->shape.numel(), p));
}

class RangeOp : public ROp {
 public:
  RangeOp(DType dt, int64_t n) : dt_(dt), n_(n) {}
  void run(int64_t, const TaskArgs& args) const override {
    switch (dt_) {
      case DType::kFloat32: fill<float>(args); break;
      case DType::kInt64: fill<int64_t>(args); break;
      case DType::kInt32: fill<int32_t>(args); break;
      default: break;
    }
  }

 private:
  template <typename T>
  void fill(const TaskArgs& args) const {
    T start = *static_cast<const T*>(args.in[0]);
    T delta = *static_cast<const T*>(args.in[2]);
    T* y = static_cast<T*>(args.out[0]);
    for (int64_t i = 0; i < n_; ++i) y[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  }
  DType dt_;
  int64_t n_;
};

Result<std::unique_ptr<ROp>> make_range(const Node& n, const KernelParams&) {
  DType dt = n.outputs[0]->dtype;
  if (dt != DType::kFloat32 && dt != DType::kInt64 && dt != DType::kInt32)
    return unimplemented(str_cat(n.label(), ": Range of ", dtype_name(dt)));
  return std::unique_ptr<ROp>(new RangeOp(dt, n.outputs[0]->shape.numel()));
}

const RKernel kKernels[] = {
    {"Reshape", "copy", "", make_byte_copy},
    {"Flatten", "copy", "", make_byte_copy},
    {"Squeeze", "copy", "", make_byte_copy},
    {"Unsqueeze", "copy", "", make_byte_copy},
    {"Transpose", "strided_copy", "merged-dim strided copy", make_transpose},
    {"Slice", "strided_copy", "merged-dim strided copy", make_slice},
    {"Expand", "strided_copy", "broadcast copy", make_expand},
    {"Concat", "concat.rows", "", make_concat},
    {"TesseraConcat", "concat.rest", "copies the parts not written in place", make_concat_rest},
    {"Split", "split.rows", "", make_split},
    {"Gather", "gather.rows", "", make_gather},
    {"Tile", "index_map", "", make_tile},
    {"Pad", "index_map", "constant, reflect, edge", make_pad},
    {"Trilu", "trilu.rows", "", make_trilu},
    {"Shape", "shape", "folded at bind time", make_shape},
    {"ConstantOfShape", "fill", "", make_constant_of_shape},
    {"Range", "range", "", make_range},
    {"ScatterND", "scatter_nd", "one rTask; reduction none", make_scatter_nd},
};

}  // namespace

std::span<const RKernel> layout_kernels() { return kKernels; }

}  // namespace tessera
