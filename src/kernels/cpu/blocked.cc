// The channel-blocked layout's rKernels (ir/ops/infer_blocked.cc):
// TesseraToBlocked, TesseraFromBlocked and TesseraBlockedConv, on blocks of
// 8 channels held in one 256-bit vector (AVX2 with FMA; AVX-512 builds have
// those instructions too). A portable build has none of them, and the
// compiler does not block there (compiler/block_channels.cc asks).
//
// Why: in NCHW a 1x1 conv's column block touches one row of every input
// and output plane (16 -> 96 channels on 112 x 112: 112 streams 50 KB
// apart), and a depthwise conv pads and masks rows of single channels.
// Blocked, a pixel's channels are one vector: a 1x1 conv reads and writes
// whole runs of pixels per channel block, and a depthwise conv is vector
// FMAs over pixels with no lane shuffling.
//
// The blocked conv computes every output as the NCHW kernels do, so the
// bits match theirs:
//   1x1        a chain of fused multiply-adds over the input channels in
//              order from 0, then the bias, the residual and a Relu or Clip
//              in registers (packed_gemm_post's order), any other
//              activation on the stored outputs;
//   depthwise  from the bias, the taps in (ky, kx) order, taps outside the
//              input adding 0 x weight as the NCHW kernels' padded rows
//              do; a Relu or Clip in registers when there is no residual,
//              else the epilogue on the stored outputs.
//
// rTasks: the 1x1 conv (blocked_pointwise.cc) in blocks of pixels (each
// computing every output channel, its input chunk in cache across them),
// or of output channels where the plane is small; the depthwise conv and
// the layout conversions in ranges of (image, channel block) planes, then
// of rows.
#include <algorithm>
#include <vector>

#include "base/strings.h"
#include "kernels/cpu/blocked.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/kernel.h"


namespace tessera {
namespace {

#if defined(TESSERA_BLOCKED)
// rows[i] (8 floats each) <- column i of the 8 x 8 block in rows.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// rTasks as ranges of `planes` (image, block or group) then of output
// `rows`: about flops / grain of them (at least `least`), or as many as
// asked; the access a task makes, by ranges where it takes whole planes.
struct PlaneRows {
  int64_t planes = 1, rows = 1;
  Access access() const { return rows == 1 ? Access::kRange : Access::kSpread; }
};
PlaneRows plane_rows(int64_t planes, int64_t rows, double flops, double grain, int64_t least, const KernelParams& p) {
  const int64_t target = p.tasks > 0 ? p.tasks
                                     : std::clamp<int64_t>(static_cast<int64_t>(flops / grain), least,
                                                           kMaxDefaultTasks);
  PlaneRows t;
  t.planes = std::min(planes, target);
  t.rows = std::clamp<int64_t>((target + t.planes - 1) / t.planes, 1, rows);
  return t;
}

// Planes of (image, channel block) per rTask by default: about 64 KB.
int64_t planes_grain(int64_t plane_floats) {
  return std::max<int64_t>(1, (int64_t{16} << 10) / std::max<int64_t>(1, plane_floats * kB));
}

// ------------------------------------------------------------ layouts ---

// NCHW <-> blocked, 8 pixels x 8 channels at a time through registers.
// rTasks: ranges of (image, channel block) planes.
class RelayoutOp : public ROp {
 public:
  RelayoutOp(bool to_blocked, int64_t n, int64_t c, int64_t hw, const KernelParams& p)
      : to_(to_blocked), blocks_(n * c / kB), hw_(hw) {
    tasks_ = choose_tasks(blocks_, planes_grain(hw), p);
    set_access({Access::kRange}, Access::kRange);
  }
  std::string_view path() const override { return to_ ? "to blocked" : "from blocked"; }

  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b0, b1;
    task_range(blocks_, tasks_, task, &b0, &b1);
    const float* x = static_cast<const float*>(args.in[0]);
    float* y = static_cast<float*>(args.out[0]);
    // Block b is the same 8 * hw floats in both layouts: planes c .. c + 7
    // of an image in NCHW, [hw][8] blocked.
    for (int64_t b = b0; b < b1; ++b) {
      const float* src = x + b * kB * hw_;
      float* dst = y + b * kB * hw_;
      int64_t p = 0;
      __m256 r[8];
      if (to_) {
        for (; p + 8 <= hw_; p += 8) {
          for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + j * hw_ + p);
          transpose8(r);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (p + i) * kB, r[i]);
        }
        for (; p < hw_; ++p)
          for (int64_t j = 0; j < kB; ++j) dst[p * kB + j] = src[j * hw_ + p];
      } else {
        for (; p + 8 <= hw_; p += 8) {
          for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (p + i) * kB);
          transpose8(r);
          for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + j * hw_ + p, r[j]);
        }
        for (; p < hw_; ++p)
          for (int64_t j = 0; j < kB; ++j) dst[j * hw_ + p] = src[p * kB + j];
      }
    }
  }

 private:
  bool to_;
  int64_t blocks_, hw_;
};

// ---------------------------------------------------- the depthwise conv ---

// A depthwise conv's arithmetic on one block plane's rows: input rows from
// row0 of the plane lie at x (rows outside the input read as zero; the
// caller holds every row inside it that the output rows asked for read),
// output rows at y.
class Depthwise8 {
 public:
  Depthwise8(const Conv2d& c, const float* w, const Epilogue& epi) : c_(c) {
    taps_ = c.kh * c.kw;
    wpack_.resize(static_cast<size_t>(c.cout * taps_));
    for (int64_t ch = 0; ch < c.cout; ++ch)
      for (int64_t t = 0; t < taps_; ++t) wpack_[static_cast<size_t>((ch / kB * taps_ + t) * kB + ch % kB)] = w[ch * taps_ + t];
    if (!epi.residual) fused_ = clamp_.take(epi);
    zero_row_.assign(static_cast<size_t>(c.iw * kB), 0.f);
    // Where each output pixel's window starts in padded rows (from an
    // rTask's first row): the same for every block.
    window_at_.resize(static_cast<size_t>(c.oh * c.ow));
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox)
        window_at_[static_cast<size_t>(oy * c.ow + ox)] = (oy * c.sh * padded_w() + ox * c.sw) * kB;
    // Output columns whose every tap column lies inside the row.
    ox_lo_ = std::min(c.ow, (c.pw + c.sw - 1) / c.sw);
    const int64_t last = c.iw + c.pw - c.kw;  // the last inside column's first tap, times the stride
    ox_hi_ = last < 0 ? ox_lo_ : std::max(ox_lo_, std::min(c.ow, last / c.sw + 1));
  }
  const std::vector<float>& weights() const { return wpack_; }
  // Whether a Relu or Clip is applied in registers (else the caller
  // applies the epilogue to the stored rows).
  bool fused() const { return fused_; }

  // Output rows [r0, r1) of block `blk`: x holds input rows from row0, y
  // output rows from r0. Each row's inside columns go in tiles of pixels
  // (inside()); the columns left, at the row ends and after the last tile,
  // go a column at a time over up to 8 rows (column()): one pixel at a
  // time, each would be a chain of dependent FMAs, and on a 7 x 7 plane
  // those are 3 of its 7 columns.
  void rows(const float* x, int64_t row0, int64_t blk, const float* bias, float* y, int64_t r0, int64_t r1) const {
    const __m256 bv = bias != nullptr ? _mm256_loadu_ps(bias + blk * kB) : _mm256_setzero_ps();
    const float* wq = wpack_.data() + blk * taps_ * kB;
    // By 8 rows, so that the columns read rows the tiles just brought into
    // L1 (on a large plane, the rows of a whole rTask would not stay there).
    for (int64_t oy0 = r0; oy0 < r1; oy0 += 8) {
      const int64_t oy1 = std::min(oy0 + 8, r1);
      int64_t rest = c_.ow;  // the first column after the inside tiles: the same in every row
      int64_t row = oy0;
#if defined(__AVX512F__)
      // Two rows at a time where their tiles share input rows (pair_window).
      if (pairs() && c_.sh == 1)
        for (; row + 2 <= oy1; row += 2) rest = inside<2>(x, row0, wq, bv, y + (row - r0) * c_.ow * kB, row);
#endif
      for (; row < oy1; ++row) rest = inside(x, row0, wq, bv, y + (row - r0) * c_.ow * kB, row);
      const auto columns = [&](int64_t from, int64_t to) {
        for (int64_t ox = from; ox < to; ++ox) {
          int64_t oy = oy0;
          if (oy + 8 <= oy1) column<8>(x, row0, wq, bv, y, r0, oy, ox), oy += 8;
          if (oy + 4 <= oy1) column<4>(x, row0, wq, bv, y, r0, oy, ox), oy += 4;
          if (oy + 2 <= oy1) column<2>(x, row0, wq, bv, y, r0, oy, ox), oy += 2;
          if (oy < oy1) column<1>(x, row0, wq, bv, y, r0, oy, ox);
        }
      };
      columns(0, std::min(ox_lo_, rest));
      columns(rest, c_.ow);
    }
  }

  // The padded width and the padded rows of `out_rows` output rows.
  int64_t padded_w() const { return (c_.ow - 1) * c_.sw + c_.kw; }
  int64_t padded_h(int64_t out_rows) const { return (out_rows - 1) * c_.sh + c_.kh; }

  // As rows(), x the whole input plane, through a zero-padded copy of the
  // input rows [r0, r1) read, in `pad` (padded_h(r1 - r0) x padded_w()
  // vectors): every output pixel then has every tap inside, and a row runs
  // in tiles of up to 8 pixels, its ends included (3x3 and 5x5 windows;
  // others 8 pixels at a time across rows). The same FMAs in the same
  // order: the same bits.
  void padded_rows(const float* x, int64_t blk, const float* bias, float* y, int64_t r0, int64_t r1,
                   float* pad) const {
    const __m256 bv = bias != nullptr ? _mm256_loadu_ps(bias + blk * kB) : _mm256_setzero_ps();
    const float* wq = wpack_.data() + blk * taps_ * kB;
    const int64_t wp = padded_w(), hp = padded_h(r1 - r0), iy0 = r0 * c_.sh - c_.ph;
    const int64_t cols = std::clamp<int64_t>(wp - c_.pw, 0, c_.iw);
    // A vector at a time, inline: rows of a few vectors, where calls to
    // fill and copy would each cost about what their stores do.
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t r = 0; r < hp; ++r) {
      float* d = pad + r * wp * kB;
      const int64_t iy = iy0 + r;
      const bool row_in = iy >= 0 && iy < c_.ih;
      const int64_t from = row_in ? std::min(c_.pw, wp) : wp, to = row_in ? std::min(c_.pw + cols, wp) : wp;
      const float* src = x + (iy * c_.iw - c_.pw) * kB;  // read only for j in [from, to), where iy is inside
      int64_t j = 0;
      for (; j < from; ++j) _mm256_storeu_ps(d + j * kB, zero);
      for (; j < to; ++j) _mm256_storeu_ps(d + j * kB, _mm256_loadu_ps(src + j * kB));
      for (; j < wp; ++j) _mm256_storeu_ps(d + j * kB, zero);
    }
    // 3x3 and 5x5 windows: along each row, each tap row's inputs loaded
    // once for the window's columns (padded_window()).
    if ((c_.kw == 3 || c_.kw == 5) && (c_.sw == 1 || c_.sw == 2)) {
      for (int64_t oy = 0; oy < r1 - r0; ++oy) {
        const float* prow = pad + oy * c_.sh * wp * kB;
        float* yr = y + oy * c_.ow * kB;
        if (c_.kw == 3 && c_.sw == 1) padded_row<3, 1>(prow, wp, wq, bv, yr);
        else if (c_.kw == 3) padded_row<3, 2>(prow, wp, wq, bv, yr);
        else if (c_.sw == 1) padded_row<5, 1>(prow, wp, wq, bv, yr);
        else padded_row<5, 2>(prow, wp, wq, bv, yr);
      }
      return;
    }
    const int64_t n = (r1 - r0) * c_.ow;
    int64_t i = 0;  // the next pixel
    const auto group = [&]<int T>() {
      const float* base[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) base[t] = pad + window_at_[static_cast<size_t>(i + t)];
      gathered<T>(base, wp, wq, bv, y + i * kB);
      i += T;
    };
    while (i + kTile <= n) group.template operator()<kTile>();
    if (i + 4 <= n) group.template operator()<4>();
    if (i + 2 <= n) group.template operator()<2>();
    if (i < n) group.template operator()<1>();
  }

 private:
  static constexpr int kTile = 8;  // output pixels in registers

  // A row's columns whose taps all lie inside it, in tiles (3x3 and 5x5
  // windows at stride 1 or 2 by window(), others 8 pixels a tile), then 4
  // and 2; returns the first column after them (the rest: column()).
  // With R = 2 (AVX-512, pairs()), rows oy and oy + 1, yr the first.
  template <int R = 1>
  int64_t inside(const float* x, int64_t row0, const float* wq, __m256 bv, float* yr, int64_t oy) const {
    int64_t ox = ox_lo_;
    // A tile of N pixels at column o: window() with AVX2's registers,
    // pair_window() at stride 1 with AVX-512's.
    const auto w3 = [&]<int N>(int64_t o) { window<N, 3, 1>(x, row0, wq, bv, yr, oy, o); };
    const auto w5 = [&]<int N>(int64_t o) { window<N, 5, 1>(x, row0, wq, bv, yr, oy, o); };
    const auto w3s2 = [&]<int N>(int64_t o) { window<N, 3, 2>(x, row0, wq, bv, yr, oy, o); };
    const auto w5s2 = [&]<int N>(int64_t o) { window<N, 5, 2>(x, row0, wq, bv, yr, oy, o); };
#if defined(__AVX512F__)
    const auto p3 = [&]<int N>(int64_t o) { pair_window<N, 3, R>(x, row0, wq, bv, yr, oy, o); };
    const auto p5 = [&]<int N>(int64_t o) { pair_window<N, 5, R>(x, row0, wq, bv, yr, oy, o); };
    if (c_.kw == 3 && c_.sw == 1) return tiles<12>(p3, ox);
    if (c_.kw == 5 && c_.sw == 1) return tiles<8>(p5, ox);
#endif
    if (c_.kw == 3 && c_.sw == 1) ox = tiles<6>(w3, ox);
    else if (c_.kw == 3 && c_.sw == 2) ox = tiles<4>(w3s2, ox);
    else if (c_.kw == 5 && c_.sw == 1) ox = tiles<4>(w5, ox);
    else if (c_.kw == 5 && c_.sw == 2) ox = tiles<3>(w5s2, ox);
    else
      for (; ox + kTile <= ox_hi_; ox += kTile) pixels<kTile>(x, row0, wq, bv, yr, oy, ox);
    if (ox + 4 <= ox_hi_) pixels<4>(x, row0, wq, bv, yr, oy, ox), ox += 4;
    if (ox + 2 <= ox_hi_) pixels<2>(x, row0, wq, bv, yr, oy, ox), ox += 2;
    return ox;
  }

  // Column ox of output rows [oy, oy + R), into y (output rows from r0):
  // R pixels, each its taps' FMAs in the order pixels() takes them, columns
  // and rows outside the input reading zero (the same bits), R chains
  // sharing each tap's weight.
  template <int R>
  void column(const float* x, int64_t row0, const float* wq, __m256 bv, float* y, int64_t r0, int64_t oy,
              int64_t ox) const {
    __m256 acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = bv;
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t ky = 0; ky < c_.kh; ++ky) {
      // Each row's input row, or a row of zeros where it lies outside.
      const float* xr[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int64_t iy = (oy + r) * c_.sh - c_.ph + ky;
        xr[r] = iy >= 0 && iy < c_.ih ? x + (iy - row0) * c_.iw * kB : zero_row_.data();
      }
      for (int64_t kx = 0; kx < c_.kw; ++kx) {
        const __m256 wv = _mm256_loadu_ps(wq + (ky * c_.kw + kx) * kB);
        const int64_t ix = ox * c_.sw - c_.pw + kx;
        if (ix >= 0 && ix < c_.iw) {
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[r] + ix * kB), wv, acc[r]);
        } else {
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(zero, wv, acc[r]);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      _mm256_storeu_ps(y + ((oy + r - r0) * c_.ow + ox) * kB, fused_ ? clamp_(acc[r]) : acc[r]);
  }

  // Inside tiles of T pixels from ox while they fit, then one of 4 and
  // one of 2 where those fit, each tile.template operator()<N>(column);
  // returns the next column.
  template <int T, class Tile>
  int64_t tiles(const Tile& tile, int64_t ox) const {
    for (; ox + T <= ox_hi_; ox += T) tile.template operator()<T>(ox);
    if constexpr (T > 4) {
      if (ox + 4 <= ox_hi_) tile.template operator()<4>(ox), ox += 4;
    }
    if (ox + 2 <= ox_hi_) tile.template operator()<2>(ox), ox += 2;
    return ox;
  }

  // Output pixels [ox, ox + T) of row oy, every tap column inside the row,
  // a KW-wide window at stride SW: per tap row, its (T - 1) * SW + KW input
  // vectors loaded once and kept in registers for the row's KW taps (T
  // accumulators, the inputs and a weight: at most 15 of AVX2's 16
  // registers). The same FMAs in the same order as pixels(): the same
  // bits.
  template <int T, int KW, int SW>
  void window(const float* x, int64_t row0, const float* wq, __m256 bv, float* yr, int64_t oy, int64_t ox) const {
    constexpr int kIn = (T - 1) * SW + KW;
    __m256 acc[T];
#pragma GCC unroll 8
    for (int i = 0; i < T; ++i) acc[i] = bv;
    const __m256 zero = _mm256_setzero_ps();
    const int64_t ix0 = ox * SW - c_.pw;
    for (int64_t ky = 0; ky < c_.kh; ++ky) {
      const int64_t iy = oy * c_.sh - c_.ph + ky;
      const bool row_in = iy >= 0 && iy < c_.ih;
      __m256 in[kIn];
      if (row_in) {
        const float* xr = x + ((iy - row0) * c_.iw + ix0) * kB;
#pragma GCC unroll 16
        for (int j = 0; j < kIn; ++j) in[j] = _mm256_loadu_ps(xr + j * kB);
      } else {
#pragma GCC unroll 16
        for (int j = 0; j < kIn; ++j) in[j] = zero;
      }
#pragma GCC unroll 5
      for (int kx = 0; kx < KW; ++kx) {
        const __m256 wv = _mm256_loadu_ps(wq + (ky * KW + kx) * kB);
#pragma GCC unroll 8
        for (int i = 0; i < T; ++i) acc[i] = _mm256_fmadd_ps(in[i * SW + kx], wv, acc[i]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < T; ++i) _mm256_storeu_ps(yr + (ox + i) * kB, fused_ ? clamp_(acc[i]) : acc[i]);
  }

#if defined(__AVX512F__)
  // Whether inside() runs pair_window().
  bool pairs() const { return c_.sw == 1 && (c_.kw == 3 || c_.kw == 5); }

  // window<T, KW, 1> on pairs of pixels (stride 1 with AVX-512: a block's
  // pixels are consecutive, so two pixels' 8 channels are one 512-bit
  // vector, and one FMA adds a tap to both), over R output rows from oy
  // (R = 2 at vertical stride 1: each input row loaded once for both).
  template <int T, int KW, int R>
  void pair_window(const float* x, int64_t row0, const float* wq, __m256 bv, float* yr, int64_t oy,
                   int64_t ox) const {
    const int64_t ix0 = ox - c_.pw;
    const auto row = [&](int64_t q) -> const float* {  // input row oy * sh - ph + q at column ix0
      const int64_t iy = oy * c_.sh - c_.ph + q;
      return iy >= 0 && iy < c_.ih ? x + ((iy - row0) * c_.iw + ix0) * kB : nullptr;
    };
    pair_tile<T, KW, R>(row, wq, bv, yr + ox * kB, c_.ow * kB);
  }

  // T output pixels in pairs (two pixels' 8 channels in one 512-bit
  // vector: T / 2 accumulators), over R output rows y + r * ystride, input
  // row q of their windows at row(q) (nullptr: zeros), q from 0 to
  // kh + R - 2. Per input row, the pairs starting at each of its first
  // T + KW - 2 columns (pair i's tap kx is the one at 2i + kx), each one
  // unaligned load, and each tap's weight in both halves. The input rows
  // go in order, so every lane sees window()'s FMAs in the same order:
  // the same bits, half the FMAs, and with R = 2 half the loads.
  template <int T, int KW, int R, class Row>
  void pair_tile(const Row& row, const float* wq, __m256 bv, float* y, int64_t ystride) const {
    static_assert(T % 2 == 0 && (R == 1 || R == 2));
    constexpr int kPairs = T / 2, kIn = T + KW - 2;
    // (The maskz form: GCC 12 warns about the plain one's undefined
    // pass-through operand.)
    const auto both = [](__m256 v) {
      return _mm512_castpd_ps(_mm512_maskz_broadcast_f64x4(static_cast<__mmask8>(0xff), _mm256_castps_pd(v)));
    };
    __m512 acc[R][kPairs];
    const __m512 b2 = both(bv);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int i = 0; i < kPairs; ++i) acc[r][i] = b2;
    const int64_t kh = c_.kh;
    for (int64_t q = 0; q < kh + R - 1; ++q) {
      __m512 in[kIn];
      if (const float* xr = row(q)) {
#pragma GCC unroll 16
        for (int j = 0; j < kIn; ++j) in[j] = _mm512_loadu_ps(xr + j * kB);
      } else {
#pragma GCC unroll 16
        for (int j = 0; j < kIn; ++j) in[j] = _mm512_setzero_ps();
      }
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const int64_t ky = q - r;
        if (ky < 0 || ky >= kh) continue;
#pragma GCC unroll 5
        for (int kx = 0; kx < KW; ++kx) {
          const __m512 wv = both(_mm256_loadu_ps(wq + (ky * KW + kx) * kB));
#pragma GCC unroll 8
          for (int i = 0; i < kPairs; ++i) acc[r][i] = _mm512_fmadd_ps(in[2 * i + kx], wv, acc[r][i]);
        }
      }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int i = 0; i < kPairs; ++i)
        _mm512_storeu_ps(y + r * ystride + 2 * i * kB, fused_ ? clamp_(acc[r][i]) : acc[r][i]);
  }
#endif

  // The widest tile of a row through padded rows: with AVX-512's 32
  // registers 7 (planes of 7, 14, 28, ... wide) or 8 pixels (the inputs a
  // 5x5 window at stride 2 needs for 8 pixels, their sums and a weight:
  // 28), with AVX2's 16, 4. (AVX-512 at stride 1 runs pairs instead.)
#if defined(__AVX512F__)
  static constexpr int kRowTile = 8;
#else
  static constexpr int kRowTile = 4;
#endif

  // Output row yr from padded rows at prow (the row its first tap row
  // reads), in tiles of padded_window().
  template <int KW, int SW>
  void padded_row(const float* prow, int64_t wp, const float* wq, __m256 bv, float* yr) const {
    int64_t ox = 0;
#if defined(__AVX512F__)
    if constexpr (SW == 1) {
      // Stride 1: pairs of pixels (pair_tile), tiles of 8, 4 and 2, then
      // a last pixel alone.
      const auto tile = [&]<int T>() {
        pair_tile<T, KW, 1>([&](int64_t q) { return prow + (q * wp + ox) * kB; }, wq, bv, yr + ox * kB, 0);
        ox += T;
      };
      while (ox + 8 <= c_.ow) tile.template operator()<8>();
      if (ox + 4 <= c_.ow) tile.template operator()<4>();
      if (ox + 2 <= c_.ow) tile.template operator()<2>();
      if (ox < c_.ow) padded_window<1, KW, SW>(prow, wp, wq, bv, yr, ox);
      return;
    }
#endif
    if (kRowTile >= 7 && c_.ow % 7 == 0) {
      for (; ox + 7 <= c_.ow; ox += 7) padded_window<7, KW, SW>(prow, wp, wq, bv, yr, ox);
    } else {
      for (; ox + kRowTile <= c_.ow; ox += kRowTile) padded_window<kRowTile, KW, SW>(prow, wp, wq, bv, yr, ox);
    }
    if (ox + 4 <= c_.ow) padded_window<4, KW, SW>(prow, wp, wq, bv, yr, ox), ox += 4;
    if (ox + 2 <= c_.ow) padded_window<2, KW, SW>(prow, wp, wq, bv, yr, ox), ox += 2;
    if (ox < c_.ow) padded_window<1, KW, SW>(prow, wp, wq, bv, yr, ox);
  }

  // Output pixels [ox, ox + T) of a row through padded rows (every tap
  // inside): per tap row, its (T - 1) * SW + KW inputs loaded once for the
  // row's KW taps. The FMAs of pixels() in its order: the same bits.
  template <int T, int KW, int SW>
  void padded_window(const float* prow, int64_t wp, const float* wq, __m256 bv, float* yr, int64_t ox) const {
    constexpr int kIn = (T - 1) * SW + KW;
    __m256 acc[T];
#pragma GCC unroll 8
    for (int i = 0; i < T; ++i) acc[i] = bv;
    for (int64_t ky = 0; ky < c_.kh; ++ky) {
      const float* xr = prow + (ky * wp + ox * SW) * kB;
      __m256 in[kIn];
#pragma GCC unroll 20
      for (int j = 0; j < kIn; ++j) in[j] = _mm256_loadu_ps(xr + j * kB);
#pragma GCC unroll 5
      for (int kx = 0; kx < KW; ++kx) {
        const __m256 wv = _mm256_loadu_ps(wq + (ky * KW + kx) * kB);
#pragma GCC unroll 8
        for (int i = 0; i < T; ++i) acc[i] = _mm256_fmadd_ps(in[i * SW + kx], wv, acc[i]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < T; ++i) _mm256_storeu_ps(yr + (ox + i) * kB, fused_ ? clamp_(acc[i]) : acc[i]);
  }

  // T output pixels, pixel t's window at base[t] in padded rows of wp
  // vectors, into y (consecutive).
  template <int T>
  void gathered(const float* const* base, int64_t wp, const float* wq, __m256 bv, float* y) const {
    __m256 acc[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t] = bv;
    for (int64_t ky = 0; ky < c_.kh; ++ky)
      for (int64_t kx = 0; kx < c_.kw; ++kx) {
        const __m256 wv = _mm256_loadu_ps(wq + (ky * c_.kw + kx) * kB);
        const int64_t off = (ky * wp + kx) * kB;
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(base[t] + off), wv, acc[t]);
      }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * kB, fused_ ? clamp_(acc[t]) : acc[t]);
  }

  // Output pixels [ox, ox + T) of row oy, every tap column inside the row
  // (rows are checked per tap row).
  template <int T>
  void pixels(const float* x, int64_t row0, const float* wq, __m256 bv, float* yr, int64_t oy, int64_t ox) const {
    __m256 acc[T];
#pragma GCC unroll 8
    for (int i = 0; i < T; ++i) acc[i] = bv;
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t ky = 0; ky < c_.kh; ++ky) {
      const int64_t iy = oy * c_.sh - c_.ph + ky;
      const bool row_in = iy >= 0 && iy < c_.ih;
      const float* xr = row_in ? x + (iy - row0) * c_.iw * kB : x;
      for (int64_t kx = 0; kx < c_.kw; ++kx) {
        const __m256 wv = _mm256_loadu_ps(wq + (ky * c_.kw + kx) * kB);
#pragma GCC unroll 8
        for (int i = 0; i < T; ++i) {
          const int64_t ix = (ox + i) * c_.sw - c_.pw + kx;
          __m256 xv = zero;
          if (row_in) xv = _mm256_loadu_ps(xr + ix * kB);
          acc[i] = _mm256_fmadd_ps(xv, wv, acc[i]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < T; ++i) _mm256_storeu_ps(yr + (ox + i) * kB, fused_ ? clamp_(acc[i]) : acc[i]);
  }

  Conv2d c_;
  Clamp8 clamp_;
  bool fused_ = false;  // a Relu or Clip in registers
  int64_t taps_ = 1;
  int64_t ox_lo_ = 0, ox_hi_ = 0;  // output columns with every tap inside the row
  std::vector<float> wpack_;       // [block][tap][8]
  std::vector<float> zero_row_;    // an input row of zeros, for column()'s rows outside the input
  std::vector<int64_t> window_at_;  // per output pixel: its window's first float in padded rows
};

class BlockedDepthwiseOp : public ROp {
 public:
  // padded: through zero-padded rows in scratch (conv.blocked_padded).
  BlockedDepthwiseOp(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi, bool padded,
                     const KernelParams& p)
      : c_(c), has_bias_(has_bias), epi_(epi), dw_(c, w, epi), padded_(padded) {
    cb_ = c.cout / kB;
    const int64_t planes = c.batch * cb_;
    const PlaneRows t =
        plane_rows(planes, c.oh, 2.0 * static_cast<double>(planes * kB * c.oh * c.ow * c.kh * c.kw), 1 << 20, 1, p);
    pl_ = t.planes, rb_ = t.rows;
    tasks_ = pl_ * rb_;
    set_access({t.access(), Access::kWhole, Access::kWhole, t.access()}, t.access());
    if (padded_)
      scratch_bytes_ = static_cast<size_t>(dw_.padded_h((c.oh + rb_ - 1) / rb_) * dw_.padded_w() * kB) * sizeof(float);
  }
  std::string_view path() const override { return padded_ ? "blocked depthwise padded" : "blocked depthwise"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(dw_.weights())}; }

  void run(int64_t task, const TaskArgs& args) const override {
    int64_t q0, q1, r0, r1;
    task_range(c_.batch * cb_, pl_, task / rb_, &q0, &q1);
    task_range(c_.oh, rb_, task % rb_, &r0, &r1);
    if (r1 <= r0) return;
    const float* x = static_cast<const float*>(args.in[0]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    const int64_t ipl = c_.ih * c_.iw * kB, opl = c_.oh * c_.ow * kB;
    for (int64_t q = q0; q < q1; ++q) {
      if (padded_)
        dw_.padded_rows(x + q * ipl, q % cb_, bias, y + q * opl + r0 * c_.ow * kB, r0, r1,
                        static_cast<float*>(args.scratch));
      else
        dw_.rows(x + q * ipl, 0, q % cb_, bias, y + q * opl + r0 * c_.ow * kB, r0, r1);
      if (!epi_.empty() && !dw_.fused()) {
        const int64_t off = q * opl + r0 * c_.ow * kB;
        epi_.apply(y + off, epi_.residual ? static_cast<const float*>(args.in[3]) + off : nullptr,
                   (r1 - r0) * c_.ow * kB);
      }
    }
  }

 private:
  Conv2d c_;
  bool has_bias_;
  Epilogue epi_;
  Depthwise8 dw_;
  bool padded_;              // through zero-padded rows in scratch (Depthwise8::padded_rows)
  int64_t cb_ = 1;
  int64_t pl_ = 1, rb_ = 1;  // rTasks: ranges of planes x ranges of rows
};

// ------------------------------------------------------ the grouped conv ---

// Groups of a multiple of 8 channels in and out (RegNet's 16), as the NCHW
// grouped direct kernel computes them (grouped_conv.cc) on blocked data: an
// rTask first copies the rows its output rows read of a group's input
// blocks into scratch, zero-padded ([block][row][column][8]), so that taps
// need no bounds; a tile is NV output blocks x T pixels running along the
// flattened output plane, across row ends (a 7 x 7 plane is 9 tiles of 6,
// not rows of 1 + 4 + 1 + 1), its accumulators in registers over all of the
// group's taps in (ci, ky, kx) order: per tap NV weight vectors and one
// broadcast input per pixel. Each output is the NCHW kernel's chain of
// fused multiply-adds from 0, then the bias. rTasks: ranges of (image,
// group) planes, then of rows.
class BlockedGroupedOp : public ROp {
 public:
  BlockedGroupedOp(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi, const KernelParams& p)
      : c_(c), has_bias_(has_bias), epi_(epi) {
    cin_g_ = c.cin / c.group;
    cout_g_ = c.cout / c.group;
    taps_ = cin_g_ * c.kh * c.kw;
    nv_ = cout_g_ % (2 * kB) == 0 ? 2 : 1;
    // Weights: per group, per tile of nv_ output blocks, [tap][nv_ * 8].
    wpack_.resize(static_cast<size_t>(c.cout * taps_));
    for (int64_t co = 0; co < c.cout; ++co) {
      const int64_t g = co / cout_g_, t0 = co % cout_g_ / (nv_ * kB), j = co % (nv_ * kB);
      float* dst = wpack_.data() + ((g * (cout_g_ / (nv_ * kB)) + t0) * taps_) * nv_ * kB + j;
      for (int64_t t = 0; t < taps_; ++t) dst[t * nv_ * kB] = w[co * taps_ + t];
    }
    const PlaneRows t = plane_rows(c.batch * c.group, c.oh,
                                   2.0 * static_cast<double>(c.batch * c.cout * c.oh * c.ow * taps_), 1 << 22, 2, p);
    gb_ = t.planes, rb_ = t.rows;
    tasks_ = gb_ * rb_;
    set_access({t.access(), Access::kWhole, Access::kWhole, t.access()}, t.access());
    if (!epi_.residual) fused_ = clamp_.take(epi_);
    // The padded rows of the tallest row block, per input block.
    const int64_t rows = (c.oh + rb_ - 1) / rb_;
    hp_ = (rows - 1) * c.sh + c.kh;
    wp_ = (c.ow - 1) * c.sw + c.kw;
    for (int64_t ci = 0; ci < cin_g_; ++ci)
      for (int64_t ky = 0; ky < c.kh; ++ky)
        for (int64_t kx = 0; kx < c.kw; ++kx)
          tap_off_.push_back((((ci / kB) * hp_ + ky) * wp_ + kx) * kB + ci % kB);
    scratch_bytes_ = static_cast<size_t>(cin_g_ * hp_ * wp_) * sizeof(float);
  }
  std::string_view path() const override { return "blocked grouped"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(wpack_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    int64_t q0, q1, r0, r1;
    task_range(c_.batch * c_.group, gb_, task / rb_, &q0, &q1);
    task_range(c_.oh, rb_, task % rb_, &r0, &r1);
    if (r1 <= r0) return;
    const float* x = static_cast<const float*>(args.in[0]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* pad = static_cast<float*>(args.scratch);
    const int64_t ipl = c_.ih * c_.iw * kB, opl = c_.oh * c_.ow * kB;
    const int64_t tiles_per_group = cout_g_ / (nv_ * kB);
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n = q / c_.group, g = q % c_.group;
      fill(x + (n * c_.cin + g * cin_g_) / kB * ipl, r0, r1, pad);
      for (int64_t t = 0; t < tiles_per_group; ++t) {
        const int64_t ob = (n * c_.cout + g * cout_g_) / kB + t * nv_;  // first output block
        const float* wt = wpack_.data() + (g * tiles_per_group + t) * taps_ * nv_ * kB;
        const float* bt = bias != nullptr ? bias + g * cout_g_ + t * nv_ * kB : nullptr;
        if (nv_ == 2) tiles<2>(pad, wt, bt, y + ob * opl, r0, r1);
        else tiles<1>(pad, wt, bt, y + ob * opl, r0, r1);
      }
      if (!epi_.empty() && !fused_) {
        const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
        for (int64_t b = 0; b < cout_g_ / kB; ++b) {
          const int64_t off = ((n * c_.cout + g * cout_g_) / kB + b) * opl + r0 * c_.ow * kB;
          epi_.apply(y + off, res != nullptr ? res + off : nullptr, (r1 - r0) * c_.ow * kB);
        }
      }
    }
  }

 private:
  // pad[block][r][col][8] = input (block, r0 * sh - ph + r, col - pw) of the
  // group's blocks at xg, zero outside the plane, for the rows output rows
  // [r0, r1) read.
  void fill(const float* xg, int64_t r0, int64_t r1, float* pad) const {
    const int64_t rows = (r1 - r0 - 1) * c_.sh + c_.kh;
    const int64_t ipl = c_.ih * c_.iw * kB;
    const int64_t x0 = std::min(c_.pw, wp_), x1 = std::clamp(c_.pw + c_.iw, x0, wp_);
    for (int64_t b = 0; b < cin_g_ / kB; ++b)
      for (int64_t r = 0; r < rows; ++r) {
        // A pixel is one vector: the row is vector stores, no masks (on 7 x 7
        // planes library calls per row cost more than the copy).
        float* dst = pad + (b * hp_ + r) * wp_ * kB;
        const int64_t iy = r0 * c_.sh - c_.ph + r;
        const __m256 zero = _mm256_setzero_ps();
        if (iy < 0 || iy >= c_.ih) {
          for (int64_t col = 0; col < wp_; ++col) _mm256_storeu_ps(dst + col * kB, zero);
          continue;
        }
        const float* src = xg + b * ipl + (iy * c_.iw - c_.pw) * kB;
        int64_t col = 0;
        for (; col < x0; ++col) _mm256_storeu_ps(dst + col * kB, zero);
        for (; col < x1; ++col) _mm256_storeu_ps(dst + col * kB, _mm256_loadu_ps(src + col * kB));
        for (; col < wp_; ++col) _mm256_storeu_ps(dst + col * kB, zero);
      }
  }

  // Output rows [r0, r1) of NV blocks (at yb, a plane apart), T pixels at a
  // time along the flattened plane; the last tile repeats its last pixel
  // (computed, not stored).
  template <int NV>
  void tiles(const float* pad, const float* wt, const float* bt, float* yb, int64_t r0, int64_t r1) const {
    constexpr int T = 12 / NV;
    const int64_t p0 = r0 * c_.ow, p1 = r1 * c_.ow, ow = c_.ow, opl = c_.oh * c_.ow * kB;
    for (int64_t t0 = p0; t0 < p1; t0 += T) {
      const int count = static_cast<int>(std::min<int64_t>(T, p1 - t0));
      int64_t off[T];
#pragma GCC unroll 12
      for (int i = 0; i < T; ++i) {
        const int64_t q = t0 + std::min(i, count - 1);
        off[i] = ((q / ow - r0) * c_.sh * wp_ + q % ow * c_.sw) * kB;
      }
      __m256 acc[NV][T];
#pragma GCC unroll 2
      for (int b = 0; b < NV; ++b)
#pragma GCC unroll 12
        for (int i = 0; i < T; ++i) acc[b][i] = _mm256_setzero_ps();
      const float* wp = wt;
      const int64_t taps = taps_;
      const int64_t* tap_off = tap_off_.data();
      for (int64_t t = 0; t < taps; ++t, wp += NV * kB) {
        const float* src = pad + tap_off[t];
        __m256 wv[NV];
#pragma GCC unroll 2
        for (int b = 0; b < NV; ++b) wv[b] = _mm256_loadu_ps(wp + b * kB);
#pragma GCC unroll 12
        for (int i = 0; i < T; ++i) {
          const __m256 xv = _mm256_broadcast_ss(src + off[i]);
#pragma GCC unroll 2
          for (int b = 0; b < NV; ++b) acc[b][i] = _mm256_fmadd_ps(wv[b], xv, acc[b][i]);
        }
      }
#pragma GCC unroll 2
      for (int b = 0; b < NV; ++b) {
        const __m256 bv = bt != nullptr ? _mm256_loadu_ps(bt + b * kB) : _mm256_setzero_ps();
#pragma GCC unroll 12
        for (int i = 0; i < T; ++i) {
          if (i >= count) break;
          __m256 v = acc[b][i];
          if (bt != nullptr) v = _mm256_add_ps(v, bv);
          if (fused_) v = clamp_(v);
          _mm256_storeu_ps(yb + b * opl + (t0 + i) * kB, v);
        }
      }
    }
  }

  Conv2d c_;
  bool has_bias_;
  Epilogue epi_;
  Clamp8 clamp_;
  bool fused_ = false;
  int64_t cin_g_ = 1, cout_g_ = 1, taps_ = 1, nv_ = 1;
  int64_t gb_ = 1, rb_ = 1;
  int64_t hp_ = 1, wp_ = 1;        // the padded rows in scratch
  std::vector<int64_t> tap_off_;   // per tap (ci, ky, kx): its offset in the padded rows
  std::vector<float> wpack_;       // [group][tile][tap][nv_ * 8]
};

// ------------------------------------------------------------ factories ---

Result<std::unique_ptr<ROp>> make_relayout(const Node& n, const KernelParams& p) {
  const bool to = n.op_type == "TesseraToBlocked";
  const Shape& s = to ? n.inputs[0]->shape : n.outputs[0]->shape;  // [N, C, H, W]
  if (s.rank() != 4 || s[1] % kB != 0 || (to ? n.outputs[0]->shape[4] : n.inputs[0]->shape[4]) != kB)
    return invalid_argument(str_cat(n.label(), ": the cpu rKernel takes blocks of ", kB, " channels"));
  return std::unique_ptr<ROp>(new RelayoutOp(to, s[0], s[1], s[2] * s[3], p));
}

// A blocked conv node's geometry (in NCHW terms).
Result<Conv2d> blocked_conv2d(const Node& n) {
  const Shape& xb = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  if (xb[4] != kB) return invalid_argument(str_cat(n.label(), ": the cpu rKernel takes blocks of ", kB, " channels"));
  const Shape x{xb[0], xb[1] * kB, xb[2], xb[3]};
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, x, {w[2], w[3]}));
  auto c = conv2d_from(g, x, w[0], n.attr_int("group", 1));
  if (!c.ok()) return c.status().with_context(n.label());
  return *c;
}
bool is_depthwise(const Conv2d& c) { return c.group == c.cin && c.cout == c.cin && c.group > 1; }

// A whole padded plane above this stays on the unpadded path: its scratch
// would pass the L2, and a wide plane's edge columns are few.
constexpr int64_t kMaxPaddedPlaneBytes = 256 << 10;

bool fits_blocked_padded(const Node& n) {
  const Result<Conv2d> c = blocked_conv2d(n);
  if (!c.ok() || !is_depthwise(*c)) return false;
  const int64_t wp = (c->ow - 1) * c->sw + c->kw, hp = (c->oh - 1) * c->sh + c->kh;
  return wp * hp * kB * static_cast<int64_t>(sizeof(float)) <= kMaxPaddedPlaneBytes;
}

Result<std::unique_ptr<ROp>> make_blocked(const Node& n, const KernelParams& p, bool padded) {
  TESSERA_ASSIGN_OR_RETURN(Conv2d c, blocked_conv2d(n));
  const Value* wv = n.inputs[1];
  if (!wv->is_constant() || wv->dtype != DType::kFloat32)
    return invalid_argument(str_cat(n.label(), ": the blocked conv takes constant float32 weights"));
  if (padded && !fits_blocked_padded(n))
    return invalid_argument(str_cat(n.label(), ": conv.blocked_padded takes depthwise convs whose padded plane is ",
                                    kMaxPaddedPlaneBytes >> 10, " KB or less"));
  TESSERA_ASSIGN_OR_RETURN(Epilogue epi, Epilogue::from_node(n));
  const float* wd = wv->constant->data<float>();
  const bool bias = n.input(2) != nullptr;
  if (c.group == 1) return make_blocked_pointwise(c, wd, bias, epi, p);
  if (is_depthwise(c)) return std::unique_ptr<ROp>(new BlockedDepthwiseOp(c, wd, bias, epi, padded, p));
  return std::unique_ptr<ROp>(new BlockedGroupedOp(c, wd, bias, epi, p));
}
Result<std::unique_ptr<ROp>> make_blocked_conv(const Node& n, const KernelParams& p) { return make_blocked(n, p, false); }
Result<std::unique_ptr<ROp>> make_blocked_padded(const Node& n, const KernelParams& p) {
  return make_blocked(n, p, true);
}

const RKernel kKernels[] = {
    {"TesseraToBlocked", "layout.to_blocked", "NCHW to blocks of 8 channels, 8 x 8 transposes in registers",
     make_relayout},
    {"TesseraFromBlocked", "layout.from_blocked", "blocks of 8 channels to NCHW, 8 x 8 transposes in registers",
     make_relayout},
    {"TesseraBlockedConv", "conv.blocked", "1x1, depthwise or grouped conv on blocks of 8 channels, its epilogue fused",
     make_blocked_conv},
    // Chosen by measurement (compiler/variants.h) where it beats the above.
    {"TesseraBlockedConv", "conv.blocked_padded",
     "depthwise conv on blocks of 8 channels through zero-padded planes: 8 pixels at a time, edges included",
     make_blocked_padded, fits_blocked_padded},
};
#endif  // TESSERA_BLOCKED

}  // namespace

std::span<const RKernel> blocked_kernels() {
#if defined(TESSERA_BLOCKED)
  return kKernels;
#else
  return {};
#endif
}

}  // namespace tessera
