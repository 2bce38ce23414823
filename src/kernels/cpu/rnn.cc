// LSTM and GRU (forward, reverse, bidirectional; default activations).
//
// An rTask is one (direction, batch entry) sequence: independent of every
// other. It first projects its inputs for all time steps with one sgemm
// ([seq, input] x W^T), then walks the steps, each a [1, H] x R^T product
// plus the gate math. Splitting the steps themselves into rOperators, for
// wavefront schedules across layers, is the compiler's job.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/strings.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel.h"

namespace tessera {
namespace {

inline float sigmoid(float x) { return fast_sigmoid(x); }

class RnnOp : public ROp {
 public:
  RnnOp(bool lstm, int64_t seq, int64_t batch, int64_t input, int64_t hidden, int64_t dirs, bool reverse_only,
        bool linear_before_reset, std::vector<bool> present, size_t outputs)
      : lstm_(lstm), seq_(seq), batch_(batch), input_(input), h_(hidden), dirs_(dirs), reverse_only_(reverse_only),
        lbr_(linear_before_reset), present_(std::move(present)), outputs_(outputs) {
    gates_ = lstm ? 4 : 3;
    tasks_ = std::max<int64_t>(1, dirs * batch);
    const int64_t gh = gates_ * h_;
    scratch_bytes_ = static_cast<size_t>(seq * gh + 2 * gh + 2 * h_) * sizeof(float);
  }

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
      sgemm(false, true, 1, gh, h_, 1.f, hstate, h_, r, h_, 0.f, rec, gh);
      if (lstm_) lstm_step(p, rec, bias, gates, hstate, cstate);
      else gru_step(p, rec, bias, r, gates, hstate);
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
  void gru_step(const float* p, const float* rec, const float* bias, const float* r_mat, float* tmp, float* h) const {
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
    sgemm(false, true, 1, h_, h_, 1.f, rh, h_, r_mat + 2 * h_ * h_, h_, 0.f, cand, h_);
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
  return std::unique_ptr<ROp>(new RnnOp(lstm, x[0], x[1], x[2], hidden, w[0], dir == "reverse", lbr, present,
                                        n.outputs.size()));
}

const RKernel kKernels[] = {
    {"LSTM", "rnn.sequences", "one rTask per (direction, batch entry)", make_rnn},
    {"GRU", "rnn.sequences", "one rTask per (direction, batch entry)", make_rnn},
};

}  // namespace

std::span<const RKernel> rnn_kernels() { return kKernels; }

}  // namespace tessera

// --------------------------------------------- lowered LSTM (one step) ---

namespace tessera {
namespace {

// One time step of a forward LSTM. An rTask is one block of hidden units:
// one GEMM of [x_t, h_prev] (or h_prev alone, when x was projected ahead)
// against the block's packed gate rows, then the cell update.
class LstmCellOp : public ROp {
 public:
  LstmCellOp(int64_t batch, int64_t hidden, int64_t k, int64_t input, int64_t step, int64_t blocks, bool has_h,
             bool has_c, bool has_b)
      : batch_(batch), h_(hidden), k_(k), in_(input), step_(step), has_h_(has_h), has_c_(has_c), has_b_(has_b) {
    tasks_ = blocks;
    const int64_t nu = (hidden + blocks - 1) / blocks;
    scratch_bytes_ = static_cast<size_t>(batch * (k + 4 * nu)) * sizeof(float);
  }

  void run(int64_t task, const TaskArgs& args) const override {
    int64_t u0, u1;
    task_range(h_, tasks_, task, &u0, &u1);
    const int64_t nu = u1 - u0;
    if (nu <= 0) return;
    const float* x = static_cast<const float*>(args.in[0]);
    const float* hp = has_h_ ? static_cast<const float*>(args.in[1]) : nullptr;
    const float* cp = has_c_ ? static_cast<const float*>(args.in[2]) : nullptr;
    const float* wp = static_cast<const float*>(args.in[3]) + 4 * u0 * k_;
    const float* bp = has_b_ ? static_cast<const float*>(args.in[4]) + 4 * u0 : nullptr;
    float* hy = static_cast<float*>(args.out[0]);
    float* cy = static_cast<float*>(args.out[1]);
    float* z = static_cast<float*>(args.scratch);  // [batch, k]
    float* g = z + batch_ * k_;                       // [batch, 4 * nu], gate-major
    const bool projected = step_ >= 0;
    for (int64_t b = 0; b < batch_; ++b) {
      float* zb = z + b * k_;
      int64_t off = 0;
      if (!projected) {
        std::memcpy(zb, x + b * in_, static_cast<size_t>(in_) * sizeof(float));
        off = in_;
      }
      if (hp != nullptr) std::memcpy(zb + off, hp + b * h_, static_cast<size_t>(h_) * sizeof(float));
      else std::memset(zb + off, 0, static_cast<size_t>(h_) * sizeof(float));
    }
    sgemm(false, true, batch_, 4 * nu, k_, 1.f, z, k_, wp, k_, 0.f, g, 4 * nu);
    for (int64_t b = 0; b < batch_; ++b) {
      float* gb = g + b * 4 * nu;
      if (projected) {
        const float* pr = x + (step_ * batch_ + b) * 4 * h_;
        for (int gate = 0; gate < 4; ++gate)
          for (int64_t j = 0; j < nu; ++j) gb[gate * nu + j] += pr[gate * h_ + u0 + j];
      } else if (bp != nullptr) {
        for (int64_t j = 0; j < 4 * nu; ++j) gb[j] += bp[j];
      }
      for (int64_t j = 0; j < nu; ++j) {
        float i = fast_sigmoid(gb[j]), o = fast_sigmoid(gb[nu + j]), f = fast_sigmoid(gb[2 * nu + j]);
        float cc = fast_tanh(gb[3 * nu + j]);
        float c = i * cc + (cp != nullptr ? f * cp[b * h_ + u0 + j] : 0.f);
        cy[b * h_ + u0 + j] = c;
        hy[b * h_ + u0 + j] = o * fast_tanh(c);
      }
    }
  }

 private:
  int64_t batch_, h_, k_, in_, step_;
  bool has_h_, has_c_, has_b_;
};

Result<std::unique_ptr<ROp>> make_lstm_cell(const Node& n, const KernelParams&) {
  int64_t step = n.attr_int("step", 0), hidden = n.attr_int("hidden_size", 1), batch = n.attr_int("batch", 1);
  int64_t blocks = n.attr_int("blocks", 1);
  const Shape& wp = n.inputs[3]->shape;
  if (wp.rank() != 2 || wp[0] != 4 * hidden || blocks < 1 || blocks > hidden)
    return invalid_argument(str_cat(n.label(), ": packed weights have shape ", wp.to_string()));
  int64_t input = step >= 0 ? 0 : wp[1] - hidden;
  if (step < 0 && n.inputs[0]->shape.numel() != batch * input)
    return invalid_argument(str_cat(n.label(), ": step input has ", n.inputs[0]->shape.numel(), " values"));
  return std::unique_ptr<ROp>(new LstmCellOp(batch, hidden, wp[1], input, step, blocks, n.input(1) != nullptr,
                                             n.input(2) != nullptr, n.input(4) != nullptr));
}

// X [seq, batch, I] x W[0]^T + Wb + Rb: rTasks are row blocks of the
// [seq * batch, G*H] result.
class RnnProjOp : public ROp {
 public:
  RnnProjOp(int64_t rows, int64_t in, int64_t cols, bool has_b, const KernelParams& p)
      : rows_(rows), in_(in), cols_(cols), has_b_(has_b) {
    tasks_ = choose_tasks(rows, std::max<int64_t>(1, (1 << 21) / std::max<int64_t>(2 * in * cols, 1)), p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t r0, r1;
    task_range(rows_, tasks_, task, &r0, &r1);
    if (r1 <= r0) return;
    const float* x = static_cast<const float*>(args.in[0]);
    const float* w = static_cast<const float*>(args.in[1]);
    const float* b = has_b_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    sgemm(false, true, r1 - r0, cols_, in_, 1.f, x + r0 * in_, in_, w, in_, 0.f, y + r0 * cols_, cols_);
    if (b != nullptr)
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < cols_; ++j) y[r * cols_ + j] += b[j] + b[cols_ + j];
  }

 private:
  int64_t rows_, in_, cols_;
  bool has_b_;
};

Result<std::unique_ptr<ROp>> make_rnn_proj(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  return std::unique_ptr<ROp>(new RnnProjOp(x[0] * x[1], x[2], n.inputs[1]->shape[1], n.input(2) != nullptr, p));
}

const RKernel kLoweredKernels[] = {
    {"TesseraLstmCell", "lstm_cell.units", "one time step; rTasks are blocks of hidden units", make_lstm_cell},
    {"TesseraRnnProj", "rnn_proj.rows", "input projection of every step, one GEMM tiled by rows", make_rnn_proj},
};

}  // namespace

std::span<const RKernel> rnn_lowered_kernels() { return kLoweredKernels; }

}  // namespace tessera
