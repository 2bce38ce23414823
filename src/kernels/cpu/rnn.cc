// LSTM and GRU (forward, reverse, bidirectional; default activations).
//
// An rTask is one (direction, batch entry) sequence: independent of every
// other. It first projects its inputs for all time steps with one sgemm
// ([seq, input] x W^T), then walks the steps, each a [1, H] x R^T product
// (on a transposed copy of R made with the op when R is constant, else an
// sgemm) plus the gate math. Splitting the steps themselves into rOperators, for
// wavefront schedules across layers, is the compiler's job.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/strings.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/row_math.h"

namespace tessera {
namespace {

inline float sigmoid(float x) { return fast_sigmoid(x); }

// Outputs [j, j + w) of matvec_t, w <= 64, in registers over all of k;
// inlined with w = 64 for whole blocks, so that loop has a fixed width.
inline void matvec_block(const float* x, const float* rt, int64_t k, int64_t ld, int64_t j, int64_t w, float* y) {
  float acc[64] = {};
  for (int64_t i = 0; i < k; ++i) {
    const float xi = x[i];
    const float* row = rt + i * ld + j;
    for (int64_t q = 0; q < w; ++q) acc[q] += xi * row[q];
  }
  std::memcpy(y + j, acc, static_cast<size_t>(w) * sizeof(float));
}

// y[0, n) = x[0, k) * rt, rt row-major [k][ld] (a transposed weight
// block): 64 outputs at a time held in registers over all of k, each
// summed over k in order. A step's h_prev R^T is a few thousand
// multiply-adds; as an sgemm call it cost more in the call than in the
// arithmetic.
void matvec_t(const float* x, const float* rt, int64_t k, int64_t n, int64_t ld, float* y) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) matvec_block(x, rt, k, ld, j, 64, y);
  if (j < n) matvec_block(x, rt, k, ld, j, n - j, y);
}

class RnnOp : public ROp {
 public:
  RnnOp(bool lstm, int64_t seq, int64_t batch, int64_t input, int64_t hidden, int64_t dirs, bool reverse_only,
        bool linear_before_reset, std::vector<bool> present, size_t outputs, const float* r_const)
      : lstm_(lstm), seq_(seq), batch_(batch), input_(input), h_(hidden), dirs_(dirs), reverse_only_(reverse_only),
        lbr_(linear_before_reset), present_(std::move(present)), outputs_(outputs) {
    gates_ = lstm ? 4 : 3;
    if (r_const != nullptr) {  // R^T per direction, [h][gates * h]
      const int64_t gh = gates_ * h_;
      rt_.resize(static_cast<size_t>(dirs * h_ * gh));
      for (int64_t d = 0; d < dirs; ++d)
        for (int64_t j = 0; j < gh; ++j)
          for (int64_t k = 0; k < h_; ++k)
            rt_[static_cast<size_t>((d * h_ + k) * gh + j)] = r_const[(d * gh + j) * h_ + k];
    }
    tasks_ = std::max<int64_t>(1, dirs * batch);
    const int64_t gh = gates_ * h_;
    scratch_bytes_ = static_cast<size_t>(seq * gh + 2 * gh + 2 * h_) * sizeof(float);
  }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(rt_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    if (batch_ == 0) return;
    const int64_t d = task / batch_, b = task % batch_;
    const bool reverse = reverse_only_ || d == 1;
    const int64_t gh = gates_ * h_;
    const float* x = static_cast<const float*>(args.in[0]);
    const float* w = static_cast<const float*>(args.in[1]) + d * gh * input_;
    const float* r = static_cast<const float*>(args.in[2]) + d * gh * h_;
    const float* bias = has(3) ? static_cast<const float*>(args.in[3]) + d * 2 * gh : nullptr;
    float* proj = static_cast<float*>(args.scratch);  // [seq, gh]
    float* gates = proj + seq_ * gh;                   // [gh]
    float* rec = gates + gh;                           // [gh] (GRU: recurrent part)
    float* hstate = rec + gh;                          // [h]
    float* cstate = hstate + h_;                       // [h]
    // Input projection for every step of this batch entry.
    sgemm(false, true, seq_, gh, input_, 1.f, x + b * input_, batch_ * input_, w, input_, 0.f, proj, gh);
    const int init_h = 5, init_c = 6;
    if (has(init_h)) std::memcpy(hstate, static_cast<const float*>(args.in[init_h]) + (d * batch_ + b) * h_, h_ * 4);
    else std::memset(hstate, 0, h_ * 4);
    if (lstm_ && has(init_c))
      std::memcpy(cstate, static_cast<const float*>(args.in[init_c]) + (d * batch_ + b) * h_, h_ * 4);
    else std::memset(cstate, 0, h_ * 4);
    float* y = outputs_ > 0 ? static_cast<float*>(args.out[0]) : nullptr;
    for (int64_t step = 0; step < seq_; ++step) {
      const int64_t t = reverse ? seq_ - 1 - step : step;
      const float* p = proj + t * gh;
      const float* rt = rt_.empty() ? nullptr : rt_.data() + d * h_ * gh;
      if (rt != nullptr) matvec_t(hstate, rt, h_, gh, gh, rec);
      else sgemm(false, true, 1, gh, h_, 1.f, hstate, h_, r, h_, 0.f, rec, gh);
      if (lstm_) lstm_step(p, rec, bias, gates, hstate, cstate);
      else gru_step(p, rec, bias, r, rt, gates, hstate);
      if (y != nullptr) std::memcpy(y + ((t * dirs_ + d) * batch_ + b) * h_, hstate, h_ * 4);
    }
    if (outputs_ > 1 && args.out[1] != nullptr)
      std::memcpy(static_cast<float*>(args.out[1]) + (d * batch_ + b) * h_, hstate, h_ * 4);
    if (lstm_ && outputs_ > 2 && args.out[2] != nullptr)
      std::memcpy(static_cast<float*>(args.out[2]) + (d * batch_ + b) * h_, cstate, h_ * 4);
  }

 private:
  bool has(size_t i) const { return i < present_.size() && present_[i]; }

  // Gate order i, o, f, c; bias = [Wb (4h), Rb (4h)].
  void lstm_step(const float* p, const float* rec, const float* bias, float* g, float* h, float* c) const {
    const int64_t gh = 4 * h_;
    for (int64_t j = 0; j < gh; ++j) g[j] = p[j] + rec[j] + (bias ? bias[j] + bias[gh + j] : 0.f);
    for (int64_t j = 0; j < h_; ++j) {
      float i = sigmoid(g[j]), o = sigmoid(g[h_ + j]), f = sigmoid(g[2 * h_ + j]), cc = fast_tanh(g[3 * h_ + j]);
      c[j] = f * c[j] + i * cc;
      h[j] = o * fast_tanh(c[j]);
    }
  }

  // Gate order z, r, h; bias = [Wb (3h), Rb (3h)]; rec = h_prev * R^T;
  // tmp has room for 3h floats.
  // rt: R^T of this direction ([h][3h]) when R is constant, else null.
  void gru_step(const float* p, const float* rec, const float* bias, const float* r_mat, const float* rt, float* tmp,
                float* h) const {
    const int64_t gh = 3 * h_;
    const float* wb = bias;
    const float* rb = bias ? bias + gh : nullptr;
    if (lbr_) {
      for (int64_t j = 0; j < h_; ++j) {
        float z = sigmoid(p[j] + rec[j] + (bias ? wb[j] + rb[j] : 0.f));
        float r = sigmoid(p[h_ + j] + rec[h_ + j] + (bias ? wb[h_ + j] + rb[h_ + j] : 0.f));
        float hh = fast_tanh(p[2 * h_ + j] + (bias ? wb[2 * h_ + j] : 0.f) +
                             r * (rec[2 * h_ + j] + (bias ? rb[2 * h_ + j] : 0.f)));
        h[j] = (1.f - z) * hh + z * h[j];
      }
      return;
    }
    // linear_before_reset = 0: the candidate uses (r . h_prev) * Rh^T, a
    // second product with R's last [h, h] block.
    float* rh = tmp;           // r . h_prev
    float* cand = tmp + h_;    // (r . h_prev) * Rh^T
    float* z = tmp + 2 * h_;
    for (int64_t j = 0; j < h_; ++j) {
      z[j] = sigmoid(p[j] + rec[j] + (bias ? wb[j] + rb[j] : 0.f));
      float r = sigmoid(p[h_ + j] + rec[h_ + j] + (bias ? wb[h_ + j] + rb[h_ + j] : 0.f));
      rh[j] = r * h[j];
    }
    if (rt != nullptr) matvec_t(rh, rt + 2 * h_, h_, h_, gh, cand);
    else sgemm(false, true, 1, h_, h_, 1.f, rh, h_, r_mat + 2 * h_ * h_, h_, 0.f, cand, h_);
    for (int64_t j = 0; j < h_; ++j) {
      float hh = fast_tanh(p[2 * h_ + j] + cand[j] + (bias ? wb[2 * h_ + j] + rb[2 * h_ + j] : 0.f));
      h[j] = (1.f - z[j]) * hh + z[j] * h[j];
    }
  }

  bool lstm_;
  int64_t seq_, batch_, input_, h_, dirs_;
  bool reverse_only_, lbr_;
  std::vector<bool> present_;
  size_t outputs_;
  int64_t gates_;
  std::vector<float> rt_;  // R^T per direction when R is a constant
};

Result<std::unique_ptr<ROp>> make_rnn(const Node& n, const KernelParams&) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  bool lstm = n.op_type == "LSTM";
  int64_t gates = lstm ? 4 : 3;
  int64_t hidden = n.attr_int("hidden_size", w[1] / gates);
  std::string dir = n.attr_string("direction", "forward");
  bool lbr = n.attr_int("linear_before_reset", 0) != 0;
  std::vector<bool> present;
  for (Value* v : n.inputs) present.push_back(v != nullptr);
  const Value* r = n.inputs[2];
  const float* r_const =
      r->is_constant() && r->dtype == DType::kFloat32 && r->shape.numel() == w[0] * gates * hidden * hidden
          ? r->constant->data<float>()
          : nullptr;
  return std::unique_ptr<ROp>(new RnnOp(lstm, x[0], x[1], x[2], hidden, w[0], dir == "reverse", lbr, present,
                                        n.outputs.size(), r_const));
}

const RKernel kKernels[] = {
    {"LSTM", "rnn.sequences", "one rTask per (direction, batch entry)", make_rnn},
    {"GRU", "rnn.sequences", "one rTask per (direction, batch entry)", make_rnn},
};

}  // namespace

std::span<const RKernel> rnn_kernels() { return kKernels; }

}  // namespace tessera
