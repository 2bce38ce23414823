// BatchNormalization (inference), InstanceNormalization,
// LayerNormalization, Softmax and LogSoftmax. An rTask is a block of rows
// (or planes) normalized independently.
#include <algorithm>
#include <cmath>
#include <vector>
#include <limits>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/row_math.h"

namespace tessera {
namespace {

constexpr int64_t kGrain = 16384;  // elements per task

int64_t row_tasks(int64_t rows, int64_t cols, const KernelParams& p) {
  return choose_tasks(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), p);
}

class BatchNormOp : public ROp {
 public:
  BatchNormOp(int64_t batch, int64_t channels, int64_t plane, float eps, const KernelParams& p)
      : batch_(batch), channels_(channels), plane_(plane), eps_(eps) {
    tasks_ = row_tasks(batch * channels, plane, p);
    set_access({Access::kRange}, Access::kRange);  // blocks of planes
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(batch_ * channels_, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    const float* scale = static_cast<const float*>(args.in[1]);
    const float* bias = static_cast<const float*>(args.in[2]);
    const float* mean = static_cast<const float*>(args.in[3]);
    const float* var = static_cast<const float*>(args.in[4]);
    float* y = static_cast<float*>(args.out[0]);
    for (int64_t pl = b; pl < e; ++pl) {
      int64_t c = pl % channels_;
      float s = scale[c] / std::sqrt(var[c] + eps_);
      float t = bias[c] - mean[c] * s;
      const float* xp = x + pl * plane_;
      float* yp = y + pl * plane_;
      for (int64_t i = 0; i < plane_; ++i) yp[i] = xp[i] * s + t;
    }
  }

 private:
  int64_t batch_, channels_, plane_;
  float eps_;
};

Result<std::unique_ptr<ROp>> make_batch_norm(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  return std::unique_ptr<ROp>(
      new BatchNormOp(x[0], x[1], dims_product(x.dims, 2, x.rank()), n.attr_float("epsilon", 1e-5f), p));
}

class InstanceNormOp : public ROp {
 public:
  InstanceNormOp(int64_t batch, int64_t channels, int64_t plane, float eps, const KernelParams& p)
      : batch_(batch), channels_(channels), plane_(plane), eps_(eps) {
    tasks_ = row_tasks(batch * channels, plane, p);
    set_access({Access::kRange}, Access::kRange);  // blocks of planes
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(batch_ * channels_, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    const float* scale = static_cast<const float*>(args.in[1]);
    const float* bias = static_cast<const float*>(args.in[2]);
    float* y = static_cast<float*>(args.out[0]);
    for (int64_t pl = b; pl < e; ++pl) {
      int64_t c = pl % channels_;
      const float* xp = x + pl * plane_;
      float* yp = y + pl * plane_;
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < plane_; ++i) sum += xp[i];
      double mean = plane_ ? sum / static_cast<double>(plane_) : 0;
      for (int64_t i = 0; i < plane_; ++i) sq += (xp[i] - mean) * (xp[i] - mean);
      double var = plane_ ? sq / static_cast<double>(plane_) : 0;
      float s = static_cast<float>(scale[c] / std::sqrt(var + eps_));
      float t = static_cast<float>(bias[c] - mean * s);
      for (int64_t i = 0; i < plane_; ++i) yp[i] = xp[i] * s + t;
    }
  }

 private:
  int64_t batch_, channels_, plane_;
  float eps_;
};

Result<std::unique_ptr<ROp>> make_instance_norm(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  if (x.rank() < 3) return invalid_argument(str_cat(n.label(), ": input must have rank >= 3"));
  return std::unique_ptr<ROp>(
      new InstanceNormOp(x[0], x[1], dims_product(x.dims, 2, x.rank()), n.attr_float("epsilon", 1e-5f), p));
}

class LayerNormOp : public ROp {
 public:
  LayerNormOp(int64_t rows, int64_t cols, float eps, bool scale_bcast, bool has_bias, bool bias_bcast,
              size_t outputs, const KernelParams& p)
      : rows_(rows), cols_(cols), eps_(eps), scale_bcast_(scale_bcast), has_bias_(has_bias), bias_bcast_(bias_bcast),
        outputs_(outputs) {
    tasks_ = row_tasks(rows, cols, p);
    set_access({Access::kRange}, Access::kRange);  // blocks of rows
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(rows_, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    const float* scale = static_cast<const float*>(args.in[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* mean_out = outputs_ > 1 ? static_cast<float*>(args.out[1]) : nullptr;
    float* inv_out = outputs_ > 2 ? static_cast<float*>(args.out[2]) : nullptr;
    if (!scale_bcast_ && (bias == nullptr || !bias_bcast_)) {  // the usual case: per-element scale and bias
      layer_norm_rows(x + b * cols_, cols_, y + b * cols_, cols_, e - b, cols_, eps_, scale, bias,
                      mean_out ? mean_out + b : nullptr, inv_out ? inv_out + b : nullptr);
      return;
    }
    for (int64_t r = b; r < e; ++r) {  // a scale or bias of one value
      const float* xr = x + r * cols_;
      float* yr = y + r * cols_;
      const float mean = cols_ ? row_sum(xr, cols_) / static_cast<float>(cols_) : 0.f;
      const float var = cols_ ? row_sq_dev(xr, cols_, mean) / static_cast<float>(cols_) : 0.f;
      const float inv = 1.f / std::sqrt(var + eps_);
      for (int64_t i = 0; i < cols_; ++i) {
        float v = (xr[i] - mean) * inv * scale[scale_bcast_ ? 0 : i];
        yr[i] = bias ? v + bias[bias_bcast_ ? 0 : i] : v;
      }
      if (mean_out) mean_out[r] = mean;
      if (inv_out) inv_out[r] = inv;
    }
  }

 private:
  int64_t rows_, cols_;
  float eps_;
  bool scale_bcast_, has_bias_, bias_bcast_;
  size_t outputs_;
};

Result<std::unique_ptr<ROp>> make_layer_norm(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  int axis;
  if (!normalize_axis(n.attr_int("axis", -1), x.rank(), &axis)) return invalid_argument(str_cat(n.label(), ": axis"));
  int64_t rows = dims_product(x.dims, 0, axis), cols = dims_product(x.dims, axis, x.rank());
  int64_t sn = n.inputs[1]->shape.numel();
  if (sn != cols && sn != 1)
    return invalid_argument(str_cat(n.label(), ": scale has ", sn, " elements, normalized size is ", cols));
  bool has_bias = n.input(2) != nullptr;
  int64_t bn = has_bias ? n.inputs[2]->shape.numel() : 0;
  if (has_bias && bn != cols && bn != 1)
    return invalid_argument(str_cat(n.label(), ": bias has ", bn, " elements, normalized size is ", cols));
  return std::unique_ptr<ROp>(
      new LayerNormOp(rows, cols, n.attr_float("epsilon", 1e-5f), sn == 1, has_bias, bn == 1, n.outputs.size(), p));
}

// Softmax over `axis` of an [outer, axis, inner] view; an rTask is a block
// of (outer, inner) lines.
class SoftmaxOp : public ROp {
 public:
  SoftmaxOp(bool log, int64_t outer, int64_t len, int64_t inner, const KernelParams& p)
      : log_(log), outer_(outer), len_(len), inner_(inner) {
    tasks_ = row_tasks(outer * inner, len, p);
    if (inner == 1) set_access({Access::kRange}, Access::kRange);  // blocks of whole rows
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(outer_ * inner_, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    float* y = static_cast<float*>(args.out[0]);
    if (inner_ == 1) {  // contiguous lines (the last axis)
      if (!log_) {
        softmax_rows(x + b * len_, len_, y + b * len_, len_, e - b, len_);
        return;
      }
      for (int64_t line = b; line < e; ++line) log_softmax_row(x + line * len_, y + line * len_, len_);
      return;
    }
    for (int64_t line = b; line < e; ++line) {
      int64_t o = line / inner_, i = line % inner_;
      const float* xl = x + o * len_ * inner_ + i;
      float* yl = y + o * len_ * inner_ + i;
      const int64_t s = inner_;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < len_; ++k) mx = std::max(mx, xl[k * s]);
      float sum = 0;
      if (log_) {
        for (int64_t k = 0; k < len_; ++k) sum += fast_exp(xl[k * s] - mx);
        float lse = std::log(sum);
        for (int64_t k = 0; k < len_; ++k) yl[k * s] = xl[k * s] - mx - lse;
      } else {
        for (int64_t k = 0; k < len_; ++k) {
          float v = fast_exp(xl[k * s] - mx);
          yl[k * s] = v;
          sum += v;
        }
        float inv = 1.f / sum;
        for (int64_t k = 0; k < len_; ++k) yl[k * s] *= inv;
      }
    }
  }

 private:
  bool log_;
  int64_t outer_, len_, inner_;
};

Result<std::unique_ptr<ROp>> make_softmax(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  bool log = n.op_type == "LogSoftmax";
  if (x.rank() == 0) return std::unique_ptr<ROp>(new SoftmaxOp(log, 1, 1, 1, p));
  int axis;
  int64_t def = n.opset >= 13 ? -1 : 1;
  if (!normalize_axis(n.attr_int("axis", def), x.rank(), &axis)) return invalid_argument(str_cat(n.label(), ": axis"));
  if (n.opset < 13)  // coerced to 2-D at axis
    return std::unique_ptr<ROp>(
        new SoftmaxOp(log, dims_product(x.dims, 0, axis), dims_product(x.dims, axis, x.rank()), 1, p));
  return std::unique_ptr<ROp>(new SoftmaxOp(log, dims_product(x.dims, 0, axis), x.dims[axis],
                                            dims_product(x.dims, axis + 1, x.rank()), p));
}

// ------------------------------------------------------------ Attention ---

// TesseraAttention: an rTask is a block of query rows of one or more batch
// entries. Per batch entry in its range: scores = Q rows x Kt into scratch
// (one sgemm), scale, mask and softmax each row there (the unfused ops'
// arithmetic, in their order), then out rows = P x V (one sgemm). The
// [S, T] score matrix never goes to memory.
class AttentionOp : public ROp {
 public:
  // heads == 0: Q [batch, s, d], Kt [batch, d, t], V [batch, t, dv] -> Y
  // [batch, s, dv]. heads == H: batch is B*H and each is head h of image b
  // inside rows of H heads: Q [B, s, H*d], K [B, t, H*d], V [B, t, H*dv]
  // -> Y [B, s, H*dv] (op_registry.h, AttentionGeometry).
  AttentionOp(const AttentionGeometry& g, int scale_op, float scale, std::vector<int64_t> mask_batch,
              int64_t mask_row, int64_t mask_col, bool has_mask, const KernelParams& p)
      : batch_(g.batch), s_(g.s), d_(g.d), t_(g.t), dv_(g.dv), heads_(g.heads), scale_op_(scale_op), scale_(scale),
        mask_batch_(std::move(mask_batch)), mask_row_(mask_row), mask_col_(mask_col), has_mask_(has_mask) {
    const int64_t per_row = std::max<int64_t>(1, 2 * t_ * (d_ + dv_));
    tasks_ = choose_tasks(batch_ * s_, std::max<int64_t>(1, (int64_t{1} << 20) / per_row), p);
    const int64_t rows = std::min(s_, (batch_ * s_ + tasks_ - 1) / tasks_);
    // Scores, then (by heads) the head's K transposed, so that the first
    // GEMM is the same as on a transposed copy.
    kt_at_ = rows * t_;
    scratch_bytes_ = static_cast<size_t>(rows * t_ + (heads_ > 0 ? d_ * t_ : 0)) * sizeof(float);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(batch_ * s_, tasks_, task, &b, &e);
    const float* q = static_cast<const float*>(args.in[0]);
    const float* k = static_cast<const float*>(args.in[1]);
    const float* v = static_cast<const float*>(args.in[2]);
    const float* mask = has_mask_ ? static_cast<const float*>(args.in[4]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* sc = static_cast<float*>(args.scratch);
    // Row strides, and where score matrix bi's Q, K(t), V and Y start.
    const int64_t h = std::max<int64_t>(heads_, 1);
    const int64_t ldq = h * d_, ldv = h * dv_;
    for (int64_t line = b; line < e;) {
      const int64_t bi = line / s_, r0 = line % s_;
      const int64_t r1 = std::min(s_, r0 + (e - line));
      const int64_t rows = r1 - r0;
      const int64_t img = bi / h, head = bi % h;
      const float* qb = q + img * s_ * ldq + head * d_;
      const float* vb = v + img * t_ * ldv + head * dv_;
      float* yb = y + img * s_ * ldv + head * dv_;
      const float* ktb = k + bi * d_ * t_;
      if (heads_ > 0) {  // K rows [t, d] of this head, transposed to [d, t]
        float* kt = sc + kt_at_;
        const float* kb = k + img * t_ * ldq + head * d_;
        transpose(kb, ldq, t_, d_, kt, t_);
        ktb = kt;
      }
      matmul_gemm(rows, t_, d_, qb + r0 * ldq, ldq, ktb, t_, sc, t_, s_, t_);
      for (int64_t i = 0; i < rows; ++i) {
        float* row = sc + i * t_;
        if (scale_op_ == 1)
          for (int64_t k2 = 0; k2 < t_; ++k2) row[k2] = row[k2] / scale_;
        else if (scale_op_ == 2)
          for (int64_t k2 = 0; k2 < t_; ++k2) row[k2] = row[k2] * scale_;
        if (mask != nullptr) {
          const float* m = mask + mask_batch_[bi] + (r0 + i) * mask_row_;
          if (mask_col_ == 1)
            for (int64_t k2 = 0; k2 < t_; ++k2) row[k2] = row[k2] + m[k2];
          else
            for (int64_t k2 = 0; k2 < t_; ++k2) row[k2] = row[k2] + m[0];
        }
      }
      softmax_rows(sc, t_, sc, t_, rows, t_);
      matmul_gemm(rows, dv_, t_, sc, t_, vb, ldv, yb + r0 * ldv, ldv, s_, dv_);
      line += rows;
    }
  }

 private:
  int64_t batch_, s_, d_, t_, dv_, heads_;
  int scale_op_;  // 0 none, 1 divide, 2 multiply
  float scale_;
  std::vector<int64_t> mask_batch_;  // mask offset of each batch entry
  int64_t mask_row_, mask_col_;
  bool has_mask_;
  int64_t kt_at_ = 0;  // floats into scratch where K transposed goes
};

Result<std::unique_ptr<ROp>> make_attention(const Node& n, const KernelParams& p) {
  auto geo = attention_geometry(n);
  if (!geo.ok()) return geo.status().with_context(n.label());
  const AttentionGeometry& g = *geo;
  int scale_op = 0;
  float scale = 1.f;
  if (const Value* s = n.input(3)) {
    if (!s->is_constant() || s->shape.numel() != 1) return invalid_argument(str_cat(n.label(), ": scale"));
    scale = s->constant->data<float>()[0];
    scale_op = n.attr_string("scale_op", "Div") == "Div" ? 1 : 2;
  }
  // The mask's element strides over the scores' dims [batch..., S, T]
  // (0 where it broadcasts), and each score matrix's offset.
  std::vector<int64_t> mask_batch(static_cast<size_t>(g.batch), 0);
  int64_t mrow = 0, mcol = 0;
  const Value* m = n.input(4);
  if (m != nullptr) {
    const std::vector<int64_t>& dims = g.scores;
    const int r = static_cast<int>(dims.size());
    std::vector<int64_t> md = m->shape.dims;
    if (static_cast<int>(md.size()) > r) return invalid_argument(str_cat(n.label(), ": mask rank"));
    md.insert(md.begin(), static_cast<size_t>(r) - md.size(), 1);
    std::vector<int64_t> stride(r, 0);
    int64_t acc = 1;
    for (int i = r - 1; i >= 0; --i) {
      if (md[i] != 1 && md[i] != dims[i]) return invalid_argument(str_cat(n.label(), ": mask does not broadcast"));
      stride[i] = md[i] == 1 ? 0 : acc;
      acc *= md[i];
    }
    mrow = stride[r - 2];
    mcol = stride[r - 1];
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      int64_t rest = bi, off = 0;
      for (int i = r - 3; i >= 0; --i) {
        off += (rest % dims[i]) * stride[i];
        rest /= dims[i];
      }
      mask_batch[static_cast<size_t>(bi)] = off;
    }
  }
  return std::unique_ptr<ROp>(
      new AttentionOp(g, scale_op, scale, std::move(mask_batch), mrow, mcol, m != nullptr, p));
}

const RKernel kKernels[] = {
    {"BatchNormalization", "batch_norm.planes", "inference: per-channel scale and shift", make_batch_norm},
    {"InstanceNormalization", "instance_norm.planes", "", make_instance_norm},
    {"LayerNormalization", "layer_norm.rows", "", make_layer_norm},
    {"Softmax", "softmax.lines", "", make_softmax},
    {"LogSoftmax", "log_softmax.lines", "", make_softmax},
    {"TesseraAttention", "attention.rows", "MatMul, scale, mask, Softmax, MatMul per block of query rows", make_attention},
};

}  // namespace

std::span<const RKernel> norm_kernels() { return kKernels; }

}  // namespace tessera
