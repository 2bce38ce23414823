// BatchNormalization (inference), InstanceNormalization,
// LayerNormalization, Softmax and LogSoftmax. An rTask is a block of rows
// (or planes) normalized independently.
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/strings.h"
#include "kernels/cpu/kernel.h"

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
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * cols_;
      float* yr = y + r * cols_;
      float sum = 0;
      for (int64_t i = 0; i < cols_; ++i) sum += xr[i];
      float mean = cols_ ? sum / static_cast<float>(cols_) : 0.f;
      float sq = 0;
      for (int64_t i = 0; i < cols_; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
      float inv = 1.f / std::sqrt((cols_ ? sq / static_cast<float>(cols_) : 0.f) + eps_);
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
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(outer_ * inner_, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    float* y = static_cast<float*>(args.out[0]);
    for (int64_t line = b; line < e; ++line) {
      int64_t o = line / inner_, i = line % inner_;
      const float* xl = x + o * len_ * inner_ + i;
      float* yl = y + o * len_ * inner_ + i;
      const int64_t s = inner_;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < len_; ++k) mx = std::max(mx, xl[k * s]);
      float sum = 0;
      if (log_) {
        for (int64_t k = 0; k < len_; ++k) sum += std::exp(xl[k * s] - mx);
        float lse = std::log(sum);
        for (int64_t k = 0; k < len_; ++k) yl[k * s] = xl[k * s] - mx - lse;
      } else {
        for (int64_t k = 0; k < len_; ++k) {
          float v = std::exp(xl[k * s] - mx);
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

const RKernel kKernels[] = {
    {"BatchNormalization", "batch_norm.planes", "inference: per-channel scale and shift", make_batch_norm},
    {"InstanceNormalization", "instance_norm.planes", "", make_instance_norm},
    {"LayerNormalization", "layer_norm.rows", "", make_layer_norm},
    {"Softmax", "softmax.lines", "", make_softmax},
    {"LogSoftmax", "log_softmax.lines", "", make_softmax},
};

}  // namespace

std::span<const RKernel> norm_kernels() { return kKernels; }

}  // namespace tessera
