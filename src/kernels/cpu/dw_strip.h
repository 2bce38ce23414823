// DwStrip: the depthwise conv of conv.cc's depthwise path for 3 x 3
// windows at stride 1 or 2 (MobileNets, MnasNets, EfficientNets) where
// vectors have 8 lanes (AVX2). One vector of output columns (a strip) at
// a time, down the rows: the 9 weights stay in registers for the whole
// strip, so that the only loads are the input's, and a tile of R rows
// shares each input vector among the rows it reaches.
//
// Strips inside the row load plain vectors; the first and last strips mask
// the columns outside the row, and rows above or below the plane read a
// zero row. Every accumulator starts at the bias and adds its taps in
// (ky, kx) order, as DwDirect does: results are bitwise the same.
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
    return c.kh == 3 && c.kw == 3 && c.sh == c.sw && (c.sh == 1 || c.sh == 2) && c.dh == 1 && c.dw == 1 &&
           c.pw <= 2;
  }

  // False when ok(c) is not.
  bool init(const Conv2d& c) {
    if (!ok(c)) return false;
    c_ = c;
    nstrip_ = (c.ow + kLanes - 1) / kLanes;
    // Per strip, per load (3 for stride 1, 4 for stride 2): the lanes
    // inside the row; a strip is plain when all are.
    loads_ = c.sw == 1 ? 3 : 4;
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
  void rows(const float* xc, const float* wc, float b, float* scratch, float* yc, int64_t r0, int64_t r1) const {
    std::fill(scratch, scratch + scratch_floats(), 0.f);
    const float* zero = scratch + 2 * kLanes;  // loads start up to pw <= 2 columns left of it
    if (!clamp_.on) return rows_as<false>(xc, wc, b, zero, yc, r0, r1);
    rows_as<true>(xc, wc, b, zero, yc, r0, r1);
  }

  // Whether rows() also applies `epi` (Relu or Clip, no residual).
  bool fuse(const Epilogue& epi) { return clamp_.take(epi); }

 private:
  // Input column of load l's lane 0 in strip s: stride 1 loads tap kx = l
  // at ox - pw + l; stride 2 loads vectors at 2 ox - pw (+ 8) for taps 0
  // and 1, and at 2 ox - pw + 2 (+ 8) for tap 2.
  int64_t column(int64_t s, int64_t l) const {
    const int64_t ox = s * kLanes;
    if (c_.sw == 1) return ox - c_.pw + l;
    return 2 * ox - c_.pw + (l >= 2 ? 2 : 0) + (l % 2) * kLanes;
  }

  // Output rows per tile: R accumulators beside the 9 weights and the
  // loaded vectors (1 for stride 1; 2 loaded and 2 split for stride 2).
  static constexpr int kRows1 = 6, kRows2 = 3;

  template <bool kClamp>
  void rows_as(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t r0, int64_t r1) const {
    Vec::T w[9];
#pragma GCC unroll 9
    for (int t = 0; t < 9; ++t) w[t] = Vec::set1(wc[t]);
    if (c_.sw == 1) return tiles<1, kRows1, kClamp>(xc, w, b, zero, yc, r0, r1);
    tiles<2, kRows2, kClamp>(xc, w, b, zero, yc, r0, r1);
  }

  // Tiles of R rows (as even as can be, so that none is left with too few
  // accumulators to hide the FMA latency), each across the row's strips
  // right to left: a partial last strip is stored whole, its extra lanes
  // landing on the next row's first columns, which a later store
  // overwrites (that row's first strip). Only the rTask's last row
  // (r1 - 1) stores it masked: a masked store costs tens of cycles on AMD
  // cores.
  template <int S, int R, bool kClamp>
  void tiles(const float* xc, const Vec::T (&w)[9], float b, const float* zero, float* yc, int64_t r0,
             int64_t r1) const {
    const int64_t n = r1 - r0, count = (n + R - 1) / R;
    int64_t oy = r0;
    for (int64_t t = 0; t < count; ++t) {
      const int64_t r = n / count + (t < n % count ? 1 : 0);
      for (int64_t s = nstrip_ - 1; s >= 0; --s) {
        const bool plain = plain_[static_cast<size_t>(s)] != 0;
        if (plain) by_rows<S, R, true, kClamp>(r, xc, w, b, zero, yc, oy, s, r1 - 1);
        else by_rows<S, R, false, kClamp>(r, xc, w, b, zero, yc, oy, s, r1 - 1);
      }
      oy += r;
    }
  }

  // tile() for a tile of r rows, 1 to R.
  template <int S, int R, bool kPlain, bool kClamp>
  void by_rows(int64_t r, const float* xc, const Vec::T (&w)[9], float b, const float* zero, float* yc, int64_t oy,
               int64_t s, int64_t last) const {
    if constexpr (R > 1) {
      if (r < R) return by_rows<S, R - 1, kPlain, kClamp>(r, xc, w, b, zero, yc, oy, s, last);
    }
    tile<S, R, kPlain, kClamp>(xc, w, b, zero, yc, oy, s, last);
  }

  template <int S, int R, bool kPlain, bool kClamp>
  void tile(const float* xc, const Vec::T (&w_in)[9], float b, const float* zero, float* yc, int64_t oy0, int64_t s,
            int64_t last) const {
    const int64_t ih = c_.ih, iw = c_.iw;
    const Mask* m = mask_.data() + s * loads_;
    int64_t col[4];
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) col[l] = column(s, l);
    Vec::T w[9];  // locals, held in registers over the tile
#pragma GCC unroll 9
    for (int t = 0; t < 9; ++t) w[t] = w_in[t];
    Vec::T acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = Vec::set1(b);
    // Input row i of the tile reaches output row r at ky = i - S * r.
    constexpr int kSpan = (R - 1) * S + 3;
#pragma GCC unroll 16
    for (int i = 0; i < kSpan; ++i) {
      const int64_t iy = oy0 * S - c_.ph + i;
      const float* row = iy >= 0 && iy < ih ? xc + iy * iw : zero;
      Vec::T v[3];
      if constexpr (S == 1) {
#pragma GCC unroll 3
        for (int kx = 0; kx < 3; ++kx) v[kx] = kPlain ? Vec::load(row + col[kx]) : Vec::load(row + col[kx], m[kx].m);
      } else {
        Vec::T odd2;
        if constexpr (kPlain) {
          Vec::deinterleave(Vec::load(row + col[0]), Vec::load(row + col[1]), &v[0], &v[1]);
          Vec::deinterleave(Vec::load(row + col[2]), Vec::load(row + col[3]), &v[2], &odd2);
        } else {
          Vec::deinterleave(Vec::load(row + col[0], m[0].m), Vec::load(row + col[1], m[1].m), &v[0], &v[1]);
          Vec::deinterleave(Vec::load(row + col[2], m[2].m), Vec::load(row + col[3], m[3].m), &v[2], &odd2);
        }
        (void)odd2;
      }
#pragma GCC unroll 3
      for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int ky = i - S * r;
          if (ky >= 0 && ky < 3) acc[r] = Vec::fma(w[ky * 3 + kx], v[kx], acc[r]);
        }
    }
    const int64_t ow = c_.ow, ox = s * kLanes, count = std::min<int64_t>(kLanes, ow - ox);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (kClamp) acc[r] = clamp_(acc[r]);
      float* out = yc + (oy0 + r) * ow + ox;
      if (count == kLanes || oy0 + r < last) Vec::store(out, acc[r]);
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
