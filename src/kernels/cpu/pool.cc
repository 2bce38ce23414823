// MaxPool, AveragePool (1-D and 2-D; ceil_mode, count_include_pad,
// dilations for MaxPool) and GlobalAveragePool. An rTask is a block of
// (image, channel) planes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/simd.h"

namespace tessera {
namespace {

class PoolOp : public ROp {
 public:
  struct Geo {
    int64_t planes, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, ph_end, pw_end;
  };
  PoolOp(bool max, bool include_pad, Geo g, const Epilogue& epi, const KernelParams& p)
      : max_(max), include_pad_(include_pad), epi_(epi), g_(g) {
    tasks_ = choose_tasks(g.planes, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, g.oh * g.ow * g.kh * g.kw)), p);
    set_access({Access::kRange, Access::kRange}, Access::kRange);  // blocks of planes (and a residual's)
    scratch_bytes_ = static_cast<size_t>(g.ow) * sizeof(float);  // one output row's accumulators
#if defined(TESSERA_SIMD)
    // Unit stride along the row: per vector of output columns, each input
    // row's kw taps are reduced once (one load per tap, masked where the
    // block's taps leave the row), then each output row reduces kh of
    // those row sums from scratch.
    rows_first_ = g.sw == 1 && g.dw == 1;
    if (rows_first_) {
      const int64_t blocks = (g.ow + kLanes - 1) / kLanes;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        // Bit kx: tap kx has lanes outside the row or the outputs (read by
        // plane_rolling, whose windows are at most 5 wide).
        uint32_t masked = 0;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix0 = blk * kLanes - g.pw + kx;  // lane j reads input column ix0 + j
          const uint32_t bits = lane_bits(-ix0, std::min(g.iw - ix0, g.ow - blk * kLanes));
          if (bits != (1u << kLanes) - 1) masked |= kx < 32 ? 1u << kx : 0u;
          tap_mask_.push_back({Vec::from_bits(bits)});
        }
        masked_taps_.push_back(masked);
      }
      scratch_bytes_ = static_cast<size_t>(g.ih * kLanes) * sizeof(float);
    }
#endif
    // Per output column: the first and last tap inside the row, the
    // divisor's width, for the row-at-a-time loops below.
    kx_lo_.resize(g.ow);
    kx_hi_.resize(g.ow);
    width_.resize(g.ow);
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t x0 = ox * g.sw - g.pw;
      window_range(x0, g.dw, g.kw, g.iw, &kx_lo_[ox], &kx_hi_[ox]);
      width_[ox] = include_pad ? std::min(x0 + (g.kw - 1) * g.dw + 1, g.iw + g.pw_end) - x0 : kx_hi_[ox] - kx_lo_[ox];
    }
#if defined(TESSERA_SIMD)
#if defined(__AVX512F__)
    separable_ = !rows_first_ && g.sw == 2 && g.dw == 1 && g.kw <= kMaxSeparableKw;
    for (int64_t kx = 0; separable_ && kx < g.kw; ++kx) {
      alignas(64) int32_t idx[16];
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t t = j * g.sw + kx;
        idx[j] = static_cast<int32_t>(t < 32 ? t : t - 16);
        if (t >= 32) high_[kx] = static_cast<__mmask16>(high_[kx] | (1u << j));
      }
      shift_[kx] = _mm512_load_si512(idx);
    }
#else
    // AVX2: column stride 2 through a row of column reductions in scratch.
    strided_ = !rows_first_ && g.sw == 2 && g.dw == 1;
    if (strided_) scratch_bytes_ = static_cast<size_t>(strided_row()) * sizeof(float);
#endif
    if (separable_ || rows_first_ || strided_) {
      // Made once here rather than per row and plane: window_range divides.
      row_window_.resize(g.oh);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t y0 = oy * g.sh - g.ph;
        int64_t ky_lo, ky_hi;
        window_range(y0, g.dh, g.kh, g.ih, &ky_lo, &ky_hi);
        row_window_[oy] = {y0 + ky_lo * g.dh, (y0 + ky_lo * g.dh) * g.iw, ky_hi - ky_lo,
                           static_cast<float>(include_pad ? std::min(y0 + (g.kh - 1) * g.dh + 1, g.ih + g.ph_end) - y0
                                                          : ky_hi - ky_lo)};
      }
    }
    widthf_.assign(static_cast<size_t>((g.ow + 15) / 16 * 16), 0.f);
    for (int64_t ox = 0; ox < g.ow; ++ox) widthf_[ox] = static_cast<float>(width_[ox]);
#endif
  }

  // A row of outputs at a time: for each tap (ky, kx), one pass over the
  // output columns whose input lies inside the row, unit stride when the
  // pooling stride is 1, so the loops vectorize. Every output sees its taps
  // in the same (ky, kx) order as a window-at-a-time loop would.
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(g_.planes, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    float* y = static_cast<float*>(args.out[0]);
    float* acc = static_cast<float*>(args.scratch);
    const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
    for (int64_t pl = b; pl < e; ++pl) {
      plane(x + pl * g_.ih * g_.iw, y + pl * g_.oh * g_.ow, acc);
      // A fused residual Add and activation on the plane just made, still
      // in L1.
      if (!epi_.empty()) epi_.apply(y + pl * g_.oh * g_.ow, res ? res + pl * g_.oh * g_.ow : nullptr, g_.oh * g_.ow);
    }
  }

 private:
  // One (image, channel) plane.
  void plane(const float* xp, float* yp, float* acc) const {
    const int64_t ow = g_.ow;
    const float init = max_ ? -std::numeric_limits<float>::infinity() : 0.f;
#if defined(TESSERA_SIMD)
    if (rows_first_) {
      if (!max_) rows_first<Combine::kSum>(xp, yp, acc);
      else if (has_nan(xp)) rows_first<Combine::kMaxNan>(xp, yp, acc);
      else rows_first<Combine::kMax>(xp, yp, acc);
      return;
    }
    if (strided_) {
      if (!max_) plane_strided<Combine::kSum>(xp, yp, acc);
      else if (has_nan(xp)) plane_strided<Combine::kMaxNan>(xp, yp, acc);
      else plane_strided<Combine::kMax>(xp, yp, acc);
      return;
    }
#endif
#if defined(__AVX512F__)
    if (separable_) {
      if (!max_) plane_separable<Combine::kSum>(xp, yp);
      else if (has_nan(xp)) plane_separable<Combine::kMaxNan>(xp, yp);
      else plane_separable<Combine::kMax>(xp, yp);
      return;
    }
#endif
    for (int64_t oy = 0; oy < g_.oh; ++oy) {
      const int64_t y0 = oy * g_.sh - g_.ph;
      int64_t ky_lo, ky_hi;
      window_range(y0, g_.dh, g_.kh, g_.ih, &ky_lo, &ky_hi);
      for (int64_t ox = 0; ox < ow; ++ox) acc[ox] = init;
      for (int64_t ky = ky_lo; ky < ky_hi; ++ky) {
        const float* row = xp + (y0 + ky * g_.dh) * g_.iw;
        for (int64_t kx = 0; kx < g_.kw; ++kx) {
          const int64_t off = kx * g_.dw - g_.pw;  // input column = ox * sw + off
          const int64_t lo = off >= 0 ? 0 : (-off + g_.sw - 1) / g_.sw;
          const int64_t lim = g_.iw - 1 - off;
          const int64_t hi = lim < 0 ? 0 : std::min<int64_t>(ow, lim / g_.sw + 1);
          if (g_.sw == 1) accumulate(acc, row + off, lo, hi);
          else accumulate_strided(acc, row + off, lo, hi, g_.sw);
        }
      }
      float* out = yp + oy * ow;
      if (max_) {
        for (int64_t ox = 0; ox < ow; ++ox) out[ox] = acc[ox];
      } else {
        // count_include_pad counts padding inside the padded extent
        // (windows reaching past it under ceil_mode are clipped).
        const int64_t rows = include_pad_ ? std::min(y0 + (g_.kh - 1) * g_.dh + 1, g_.ih + g_.ph_end) - y0
                                          : ky_hi - ky_lo;
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t count = rows * width_[ox];
          const bool any = include_pad_ ? count > 0 : (ky_hi > ky_lo && kx_hi_[ox] > kx_lo_[ox]);
          out[ox] = any ? acc[ox] / static_cast<float>(count) : 0.f;
        }
      }
    }
  }

  // Kernel taps [lo, hi) of a window starting at `start` that land inside
  // [0, extent).
  static void window_range(int64_t start, int64_t dil, int64_t k, int64_t extent, int64_t* lo, int64_t* hi) {
    *lo = start >= 0 ? 0 : (-start + dil - 1) / dil;
    const int64_t last = extent - 1 - start;
    *hi = last < 0 ? 0 : std::min<int64_t>(k, last / dil + 1);
    if (*hi < *lo) *hi = *lo;
  }

  void accumulate(float* __restrict acc, const float* __restrict src, int64_t lo, int64_t hi) const {
    if (max_) {
      for (int64_t ox = lo; ox < hi; ++ox) {
        const float v = src[ox];
        acc[ox] = (v > acc[ox] || v != v) ? v : acc[ox];  // NaN propagates
      }
    } else {
      for (int64_t ox = lo; ox < hi; ++ox) acc[ox] += src[ox];
    }
  }
  void accumulate_strided(float* __restrict acc, const float* __restrict src, int64_t lo, int64_t hi,
                          int64_t stride) const {
    if (max_) {
      for (int64_t ox = lo; ox < hi; ++ox) {
        const float v = src[ox * stride];
        acc[ox] = (v > acc[ox] || v != v) ? v : acc[ox];
      }
    } else {
      for (int64_t ox = lo; ox < hi; ++ox) acc[ox] += src[ox * stride];
    }
  }

#if defined(TESSERA_SIMD)
  using Vec = simd::Vec;
  static constexpr int64_t kLanes = Vec::kLanes;

  // kMax is vmaxps with the new value first (v > acc ? v : acc), the same
  // as kMaxNan's rule on planes with no NaN, and cheaper: kMaxNan adds two
  // compares and a blend to every step (about half the time of a 3x3 max
  // pooling).
  enum class Combine { kSum, kMax, kMaxNan };

  // Whether the input plane holds a NaN: its magnitude bits above those of
  // infinity.
  bool has_nan(const float* xp) const {
    const int64_t n = g_.ih * g_.iw;
#if defined(__AVX512F__)
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    __mmask16 nan = 0;
    for (int64_t i = 0; i < n; i += 16) {
      const __m512i v = _mm512_castps_si512(
          _mm512_maskz_loadu_ps(static_cast<__mmask16>(lane_bits(0, n - i)), xp + i));
      nan = static_cast<__mmask16>(nan | _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, magnitude), inf));
    }
    return nan != 0;
#else
    __m256 nan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const __m256 v = _mm256_loadu_ps(xp + i);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    bool any = _mm256_movemask_ps(nan) != 0;
    for (; i < n; ++i) any = any || std::isnan(xp[i]);
    return any;
#endif
  }

  // The three ways of combining two values, as one vector op.
  template <Combine kMode>
  [[gnu::always_inline]] static Vec::T combine(Vec::T acc, Vec::T v) {
    if constexpr (kMode == Combine::kSum) return Vec::add(acc, v);
    if constexpr (kMode == Combine::kMax) return v > acc ? v : acc;
    return Vec::max_nan(acc, v);
  }

  // Column stride 1, undilated: per vector of output columns, every input
  // row's kw taps are reduced once (an unaligned load per tap, masked
  // where it leaves the row: -inf or 0 outside), into `rows` (one vector
  // per input row); each output row then reduces its window's rows of
  // that. kw + kh operations per 16 outputs, and each input row is read
  // once per block rather than once per output row it reaches. Max is exact in any order; the
  // average's sum runs along rows first, which can differ from the tap
  // order in the last bit.
  // The common window widths with their tap loops unrolled.
  template <Combine kMode>
  void rows_first(const float* xp, float* yp, float* rows) const {
    if (g_.sh == 1 && g_.dh == 1 && g_.kh == g_.kw) {
      switch (g_.kw) {
        case 2: return plane_rolling<kMode, 2>(xp, yp);
        case 3: return plane_rolling<kMode, 3>(xp, yp);
        case 5: return plane_rolling<kMode, 5>(xp, yp);
        default: break;
      }
    }
    plane_rows_first<kMode>(xp, yp, rows);
  }

  // Square K x K windows at stride 1 (3x3 in NASNets and Inception blocks):
  // the row reductions of the K input rows an output row needs stay in
  // registers, each new output row adding one (rows outside the input
  // count as the fill: 0 or -inf, which change no sum or max). Through
  // scratch, the reloads of the row reductions just stored stalled.
  template <Combine kMode, int K>
  void plane_rolling(const float* xp, float* yp) const {
    const Vec::T init = Vec::set1(kMode != Combine::kSum ? -std::numeric_limits<float>::infinity() : 0.f);
    for (int64_t blk = 0; blk * kLanes < g_.ow; ++blk) {
      // The taps a block masks, as a template argument: the row's first
      // block masks the first taps, its last the last ones, the blocks
      // between none; any other set masks every tap.
      constexpr uint32_t kAll = (1u << K) - 1, kFirst = 1u, kLast = 1u << (K - 1);
      constexpr uint32_t kFirst2 = 3u & kAll, kLast2 = (3u << (K - 2)) & kAll;
      const uint32_t masked = masked_taps_[static_cast<size_t>(blk)];
      if (masked == 0) strip_rolling<kMode, K, 0>(xp, yp, blk, init);
      else if (masked == kFirst) strip_rolling<kMode, K, kFirst>(xp, yp, blk, init);
      else if (masked == kLast) strip_rolling<kMode, K, kLast>(xp, yp, blk, init);
      else if (masked == kFirst2) strip_rolling<kMode, K, kFirst2>(xp, yp, blk, init);
      else if (masked == kLast2) strip_rolling<kMode, K, kLast2>(xp, yp, blk, init);
      else strip_rolling<kMode, K, kAll>(xp, yp, blk, init);
    }
  }

  // plane_rolling's output columns [ox0, ox0 + kLanes). Tap kx loads
  // masked (the fill outside the row) where bit kx of kMasked is set, else
  // as a plain vector: the masked loads and blends cost a max pool over
  // 32 x 32 planes a fifth of its time, and masking every tap of a row's
  // first and last blocks, not just those that leave the row, cost a
  // 5 x 5 pool there another tenth.
  template <Combine kMode, int K, uint32_t kMasked>
  void strip_rolling(const float* xp, float* yp, int64_t blk, Vec::T init) const {
    const int64_t ih = g_.ih, iw = g_.iw, ow = g_.ow, ph = g_.ph, ox0 = blk * kLanes;
    const TapLanes* masks = tap_mask_.data() + blk * K;
    Vec::Mask m[K];
#pragma GCC unroll 8
    for (int kx = 0; kx < K; ++kx)
      if ((kMasked >> kx) & 1u) m[kx] = masks[kx].m;
    const float* src = xp + ox0 - g_.pw;
    auto tap = [&](const float* p, int kx) {
      if ((kMasked >> kx) & 1u) return Vec::load_or(p, m[kx], init);
      return Vec::load(p);
    };
    auto row = [&](int64_t iy) {
      if (iy < 0 || iy >= ih) return init;
      const float* r = src + iy * iw;
      Vec::T v = tap(r, 0);
#pragma GCC unroll 8
      for (int kx = 1; kx < K; ++kx) v = combine<kMode>(v, tap(r + kx, kx));
      return v;
    };
    Vec::T h[K];
    // h[k] holds input row oy - ph + k; start one row early.
#pragma GCC unroll 8
    for (int k = 1; k < K; ++k) h[k] = row(k - 1 - ph);
    Vec::T width;
    if constexpr (kMode == Combine::kSum) width = Vec::load(&widthf_[ox0]);
    const Vec::Mask lanes = Vec::first(ow - ox0);
    const bool full = ow - ox0 >= kLanes;
    for (int64_t oy = 0; oy < g_.oh; ++oy) {
#pragma GCC unroll 8
      for (int k = 0; k + 1 < K; ++k) h[k] = h[k + 1];
      h[K - 1] = row(oy - ph + K - 1);
      Vec::T acc = h[0];
#pragma GCC unroll 8
      for (int k = 1; k < K; ++k) acc = combine<kMode>(acc, h[k]);
      if constexpr (kMode == Combine::kSum)
        acc = Vec::div_positive(acc, Vec::mul(Vec::set1(row_window_[oy].divisor), width));
      if (full) Vec::store(yp + oy * ow + ox0, acc);
      else Vec::store(yp + oy * ow + ox0, lanes, acc);
    }
  }

  template <Combine kMode>
  void plane_rows_first(const float* xp, float* yp, float* rows) const {
    const Vec::T init = Vec::set1(kMode != Combine::kSum ? -std::numeric_limits<float>::infinity() : 0.f);
    const int64_t ih = g_.ih, iw = g_.iw, ow = g_.ow, kw = g_.kw, dh = g_.dh;
    const TapLanes* masks = tap_mask_.data();
    for (int64_t ox0 = 0; ox0 < ow; ox0 += kLanes, masks += kw) {
      const float* src = xp + ox0 - g_.pw;
      for (int64_t iy = 0; iy < ih; ++iy, src += iw) {
        Vec::T v = Vec::load_or(src, masks[0].m, init);
        for (int64_t kx = 1; kx < kw; ++kx) v = combine<kMode>(v, Vec::load_or(src + kx, masks[kx].m, init));
        Vec::store(rows + iy * kLanes, v);
      }
      Vec::T width;
      if constexpr (kMode == Combine::kSum) width = Vec::load(&widthf_[ox0]);
      const Vec::Mask lanes = Vec::first(ow - ox0);
      for (int64_t oy = 0; oy < g_.oh; ++oy) {
        const RowWindow& rw = row_window_[oy];
        const float* r = rows + rw.row * kLanes;
        Vec::T acc = init;
        for (int64_t k = 0; k < rw.rows; ++k) acc = combine<kMode>(acc, Vec::load(r + k * dh * kLanes));
        if constexpr (kMode == Combine::kSum) acc = Vec::div_positive(acc, Vec::mul(Vec::set1(rw.divisor), width));
        Vec::store(yp + oy * ow + ox0, lanes, acc);
      }
    }
  }

  // Column stride 2, undilated, without AVX-512: per output row, the
  // window's rows reduced column by column into `row` (the fill outside
  // the input row, as in plane_separable below), then output ox reduces
  // row[2 ox + kx] over kx, each tap the even or odd lanes of two loaded
  // vectors. kh + kw operations per vector of outputs; the same order of
  // sums as plane_separable.
  int64_t strided_row() const {  // floats: padding, the row, and whole vectors of reads past it
    return g_.pw + g_.iw + 2 * g_.ow + g_.kw + 4 * kLanes;
  }
  template <Combine kMode>
  void plane_strided(const float* xp, float* yp, float* row) const {
    const float fill = kMode != Combine::kSum ? -std::numeric_limits<float>::infinity() : 0.f;
    const Vec::T init = Vec::set1(fill);
    const int64_t ow = g_.ow, iw = g_.iw, kw = g_.kw, pw = g_.pw, rstep = g_.dh * iw;
    const int64_t iw_up = (iw + kLanes - 1) / kLanes * kLanes, width = strided_row();
    std::fill(row, row + pw, fill);
    std::fill(row + pw + iw_up, row + width, fill);
    for (int64_t oy = 0; oy < g_.oh; ++oy) {
      const RowWindow& rw = row_window_[oy];
      const float* rows = xp + rw.first;
      for (int64_t x = 0; x < iw; x += kLanes) {
        const Vec::Mask m = Vec::first(iw - x);
        Vec::T v = init;
        for (int64_t r = 0; r < rw.rows; ++r) v = combine<kMode>(v, Vec::load_or(rows + r * rstep + x, m, init));
        Vec::store(row + pw + x, v);  // lanes past the row hold the fill
      }
      float* out = yp + oy * ow;
      for (int64_t ox0 = 0; ox0 < ow; ox0 += kLanes) {
        Vec::T acc = init;
        for (int64_t kx = 0; kx < kw; ++kx) {
          const float* base = row + 2 * ox0 + (kx & ~int64_t{1});
          Vec::T even, odd;
          Vec::deinterleave(Vec::load(base), Vec::load(base + kLanes), &even, &odd);
          acc = combine<kMode>(acc, (kx & 1) != 0 ? odd : even);
        }
        if constexpr (kMode == Combine::kSum)
          acc = Vec::div_positive(acc, Vec::mul(Vec::set1(rw.divisor), Vec::load(&widthf_[ox0])));
        if (ow - ox0 >= kLanes) Vec::store(out + ox0, acc);
        else Vec::store(out + ox0, Vec::first(ow - ox0), acc);
      }
    }
  }

#if defined(__AVX512F__)
  // Column stride 2, undilated: each output row is a reduction over
  // its window's rows, column by column (fill outside the input row: -inf
  // for max, 0 for the sum, which leave the result as skipping the tap
  // does), then over kw neighbours of that. kh + kw operations per 16
  // outputs instead of kh * kw. The column reductions stay in registers:
  // a block of 16 outputs reads its kw shifted windows out of two (stride
  // 1) or three (stride 2) column vectors by lane permutes, and hands the
  // last on to the next block. (Through a scratch row, 3x3 average pooling
  // of 32 planes of 32x32 took 20 us (now 12), its unaligned loads stalled on the
  // stores just made.) Max is exact in any order, with the same NaN rule
  // as the row loops above; the average's sum runs rows first, which can
  // differ from their tap order in the last bit.
  template <Combine kMode>
  void plane_separable(const float* xp, float* yp) const {
    const float fill = kMode != Combine::kSum ? -std::numeric_limits<float>::infinity() : 0.f;
    const __m512 init = _mm512_set1_ps(fill);
    const int64_t ow = g_.ow, sw = g_.sw, kw = g_.kw;
    const auto combine = [](__m512 acc, __m512 v) { return PoolOp::combine<kMode>(acc, v); };
    const int64_t rstep = g_.dh * g_.iw;
    for (int64_t oy = 0; oy < g_.oh; ++oy) {
      const RowWindow& rw = row_window_[oy];
      const float* rows = xp + rw.first - g_.pw;  // column t of the window's first row
      const int64_t nrows = rw.rows;
      const float divisor_rows = rw.divisor;
      // Column vector t0: lanes t0 .. t0 + 15 reduced over the window's rows.
      auto column = [&](int64_t t0) {
        const __mmask16 m = static_cast<__mmask16>(lane_bits(g_.pw - t0, g_.pw + g_.iw - t0));
        __m512 v = init;
        for (int64_t r = 0; r < nrows; ++r) v = combine(v, _mm512_mask_loadu_ps(init, m, rows + r * rstep + t0));
        return v;
      };
      float* out = yp + oy * ow;
      __m512 c0 = column(0);
      for (int64_t ox0 = 0; ox0 < ow; ox0 += 16) {
        const int64_t t0 = ox0 * sw;
        const __m512 c1 = column(t0 + 16);
        __m512 acc = init;
        if (sw == 1) {
          for (int64_t kx = 0; kx < kw; ++kx) acc = combine(acc, _mm512_permutex2var_ps(c0, shift_[kx], c1));
          c0 = c1;
        } else {
          const __m512 c2 = column(t0 + 32);
          for (int64_t kx = 0; kx < kw; ++kx) {
            const __m512 lo = _mm512_permutex2var_ps(c0, shift_[kx], c1);
            const __m512 hi = _mm512_permutex2var_ps(c1, shift_[kx], c2);  // the same lanes 16 columns on
            acc = combine(acc, _mm512_mask_mov_ps(lo, high_[kx], hi));
          }
          c0 = c2;
        }
        if constexpr (kMode == Combine::kSum) {
          const __m512 count = _mm512_mul_ps(_mm512_set1_ps(divisor_rows), _mm512_loadu_ps(&widthf_[ox0]));
          acc = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(count, _mm512_setzero_ps(), _CMP_GT_OQ), acc, count);
        }
        _mm512_mask_storeu_ps(out + ox0, static_cast<__mmask16>(lane_bits(0, ow - ox0)), acc);
      }
    }
  }

#endif

  // Separable: per output row, the window's rows inside the input (the
  // offset of the first, their count) and the average's rows counted.
  struct RowWindow {
    int64_t row, first, rows;  // first: the row's offset in the plane
    float divisor;
  };
  std::vector<RowWindow> row_window_;
  // Separable: per tap kx, the permute indices of output lane j's column
  // (j * sw + kx in the 32 lanes of two column vectors; for stride 2,
  // lanes whose column passes 31 take it 16 columns on, from the next
  // pair: high_).
#if defined(__AVX512F__)
  static constexpr int64_t kMaxSeparableKw = 16;
  __m512i shift_[kMaxSeparableKw];
  __mmask16 high_[kMaxSeparableKw] = {};
#endif

  bool separable_ = false;
  bool rows_first_ = false;
  bool strided_ = false;  // plane_strided (column stride 2 without AVX-512)
  struct TapLanes {
    Vec::Mask m;
  };
  std::vector<uint32_t> masked_taps_;  // rows first: [block] bit kx: tap kx has lanes outside the row
  std::vector<TapLanes> tap_mask_;  // rows first: [block][kx] lanes whose input column lies in the row
  std::vector<float> widthf_;  // width_ as floats, padded to whole vectors
#endif

  bool max_, include_pad_;
  Epilogue epi_;  // TesseraFusedPool: residual (input 3) and activation
  Geo g_;
  std::vector<int64_t> kx_lo_, kx_hi_, width_;
};

Result<std::unique_ptr<ROp>> make_pool(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  if (n.inputs[0]->dtype != DType::kFloat32) return unimplemented(str_cat(n.label(), ": pooling on non-float input"));
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, x, n.attr_ints("kernel_shape")));
  if (g.spatial > 2) return unimplemented(str_cat(n.label(), ": 3-D pooling is not supported"));
  bool one = g.spatial == 1;
  PoolOp::Geo geo{x[0] * x[1],
                  one ? 1 : g.in[0], g.in[one ? 0 : 1], one ? 1 : g.out[0], g.out[one ? 0 : 1],
                  one ? 1 : g.kernel[0], g.kernel[one ? 0 : 1], one ? 1 : g.strides[0], g.strides[one ? 0 : 1],
                  one ? 1 : g.dilations[0], g.dilations[one ? 0 : 1], one ? 0 : g.pads_begin[0],
                  g.pads_begin[one ? 0 : 1], one ? 0 : g.pads_end[0], g.pads_end[one ? 0 : 1]};
  const std::string kind = n.op_type == "TesseraFusedPool" ? n.attr_string("pool", "") : n.op_type;
  TESSERA_ASSIGN_OR_RETURN(Epilogue epi, Epilogue::from_node(n));
  return std::unique_ptr<ROp>(new PoolOp(kind == "MaxPool", n.attr_int("count_include_pad", 0) != 0, geo, epi, p));
}

class GlobalAvgOp : public ROp {
 public:
  GlobalAvgOp(int64_t planes, int64_t size, const KernelParams& p) : planes_(planes), size_(size) {
    tasks_ = choose_tasks(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(size, 1)), p);
    set_access({Access::kRange}, Access::kRange);  // blocks of planes
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(planes_, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    float* y = static_cast<float*>(args.out[0]);
    // Large planes: kParts interleaved partial sums (element i into part
    // i % kParts), which vectorize, added pairwise at the end. Small ones keep one running sum
    // each, the planes' sums overlapping in the core; the pairwise step
    // would cost more than they do (1280 planes of 7x7: 12 against 36 us).
    constexpr int64_t kParts = 32, kMinPartsSize = 128;
    for (int64_t pl = b; pl < e; ++pl) {
      const float* xp = x + pl * size_;
      if (size_ < kMinPartsSize) {
        float acc = 0;
        for (int64_t i = 0; i < size_; ++i) acc += xp[i];
        y[pl] = size_ > 0 ? acc / static_cast<float>(size_) : 0.f;
        continue;
      }
      float part[kParts] = {};
      int64_t i = 0;
      for (; i + kParts <= size_; i += kParts)
        for (int64_t j = 0; j < kParts; ++j) part[j] += xp[i + j];
      for (int64_t j = 0; i + j < size_; ++j) part[j] += xp[i + j];
      for (int64_t w = kParts / 2; w > 0; w /= 2)
        for (int64_t j = 0; j < w; ++j) part[j] += part[j + w];
      y[pl] = part[0] / static_cast<float>(size_);
    }
  }

 private:
  int64_t planes_, size_;
};

Result<std::unique_ptr<ROp>> make_global_avg(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  return std::unique_ptr<ROp>(new GlobalAvgOp(x[0] * x[1], dims_product(x.dims, 2, x.rank()), p));
}

const RKernel kKernels[] = {
    {"MaxPool", "pool.planes", "blocks of (image, channel) planes", make_pool},
    {"AveragePool", "pool.planes", "blocks of (image, channel) planes", make_pool},
    {"TesseraFusedPool", "pool.planes+epilogue", "MaxPool or AveragePool with its residual Add and activation fused",
     make_pool},
    {"GlobalAveragePool", "global_pool.planes", "blocks of planes", make_global_avg},
};

}  // namespace

std::span<const RKernel> pool_kernels() { return kKernels; }

}  // namespace tessera
