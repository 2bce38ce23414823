// The CUDA device's rKernels: each makes a CudaOp, the DevOp its rTasks
// run on the GPU (plan_kernel.cu) with the node's geometry filled in; the
// loader fills in the device addresses. Host code: no CUDA here.
#include "devices/cuda/cuda_rkernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <utility>

#include "base/check.h"
#include "base/strings.h"
#include "ir/ops/op_registry.h"

namespace tessera::cuda {
namespace {

bool all_f32(const Node& n, size_t inputs) {
  for (size_t i = 0; i < inputs && i < n.inputs.size(); ++i)
    if (n.inputs[i] == nullptr || n.inputs[i]->dtype != DType::kFloat32) return false;
  for (const Value* o : n.outputs)
    if (o->dtype != DType::kFloat32) return false;
  return true;
}

Result<std::unique_ptr<ROp>> finish(const Node& n, DevOp op, int64_t work, int64_t grain, const KernelParams& p,
                                    bool ranges) {
  op.tasks = choose_tasks(work, grain, p);
  auto r = std::make_unique<CudaOp>(op);
  if (ranges) r->set_access_by_ranges(n);
  else r->set_access({}, Access::kRange);
  return std::unique_ptr<ROp>(std::move(r));
}

// ------------------------------------------------------------ elementwise ---

const std::pair<std::string_view, BinaryOp> kBinaryOps[] = {
    {"Add", BinaryOp::kAdd}, {"Sub", BinaryOp::kSub}, {"Mul", BinaryOp::kMul}, {"Div", BinaryOp::kDiv},
    {"Max", BinaryOp::kMax}, {"Min", BinaryOp::kMin}, {"Pow", BinaryOp::kPow}};
const std::pair<std::string_view, UnaryOp> kUnaryOps[] = {
    {"Relu", UnaryOp::kRelu}, {"Sigmoid", UnaryOp::kSigmoid}, {"Tanh", UnaryOp::kTanh}, {"Exp", UnaryOp::kExp},
    {"Neg", UnaryOp::kNeg},   {"Abs", UnaryOp::kAbs},         {"Sqrt", UnaryOp::kSqrt}, {"Erf", UnaryOp::kErf}};

// The device function for op type `op` (the kernel table below lists only
// op types these name).
template <typename E, size_t N>
E by_op(std::string_view op, const std::pair<std::string_view, E> (&table)[N]) {
  for (const auto& [name, e] : table)
    if (name == op) return e;
  return table[0].second;
}

constexpr int64_t kElementGrain = 16384;
// plan_kernel.h's block size and shared memory, known here without CUDA.
constexpr int64_t kBlockThreadsHost = 256;
constexpr int64_t kSmemFloatsHost = 4096;

bool binary_fits(const Node& n) {
  return n.inputs.size() == 2 && all_f32(n, 2) && n.outputs[0]->shape.rank() <= kMaxRank;
}

Result<std::unique_ptr<ROp>> make_binary(const Node& n, const KernelParams& p) {
  if (!binary_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 of rank <= ", kMaxRank));
  DevOp op;
  op.kind = DevKind::kBinary;
  op.sub = static_cast<int32_t>(by_op(n.op_type, kBinaryOps));
  const Shape& out = n.outputs[0]->shape;
  op.rank = out.rank();
  op.n = out.numel();
  for (int d = 0; d < op.rank; ++d) op.dims[d] = out[d];
  // numpy broadcasting: dims aligned on the right; a dim of 1 (or absent)
  // in an input has stride 0.
  for (int which = 0; which < 2; ++which) {
    const Shape& s = n.inputs[static_cast<size_t>(which)]->shape;
    int64_t stride = 1;
    for (int d = op.rank - 1; d >= 0; --d) {
      const int sd = d - (op.rank - s.rank());
      const int64_t dim = sd >= 0 ? s[sd] : 1;
      op.strides[which][d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }
  return finish(n, op, op.n, kElementGrain, p, true);
}

bool unary_fits(const Node& n) { return n.inputs.size() == 1 && all_f32(n, 1); }

Result<std::unique_ptr<ROp>> make_unary(const Node& n, const KernelParams& p) {
  if (!unary_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32"));
  DevOp op;
  op.kind = DevKind::kUnary;
  op.sub = static_cast<int32_t>(by_op(n.op_type, kUnaryOps));
  op.n = n.outputs[0]->shape.numel();
  return finish(n, op, op.n, kElementGrain, p, true);
}

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the bytes as they are.
Result<std::unique_ptr<ROp>> make_copy(const Node& n, const KernelParams& p) {
  DevOp op;
  op.kind = DevKind::kCopy;
  op.n = n.outputs[0]->shape.numel() * static_cast<int64_t>(dtype_size(n.outputs[0]->dtype));
  return finish(n, op, op.n, kElementGrain * 4, p, true);
}

// ----------------------------------------------------------------- Gather ---

bool gather_fits(const Node& n) {
  return n.inputs.size() == 2 && n.inputs[0]->dtype == DType::kFloat32 &&
         (n.inputs[1]->dtype == DType::kInt64 || n.inputs[1]->dtype == DType::kInt32);
}

Result<std::unique_ptr<ROp>> make_gather(const Node& n, const KernelParams& p) {
  if (!gather_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel gathers float32 by int32/int64"));
  const Shape& x = n.inputs[0]->shape;
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += x.rank();
  DevOp op;
  op.kind = DevKind::kGather;
  op.outer = dims_product(x.dims, 0, static_cast<int>(axis));
  op.axis = x[static_cast<int>(axis)];
  op.inner = dims_product(x.dims, static_cast<int>(axis) + 1, x.rank());
  op.count = n.inputs[1]->shape.numel();
  op.idx64 = n.inputs[1]->dtype == DType::kInt64;
  op.n = n.outputs[0]->shape.numel();
  // Constant indices are checked here, once.
  if (const Value* idx = n.inputs[1]; idx->is_constant())
    for (int64_t i = 0; i < op.count; ++i) {
      const int64_t v = idx->constant->value_as_int64(i);
      if (v < -op.axis || v >= op.axis)
        return invalid_argument(str_cat(n.label(), ": index ", v, " is out of range for axis of ", op.axis));
    }
  return finish(n, op, op.n, kElementGrain, p, false);
}

// ------------------------------------------------------------ Gemm/MatMul ---

constexpr double kGemmFlopsPerTask = 1 << 20;

int64_t rows_grain(int64_t per_row_flops) {
  return std::max<int64_t>(1, static_cast<int64_t>(kGemmFlopsPerTask / std::max<double>(1.0, static_cast<double>(per_row_flops))));
}

bool gemm_fits(const Node& n) {
  return n.inputs.size() >= 2 && all_f32(n, n.inputs.size()) && n.inputs[0]->shape.rank() == 2 &&
         n.inputs[1]->shape.rank() == 2 && (n.input(2) == nullptr || n.input(2)->shape.rank() <= 2);
}

Result<std::unique_ptr<ROp>> make_gemm(const Node& n, const KernelParams& p) {
  if (!gemm_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 matrices"));
  const Shape& a = n.inputs[0]->shape;
  const Shape& b = n.inputs[1]->shape;
  DevOp op;
  op.kind = DevKind::kGemm;
  op.ta = static_cast<int32_t>(n.attr_int("transA", 0));
  op.tb = static_cast<int32_t>(n.attr_int("transB", 0));
  op.alpha = n.attr_float("alpha", 1.f);
  op.beta = n.attr_float("beta", 1.f);
  op.m = op.ta ? a[1] : a[0];
  op.k = op.ta ? a[0] : a[1];
  op.nn = op.tb ? b[0] : b[1];
  op.lda = a[1];
  op.ldb = b[1];
  if (const Value* c = n.input(2)) {
    const Shape& s = c->shape;
    const int64_t rows = s.rank() == 2 ? s[0] : 1, cols = s.rank() >= 1 ? s[s.rank() - 1] : 1;
    op.c_cs = cols == 1 ? 0 : 1;
    op.c_rs = rows == 1 ? 0 : cols;
  }
  op.n = op.m * op.nn;
  return finish(n, op, op.m, rows_grain(2 * op.nn * op.k), p, false);
}

bool matmul_fits(const Node& n) {
  if (n.inputs.size() != 2 || !all_f32(n, 2)) return false;
  const Shape& a = n.inputs[0]->shape;
  const Shape& b = n.inputs[1]->shape;
  if (a.rank() < 2 || b.rank() < 2) return false;
  // Batches: equal, or one side without any (broadcast).
  const int64_t ab = dims_product(a.dims, 0, a.rank() - 2), bb = dims_product(b.dims, 0, b.rank() - 2);
  return ab == bb || ab == 1 || bb == 1;
}

Result<std::unique_ptr<ROp>> make_matmul(const Node& n, const KernelParams& p) {
  if (!matmul_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 of equal batches"));
  const Shape& a = n.inputs[0]->shape;
  const Shape& b = n.inputs[1]->shape;
  DevOp op;
  op.kind = DevKind::kMatMul;
  op.m = a[a.rank() - 2];
  op.k = a[a.rank() - 1];
  op.nn = b[b.rank() - 1];
  op.lda = op.k;
  op.ldb = op.nn;
  const int64_t ab = dims_product(a.dims, 0, a.rank() - 2), bb = dims_product(b.dims, 0, b.rank() - 2);
  op.batch = std::max(ab, bb);
  op.a_bs = ab == 1 ? 0 : op.m * op.k;
  op.b_bs = bb == 1 ? 0 : op.k * op.nn;
  op.n = op.batch * op.m * op.nn;
  return finish(n, op, op.batch * op.m, rows_grain(2 * op.nn * op.k), p, false);
}

// Rows per rTask of a row op (Softmax, LayerNorm; rtasks.h, run_rows):
// rows of up to 1024 go a warp each, eight at once, so an rTask takes a
// row per warp for short rows and up to four for longer ones; a longer row
// takes the whole block, 8192 elements an rTask.
int64_t row_grain(int64_t cols) {
  if (cols <= 1024) return std::clamp<int64_t>(cols / 32, 8, 32);
  return std::max<int64_t>(1, 8192 / cols);
}

// ---------------------------------------------------------------- Softmax ---

bool softmax_fits(const Node& n) {
  if (n.inputs.size() != 1 || !all_f32(n, 1)) return false;
  const int rank = n.inputs[0]->shape.rank();
  const int64_t axis = n.attr_int("axis", -1);
  return rank >= 1 && (axis == -1 || axis == rank - 1);
}

Result<std::unique_ptr<ROp>> make_softmax(const Node& n, const KernelParams& p) {
  if (!softmax_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 on the last axis"));
  const Shape& x = n.inputs[0]->shape;
  DevOp op;
  op.kind = DevKind::kSoftmax;
  op.sub = n.op_type == "LogSoftmax" ? 1 : 0;
  op.cols = x[x.rank() - 1];
  op.rows = x.numel() / std::max<int64_t>(1, op.cols);
  op.n = x.numel();
  return finish(n, op, op.rows, row_grain(op.cols), p, true);
}

// ------------------------------------------------------------ tiled GEMM ---

// A tiled GEMM's shape for out [batch, m, n] with k-sums of `k`: 64 x 64
// tiles where there are enough of them to fill the GPU, else 32 x 32; and
// where even those leave most SMs idle, each tile's k-range cut into
// splits (at least kSplitK deep each), summed in order by the tile's last.
constexpr int64_t kFillUnits = 128;  // units of work that keep a GPU's SMs busy
constexpr int64_t kSplitK = 128;

struct TilePlan {
  TileShape shape;
  int64_t tiles, splits;
};

TilePlan plan_tiles(int64_t batch, int64_t m, int64_t n, int64_t k) {
  auto count = [&](int64_t t) { return batch * ((m + t - 1) / t) * ((n + t - 1) / t); };
  TilePlan tp{TileShape::k64x64, count(64), 1};
  if (tp.tiles < kFillUnits / 2) tp = {TileShape::k32x32, count(32), 1};
  if (tp.tiles < kFillUnits / 2 && k >= 2 * kSplitK)
    tp.splits = std::clamp<int64_t>(kFillUnits / tp.tiles, 1, std::min<int64_t>(16, k / kSplitK));
  return tp;
}

Result<std::unique_ptr<ROp>> finish_tiled(const Node& n, DevOp op, const KernelParams& p) {
  const TilePlan tp = plan_tiles(op.batch, op.m, op.nn, op.k);
  op.kind = DevKind::kTiled;
  op.sub = static_cast<int32_t>(tp.shape);
  op.splits = tp.splits;
  op.y_bs = op.m * op.nn;
  const int64_t units = tp.tiles * tp.splits;
  op.tasks = p.tasks > 0 ? std::clamp<int64_t>(p.tasks, 1, units) : units;
  auto r = std::make_unique<CudaOp>(op, tp.shape == TileShape::k64x64 ? (tp.splits > 1 ? "64x64 tiles, split k" : "64x64 tiles")
                                                                       : (tp.splits > 1 ? "32x32 tiles, split k" : "32x32 tiles"));
  if (tp.splits > 1) {
    r->scratch_floats = tp.splits * op.batch * op.m * op.nn;
    r->tickets = tp.tiles;
  }
  r->set_access({}, Access::kSpread);
  return std::unique_ptr<ROp>(std::move(r));
}

Result<std::unique_ptr<ROp>> make_gemm_tiled(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ROp> rows, make_gemm(n, KernelParams{}));
  DevOp op = static_cast<const CudaOp&>(*rows).op();
  // A(m, k) and B(k, n) as stored, transposed or not.
  op.a_rs = op.ta ? 1 : op.lda;
  op.a_cs = op.ta ? op.lda : 1;
  op.b_rs = op.tb ? 1 : op.ldb;
  op.b_cs = op.tb ? op.ldb : 1;
  return finish_tiled(n, op, p);
}

Result<std::unique_ptr<ROp>> make_matmul_tiled(const Node& n, const KernelParams& p) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ROp> rows, make_matmul(n, KernelParams{}));
  DevOp op = static_cast<const CudaOp&>(*rows).op();
  op.a_rs = op.k;
  op.a_cs = 1;
  op.b_rs = op.nn;
  op.b_cs = 1;
  return finish_tiled(n, op, p);
}

// ------------------------------------------------------------ Conv, pools ---

Result<ConvGeo> conv_geo(const Node& n, const std::vector<int64_t>& kernel) {
  const Shape& x = n.inputs[0]->shape;
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, x, kernel));
  if (g.spatial != 2) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes 2-D windows"));
  ConvGeo c;
  c.cin = x[1];
  c.h = g.in[0];
  c.w = g.in[1];
  c.oh = g.out[0];
  c.ow = g.out[1];
  c.kh = g.kernel[0];
  c.kw = g.kernel[1];
  c.sh = g.strides[0];
  c.sw = g.strides[1];
  c.dh = g.dilations[0];
  c.dw = g.dilations[1];
  c.ph = g.pads_begin[0];
  c.pw = g.pads_begin[1];
  return c;
}

bool conv_fits(const Node& n) {
  return n.inputs.size() >= 2 && all_f32(n, n.inputs.size()) && n.inputs[0]->shape.rank() == 4 &&
         n.inputs[1]->shape.rank() == 4;
}

bool conv_tiled_fits(const Node& n) { return conv_fits(n) && n.attr_int("group", 1) == 1; }

Result<ConvGeo> conv_of(const Node& n) {
  const Shape& w = n.inputs[1]->shape;
  TESSERA_ASSIGN_OR_RETURN(ConvGeo g, conv_geo(n, {w[2], w[3]}));
  g.cout = w[0];
  g.groups = n.attr_int("group", 1);
  if (g.groups < 1 || g.cin % g.groups != 0 || g.cout % g.groups != 0 || w[1] * g.groups != g.cin)
    return invalid_argument(str_cat(n.label(), ": group ", g.groups, " does not divide the channels"));
  return g;
}

// A Conv of one group as a GEMM: W [cout, cin kh kw] times the input's
// im2col [cin kh kw, oh ow], per image.
Result<std::unique_ptr<ROp>> make_conv_tiled(const Node& n, const KernelParams& p) {
  if (!conv_tiled_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes a float32 2-D Conv of one group"));
  TESSERA_ASSIGN_OR_RETURN(ConvGeo g, conv_of(n));
  DevOp op;
  op.conv = g;
  op.conv_b = 1;
  op.batch = n.inputs[0]->shape[0];
  op.m = g.cout;
  op.nn = g.oh * g.ow;
  op.k = g.cin * g.kh * g.kw;
  op.a_rs = op.k;
  op.a_cs = 1;
  op.bias_rows = n.input(2) != nullptr;
  op.n = op.batch * op.m * op.nn;
  return finish_tiled(n, op, p);
}

Result<std::unique_ptr<ROp>> make_conv_direct(const Node& n, const KernelParams& p) {
  if (!conv_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes a float32 2-D Conv"));
  TESSERA_ASSIGN_OR_RETURN(ConvGeo g, conv_of(n));
  DevOp op;
  op.kind = DevKind::kConvDirect;
  op.conv = g;
  op.n = n.outputs[0]->shape.numel();
  const int64_t per_out = g.cin / g.groups * g.kh * g.kw;
  return finish(n, op, op.n, std::max<int64_t>(256, kElementGrain / std::max<int64_t>(1, per_out / 8)), p, false);
}

bool pool_fits(const Node& n) {
  return n.inputs.size() == 1 && all_f32(n, 1) && n.inputs[0]->shape.rank() == 4 && n.outputs.size() == 1;
}

Result<std::unique_ptr<ROp>> make_pool(const Node& n, const KernelParams& p) {
  if (!pool_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel pools float32 images (one output)"));
  TESSERA_ASSIGN_OR_RETURN(ConvGeo g, conv_geo(n, n.attr_ints("kernel_shape")));
  DevOp op;
  op.kind = DevKind::kPool;
  op.sub = n.op_type == "MaxPool" ? 0 : 1;
  g.include_pad = static_cast<int32_t>(n.attr_int("count_include_pad", 0));
  op.conv = g;
  op.n = n.outputs[0]->shape.numel();
  return finish(n, op, op.n, kElementGrain / 4, p, false);
}

bool global_pool_fits(const Node& n) { return n.inputs.size() == 1 && all_f32(n, 1) && n.inputs[0]->shape.rank() >= 3; }

Result<std::unique_ptr<ROp>> make_global_pool(const Node& n, const KernelParams& p) {
  if (!global_pool_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 [N, C, ...]"));
  const Shape& x = n.inputs[0]->shape;
  DevOp op;
  op.kind = DevKind::kRowMean;
  op.rows = x[0] * x[1];
  op.cols = dims_product(x.dims, 2, x.rank());
  op.n = op.rows;
  return finish(n, op, op.rows, std::max<int64_t>(8, kElementGrain / std::max<int64_t>(1, op.cols)), p, false);
}

// ------------------------------------------------------------- LayerNorm ---

bool layernorm_fits(const Node& n) {
  return n.inputs.size() >= 2 && all_f32(n, n.inputs.size()) && n.inputs[0]->shape.rank() >= 1 &&
         n.outputs.size() == 1;
}

Result<std::unique_ptr<ROp>> make_layernorm(const Node& n, const KernelParams& p) {
  if (!layernorm_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 and gives Y only"));
  const Shape& x = n.inputs[0]->shape;
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += x.rank();
  DevOp op;
  op.kind = DevKind::kLayerNorm;
  op.cols = dims_product(x.dims, static_cast<int>(axis), x.rank());
  op.rows = x.numel() / std::max<int64_t>(1, op.cols);
  if (n.inputs[1]->shape.numel() != op.cols || (n.input(2) != nullptr && n.input(2)->shape.numel() != op.cols))
    return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes scale and bias of the normalized size ", op.cols));
  op.eps = n.attr_float("epsilon", 1e-5f);
  op.n = x.numel();
  return finish(n, op, op.rows, row_grain(op.cols), p, true);
}

// ----------------------------------------------------------------- layout ---

int elem_bytes(const Node& n) { return static_cast<int>(dtype_size(n.outputs[0]->dtype)); }

bool transpose_fits(const Node& n) {
  const int e = elem_bytes(n);
  return n.inputs.size() == 1 && n.inputs[0]->shape.rank() <= kMaxRank && (e == 4 || e == 8);
}

Result<std::unique_ptr<ROp>> make_transpose(const Node& n, const KernelParams& p) {
  if (!transpose_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel moves 4- or 8-byte elements, rank <= ", kMaxRank));
  const Shape& x = n.inputs[0]->shape;
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (int d = x.rank() - 1; d >= 0; --d) perm.push_back(d);
  std::vector<int64_t> in_strides(static_cast<size_t>(x.rank()), 1);
  for (int d = x.rank() - 2; d >= 0; --d) in_strides[static_cast<size_t>(d)] = in_strides[static_cast<size_t>(d) + 1] * x[d + 1];
  DevOp op;
  op.kind = DevKind::kStrided;
  op.esize = elem_bytes(n);
  op.rank = x.rank();
  for (int d = 0; d < op.rank; ++d) {
    op.dims[d] = x[static_cast<int>(perm[static_cast<size_t>(d)])];
    op.strides[0][d] = in_strides[static_cast<size_t>(perm[static_cast<size_t>(d)])];
  }
  op.n = x.numel();
  return finish(n, op, op.n, kElementGrain, p, false);
}

// Concat (parts are the inputs) and Split (the outputs): outer x axis x
// inner elements, copied in units of 8, 4 or 1 bytes.
Result<std::unique_ptr<ROp>> make_parts(const Node& n, const KernelParams& p) {
  const bool concat = n.op_type == "Concat";
  const Value* whole = concat ? n.outputs[0] : n.inputs[0];
  const std::vector<Value*>& parts = concat ? n.inputs : n.outputs;
  const Shape& s = whole->shape;
  if (s.rank() < 1) return invalid_argument(str_cat(n.label(), ": nothing to join or split"));
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += s.rank();
  DevOp op;
  op.kind = concat ? DevKind::kConcat : DevKind::kSplit;
  op.outer = dims_product(s.dims, 0, static_cast<int>(axis));
  op.axis = s[static_cast<int>(axis)];
  op.inner = dims_product(s.dims, static_cast<int>(axis) + 1, s.rank());
  int64_t esize = static_cast<int64_t>(dtype_size(whole->dtype));
  if (esize != 8 && esize != 4) {
    op.inner *= esize;
    esize = 1;
  }
  op.esize = static_cast<int32_t>(esize);
  op.n = op.outer * op.axis * op.inner;
  op.parts = static_cast<int64_t>(parts.size());
  std::vector<int64_t> off = {0};
  for (const Value* v : parts) {
    if (v == nullptr) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes every part present"));
    off.push_back(off.back() + v->shape[static_cast<int>(axis)]);
  }
  op.tasks = choose_tasks(op.n, kElementGrain, p);
  auto r = std::make_unique<CudaOp>(op);
  r->part_off = std::move(off);
  r->set_access({}, Access::kSpread);
  return std::unique_ptr<ROp>(std::move(r));
}

DTypeCode code_of(DType t) {
  switch (t) {
    case DType::kInt64: return DTypeCode::kI64;
    case DType::kInt32: return DTypeCode::kI32;
    case DType::kBool: return DTypeCode::kBool;
    default: return DTypeCode::kF32;
  }
}

bool castable(DType t) { return t == DType::kFloat32 || t == DType::kInt64 || t == DType::kInt32 || t == DType::kBool; }

bool cast_fits(const Node& n) { return n.inputs.size() == 1 && castable(n.inputs[0]->dtype) && castable(n.outputs[0]->dtype); }

Result<std::unique_ptr<ROp>> make_cast(const Node& n, const KernelParams& p) {
  if (!cast_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel casts among float32, int64, int32 and bool"));
  DevOp op;
  op.kind = DevKind::kCast;
  op.sub = static_cast<int32_t>(code_of(n.inputs[0]->dtype)) * 16 + static_cast<int32_t>(code_of(n.outputs[0]->dtype));
  op.n = n.outputs[0]->shape.numel();
  return finish(n, op, op.n, kElementGrain, p, true);
}

// Clip's bounds: inputs 1 and 2 (constants) or, before opset 11, the min
// and max attributes.
bool clip_fits(const Node& n) {
  if (n.inputs.empty() || !all_f32(n, n.inputs.size())) return false;
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (n.inputs[i] != nullptr && (!n.inputs[i]->is_constant() || n.inputs[i]->shape.numel() != 1)) return false;
  return true;
}

Result<std::unique_ptr<ROp>> make_clip(const Node& n, const KernelParams& p) {
  if (!clip_fits(n)) return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 and constant bounds"));
  DevOp op;
  op.kind = DevKind::kUnary;
  op.sub = static_cast<int32_t>(UnaryOp::kClip);
  op.lo = n.attr_float("min", -INFINITY);
  op.hi = n.attr_float("max", INFINITY);
  if (const Value* v = n.input(1)) op.lo = v->constant->data<float>()[0];
  if (const Value* v = n.input(2)) op.hi = v->constant->data<float>()[0];
  op.n = n.outputs[0]->shape.numel();
  auto r = finish(n, op, op.n, kElementGrain, p, true);
  return r;
}

// BatchNormalization in inference (training_mode 0, Y only).
bool batchnorm_fits(const Node& n) {
  if (n.inputs.size() != 5 || !all_f32(n, 5) || n.outputs.size() != 1 || n.attr_int("training_mode", 0) != 0) return false;
  const Shape& x = n.inputs[0]->shape;
  if (x.rank() < 2) return false;
  for (size_t i = 1; i < 5; ++i)
    if (n.inputs[i]->shape.numel() != x[1]) return false;
  return true;
}

Result<std::unique_ptr<ROp>> make_batchnorm(const Node& n, const KernelParams& p) {
  if (!batchnorm_fits(n))
    return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes float32 [N, C, ...] in inference mode"));
  const Shape& x = n.inputs[0]->shape;
  DevOp op;
  op.kind = DevKind::kBatchNorm;
  op.axis = x[1];
  op.inner = dims_product(x.dims, 2, x.rank());
  op.eps = n.attr_float("epsilon", 1e-5f);
  op.n = x.numel();
  return finish(n, op, op.n, kElementGrain, p, true);
}

// -------------------------------------------------------------- recurrent ---

// The lowered LSTM (compiler/lower_rnn.cc) in its plain layout: one input
// per projection, no carried or blocked projections.
bool rnn_proj_fits(const Node& n) {
  const size_t parts = n.inputs.size() - 2 - (n.attr_int("prefetch_r", 0) != 0 ? 1 : 0);
  return n.inputs.size() >= 3 && parts == 1 && n.attr_int("blocked", 0) == 0 &&
         n.inputs[0]->shape.rank() == 3 && n.inputs[0]->shape[2] <= kBlockThreadsHost;
}

Result<std::unique_ptr<ROp>> make_rnn_proj(const Node& n, const KernelParams& p) {
  if (!rnn_proj_fits(n))
    return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes one input and the plain panel layout"));
  const Shape& w = n.inputs[0]->shape;
  DevOp op;
  op.kind = DevKind::kRnnProj;
  op.panels = w[0];
  op.k = w[1];
  op.gates = n.attr_int("gates", 4);
  op.units = n.attr_int("panel_units", 16);
  op.rows = n.inputs[2]->shape.numel() / op.k;
  op.n = n.outputs[0]->shape.numel();
  return finish(n, op, op.panels, 1, p, false);
}

bool lstm_cell_fits(const Node& n) {
  const int64_t h = n.attr_int("hidden_size", 0), u = n.attr_int("panel_units", 0);
  return n.attr_int("next_slice", -1) == -1 && n.attr_int("xp_blocked", 0) == 0 && u >= 1 && 4 * u <= kBlockThreadsHost &&
         h >= 1 && h + 2 * kBlockThreadsHost <= kSmemFloatsHost && n.outputs.size() == 2;
}

Result<std::unique_ptr<ROp>> make_lstm_cell(const Node& n, const KernelParams& p) {
  if (!lstm_cell_fits(n))
    return invalid_argument(str_cat(n.label(), ": the cuda rKernel takes the plain panel layout and hidden_size <= ",
                                    kSmemFloatsHost - 2 * kBlockThreadsHost));
  DevOp op;
  op.kind = DevKind::kLstmCell;
  op.hidden = n.attr_int("hidden_size", 0);
  op.units = n.attr_int("panel_units", 16);
  op.panels = (op.hidden + op.units - 1) / op.units;
  op.gates = 4;
  op.rows = n.attr_int("batch", 1);
  op.step = n.attr_int("step", 0);
  op.n = op.rows * op.hidden;
  return finish(n, op, op.panels, 1, p, false);
}

const RKernel kKernels[] = {
    {"Add", "cuda.binary", "a flat range of outputs per rTask (broadcast by strides)", make_binary, binary_fits},
    {"Sub", "cuda.binary", "a flat range of outputs per rTask (broadcast by strides)", make_binary, binary_fits},
    {"Mul", "cuda.binary", "a flat range of outputs per rTask (broadcast by strides)", make_binary, binary_fits},
    {"Div", "cuda.binary", "a flat range of outputs per rTask (broadcast by strides)", make_binary, binary_fits},
    {"Max", "cuda.binary", "a flat range of outputs per rTask (two inputs)", make_binary, binary_fits},
    {"Min", "cuda.binary", "a flat range of outputs per rTask (two inputs)", make_binary, binary_fits},
    {"Pow", "cuda.binary", "a flat range of outputs per rTask (broadcast by strides)", make_binary, binary_fits},
    {"Relu", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Sigmoid", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Tanh", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Exp", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Neg", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Abs", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Sqrt", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Erf", "cuda.unary", "a flat range of outputs per rTask", make_unary, unary_fits},
    {"Clip", "cuda.unary", "a flat range of outputs per rTask (constant bounds)", make_clip, clip_fits},
    {"Reshape", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Flatten", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Squeeze", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Unsqueeze", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Identity", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Transpose", "cuda.strided", "a flat range of outputs per rTask, read through permuted strides", make_transpose,
     transpose_fits},
    {"Concat", "cuda.parts", "a flat range of the joined tensor per rTask", make_parts},
    {"Split", "cuda.parts", "a flat range of the split tensor per rTask", make_parts},
    {"Cast", "cuda.cast", "a flat range of outputs per rTask", make_cast, cast_fits},
    {"Gather", "cuda.gather", "a flat range of outputs per rTask", make_gather, gather_fits},
    {"Gemm", "cuda.gemm_tiled", "output tiles (64x64 or 32x32; k split where tiles are few), k-sums in order",
     make_gemm_tiled, gemm_fits},
    {"Gemm", "cuda.gemm_rows", "a range of output rows per rTask, each output's k-sum in order", make_gemm, gemm_fits},
    {"MatMul", "cuda.gemm_tiled", "output tiles per batch (64x64 or 32x32; k split where tiles are few)",
     make_matmul_tiled, matmul_fits},
    {"MatMul", "cuda.gemm_rows", "a range of (batch, row) pairs per rTask, each output's k-sum in order", make_matmul,
     matmul_fits},
    {"Conv", "cuda.conv_tiled", "implicit GEMM: output tiles of channels x pixels over the im2col, k split where few",
     make_conv_tiled, conv_tiled_fits},
    {"Conv", "cuda.conv_direct", "a flat range of outputs per rTask, a thread per output (groups, depthwise)",
     make_conv_direct, conv_fits},
    {"MaxPool", "cuda.pool", "a flat range of outputs per rTask", make_pool, pool_fits},
    {"AveragePool", "cuda.pool", "a flat range of outputs per rTask", make_pool, pool_fits},
    {"GlobalAveragePool", "cuda.row_mean", "a range of planes per rTask, a warp per plane", make_global_pool,
     global_pool_fits},
    {"LayerNormalization", "cuda.layernorm", "a range of rows per rTask, a warp a row (the block for long rows)",
     make_layernorm, layernorm_fits},
    {"BatchNormalization", "cuda.batchnorm", "a flat range of outputs per rTask", make_batchnorm, batchnorm_fits},
    {"Softmax", "cuda.softmax_rows", "a range of rows per rTask, a warp a row (the block for long rows)", make_softmax,
     softmax_fits},
    {"LogSoftmax", "cuda.softmax_rows", "a range of rows per rTask, a warp a row (the block for long rows)",
     make_softmax, softmax_fits},
    {"TesseraRnnProj", "cuda.rnn_proj", "a range of panels per rTask, every row", make_rnn_proj, rnn_proj_fits},
    {"TesseraLstmCell", "cuda.lstm_cell", "a range of panels per rTask: their h_prev R^T and gate math",
     make_lstm_cell, lstm_cell_fits},
};

}  // namespace

void CudaOp::run(int64_t, const TaskArgs&) const {
  TESSERA_CHECK_MSG(false, "a cuda rTask runs on the GPU (devices/cuda/plan_kernel.cu), not on a host thread");
}

KernelTable cuda_kernels() { return kKernels; }

Device::Passes cuda_passes() {
  return {.fuse = false, .lower_recurrent = true, .concat_in_place = false, .recurrent_chunk = 1, .recurrent_carry = false};
}

CompileConfig cuda_compile_config() {
  const Device::Passes passes = cuda_passes();
  CompileConfig c;
  c.kernels = cuda_kernels();
  c.fuse = c.fuse_blocks = passes.fuse;
  c.lower_recurrent = passes.lower_recurrent;
  c.recurrent_chunk = passes.recurrent_chunk;
  c.recurrent_carry = passes.recurrent_carry;
  c.concat_in_place = passes.concat_in_place;
  c.profile = false;
  return c;
}

Result<std::vector<DevOp>> dev_ops(const Program& p, const std::vector<void*>& slot, const DevAlloc& alloc) {
  std::vector<DevOp> ops;
  for (const Step& st : p.steps) {
    const auto* op = dynamic_cast<const CudaOp*>(st.op.get());
    if (op == nullptr) return internal_error(str_cat(st.node->label(), ": not a cuda rOperator"));
    DevOp d = op->op();
    auto at = [&](int s) -> void* { return s >= 0 ? slot[static_cast<size_t>(s)] : nullptr; };
    for (size_t j = 0; j < st.inputs.size() && j < static_cast<size_t>(kMaxInputs); ++j) d.in[j] = at(st.inputs[j]);
    d.out = at(st.outputs[0]);
    if (st.outputs.size() > 1) d.out2 = at(st.outputs[1]);
    if (op->scratch_floats > 0) {
      TESSERA_ASSIGN_OR_RETURN(void* m, alloc(sizeof(float) * static_cast<size_t>(op->scratch_floats), nullptr));
      d.scratch = static_cast<float*>(m);
    }
    if (op->tickets > 0) {
      TESSERA_ASSIGN_OR_RETURN(void* m, alloc(sizeof(int) * static_cast<size_t>(op->tickets), nullptr));
      d.tickets = static_cast<int*>(m);
    }
    if (!op->part_off.empty()) {  // Concat: the inputs; Split: the outputs
      const std::vector<int>& parts = d.kind == DevKind::kConcat ? st.inputs : st.outputs;
      std::vector<void*> ptrs;
      for (int s : parts) ptrs.push_back(at(s));
      TESSERA_ASSIGN_OR_RETURN(void* pm, alloc(sizeof(void*) * ptrs.size(), ptrs.data()));
      TESSERA_ASSIGN_OR_RETURN(void* om, alloc(sizeof(int64_t) * op->part_off.size(), op->part_off.data()));
      d.part_ptr = static_cast<void* const*>(pm);
      d.part_off = static_cast<const int64_t*>(om);
    }
    ops.push_back(d);
  }
  return ops;
}

}  // namespace tessera::cuda
