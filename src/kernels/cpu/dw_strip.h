// DwStrip: the depthwise conv of conv.cc's depthwise path for 3 x 3 and
// 5 x 5 windows at stride 1 or 2 (MobileNets, MnasNets, EfficientNets,
// NASNets) where vectors have 8 lanes (AVX2). A tile is one vector of
// output columns (a strip) x R rows; each input vector loaded feeds every
// row of the tile it reaches. At stride 1 the tile goes column by column:
// one column's K weights in registers, 8 rows of accumulators (as many
// chains as the two FMA pipes need to hide their latency). At stride 2 a
// 3 x 3 window's 9 weights stay in registers over the tile, so that the
// only loads are the input's, and a 5 x 5's 25 do not fit: each FMA
// broadcasts its weight from memory.
//
// Strips inside the row load plain vectors; the first and last strips mask
// the columns outside the row, and rows above or below the plane read a
// zero row. Every accumulator starts at the bias. At stride 2 it adds its
// taps in (ky, kx) order, as DwDirect does, so the results are bitwise the
// same; at stride 1 in (kx, ky) order, the same products summed in
// another order.
#pragma once

#include "kernels/cpu/simd.h"

#if defined(TESSERA_SIMD) && !defined(__AVX512F__)
#define TESSERA_DW_STRIP 1
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/epilogue.h"

namespace tessera {

class DwStrip {
 public:
  using Vec = simd::Vec;
  static constexpr int64_t kLanes = Vec::kLanes;

  static bool ok(const Conv2d& c) {
    return c.kh == c.kw && (c.kh == 3 || c.kh == 5) && c.sh == c.sw && (c.sh == 1 || c.sh == 2) && c.dh == 1 &&
           c.dw == 1 && c.pw <= 2;
  }

  // Whether the tile adds a window's taps column by column, (kx, ky),
  // rather than in DwDirect's (ky, kx) order: at stride 1.
  template <int K, int S>
  static constexpr bool kByColumns = S == 1;
  static bool by_columns(const Conv2d& c) { return c.sh == 1; }

  // False when ok(c) is not.
  bool init(const Conv2d& c) {
    if (!ok(c)) return false;
    c_ = c;
    nstrip_ = (c.ow + kLanes - 1) / kLanes;
    // Per strip, per load (K for stride 1, K + 1 for stride 2): the lanes
    // inside the row; a strip is plain when all are.
    loads_ = c.sw == 1 ? c.kw : c.kw + 1;
    mask_.clear();
    plain_.assign(static_cast<size_t>(nstrip_), 1);
    for (int64_t s = 0; s < nstrip_; ++s) {
      for (int64_t l = 0; l < loads_; ++l) {
        const int64_t a = column(s, l);
        const uint32_t bits = lane_bits(-a, c.iw - a);
        if (bits != (1u << kLanes) - 1) plain_[static_cast<size_t>(s)] = 0;
        mask_.push_back({Vec::from_bits(bits)});
      }
    }
    return true;
  }

  // Floats of scratch rows() needs: a zero row reaching every load.
  int64_t scratch_floats() const { return nstrip_ * kLanes * c_.sw + 4 * kLanes; }

  // Output rows [r0, r1) of one plane; `scratch` as scratch_floats().
  // Defined in dw_strip.cc, the one place the tile templates are
  // instantiated.
  void rows(const float* xc, const float* wc, float b, float* scratch, float* yc, int64_t r0, int64_t r1) const;

  // Whether rows() also applies `epi` (Relu or Clip, no residual).
  bool fuse(const Epilogue& epi) { return clamp_.take(epi); }

 private:
  // Input column of load l's lane 0 in strip s: stride 1 loads tap kx = l
  // at ox - pw + l; stride 2 loads pairs of vectors at 2 ox - pw + 2 p and
  // 8 on (l = 2 p, 2 p + 1), split into taps 2 p (even lanes) and 2 p + 1.
  int64_t column(int64_t s, int64_t l) const {
    const int64_t ox = s * kLanes;
    if (c_.sw == 1) return ox - c_.pw + l;
    return 2 * ox - c_.pw + 2 * (l / 2) + (l % 2) * kLanes;
  }

  // Output rows per tile: R accumulators beside the weights held (a
  // column's K at stride 1; at stride 2, 9 for 3 x 3 and 1 broadcast for
  // 5 x 5) and the loaded vectors (1 at stride 1; 2 loaded and 2 split at
  // stride 2). At stride 1, 8 rows: a 3 x 3 tile of 11 (15 registers)
  // ran faster alone but not in a model's runs.
  template <int K, int S>
  static constexpr int kRows = S == 1 ? 8 : (K == 3 ? 3 : 6);

  template <bool kClamp>
  void rows_as(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t r0, int64_t r1) const {
    Vec::T w[9] = {};
    if (c_.sw == 1) {
      if (c_.kw == 3) return tiles<3, 1, kClamp>(xc, w, wc, b, zero, yc, r0, r1);
      return tiles<5, 1, kClamp>(xc, w, wc, b, zero, yc, r0, r1);
    }
    if (c_.kw == 3) {
#pragma GCC unroll 9
      for (int t = 0; t < 9; ++t) w[t] = Vec::set1(wc[t]);
      return tiles<3, 2, kClamp>(xc, w, wc, b, zero, yc, r0, r1);
    }
    tiles<5, 2, kClamp>(xc, w, wc, b, zero, yc, r0, r1);
  }

  // Tiles of R rows (as even as can be, so that none is left with too few
  // accumulators to hide the FMA latency), each across the row's strips
  // right to left: a partial last strip is stored whole, its extra lanes
  // landing on the next rows' first columns, which later stores overwrite
  // (those rows' first strips). Only a store that would pass the end of
  // the rTask's rows (r1) is masked: a masked store costs tens of cycles
  // on AMD cores. `w`: a 3 x 3 window's weights as vectors (used at
  // stride 2); `wc` the plane's weights.
  template <int K, int S, bool kClamp>
  void tiles(const float* xc, const Vec::T (&w)[9], const float* wc, float b, const float* zero, float* yc,
             int64_t r0, int64_t r1) const {
    constexpr int R = kRows<K, S>;
    const int64_t n = r1 - r0, count = (n + R - 1) / R;
    int64_t oy = r0;
    for (int64_t t = 0; t < count; ++t) {
      const int64_t r = n / count + (t < n % count ? 1 : 0);
      // Runs of strips alike (plain or masked), right to left, one call each.
      for (int64_t hi = nstrip_ - 1; hi >= 0;) {
        const char plain = plain_[static_cast<size_t>(hi)];
        int64_t lo = hi;
        while (lo > 0 && plain_[static_cast<size_t>(lo - 1)] == plain) --lo;
        if (plain) by_rows<K, S, R, true, kClamp>(r, xc, w, wc, b, zero, yc, oy, hi, lo, r1 * c_.ow);
        else by_rows<K, S, R, false, kClamp>(r, xc, w, wc, b, zero, yc, oy, hi, lo, r1 * c_.ow);
        hi = lo - 1;
      }
      oy += r;
    }
  }

  // tiles() for a tile of r rows, 1 to R.
  template <int K, int S, int R, bool kPlain, bool kClamp>
  void by_rows(int64_t r, const float* xc, const Vec::T (&w)[9], const float* wc, float b, const float* zero,
               float* yc, int64_t oy, int64_t hi, int64_t lo, int64_t end) const {
    if constexpr (R > 1) {
      if (r < R) return by_rows<K, S, R - 1, kPlain, kClamp>(r, xc, w, wc, b, zero, yc, oy, hi, lo, end);
    }
    tiles<K, S, R, kPlain, kClamp>(xc, w, wc, b, zero, yc, oy, hi, lo, end);
  }

  // The tiles of rows [oy0, oy0 + R) in strips hi down to lo, all plain
  // or all masked: the rows' addresses worked out (and at stride 2 a
  // 3 x 3 window's weights loaded) once for them all. Done per strip,
  // with a call each, that work held a 3 x 3 tile to half the rate its
  // FMAs reach in a loop of their own.
  template <int K, int S, int R, bool kPlain, bool kClamp>
  void tiles(const float* xc, const Vec::T (&w_in)[9], const float* wc, float b, const float* zero, float* yc,
             int64_t oy0, int64_t hi, int64_t lo, int64_t end) const {
    constexpr int kSpan = (R - 1) * S + K;  // input rows the tile reads
    const float* rows[kSpan];
#pragma GCC unroll 16
    for (int i = 0; i < kSpan; ++i) {
      const int64_t iy = oy0 * S - c_.ph + i;
      rows[i] = iy >= 0 && iy < c_.ih ? xc + iy * c_.iw : zero;
    }
    Vec::T w[9];  // 3 x 3 at stride 2: locals, held in registers over the tiles
    if constexpr (K == 3 && S == 2) {
#pragma GCC unroll 9
      for (int t = 0; t < 9; ++t) w[t] = w_in[t];
    }
    for (int64_t s = hi; s >= lo; --s) tile<K, S, R, kPlain, kClamp>(w, wc, b, rows, yc, oy0, s, end);
  }

  // Strip s of rows [oy0, oy0 + R).
  template <int K, int S, int R, bool kPlain, bool kClamp>
  [[gnu::always_inline]] void tile(const Vec::T (&w)[9], const float* wc, float b,
                                   const float* const (&rows)[(R - 1) * S + K], float* yc, int64_t oy0, int64_t s,
                                   int64_t end) const {
    constexpr int kLoads = S == 1 ? K : K + 1;
    const Mask* m = mask_.data() + s * loads_;
    int64_t col[kLoads];
#pragma GCC unroll 6
    for (int l = 0; l < kLoads; ++l) col[l] = column(s, l);
    auto weight = [&](int ky, int kx) { return K == 3 ? w[ky * 3 + kx] : Vec::set1(wc[ky * K + kx]); };
    auto load = [&](const float* row, int l) {
      if constexpr (kPlain) return Vec::load(row + col[l]);
      else return Vec::load(row + col[l], m[l].m);
    };
    Vec::T acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = Vec::set1(b);
    // Input row i of the tile reaches output row r at ky = i - S * r.
    constexpr int kSpan = (R - 1) * S + K;
    if constexpr (kByColumns<K, S>) {
      // Column by column: kx's K weights held in registers while every
      // input row's vector at kx feeds the rows it reaches. Row by row, a
      // 5 x 5's FMAs each broadcast their weight from memory, and a
      // 3 x 3's 9 weights in registers left room for 6 rows: 6 chains of
      // FMAs, too few to hide their latency (the 3 x 3 ran a fifth
      // slower).
#pragma GCC unroll 5
      for (int kx = 0; kx < K; ++kx) {
        Vec::T wk[K];
#pragma GCC unroll 5
        for (int ky = 0; ky < K; ++ky) wk[ky] = Vec::set1(wc[ky * K + kx]);
#pragma GCC unroll 16
        for (int i = 0; i < kSpan; ++i) {
          const Vec::T v = load(rows[i], kx);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int ky = i - r;
            if (ky >= 0 && ky < K) acc[r] = Vec::fma(wk[ky], v, acc[r]);
          }
        }
      }
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < kSpan; ++i) {
        const float* row = rows[i];
        Vec::T v[K + 1];
#pragma GCC unroll 3
        for (int p = 0; p <= K / 2; ++p)
          Vec::deinterleave(load(row, 2 * p), load(row, 2 * p + 1), &v[2 * p], &v[2 * p + 1]);
#pragma GCC unroll 5
        for (int kx = 0; kx < K; ++kx)
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int ky = i - S * r;
            if (ky >= 0 && ky < K) acc[r] = Vec::fma(weight(ky, kx), v[kx], acc[r]);
          }
      }
    }
    const int64_t ow = c_.ow, ox = s * kLanes, count = std::min<int64_t>(kLanes, ow - ox);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (kClamp) acc[r] = clamp_(acc[r]);
      float* out = yc + (oy0 + r) * ow + ox;
      if (count == kLanes || (oy0 + r) * ow + ox + kLanes <= end) Vec::store(out, acc[r]);
      else Vec::store(out, Vec::first(count), acc[r]);
    }
  }

  struct Mask {
    Vec::Mask m;
  };
  Conv2d c_{};
  int64_t nstrip_ = 0;         // vector strips per output row
  int64_t loads_ = 3;          // loads per input row and strip
  std::vector<Mask> mask_;     // [strip][load]: lanes inside the row
  std::vector<char> plain_;    // [strip]: every load inside the row
  RegisterClamp clamp_;        // the fused epilogue
};

}  // namespace tessera
#endif
