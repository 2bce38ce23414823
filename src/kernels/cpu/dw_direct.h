// DwDirect: the AVX-512 depthwise conv of conv.cc's depthwise path, one
// (image, channel) plane's output rows at a time, read straight from the
// input plane with masked loads (no padded copy). Separate from conv.cc,
// which chooses among the conv paths and tiles them into rTasks.
#pragma once

#include "kernels/cpu/simd.h"

#if defined(TESSERA_SIMD)
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/epilogue.h"

namespace tessera {

// Depthwise rows read straight from the input plane (stride 1 with any
// dilation, or stride 2 with dilation 1), no padded copy: every load is
// masked to the input columns inside the row, so the padding reads as
// zeros, and a row above or below the plane reads a zero row. An output
// tile is R rows x B blocks of 16 columns, its R*B accumulators held in
// registers over all taps; taps are added in (ky, kx) order. Stride 2
// loads 32 consecutive inputs and splits them into the even columns (tap
// kx) and the odd ones (tap kx + 1).
//
// Narrow planes (7x7, 14x14) at stride 1 with the output as wide as the
// input run flat: output pixel p = oy * w + ox reads input p + shift(tap),
// so the plane is one run of 16-pixel blocks, each tap one masked load
// per block (the mask drops the lanes whose tap falls outside the row or
// the plane), and no lanes idle at row ends.
class DwDirect {
 public:
  using Vec = simd::Vec;
  static constexpr int64_t kLanes = Vec::kLanes;

  // False when the geometry is not one of these forms. `flat`: run
  // whole planes flat (it must qualify: see flat_ok).
  bool init(const Conv2d& c, bool flat) {
    if (flat) return init_flat(c);
    if (!rows_ok(c)) return false;
    c_ = c;
    nblk_ = (c.ow + kLanes - 1) / kLanes;
    const int64_t per = c.sw == 1 ? c.kw : (c.kw + 1) / 2;  // loads (pairs for stride 2) per block and row
    for (int64_t blk = 0; blk < nblk_; ++blk) {
      for (int64_t t = 0; t < per; ++t) {
        const int64_t ix0 = c.sw * blk * kLanes - c.pw + (c.sw == 1 ? t * c.dw : 2 * t);
        const int64_t lanes = c.sw == 1 ? kLanes : 2 * kLanes;
        uint32_t m = 0;
        for (int64_t j = 0; j < lanes; ++j)
          if (ix0 + j >= 0 && ix0 + j < c.iw) m |= 1u << j;
        mask_.push_back(m);
      }
    }
    per_ = per;
    if (c.sw == 1 && c.sh == 1 && c.dw == 1 && c.dh == 1 && c.kh == c.kw && (c.kh == 3 || c.kh == 5)) {
      square_ = static_cast<int>(c.kh);
      // Rows of one block measured slower shifted (3x3 on 14x14: 1.7
      // against 1.4 us). The shift (valignd) is AVX-512's.
      shift_taps_ = c.pw == c.kw / 2 && nblk_ >= 2 && kLanes == 16;
      side_.clear();
      if (shift_taps_) {
        // square_tile's side masks, per group of 4 blocks: the lanes of
        // vectors blk0 - 1 .. blk0 + 4 inside the row. Made here, not per
        // tile: about a sixth of a 6-row tile's instructions were these.
        for (int64_t blk0 = 0; blk0 < nblk_; blk0 += 4)
          for (int64_t m = 0; m < kSideVectors; ++m) {
            const int64_t c0 = (blk0 + m - 1) * kLanes;
            side_.push_back(static_cast<uint16_t>(lane_bits(-c0, c.iw - c0)));
          }
      }
    }
    make_lanes();
    return true;
  }

  static bool rows_ok(const Conv2d& c) { return c.sw == 1 || (c.sw == 2 && c.dw == 1); }
  static bool flat_ok(const Conv2d& c) { return c.sh == 1 && c.sw == 1 && c.ow == c.iw; }

  // Output rows [r0, r1) of one plane (all of them when flat); `zero`
  // holds iw zeros. Out of line (dw_direct.cc), so that the many tile
  // templates below are compiled once, not in every file that runs them.
  void rows(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t r0, int64_t r1) const;

  // Whether init() chose whole planes flat.
  bool flat() const { return flat_; }

  // Whether rows() also applies `epi` (Relu or Clip, no residual), each
  // output clamped while it is still in a register.
  bool fuse(const Epilogue& epi) { return clamp_.take(epi); }

 private:
  bool init_flat(const Conv2d& c) {
    if (!flat_ok(c)) return false;
    c_ = c;
    flat_ = true;
    const int64_t taps = c.kh * c.kw, pixels = c.oh * c.ow;
    nblk_ = (pixels + kLanes - 1) / kLanes;
    per_ = taps;
    for (int64_t ky = 0; ky < c.kh; ++ky)
      for (int64_t kx = 0; kx < c.kw; ++kx) shift_.push_back((ky * c.dh - c.ph) * c.iw + kx * c.dw - c.pw);
    for (int64_t blk = 0; blk < nblk_; ++blk) {
      for (int64_t t = 0; t < taps; ++t) {
        uint32_t m = 0;
        for (int64_t j = 0; j < kLanes; ++j) {
          const int64_t p = blk * kLanes + j, oy = p / c.ow, ox = p % c.ow;
          const int64_t iy = oy - c.ph + t / c.kw * c.dh, ix = ox - c.pw + t % c.kw * c.dw;
          if (p < pixels && iy >= 0 && iy < c.ih && ix >= 0 && ix < c.iw) m |= 1u << j;
        }
        mask_.push_back(m);
      }
    }
    make_lanes();
    return true;
  }

  // lanes_ from mask_: each entry's first and second vector of lanes.
  void make_lanes() {
    lanes_.clear();
    for (uint32_t m : mask_) {
      lanes_.push_back({Vec::from_bits(m)});
      lanes_.push_back({Vec::from_bits(static_cast<uint32_t>(static_cast<uint64_t>(m) >> kLanes))});
    }
  }

  // A whole plane, flat: blocks in groups of up to 8 accumulators.
  template <bool kClamp>
  void plane(const float* xc, const float* wc, float b, float* yc) const {
    for (int64_t blk = 0; blk < nblk_; blk += 8) {
      switch (std::min<int64_t>(8, nblk_ - blk)) {
        case 8: flat_tile<8, kClamp>(xc, wc, b, yc, blk); break;
        case 7: flat_tile<7, kClamp>(xc, wc, b, yc, blk); break;
        case 6: flat_tile<6, kClamp>(xc, wc, b, yc, blk); break;
        case 5: flat_tile<5, kClamp>(xc, wc, b, yc, blk); break;
        case 4: flat_tile<4, kClamp>(xc, wc, b, yc, blk); break;
        case 3: flat_tile<3, kClamp>(xc, wc, b, yc, blk); break;
        case 2: flat_tile<2, kClamp>(xc, wc, b, yc, blk); break;
        default: flat_tile<1, kClamp>(xc, wc, b, yc, blk); break;
      }
    }
  }

  template <int B, bool kClamp>
  void flat_tile(const float* xc, const float* wc, float b, float* yc, int64_t blk0) const {
    const int64_t taps = per_, pixels = c_.oh * c_.ow;
    const Lanes* masks = lanes_.data() + 2 * blk0 * taps;
    const int64_t* shift = shift_.data();
    const float* x0 = xc + blk0 * kLanes;
    Vec::T acc[B];
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) acc[j] = Vec::set1(b);
    for (int64_t t = 0; t < taps; ++t) {
      const Vec::T w = Vec::set1(wc[t]);
      const float* src = x0 + shift[t];
#pragma GCC unroll 8
      for (int j = 0; j < B; ++j)
        acc[j] = Vec::fma(w, Vec::load(src + j * kLanes, masks[2 * (j * taps + t)].m), acc[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) {
      if constexpr (kClamp) acc[j] = clamp_(acc[j]);
      const int64_t p = (blk0 + j) * kLanes, count = std::min<int64_t>(kLanes, pixels - p);
      if (count == kLanes) Vec::store(yc + p, acc[j]);
      else Vec::store(yc + p, Vec::first(count), acc[j]);
    }
  }

  template <bool kClamp>
  void rows_as(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t r0, int64_t r1) const {
    const int64_t bw = std::min<int64_t>(4, nblk_);
    if (square_ == 3 || square_ == 5) {
      const int64_t rt = kSquareRows[bw];
      const int64_t n = r1 - r0, tiles = (n + rt - 1) / rt;
      int64_t oy = r0;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t r = n / tiles + (t < n % tiles ? 1 : 0);
        for (int64_t blk = 0; blk < nblk_; blk += 4) {
          const int64_t nb = std::min<int64_t>(4, nblk_ - blk);
          if (square_ == 3) square<3, kClamp>(nb, r, xc, wc, b, zero, yc, oy, blk);
          else square<5, kClamp>(nb, r, xc, wc, b, zero, yc, oy, blk);
        }
        oy += r;
      }
      return;
    }
    const int64_t rt = bw >= 3 ? 2 : bw == 2 ? 4 : 8;  // rows per tile: R * B up to 8 accumulators
    // The rows in tiles as even as can be (14 rows: 7 + 7, not 8 + 6 x 1),
    // so that no tile is left with too few accumulators to hide latency.
    const int64_t n = r1 - r0, tiles = (n + rt - 1) / rt;
    int64_t oy = r0;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r = n / tiles + (t < n % tiles ? 1 : 0);
      row_tiles<kClamp>(xc, wc, b, zero, yc, oy, r);
      oy += r;
    }
  }

  template <bool kClamp>
  void row_tiles(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t oy,
                 int64_t r) const {
    for (int64_t blk = 0; blk < nblk_; blk += 4) {
      const int64_t nb = std::min<int64_t>(4, nblk_ - blk);
      if (c_.sw == 1) dispatch<1, kClamp>(nb, r, xc, wc, b, zero, yc, oy, blk);
      else dispatch<2, kClamp>(nb, r, xc, wc, b, zero, yc, oy, blk);
    }
  }

  template <int S, bool kClamp>
  void dispatch(int64_t nb, int64_t r, const float* xc, const float* wc, float b, const float* zero, float* yc,
                int64_t oy, int64_t blk) const {
#define TESSERA_DW_TILE(NB, R) \
  if (nb == NB && r == R) return tile<S, NB, R, kClamp>(xc, wc, b, zero, yc, oy, blk);
    TESSERA_DW_TILE(4, 2) TESSERA_DW_TILE(4, 1) TESSERA_DW_TILE(3, 2) TESSERA_DW_TILE(3, 1)
    TESSERA_DW_TILE(2, 4) TESSERA_DW_TILE(2, 3) TESSERA_DW_TILE(2, 2) TESSERA_DW_TILE(2, 1)
    TESSERA_DW_TILE(1, 8) TESSERA_DW_TILE(1, 7) TESSERA_DW_TILE(1, 6) TESSERA_DW_TILE(1, 5)
    TESSERA_DW_TILE(1, 4) TESSERA_DW_TILE(1, 3) TESSERA_DW_TILE(1, 2) TESSERA_DW_TILE(1, 1)
#undef TESSERA_DW_TILE
    // A tile narrower than the row's first (the last blocks of a row):
    // its row count is the first's, one row at a time.
    for (int64_t i = 0; i < r; ++i) dispatch<S, kClamp>(nb, 1, xc, wc, b, zero, yc, oy + i, blk);
  }

  // A tile's accumulators start at the bias; at the end each is clamped
  // (a fused Relu/Clip) and stored, the row's last block masked.
  template <int B, int R>
  [[gnu::always_inline]] static void fill_tile(Vec::T (&acc)[R][B], float b) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < B; ++j) acc[r][j] = Vec::set1(b);
  }

  template <int B, int R, bool kClamp>
  [[gnu::always_inline]] void store_tile(Vec::T (&acc)[R][B], float* yc, int64_t oy0, int64_t blk0) const {
    const int64_t ow = c_.ow;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* out = yc + (oy0 + r) * ow;
#pragma GCC unroll 4
      for (int j = 0; j < B; ++j) {
        if constexpr (kClamp) acc[r][j] = clamp_(acc[r][j]);
        const int64_t ox = (blk0 + j) * kLanes, count = std::min<int64_t>(kLanes, ow - ox);
        if (count == kLanes) Vec::store(out + ox, acc[r][j]);
        else Vec::store(out + ox, Vec::first(count), acc[r][j]);
      }
    }
  }

  // Stride 1, dilation 1, a square K x K window (K = 3 or 5: MobileNets,
  // EfficientNets, NASNets): input rows in the outer loop, so that each
  // loaded input vector feeds every output row of the tile it reaches
  // (up to K FMAs per load instead of one) and a tile can hold more rows.
  // Each accumulator still sees its taps in (ky, kx) order: bitwise the
  // same as tile() above.
  // Rows per tile for 1 to 4 blocks: R * B <= 12 accumulators in
  // AVX-512's 32 registers; with AVX2's 16, R * B <= 10 beside the B
  // loaded vectors and a weight.
  static constexpr int64_t kSquareRows[5] = {0, 8, kLanes == 16 ? 6 : 5, kLanes == 16 ? 4 : 3, kLanes == 16 ? 3 : 2};

  template <int K, bool kClamp>
  void square(int64_t nb, int64_t r, const float* xc, const float* wc, float b, const float* zero, float* yc,
              int64_t oy, int64_t blk) const {
#define TESSERA_DW_SQ(NB, R)                                                                 \
  if (nb == NB && r == R) {                                                                  \
    if (shift_taps_) return square_tile<K, NB, R, kClamp, true>(xc, wc, b, zero, yc, oy, blk);  \
    return square_tile<K, NB, R, kClamp, false>(xc, wc, b, zero, yc, oy, blk);                 \
  }
    TESSERA_DW_SQ(4, 3) TESSERA_DW_SQ(4, 2) TESSERA_DW_SQ(4, 1)
    TESSERA_DW_SQ(3, 4) TESSERA_DW_SQ(3, 3) TESSERA_DW_SQ(3, 2) TESSERA_DW_SQ(3, 1)
    TESSERA_DW_SQ(2, 6) TESSERA_DW_SQ(2, 5) TESSERA_DW_SQ(2, 4) TESSERA_DW_SQ(2, 3) TESSERA_DW_SQ(2, 2)
    TESSERA_DW_SQ(2, 1) TESSERA_DW_SQ(1, 8) TESSERA_DW_SQ(1, 7) TESSERA_DW_SQ(1, 6) TESSERA_DW_SQ(1, 5)
    TESSERA_DW_SQ(1, 4) TESSERA_DW_SQ(1, 3) TESSERA_DW_SQ(1, 2) TESSERA_DW_SQ(1, 1)
#undef TESSERA_DW_SQ
    // The last blocks of a row, narrower than the first: one row at a time.
    for (int64_t i = 0; i < r; ++i) square<K, kClamp>(nb, 1, xc, wc, b, zero, yc, oy + i, blk);
  }

  // kShift (padding K / 2 on the left, rows of 2 or more blocks): each
  // input row is loaded once as
  // the tile's B vectors and one on each side (masked to the row, zero
  // outside), and every tap's window is two of them shifted by valignd,
  // instead of K unaligned loads per vector. The same values reach the same
  // FMAs, so results are bitwise those of the loads; 10-20 % less time on
  // rows of several blocks.
  template <int K, int B, int R, bool kClamp, bool kShift>
  void square_tile(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t oy0,
                   int64_t blk0) const {
    const int64_t ih = c_.ih, iw = c_.iw, ph = c_.ph, pw = c_.pw;
    const Lanes* masks = lanes_.data() + 2 * blk0 * K;
    Vec::T acc[R][B];
    fill_tile<B, R>(acc, b);
    // The K FMA steps of one tap kx on the B windows v of one input row i.
    auto fma_tap = [&](int i, int kx, const Vec::T(&v)[B]) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int ky = i - r;
        if (ky < 0 || ky >= K) continue;
        const Vec::T w = Vec::set1(wc[ky * K + kx]);
#pragma GCC unroll 4
        for (int j = 0; j < B; ++j) acc[r][j] = Vec::fma(w, v[j], acc[r][j]);
      }
    };
#if defined(__AVX512F__)
    // kShift: lanes of vector m - 1 of the tile inside the row.
    const uint16_t* side = kShift ? side_.data() + blk0 / 4 * kSideVectors : nullptr;
#endif
    // One step per input row, unrolled by the template (R + K - 1 steps)
    // so that every row's ky tests are resolved at compile time.
    auto input_row = [&]<int i>(std::integral_constant<int, i>) {
      const int64_t iy = oy0 + i - ph;
      const float* in = iy >= 0 && iy < ih ? xc + iy * iw : zero;
#if defined(__AVX512F__)
      if constexpr (kShift) {
        __m512i q[B + 2];
#pragma GCC unroll 6
        for (int m = 0; m < B + 2; ++m)
          q[m] = _mm512_castps_si512(_mm512_maskz_loadu_ps(side[m], in + (blk0 + m - 1) * kLanes));
        [&]<int... kx>(std::integer_sequence<int, kx...>) {
          (
              [&] {
                constexpr int d = kx - K / 2;  // window = columns [16j + d, 16j + d + 16) of the tile
                __m512 v[B];
#pragma GCC unroll 4
                for (int j = 0; j < B; ++j) {
                  __m512i t;
                  if constexpr (d < 0) t = _mm512_maskz_alignr_epi32(0xffff, q[j + 1], q[j], 16 + d);
                  else if constexpr (d == 0) t = q[j + 1];
                  else t = _mm512_maskz_alignr_epi32(0xffff, q[j + 2], q[j + 1], d);
                  v[j] = _mm512_castsi512_ps(t);
                }
                fma_tap(i, kx, v);
              }(),
              ...);
        }(std::make_integer_sequence<int, K>{});
        return;
      }
#endif
      {
        const float* row = in + blk0 * kLanes - pw;
#pragma GCC unroll 5
        for (int kx = 0; kx < K; ++kx) {
          Vec::T v[B];
#pragma GCC unroll 4
          for (int j = 0; j < B; ++j) v[j] = Vec::load(row + kx + j * kLanes, masks[2 * (j * K + kx)].m);
          fma_tap(i, kx, v);
        }
      }
    };
    [&]<int... I>(std::integer_sequence<int, I...>) {
      (input_row(std::integral_constant<int, I>{}), ...);
    }(std::make_integer_sequence<int, R + K - 1>{});
    store_tile<B, R, kClamp>(acc, yc, oy0, blk0);
  }

  template <int S, int B, int R, bool kClamp>
  void tile(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t oy0, int64_t blk0) const {
    // Geometry in locals, so that nothing is reloaded through `this` and
    // the accumulators stay in registers.
    const int64_t kh = c_.kh, kw = c_.kw, ih = c_.ih, iw = c_.iw, sh = c_.sh, dh = c_.dh, ph = c_.ph;
    const int64_t pw = c_.pw, dw = c_.dw, per = per_;
    const Lanes* masks = lanes_.data() + 2 * blk0 * per;
    Vec::T acc[R][B];
    fill_tile<B, R>(acc, b);
    for (int64_t ky = 0; ky < kh; ++ky) {
      const float* row[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int64_t iy = (oy0 + r) * sh - ph + ky * dh;
        row[r] = (iy >= 0 && iy < ih ? xc + iy * iw : zero) + S * blk0 * kLanes - pw;
      }
      const float* wk = wc + ky * kw;
      for (int64_t t = 0; t < per; ++t) {
        if constexpr (S == 1) {
          const Vec::T w = Vec::set1(wk[t]);
          const int64_t off = t * dw;
#pragma GCC unroll 4
          for (int j = 0; j < B; ++j) {
            const Vec::Mask m = masks[2 * (j * per + t)].m;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) acc[r][j] = Vec::fma(w, Vec::load(row[r] + off + j * kLanes, m), acc[r][j]);
          }
        } else {
          const int64_t kx = 2 * t;
          const bool pair = kx + 1 < kw;
          const Vec::T w0 = Vec::set1(wk[kx]);
          const Vec::T w1 = Vec::set1(pair ? wk[kx + 1] : 0.f);
#pragma GCC unroll 4
          for (int j = 0; j < B; ++j) {
            const Vec::Mask lo_m = masks[2 * (j * per + t)].m, hi_m = masks[2 * (j * per + t) + 1].m;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
              const float* src = row[r] + kx + 2 * j * kLanes;
              Vec::T even, odd;
              Vec::deinterleave(Vec::load(src, lo_m), Vec::load(src + kLanes, hi_m), &even, &odd);
              acc[r][j] = Vec::fma(w0, even, acc[r][j]);
              if (pair) acc[r][j] = Vec::fma(w1, odd, acc[r][j]);
            }
          }
        }
      }
    }
    store_tile<B, R, kClamp>(acc, yc, oy0, blk0);
  }

  Conv2d c_{};
  int64_t nblk_ = 0, per_ = 0;  // blocks per row (per plane when flat); taps or tap pairs
  bool flat_ = false;
  int square_ = 0;              // K of a K x K stride-1 undilated window that square() takes, or 0
  bool shift_taps_ = false;     // square(): the left padding is K / 2 (square_tile's kShift)
  std::vector<int64_t> shift_;  // flat: per tap, input pixel minus output pixel
  RegisterClamp clamp_;  // the fused epilogue
  std::vector<uint32_t> mask_;  // [block][tap or tap pair]: lanes whose input is inside the plane
  // mask_ as two vectors' lane masks each (the second for stride 2's pair).
  struct Lanes {
    Vec::Mask m;
  };
  std::vector<Lanes> lanes_;
  static constexpr int64_t kSideVectors = 6;  // a tile's 4 blocks and one on each side
  std::vector<uint16_t> side_;  // shift_taps_: [group of 4 blocks][vector]: lane masks
};

}  // namespace tessera
#endif
