// The CUDA device's rKernels: each makes a CudaOp, the DevOp its rTasks
// run on the GPU (plan_kernel.cu) with the node's geometry filled in; the
// loader fills in the device addresses. Host code: no CUDA here.
#include "devices/cuda/cuda_rkernels.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "base/check.h"
#include "base/strings.h"

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
  return finish(n, op, op.rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, op.cols)), p, true);
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
    {"Reshape", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Flatten", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Squeeze", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Unsqueeze", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Identity", "cuda.copy", "the bytes as they are, a range per rTask", make_copy},
    {"Gather", "cuda.gather", "a flat range of outputs per rTask", make_gather, gather_fits},
    {"Gemm", "cuda.gemm_rows", "a range of output rows per rTask, each output's k-sum in order", make_gemm, gemm_fits},
    {"MatMul", "cuda.gemm_rows", "a range of (batch, row) pairs per rTask, each output's k-sum in order", make_matmul,
     matmul_fits},
    {"Softmax", "cuda.softmax_rows", "a range of rows per rTask, reduced by the block", make_softmax, softmax_fits},
    {"LogSoftmax", "cuda.softmax_rows", "a range of rows per rTask, reduced by the block", make_softmax,
     softmax_fits},
};

}  // namespace

void CudaOp::run(int64_t, const TaskArgs&) const {
  TESSERA_CHECK_MSG(false, "a cuda rTask runs on the GPU (devices/cuda/plan_kernel.cu), not on a host thread");
}

KernelTable cuda_kernels() { return kKernels; }

}  // namespace tessera::cuda
