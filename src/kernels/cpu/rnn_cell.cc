// The lowered LSTM and GRU steps (compiler/lower_rnn.cc): the packed
// weight layouts (rnn_cell.h) and the per-step cell rKernel, its GEMV of
// R panel by panel, the next layer's projection carried in its idle FMA
// slots, and the gate math. The projection rKernel: rnn_proj.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/strings.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/rnn_cell.h"
#include "kernels/cpu/rnn_lowered.h"
#include "kernels/cpu/row_math.h"

namespace tessera {

Tensor pack_rnn_recurrence(const float* r, int64_t gates, int64_t hidden) {
  const int64_t panels = rnn_panels(hidden), width = gates * kRnnPanelUnits;
  Tensor out(DType::kFloat32, Shape{panels, hidden, width});
  float* o = out.data<float>();
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t k = 0; k < hidden; ++k)
      for (int64_t g = 0; g < gates; ++g)
        for (int64_t j = 0; j < kRnnPanelUnits; ++j) {
          const int64_t u = p * kRnnPanelUnits + j;
          o[(p * hidden + k) * width + g * kRnnPanelUnits + j] = u < hidden ? r[(g * hidden + u) * hidden + k] : 0.f;
        }
  return out;
}

namespace {

// The row of W (g * H + u) behind column c of the packed projection, or -1
// for a unit past H.
int64_t projection_source(int64_t c, int64_t gates, int64_t hidden) {
  const int64_t width = gates * kRnnPanelUnits;
  const int64_t g = (c % width) / kRnnPanelUnits, u = (c / width) * kRnnPanelUnits + c % kRnnPanelUnits;
  return u < hidden ? g * hidden + u : -1;
}

}  // namespace

Tensor pack_rnn_projection(const float* w, int64_t gates, int64_t hidden, int64_t input) {
  const int64_t panels = rnn_panels(hidden), width = gates * kRnnPanelUnits;
  Tensor out(DType::kFloat32, Shape{panels, input, width});
  float* o = out.data<float>();
  for (int64_t c = 0; c < panels * width; ++c) {
    const int64_t src = projection_source(c, gates, hidden), p = c / width, q = c % width;
    for (int64_t k = 0; k < input; ++k) o[(p * input + k) * width + q] = src < 0 ? 0.f : w[src * input + k];
  }
  return out;
}

Tensor pack_rnn_gate_vector(const float* v, int64_t gates, int64_t hidden) {
  const int64_t cols = rnn_projection_cols(gates, hidden);
  Tensor out(DType::kFloat32, Shape{cols});
  float* o = out.data<float>();
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t src = projection_source(c, gates, hidden);
    o[c] = src < 0 ? 0.f : v[src];
  }
  return out;
}

bool rnn_carry_fused() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

namespace {

// acc[W] = sum over i < k of h[i] * panel row i: the sums stay in
// registers while the panel streams through once.
// tick() is called after every kGateTickRows rows (see GatePipe).
constexpr int64_t kGateTickRows = 32;
struct NoTick {
  void operator()() const {}
};
template <int64_t W, typename Tick = NoTick>
inline void panel_gemv(const float* __restrict panel, const float* __restrict h, int64_t k, float* __restrict acc,
                       Tick tick = {}) {
#if defined(__AVX512F__)
  if constexpr (W == 64 && !std::is_same_v<Tick, NoTick>) {
    // Written out: the tick in GCC's vectorized loop below left its sums
    // in memory. The same sums in the same order.
    __m512 g0 = _mm512_setzero_ps(), g1 = g0, g2 = g0, g3 = g0;
    for (int64_t i = 0; i < k; ++i) {
      const float* row = panel + i * 64;
      const __m512 s = _mm512_set1_ps(h[i]);
      g0 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row), g0);
      g1 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 16), g1);
      g2 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 32), g2);
      g3 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 48), g3);
      if (i % kGateTickRows == kGateTickRows - 1) tick();
    }
    _mm512_storeu_ps(acc, g0);
    _mm512_storeu_ps(acc + 16, g1);
    _mm512_storeu_ps(acc + 32, g2);
    _mm512_storeu_ps(acc + 48, g3);
    return;
  }
#endif
  float a[W] = {};
  for (int64_t i = 0; i < k; ++i) {
    const float hi = h[i];
    const float* row = panel + i * W;
    for (int64_t j = 0; j < W; ++j) a[j] += hi * row[j];
    if (i % kGateTickRows == kGateTickRows - 1) tick();
  }
  for (int64_t j = 0; j < W; ++j) acc[j] = a[j];
}

// The next layer's projection carried by a step (attribute next_slice):
// each group of kNextGroupPanels panels of this layer's R also computes
// one kNextTileRows x kNextTileCols tile of the next layer's projection,
// its reduction spread over the group's panel GEMVs. A GEMV streams R
// from L2 and leaves the FMA units about half idle; the tile's
// arithmetic fills them (standalone, one half-cell of LSTM-TC: GEMV 4.57
// us, GEMV then the step's share of the projection 7.0 us, fused 5.7).
constexpr int64_t kNextGroupPanels = 4;
constexpr int64_t kNextTileRows = kRnnBlockRows;
constexpr int64_t kNextTileCols = 32;
// How far ahead (rows of W) a tile prefetches its W columns: two lines
// of every 256-byte row. The first block of a layer's W comes from DRAM
// (untouched since the last run); left to the hardware prefetcher its
// steps took 16-18 us, prefetched 12 (LSTM-TC traces; whole runs 4-9 %
// faster, with 8 to 32 rows ahead alike).
[[maybe_unused]] constexpr int64_t kNextTilePrefetchRows = 16;  // AVX-512 builds only
// A step of the first carried block (steps 8-15, which read the next
// layer's W from memory, each one panel) also pulls the panel the next
// step reads into L2, a row's two lines per tile k-step: a whole step
// ahead instead of 16 rows, the memory latency is covered (LSTM-TC's
// steps 8-15: 10.0-11.6 us each -> 7.9-9.4). Later blocks find W in L3,
// where the same requests cost their steps more than they saved.
// Into L2 (T1): requested into L1, they saved little.
static_assert(kNextTileCols * sizeof(float) == 128, "a tile row is two cache lines");

// One tile: rows a[0..7] (the previous layer's h rows), columns `wcol`
// (column block of a packed W panel, row stride ldw) over reductions
// [k0, k1), accumulated into acc[8][32] in ascending k, as gemm_rows
// accumulates (one fused multiply-add chain per output).
inline void next_tile_part(const float* const* a, const float* wcol, int64_t ldw, int64_t k0, int64_t k1,
                           float (*acc)[kNextTileCols]) {
  for (int64_t i = k0; i < k1; ++i)
    for (int64_t r = 0; r < kNextTileRows; ++r) {
      const float s = a[r][i];
      for (int64_t c = 0; c < kNextTileCols; ++c) acc[r][c] = std::fma(s, wcol[i * ldw + c], acc[r][c]);
    }
}

// The GEMVs of a group's 4 panels (r4: 4 panels of [k, 64]) into acc4
// [4][64], with S tiles interleaved (S = 1 or 2 slices, next_slices):
// tile s rides on panels s 4/S .. (s+1) 4/S - 1, S tile k-steps after
// every 4 GEMV rows, so each of its panels carries an equal share of its
// reductions in order. wcol[s], bias[s], tout[s]: tile s's W columns,
// bias and output (row stride ldt). wnext (or null): the same columns of
// the panel the next step reads, pulled into L2 as the tile goes
// (kNextTilePrefetchRows; one slice only). Sums in the order panel_gemv
// and next_tile_part take (bitwise the same).
template <int S, typename Tick, typename PanelDone>
inline void group_gemv_with_tiles(const float* __restrict r4, const float* __restrict h, int64_t k, float* acc4,
                                  const float* const* a, const float* const* wcol, int64_t ldw,
                                  const float* const* bias, float* const* tout, int64_t ldt, Tick tick,
                                  PanelDone panel_done, const float* wnext) {
  static_assert(S == 1 || S == 2, "a step carries one or two slices");
#if defined(__AVX512F__)
  constexpr int64_t kPanelsPerTile = kNextGroupPanels / S;
  __m512 t[kNextTileRows][2];
  for (int64_t r = 0; r < kNextTileRows; ++r) t[r][0] = t[r][1] = _mm512_setzero_ps();
  // The rows in named pointers: an array of them would stay in memory.
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5], *a6 = a[6], *a7 = a[7];
  const float* w = wcol[0];
  const auto prefetch_w_row = [&](int64_t i) {
    const char* line = reinterpret_cast<const char*>(w + i * ldw);
    _mm_prefetch(line, _MM_HINT_T0);
    _mm_prefetch(line + 64, _MM_HINT_T0);
  };
  int64_t kk = 0;
  for (int64_t p = 0; p < kNextGroupPanels; ++p) {
    const int64_t tile = p / kPanelsPerTile;
    if (p % kPanelsPerTile == 0) {
      w = wcol[tile];
      kk = 0;
      if (p > 0)
        for (int64_t r = 0; r < kNextTileRows; ++r) t[r][0] = t[r][1] = _mm512_setzero_ps();
      for (int64_t i = 0; i < std::min(k, kNextTilePrefetchRows); ++i) prefetch_w_row(i);
    }
    const float* panel = r4 + p * k * 64;
    __m512 g0 = _mm512_setzero_ps(), g1 = g0, g2 = g0, g3 = g0;
    for (int64_t i = 0; i < k; i += kNextGroupPanels) {
      // Four GEMV rows, written out: GCC leaves a loop of them rolled.
      const float* row = panel + i * 64;
      __m512 s = _mm512_set1_ps(h[i]);
      g0 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row), g0);
      g1 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 16), g1);
      g2 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 32), g2);
      g3 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 48), g3);
      s = _mm512_set1_ps(h[i + 1]);
      g0 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 64), g0);
      g1 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 80), g1);
      g2 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 96), g2);
      g3 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 112), g3);
      s = _mm512_set1_ps(h[i + 2]);
      g0 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 128), g0);
      g1 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 144), g1);
      g2 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 160), g2);
      g3 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 176), g3);
      s = _mm512_set1_ps(h[i + 3]);
      g0 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 192), g0);
      g1 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 208), g1);
      g2 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 224), g2);
      g3 = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 240), g3);
      if (i % kGateTickRows == kGateTickRows - kNextGroupPanels) tick();
#pragma GCC unroll 2
      for (int step = 0; step < S; ++step, ++kk) {
        if (kk + kNextTilePrefetchRows < k) prefetch_w_row(kk + kNextTilePrefetchRows);
        if (wnext != nullptr) {
          const char* line = reinterpret_cast<const char*>(wnext + kk * ldw);
          _mm_prefetch(line, _MM_HINT_T1);
          _mm_prefetch(line + 64, _MM_HINT_T1);
        }
        const __m512 b0 = _mm512_loadu_ps(w + kk * ldw), b1 = _mm512_loadu_ps(w + kk * ldw + 16);
        const float* rows[kNextTileRows] = {a0, a1, a2, a3, a4, a5, a6, a7};
#pragma GCC unroll 8
        for (int64_t r = 0; r < kNextTileRows; ++r) {
          const __m512 x = _mm512_set1_ps(rows[r][kk]);
          t[r][0] = _mm512_fmadd_ps(x, b0, t[r][0]);
          t[r][1] = _mm512_fmadd_ps(x, b1, t[r][1]);
        }
      }
    }
    float* acc = acc4 + p * 64;
    _mm512_storeu_ps(acc, g0);
    _mm512_storeu_ps(acc + 16, g1);
    _mm512_storeu_ps(acc + 32, g2);
    _mm512_storeu_ps(acc + 48, g3);
    panel_done(p);
    if (p % kPanelsPerTile == kPanelsPerTile - 1) {
      const __m512 c0 = _mm512_loadu_ps(bias[tile]), c1 = _mm512_loadu_ps(bias[tile] + 16);
      float* out = tout[tile];
      for (int64_t r = 0; r < kNextTileRows; ++r) {
        _mm512_storeu_ps(out + r * ldt, _mm512_add_ps(t[r][0], c0));
        _mm512_storeu_ps(out + r * ldt + 16, _mm512_add_ps(t[r][1], c1));
      }
    }
  }
#else
  for (int64_t p = 0; p < kNextGroupPanels; ++p) {
    panel_gemv<64>(r4 + p * k * 64, h, k, acc4 + p * 64, tick);
    panel_done(p);
  }
  for (int tile = 0; tile < S; ++tile) {
    float tacc[kNextTileRows][kNextTileCols] = {};
    next_tile_part(a, wcol[tile], ldw, 0, k, tacc);
    for (int64_t r = 0; r < kNextTileRows; ++r)
      for (int64_t c = 0; c < kNextTileCols; ++c) tout[tile][r * ldt + c] = tacc[r][c] + bias[tile][c];
  }
#endif
}

// The gate math of a panel: sums = h_prev R^T, pre = the projection, gate
// blocks of `u` units. Out of line with run-time trip counts so that GCC
// vectorizes them (a fixed 16 unrolls them fully and they stay scalar).
__attribute__((noinline)) void lstm_gates(const float* __restrict sums, const float* __restrict pre,
                                          const float* __restrict c_prev, float* __restrict h, float* __restrict c,
                                          int64_t u) {
  for (int64_t j = 0; j < u; ++j) {
    const float i = fast_sigmoid(sums[j] + pre[j]), o = fast_sigmoid(sums[u + j] + pre[u + j]);
    const float f = fast_sigmoid(sums[2 * u + j] + pre[2 * u + j]);
    const float cc = fast_tanh(sums[3 * u + j] + pre[3 * u + j]);
    const float cj = i * cc + f * c_prev[j];
    c[j] = cj;
    h[j] = o * fast_tanh(cj);
  }
}

__attribute__((noinline)) void gru_gates(const float* __restrict sums, const float* __restrict pre,
                                         const float* __restrict h_prev, const float* __restrict rb_h,
                                         float* __restrict h, int64_t u) {
  for (int64_t j = 0; j < u; ++j) {
    const float z = fast_sigmoid(sums[j] + pre[j]), r = fast_sigmoid(sums[u + j] + pre[u + j]);
    const float hh = fast_tanh(pre[2 * u + j] + r * (sums[2 * u + j] + rb_h[j]));
    h[j] = (1.f - z) * hh + z * h_prev[j];
  }
}

#if defined(__AVX512F__)
// fast_tanh (fast_math.h) on 16 lanes.
using row_math_detail::sigmoid16;

inline __m512 tanh16(__m512 x) {
  using namespace tanh_consts;
  using row_math_detail::kAll;
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512 a = _mm512_castsi512_ps(_mm512_maskz_andnot_epi32(kAll, sign, _mm512_castps_si512(x)));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(kPoly[0]);
  for (int i = 1; i < 5; ++i) p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kPoly[i]));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, x2), p, a);
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 q = row_math_detail::exp16(_mm512_add_ps(a, a));
  const __m512 large = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.f), _mm512_add_ps(q, one)));
  const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(kSmall), _CMP_LT_OQ), large, small);
  return _mm512_castsi512_ps(_mm512_maskz_or_epi32(
      kAll, _mm512_castps_si512(r), _mm512_maskz_and_epi32(kAll, sign, _mm512_castps_si512(x))));
}

// The gate math of one LSTM panel (16 units), cut into stages of about
// one activation each: tick() runs the next. The cells run a panel's
// stages in the gaps of the next panel's GEMV, which streams R from L2
// and leaves the vector units idle half the time; run after its GEMV, the
// gate math left the L2 idle (a half-cell of LSTM-TC without a carried
// tile: 5.5 us, piped 5.2). A cell carrying a tile has no idle vector
// units to give, and its time does not change.
class GatePipe {
 public:
  static constexpr int kStages = 6;
  static_assert(kStages * kGateTickRows <= 256, "a GEMV of 256 rows ticks often enough");
  // Takes a panel: its sums (4 gates x 16), the projection, c_prev (null:
  // zeros) and where its n <= 16 units of h and c go. Finishes the panel
  // before, if its stages have not all run.
  void start(const float* sums, const float* pre, const float* c_prev, int64_t n, float* h, float* c) {
    finish();
    for (int g = 0; g < 4; ++g) z_[g] = _mm512_add_ps(_mm512_loadu_ps(sums + 16 * g), _mm512_loadu_ps(pre + 16 * g));
    mask_ = row_math_detail::lanes_left(n);
    c_prev_ = c_prev != nullptr ? _mm512_maskz_loadu_ps(mask_, c_prev) : _mm512_setzero_ps();
    h_ = h;
    c_ = c;
    stage_ = 0;
  }
  void tick() {
    switch (stage_) {
      case 0: z_[0] = sigmoid16(z_[0]); break;  // i
      case 1: z_[1] = sigmoid16(z_[1]); break;  // o
      case 2: z_[2] = sigmoid16(z_[2]); break;  // f
      case 3: z_[3] = tanh16(z_[3]); break;     // c~
      case 4: {
        const __m512 c = _mm512_fmadd_ps(z_[0], z_[3], _mm512_mul_ps(z_[2], c_prev_));
        _mm512_mask_storeu_ps(c_, mask_, c);
        z_[3] = tanh16(c);
        break;
      }
      case 5: _mm512_mask_storeu_ps(h_, mask_, _mm512_mul_ps(z_[1], z_[3])); break;
      default: return;
    }
    ++stage_;
  }
  void finish() {
    while (stage_ < kStages) tick();
  }

 private:
  __m512 z_[4], c_prev_;
  __mmask16 mask_ = 0;
  float* h_ = nullptr;
  float* c_ = nullptr;
  int stage_ = kStages;
};
#endif

// Panels of one rTask: a grain of 8 panels (128 hidden units) cuts a
// 256-unit layer in two, one half of R per vEU.
constexpr int64_t kCellGrainPanels = 8;

// One time step of a forward LSTM (gates i, o, f, c) or GRU
// (linear_before_reset = 1; gates z, r, h). Inputs, LSTM: xp, h_prev,
// c_prev, Rp; GRU: xp, h_prev, Rp, Rb_h. xp holds the step's input
// projection (biases folded in, except the GRU's Rb_h, which the reset
// gate scales) at rows step * batch + b. An rTask is a range of panels
// (rnn_cell.h): one pass over its part of R, then the cell update of its
// units.
class RnnCellOp : public ROp {
 public:
  RnnCellOp(bool lstm, int64_t batch, int64_t hidden, int64_t step, bool has_h, bool has_c, bool has_rb,
            int64_t next_slice, int64_t next_slices, bool xp_blocked, const KernelParams& p)
      : lstm_(lstm),
        batch_(batch),
        h_(hidden),
        step_(step),
        has_h_(has_h),
        has_c_(has_c),
        has_rb_(has_rb),
        next_slice_(next_slice),
        next_slices_(next_slices),
        xp_blocked_(xp_blocked) {
    tasks_ = choose_tasks(rnn_panels(hidden), kCellGrainPanels, p);
    // What crosses vEUs: of xp, the step's row of this task's panels (not
    // the whole sequence); h_prev whole; c_prev and the outputs by units,
    // flat ranges at batch 1.
    const Access units = batch == 1 ? Access::kRange : Access::kSpread;
    if (lstm) set_access({Access::kWhole, Access::kWhole, units}, units);
    else set_access({Access::kWhole, Access::kWhole}, units);
    const int64_t gates = lstm ? 4 : 3;
    set_input_read_bytes(0, static_cast<double>(batch * gates * hidden) * sizeof(float) / static_cast<double>(tasks_));
  }

  void run(int64_t task, const TaskArgs& args) const override {
    if (lstm_) run_gates<4>(task, args);
    else run_gates<3>(task, args);
  }

 private:
  template <int64_t G>
  void run_gates(int64_t task, const TaskArgs& args) const {
    constexpr int64_t kW = G * kRnnPanelUnits;
    int64_t p0, p1;
    task_range(rnn_panels(h_), tasks_, task, &p0, &p1);
    const int64_t H = h_;
    const float* xp = static_cast<const float*>(args.in[0]);
    const float* hp = has_h_ ? static_cast<const float*>(args.in[1]) : nullptr;
    const float* cp = lstm_ && has_c_ ? static_cast<const float*>(args.in[2]) : nullptr;
    const float* rp = static_cast<const float*>(args.in[lstm_ ? 3 : 2]);
    const float* rb = !lstm_ && has_rb_ ? static_cast<const float*>(args.in[3]) : nullptr;
    float* hy = static_cast<float*>(args.out[0]);
    float* cy = lstm_ ? static_cast<float*>(args.out[1]) : nullptr;
    alignas(64) float accs[kNextGroupPanels * kW];
    for (int64_t b = 0; b < batch_; ++b) {
      const float* hb = hp != nullptr ? hp + b * H : nullptr;
      const float* xb = xp + (step_ * batch_ + b) * rnn_panels(H) * kW;
      // Odd steps walk their panels back to front: the panels the last step
      // read last are still in L2 and are read first (an rTask's part of R
      // is about its core's whole L2; front to back every step, each step
      // evicted the lines the next one read first). The panels are
      // independent, so the bits do not change. A step that carries the
      // next layer's tiles keeps their group order.
      const bool backward = next_slice_ < 0 && step_ % 2 == 1;
      // The panel's gates, in its order: row `step` of xp, or of the
      // blocked layout (rnn_cell.h).
      const auto pre_of = [&](int64_t p) {
        return xp_blocked_ ? xp + rnn_blocked_offset(step_, p, rnn_panels(H), kW) : xb + p * kW;
      };
#if defined(__AVX512F__)
      // An LSTM's gate math runs in the gaps of the next panel's GEMV.
      constexpr bool kPiped = G == 4;
      GatePipe pipe;
      const auto tick = [&] {
        if constexpr (kPiped) pipe.tick();
      };
      const auto take = [&](int64_t p, const float* acc) {
        if constexpr (kPiped) {
          const int64_t u0 = p * kRnnPanelUnits;
          pipe.start(acc, pre_of(p), cp != nullptr ? cp + b * H + u0 : nullptr, std::min(kRnnPanelUnits, H - u0),
                     hy + b * H + u0, cy + b * H + u0);
        }
      };
#else
      constexpr bool kPiped = false;
      const NoTick tick;
      const auto take = [](int64_t, const float*) {};
#endif
      for (int64_t i = 0, count = 1; i < p1 - p0; i += count) {
        const int64_t first = backward ? p1 - 1 - i : p0 + i;
        // The next layer's tiles of this panel's group (one per slice), if
        // this task holds the group's first panel: a whole group in one
        // call, their reductions riding on its GEMVs; else panel by panel,
        // the tiles computed whole at the group's first panel.
        const int64_t g = first / kNextGroupPanels, slot = first % kNextGroupPanels;
        const bool tile = G == 4 && next_slice_ >= 0 && g * kNextGroupPanels >= p0;
        const float* wcols[2] = {};
        const float* bns[2] = {};
        float* pieces[2] = {};
        const float* arows[kNextTileRows];
        if (tile) {
          const int64_t c0 = g % 2 * kNextTileCols, piece_floats = rnn_panels(H) / 8 * kNextTileRows * kW;
          for (int64_t sl = 0; sl < next_slices_; ++sl) {
            const int64_t q = g / 2 * 8 + next_slice_ + sl;
            wcols[sl] = static_cast<const float*>(args.in[4]) + q * H * kW + c0;
            bns[sl] = static_cast<const float*>(args.in[5]) + q * kW + c0;
            pieces[sl] = static_cast<float*>(args.out[2]) + sl * piece_floats + (g / 2 * kNextTileRows) * kW + c0;
          }
          for (int64_t r = 0; r < kNextTileRows; ++r) arows[r] = static_cast<const float*>(args.in[6 + r]);
        }
        count = tile && hb != nullptr && slot == 0 && first + kNextGroupPanels <= p1 ? kNextGroupPanels : 1;
        if (count > 1) {
          const auto done = [&](int64_t j) { take(first + j, accs + j * kW); };
          // The first carried block's steps are steps 8-15 (lower_rnn.cc).
          const bool first_block = step_ < 2 * kRnnBlockRows && next_slice_ + 1 < kCarrySlices;
          if (next_slices_ == 2)
            group_gemv_with_tiles<2>(rp + first * H * kW, hb, H, accs, arows, wcols, kW, bns, pieces, kW, tick, done,
                                     nullptr);
          else
            group_gemv_with_tiles<1>(rp + first * H * kW, hb, H, accs, arows, wcols, kW, bns, pieces, kW, tick, done,
                                     first_block ? wcols[0] + H * kW : nullptr);
        } else {
          if (hb != nullptr) panel_gemv<kW>(rp + first * H * kW, hb, H, accs, tick);
          else std::fill(accs, accs + kW, 0.f);
          for (int64_t sl = 0; tile && slot == 0 && sl < next_slices_; ++sl) {
            float tacc[kNextTileRows][kNextTileCols] = {};
            next_tile_part(arows, wcols[sl], kW, 0, H, tacc);
            for (int64_t r = 0; r < kNextTileRows; ++r)
              for (int64_t c = 0; c < kNextTileCols; ++c) pieces[sl][r * kW + c] = tacc[r][c] + bns[sl][c];
          }
        }
        if constexpr (kPiped) {
          if (count == 1) take(first, accs);
          continue;
        }
        for (int64_t p = first; p < first + count; ++p) {
          const float* acc = accs + (p - first) * kW;
          // Gate math on whole panels; units past H are computed on zeros
          // (their projection columns are zero) and not stored.
          const int64_t u0 = p * kRnnPanelUnits, n = std::min(kRnnPanelUnits, H - u0);
          constexpr int64_t U = kRnnPanelUnits;
          alignas(64) float prev[U], hout[U], cout[U];
          const float* pre = pre_of(p);
          std::fill(prev + n, prev + U, 0.f);
          const float* state = G == 4 ? (cp != nullptr ? cp + b * H : nullptr) : hb;
          if (state != nullptr) std::copy(state + u0, state + u0 + n, prev);
          else std::fill(prev, prev + n, 0.f);
          if constexpr (G == 4) {
            lstm_gates(acc, pre, prev, hout, cout, U);
            std::copy(cout, cout + n, cy + b * H + u0);
          } else {
            alignas(64) float rbh[U];
            std::fill(rbh + n, rbh + U, 0.f);
            if (rb != nullptr) std::copy(rb + u0, rb + u0 + n, rbh);
            else std::fill(rbh, rbh + n, 0.f);
            gru_gates(acc, pre, prev, rbh, hout, U);
          }
          std::copy(hout, hout + n, hy + b * H + u0);
        }
      }
#if defined(__AVX512F__)
      pipe.finish();
#endif
    }
  }

  bool lstm_;
  int64_t batch_, h_, step_;
  bool has_h_, has_c_, has_rb_;
  int64_t next_slice_;   // the next layer's projection slice this step computes (-1: none)
  int64_t next_slices_;  // how many: slices next_slice_ .. + next_slices_ - 1
  bool xp_blocked_;     // xp in the blocked layout the previous layer's steps write (batch 1)
};

}  // namespace

// The layout attributes of a lowered recurrent op name this backend's.
Status check_rnn_layout(const Node& n, bool blocked) {
  if (n.attr_int("panel_units", 0) != kRnnPanelUnits)
    return invalid_argument(str_cat("panel_units ", n.attr_int("panel_units", 0), ": the cpu rKernel ", n.op_type,
                                    " takes panels of ", kRnnPanelUnits, " hidden units"));
  if (blocked && n.attr_int("block_rows", 0) != kRnnBlockRows)
    return invalid_argument(str_cat("block_rows ", n.attr_int("block_rows", 0), ": the cpu rKernel ", n.op_type,
                                    " takes pieces of ", kRnnBlockRows, " rows"));
  return Status();
}

Result<std::unique_ptr<ROp>> make_rnn_cell(const Node& n, const KernelParams& p) {
  const bool lstm = n.op_type == "TesseraLstmCell";
  TESSERA_RETURN_IF_ERROR(
      check_rnn_layout(n, n.attr_int("next_slice", -1) >= 0 || n.attr_int("xp_blocked", 0) != 0));
  // Shapes were checked by infer_rnn_cell.
  return std::unique_ptr<ROp>(new RnnCellOp(lstm, n.attr_int("batch", 1), n.attr_int("hidden_size", 1),
                                            n.attr_int("step", 0), n.input(1) != nullptr,
                                            lstm && n.input(2) != nullptr, !lstm && n.input(3) != nullptr,
                                            n.attr_int("next_slice", -1), n.attr_int("next_slices", 1),
                                            n.attr_int("xp_blocked", 0) != 0, p));
}

}  // namespace tessera
