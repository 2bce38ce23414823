// MatMul (batched, numpy broadcasting), Gemm and two-operand Einsum.
//
// Tiling: an rTask is one (batch entry, row block, column block) of the
// output; the grid splits batches first, then rows, then columns, until it
// has the requested number of tasks. Each task is one sgemm call. A
// TesseraFusedMatMul that normalizes its rows (a LayerNormalization the
// fusion pass absorbed) keeps whole rows in every tile; one that took in a
// Split of its columns writes each section to its own output.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "base/strings.h"
#include "ir/ops/infer.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/row_math.h"

namespace tessera {
namespace {

constexpr double kFlopsPerTask = 1 << 20;  // default grain

// Splits an m x n output (times `batch`) into about `target` tiles.
struct Grid {
  int64_t batch = 1, m = 1, n = 1;      // problem
  int64_t mb = 1, nb = 1;               // blocks along m and n
  int64_t tasks() const { return batch * mb * nb; }
  void tile(int64_t t, int64_t* bi, int64_t* m0, int64_t* m1, int64_t* n0, int64_t* n1) const {
    *bi = t / (mb * nb);
    int64_t r = t % (mb * nb);
    task_range(m, mb, r / nb, m0, m1);
    task_range(n, nb, r % nb, n0, n1);
  }
};

Grid make_grid(int64_t batch, int64_t m, int64_t n, int64_t k, const KernelParams& p, bool whole_rows = false) {
  Grid g{batch, m, n, 1, 1};
  double flops = 2.0 * static_cast<double>(batch) * m * n * std::max<int64_t>(k, 1);
  int64_t target = p.tasks > 0 ? p.tasks
                               : std::clamp<int64_t>(static_cast<int64_t>(flops / kFlopsPerTask), 1, kMaxDefaultTasks);
  int64_t per_batch = std::max<int64_t>(1, (target + batch - 1) / batch);
  if (batch >= target) per_batch = 1;
  // Rows first in blocks of at least 8, then columns in blocks of at least 32.
  g.mb = std::clamp<int64_t>(per_batch, 1, std::max<int64_t>(1, m / 8));
  // At the default grain, rows in whole blocks of 8 where m allows it: the
  // row kernels keep 8 rows in registers (4 with AVX2), and a block of 10
  // or 11 ran its last 2 or 3 rows at half speed (tiny BERT's 64 x 384 QKV
  // projection in 6 tasks: 11.7 us per rTask against 7.0 in 8 blocks of 8).
  // The divisor of m / 8 nearest the wanted count, the larger on a tie.
  if (p.tasks <= 0 && m % 8 == 0 && m / 8 > 1) {
    int64_t best = 1;
    for (int64_t d = 1; d <= m / 8; ++d)
      if ((m / 8) % d == 0 && std::abs(d - g.mb) <= std::abs(best - g.mb)) best = d;
    g.mb = best;
  }
  int64_t left = std::max<int64_t>(1, per_batch / g.mb);
  g.nb = whole_rows ? 1 : std::clamp<int64_t>(left, 1, std::max<int64_t>(1, n / 32));
  return g;
}

// --------------------------------------------------------------- MatMul ---

class MatMulOp : public ROp {
 public:
  // `sections`: where each output's columns start, then n (a fused Split
  // of the columns; {0, n} for one output).
  MatMulOp(Grid grid, int64_t k, std::vector<int64_t> a_off, std::vector<int64_t> b_off, bool has_bias,
           const Epilogue& epi, bool norm, bool norm_bias, float norm_eps, std::vector<int64_t> sections)
      : g_(grid), k_(k), a_off_(std::move(a_off)), b_off_(std::move(b_off)), has_bias_(has_bias), epi_(epi),
        norm_(norm), norm_bias_(norm_bias), norm_eps_(norm_eps), sections_(std::move(sections)) {
    tasks_ = g_.tasks();
  }

  // A constant B read by gemm_rows, the same matrix for every batch entry,
  // is packed into panels once (gemm_rows_packed: the same bits).
  void pack_b(const float* b) {
    if (b == nullptr || !matmul_uses_rows(k_, g_.m, g_.n)) return;
    for (int64_t off : b_off_)
      if (off != 0) return;
    packed_b_.assign(packed_cols_size(k_, g_.n), 0.f);
    pack_cols(b, k_, g_.n, g_.n, packed_b_.data());
  }

  std::string_view path() const override {
    return !packed_b_.empty() ? "gemm_rows, B packed" : matmul_uses_rows(k_, g_.m, g_.n) ? "gemm_rows" : "sgemm";
  }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(packed_b_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    int64_t bi, m0, m1, n0, n1;
    g_.tile(task, &bi, &m0, &m1, &n0, &n1);
    const float* a = static_cast<const float*>(args.in[0]) + a_off_[bi] + m0 * k_;
    const float* b = static_cast<const float*>(args.in[1]) + b_off_[bi];
    // Each output section the tile covers: one sgemm into that output.
    for (size_t s = 0; s + 1 < sections_.size(); ++s) {
      const int64_t c0 = std::max(n0, sections_[s]), c1 = std::min(n1, sections_[s + 1]);
      if (c0 >= c1) continue;
      const int64_t ldc = sections_[s + 1] - sections_[s];
      const int64_t at = bi * g_.m * ldc + m0 * ldc + (c0 - sections_[s]);
      float* c = static_cast<float*>(args.out[s]) + at;
      if (!packed_b_.empty()) gemm_rows_packed(m1 - m0, c0, c1, k_, a, k_, packed_b_.data(), c, ldc);
      else matmul_gemm(m1 - m0, c1 - c0, k_, a, k_, b + c0, g_.n, c, ldc, g_.m, g_.n);
      if (!has_bias_ && epi_.empty() && !norm_) continue;
      // TesseraFusedMatMul: the bias Add (bias + y, as the unfused Add),
      // then the residual and activation, then the LayerNormalization
      // (whole rows here), on this tile's rows while they are in cache.
      // A residual or a norm comes only with one output (ldc = n).
      const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) + c0 : nullptr;
      const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) + at : nullptr;
      const float* scale = norm_ ? static_cast<const float*>(args.in[4]) : nullptr;
      const float* shift = norm_bias_ ? static_cast<const float*>(args.in[5]) : nullptr;
      const int64_t w = c1 - c0;
      for (int64_t i = 0; i < m1 - m0; ++i) {
        float* __restrict row = c + i * ldc;
        if (bias != nullptr)
          for (int64_t j = 0; j < w; ++j) row[j] = bias[j] + row[j];
        epi_.apply(row, res ? res + i * ldc : nullptr, w);
      }
      if (norm_) layer_norm_rows(c, ldc, c, ldc, m1 - m0, w, norm_eps_, scale, shift);
    }
  }

 private:
  Grid g_;
  int64_t k_;
  std::vector<int64_t> a_off_, b_off_;  // element offset of each batch entry
  bool has_bias_;
  Epilogue epi_;
  bool norm_, norm_bias_;  // a LayerNormalization of each row (scale: input 4, bias: input 5)
  float norm_eps_;
  std::vector<int64_t> sections_;
  std::vector<float> packed_b_;  // B packed by pack_cols, or empty
};

// Offsets of each broadcast batch entry into an operand with batch dims
// `dims` (left-padded to the output batch rank) and matrix size `mat`.
std::vector<int64_t> batch_offsets(const std::vector<int64_t>& out_batch, std::vector<int64_t> dims, int64_t mat) {
  dims.insert(dims.begin(), out_batch.size() - dims.size(), 1);
  int rank = static_cast<int>(out_batch.size());
  std::vector<int64_t> stride(rank, 0);
  int64_t s = mat;
  for (int d = rank - 1; d >= 0; --d) {
    stride[d] = dims[d] == 1 ? 0 : s;
    s *= dims[d];
  }
  int64_t total = dims_product(out_batch, 0, rank);
  std::vector<int64_t> off(total);
  for (int64_t i = 0; i < total; ++i) {
    int64_t rem = i, o = 0;
    for (int d = rank - 1; d >= 0; --d) {
      o += (rem % out_batch[d]) * stride[d];
      rem /= out_batch[d];
    }
    off[i] = o;
  }
  return off;
}

Result<std::unique_ptr<ROp>> make_matmul(const Node& n, const KernelParams& p) {
  if (n.inputs[0]->dtype != DType::kFloat32)
    return unimplemented(str_cat(n.label(), ": MatMul on ", dtype_name(n.inputs[0]->dtype)));
  Shape a = n.inputs[0]->shape, b = n.inputs[1]->shape;
  bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
  if (a_vec) a = Shape{1, a[0]};
  if (b_vec) b = Shape{b[0], 1};
  int64_t m = a[a.rank() - 2], k = a[a.rank() - 1], nn = b[b.rank() - 1];
  std::vector<int64_t> ab(a.dims.begin(), a.dims.end() - 2), bb(b.dims.begin(), b.dims.end() - 2);
  std::vector<int64_t> out_batch(std::max(ab.size(), bb.size()));
  for (size_t i = 0; i < out_batch.size(); ++i) {
    int64_t da = i + ab.size() >= out_batch.size() ? ab[i + ab.size() - out_batch.size()] : 1;
    int64_t db = i + bb.size() >= out_batch.size() ? bb[i + bb.size() - out_batch.size()] : 1;
    out_batch[i] = std::max(da, db);
  }
  int64_t batch = dims_product(out_batch, 0, static_cast<int>(out_batch.size()));
  const bool norm = n.input(4) != nullptr;
  std::vector<int64_t> sections = {0};
  for (int64_t w : n.attr_ints("split")) sections.push_back(sections.back() + w);
  if (sections.size() == 1) sections.push_back(nn);
  if (sections.back() != nn || sections.size() - 1 != n.outputs.size() ||
      (sections.size() > 2 && (norm || n.input(3) != nullptr)))
    return invalid_argument(str_cat(n.label(), ": split ", sections.size() - 1, " ways does not fit ", nn,
                                    " columns and ", n.outputs.size(), " outputs"));
  Grid g = make_grid(batch, m, nn, k, p, norm);
  TESSERA_ASSIGN_OR_RETURN(Epilogue epi, Epilogue::from_node(n));
  auto op = std::make_unique<MatMulOp>(g, k, batch_offsets(out_batch, ab, m * k), batch_offsets(out_batch, bb, k * nn),
                                       n.input(2) != nullptr, epi, norm, n.input(5) != nullptr,
                                       n.attr_float("norm_epsilon", 1e-5f), std::move(sections));
  const Value* bv = n.inputs[1];
  if (bv->is_constant() && bv->dtype == DType::kFloat32) op->pack_b(bv->constant->data<float>());
  return std::unique_ptr<ROp>(std::move(op));
}

// ----------------------------------------------------------------- Gemm ---

class GemmOp : public ROp {
 public:
  GemmOp(Grid g, int64_t k, bool ta, bool tb, float alpha, float beta, int64_t c_rs, int64_t c_cs, bool has_c,
         const Epilogue& epi)
      : g_(g), k_(k), ta_(ta), tb_(tb), alpha_(alpha), beta_(beta), c_rs_(c_rs), c_cs_(c_cs), has_c_(has_c),
        epi_(epi) {
    tasks_ = g_.tasks();
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t bi, m0, m1, n0, n1;
    g_.tile(task, &bi, &m0, &m1, &n0, &n1);
    const int64_t n = g_.n;
    float* y = static_cast<float*>(args.out[0]);
    float beta = 0.f;
    if (has_c_ && beta_ != 0.f) {
      const float* c = static_cast<const float*>(args.in[2]);
      for (int64_t i = m0; i < m1; ++i)
        for (int64_t j = n0; j < n1; ++j) y[i * n + j] = beta_ * c[i * c_rs_ + j * c_cs_];
      beta = 1.f;
    }
    const float* a = static_cast<const float*>(args.in[0]);
    const float* b = static_cast<const float*>(args.in[1]);
    // A is m x k (or k x m when transposed); B is k x n (or n x k).
    const float* at = ta_ ? a + m0 : a + m0 * k_;
    const float* bt = tb_ ? b + n0 * k_ : b + n0;
    sgemm(ta_, tb_, m1 - m0, n1 - n0, k_, alpha_, at, ta_ ? g_.m : k_, bt, tb_ ? k_ : n, beta, y + m0 * n + n0, n);
    if (!epi_.empty()) {
      const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
      for (int64_t i = m0; i < m1; ++i) epi_.apply(y + i * n + n0, res ? res + i * n + n0 : nullptr, n1 - n0);
    }
  }

 private:
  Grid g_;
  int64_t k_;
  bool ta_, tb_;
  float alpha_, beta_;
  int64_t c_rs_, c_cs_;  // C's strides after broadcasting to m x n
  bool has_c_;
  Epilogue epi_;
};

Result<std::unique_ptr<ROp>> make_gemm(const Node& n, const KernelParams& p) {
  const Shape& a = n.inputs[0]->shape;
  bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t nn = n.outputs[0]->shape[1];
  int64_t rs = 0, cs = 0;
  bool has_c = n.input(2) != nullptr;
  if (has_c) {
    const Shape& c = n.inputs[2]->shape;
    std::vector<int64_t> d = c.dims;
    d.insert(d.begin(), 2 - d.size(), 1);
    rs = d[0] == 1 ? 0 : d[1];
    cs = d[1] == 1 ? 0 : 1;
  }
  Grid g = make_grid(1, m, nn, k, p);
  TESSERA_ASSIGN_OR_RETURN(Epilogue epi, Epilogue::from_node(n));
  return std::unique_ptr<ROp>(
      new GemmOp(g, k, ta, tb, n.attr_float("alpha", 1.f), n.attr_float("beta", 1.f), rs, cs, has_c, epi));
}

// --------------------------------------------------------------- Einsum ---

// Two-operand einsum with every index either batch (both operands and the
// output), m (A and output), n (B and output) or k (A and B, summed). Each
// rTask computes one batch entry: it gathers A and B into contiguous
// [m, k] and [k, n] tiles in scratch, multiplies, and scatters the [m, n]
// result into the output.
class EinsumOp : public ROp {
 public:
  struct Axis {
    int64_t extent;
    int64_t sa, sb, so;  // strides in A, B and the output (0 if absent)
  };
  EinsumOp(std::vector<Axis> batch, std::vector<Axis> m, std::vector<Axis> n, std::vector<Axis> k)
      : batch_(std::move(batch)), m_(std::move(m)), n_(std::move(n)), k_(std::move(k)) {
    bn_ = product(batch_);
    mn_ = product(m_);
    nn_ = product(n_);
    kn_ = product(k_);
    tasks_ = std::max<int64_t>(1, bn_);
    scratch_bytes_ = static_cast<size_t>(mn_ * kn_ + kn_ * nn_ + mn_ * nn_) * sizeof(float);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    if (bn_ == 0) return;
    const float* a = static_cast<const float*>(args.in[0]);
    const float* b = static_cast<const float*>(args.in[1]);
    float* o = static_cast<float*>(args.out[0]);
    int64_t oa = 0, ob = 0, oo = 0;
    offset_of(batch_, task, &oa, &ob, &oo);
    float* ta = static_cast<float*>(args.scratch);
    float* tb = ta + mn_ * kn_;
    float* tc = tb + kn_ * nn_;
    for (int64_t i = 0; i < mn_; ++i) {
      int64_t ia = 0, unused1 = 0, unused2 = 0;
      offset_of(m_, i, &ia, &unused1, &unused2);
      for (int64_t j = 0; j < kn_; ++j) {
        int64_t ka = 0, kb = 0, ko = 0;
        offset_of(k_, j, &ka, &kb, &ko);
        ta[i * kn_ + j] = a[oa + ia + ka];
      }
    }
    for (int64_t j = 0; j < kn_; ++j) {
      int64_t ka = 0, kb = 0, ko = 0;
      offset_of(k_, j, &ka, &kb, &ko);
      for (int64_t i = 0; i < nn_; ++i) {
        int64_t u1 = 0, ib = 0, u2 = 0;
        offset_of(n_, i, &u1, &ib, &u2);
        tb[j * nn_ + i] = b[ob + ib + kb];
      }
    }
    matmul_gemm(mn_, nn_, kn_, ta, kn_, tb, nn_, tc, nn_, mn_, nn_);
    for (int64_t i = 0; i < mn_; ++i) {
      int64_t u1 = 0, u2 = 0, io = 0;
      offset_of(m_, i, &u1, &u2, &io);
      for (int64_t j = 0; j < nn_; ++j) {
        int64_t v1 = 0, v2 = 0, jo = 0;
        offset_of(n_, j, &v1, &v2, &jo);
        o[oo + io + jo] = tc[i * nn_ + j];
      }
    }
  }

 private:
  static int64_t product(const std::vector<Axis>& axes) {
    int64_t p = 1;
    for (auto& x : axes) p *= x.extent;
    return p;
  }
  static void offset_of(const std::vector<Axis>& axes, int64_t flat, int64_t* a, int64_t* b, int64_t* o) {
    for (int d = static_cast<int>(axes.size()) - 1; d >= 0; --d) {
      int64_t i = flat % axes[d].extent;
      flat /= axes[d].extent;
      *a += i * axes[d].sa;
      *b += i * axes[d].sb;
      *o += i * axes[d].so;
    }
  }
  std::vector<Axis> batch_, m_, n_, k_;
  int64_t bn_, mn_, nn_, kn_;
};

Result<std::unique_ptr<ROp>> make_einsum(const Node& n, const KernelParams&) {
  if (n.inputs.size() != 2)
    return unimplemented(str_cat(n.label(), ": Einsum with ", n.inputs.size(),
                                 " operand(s); only two-operand (matmul-like) equations are supported"));
  std::vector<int> ranks{n.inputs[0]->shape.rank(), n.inputs[1]->shape.rank()};
  TESSERA_ASSIGN_OR_RETURN(EinsumSpec spec, parse_einsum(n.attr_string("equation", ""), ranks));
  auto strides = [](const Shape& s) {
    std::vector<int64_t> st(s.rank());
    int64_t acc = 1;
    for (int d = s.rank() - 1; d >= 0; --d) {
      st[d] = acc;
      acc *= s.dims[d];
    }
    return st;
  };
  auto sa = strides(n.inputs[0]->shape), sb = strides(n.inputs[1]->shape), so = strides(n.outputs[0]->shape);
  std::map<char, EinsumOp::Axis> axes;
  std::string order;
  auto add = [&](char c, int64_t extent, int64_t EinsumOp::Axis::*field, int64_t stride) {
    if (!axes.count(c)) {
      axes[c] = EinsumOp::Axis{extent, 0, 0, 0};
      order += c;
    }
    axes[c].*field += stride;  // repeated letters (diagonals) add strides
  };
  for (size_t i = 0; i < spec.operands[0].size(); ++i)
    add(spec.operands[0][i], n.inputs[0]->shape[static_cast<int>(i)], &EinsumOp::Axis::sa, sa[i]);
  for (size_t i = 0; i < spec.operands[1].size(); ++i)
    add(spec.operands[1][i], n.inputs[1]->shape[static_cast<int>(i)], &EinsumOp::Axis::sb, sb[i]);
  for (size_t i = 0; i < spec.output.size(); ++i) axes[spec.output[i]].so = so[i];
  std::vector<EinsumOp::Axis> batch, m, nn, k;
  for (char c : order) {
    bool in_a = spec.operands[0].find(c) != std::string::npos;
    bool in_b = spec.operands[1].find(c) != std::string::npos;
    bool in_o = spec.output.find(c) != std::string::npos;
    const auto& ax = axes[c];
    if (in_a && in_b && in_o) batch.push_back(ax);
    else if (in_a && in_b) k.push_back(ax);
    else if (in_a && in_o) m.push_back(ax);
    else if (in_b && in_o) nn.push_back(ax);
    else
      return unimplemented(str_cat(n.label(), ": index '", c,
                                   "' is summed within one operand; only matmul-like equations are supported"));
  }
  // Keep output order for batch axes so tasks write in order.
  return std::unique_ptr<ROp>(new EinsumOp(batch, m, nn, k));
}

const RKernel kKernels[] = {
    {"MatMul", "matmul.gemm_tiles", "batched, broadcast; tiles of rows x cols, one sgemm each", make_matmul},
    {"TesseraFusedMatMul", "matmul.gemm_tiles+epilogue", "MatMul with its bias Add, residual Add, activation and LayerNormalization fused, or writing a Split of its columns",
     make_matmul},
    {"Gemm", "gemm.tiles", "tiles of rows x cols with fused bias", make_gemm},
    {"TesseraFusedGemm", "gemm.tiles+epilogue", "Gemm with its residual Add and activation fused into each tile",
     make_gemm},
    {"Einsum", "einsum.batched_gemm", "two operands, one batch entry per rTask", make_einsum},
};

}  // namespace

std::span<const RKernel> matmul_kernels() { return kKernels; }

}  // namespace tessera
