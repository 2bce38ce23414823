// The channel-blocked 1x1 conv (blocked.h, blocked.cc): a GEMM over runs
// of pixels per channel block, each output the chain of fused
// multiply-adds over the input channels in order from 0, then the bias,
// the residual and a Relu or Clip in registers (packed_gemm_post's order),
// any other activation on the stored outputs: the packed NCHW 1x1's bits.
#include "kernels/cpu/blocked.h"

#include <algorithm>
#include <vector>

namespace tessera {
#if defined(TESSERA_BLOCKED)
namespace {

// --------------------------------------------------------- the 1x1 conv ---

// A 1x1 conv's arithmetic on blocked planes: the weights packed per pair
// of output blocks, and run() over a range of output pixels and of pairs
// of output blocks, of planes that lie any distance apart.
class Pointwise8 {
 public:
  static constexpr int64_t kChunkAlign = 12;  // 6- and 12-pixel tiles both end on it

  // w: [m][k] (a 1x1 conv's weight). Output pixel q reads input pixel
  // (q / ow * sh, q % ow * sw) of a plane iw wide.
  Pointwise8(const float* w, int64_t k, int64_t m, const Epilogue& epi, int64_t ow, int64_t iw, int64_t sh,
             int64_t sw)
      : k_(k), m_(m), strided_(sh != 1 || sw != 1), ow_(ow), iw_(iw), sh_(sh), sw_(sw) {
    // AVX2: output blocks in pairs, a tile of 2 x 6 pixels in 12
    // accumulators (with the pair's weights and a broadcast: 15 of the 16
    // registers; 3 x 4 tiles spilled and ran at two thirds the speed), a
    // last block alone x 12 pixels where the count is odd. AVX-512: blocks
    // in fours, a pair's 16 channels one 512-bit vector, a tile of 4 x 12
    // pixels in 24 of the 32 registers (half the broadcasts per multiply-add of
    // 2 x 6); then a pair, then one block, as AVX2 runs them. At a stride
    // the pixels' 12 offsets would not stay in registers: pairs.
    //
    // The groups are formed in run(), from the pairs asked for. The
    // weights in units of the widest group, [unit][k][8 x its blocks]; a
    // pair [k][16] where 2 or 3 blocks are left, then a block alone
    // [k][8]. (Transposed whole, [k][m], a 4-block tile's weights lay a
    // row of m apart: with m = 400 such convs ran 1.3x slower; in pairs,
    // two streams, 1.04x.)
    wide_ = strided_ ? 2 : kWideBlocks;
    const int64_t mb = m_ / kB;
    full_ = mb / wide_ * wide_;
    auto pack = [&](int64_t ob, int64_t nb) {
      for (int64_t ci = 0; ci < k_; ++ci)
        for (int64_t b = ob; b < ob + nb; ++b)
          for (int64_t j = 0; j < kB; ++j) wpack_.push_back(w[(b * kB + j) * k_ + ci]);
    };
    for (int64_t ob = 0; ob < full_; ob += wide_) pack(ob, wide_);
    if (mb - full_ >= 2) pack(full_, 2);
    if ((mb - full_) % 2 == 1) pack(mb - 1, 1);
    // Pixels per chunk: its input (all k channels) about 32 KB, whole
    // tiles of the widest tile (12 pixels).
    chunk_ = std::max<int64_t>(kChunkAlign, (int64_t{8} << 10) / k_ / kChunkAlign * kChunkAlign);
    clamp_.take(epi);
    rest_ = epi;
    rest_.residual = false;
    if (clamp_.on) rest_.act = Epilogue::Act::kNone;
  }
  bool strided() const { return strided_; }
  const std::vector<float>& weights() const { return wpack_; }
  int64_t blocks() const { return m_ / kB; }
  // Blocks per unit of packed weights: a range of blocks that starts at a
  // multiple of it runs in its widest tiles.
  int64_t unit() const { return wide_; }

  // Output pixels [p0, p1) of blocks [b0, b1) (b0 even): x's channel blocks x_plane
  // floats apart, y's (and the residual's, when given) y_plane apart;
  // bias, residual and a Relu or Clip in registers, any other activation
  // on the stored outputs.
  void run(const float* x, int64_t x_plane, const float* bias, const float* res, float* y, int64_t y_plane,
           int64_t p0, int64_t p1, int64_t b0, int64_t b1) const {
    for (int64_t c0 = p0, c1; c0 < p1; c0 = c1) {
      c1 = std::min(p1, c0 + chunk_);
      if (p1 - c1 < kChunkAlign) c1 = p1;  // the last chunk takes a rest shorter than a tile
      for (int64_t ob = b0, nb; ob < b1; ob += nb) {
        // 4 blocks where a unit of them starts here; else a pair (ob is
        // even: both in one unit, or the pair left); else one.
        nb = wide_ == 4 && ob % 4 == 0 && ob + 4 <= std::min(full_, b1) ? 4 : ob + 2 <= b1 ? 2 : 1;
        const Group gr = group(ob, nb);
#if defined(__AVX512F__)
        if (gr.nb == 4) {  // never at a stride
          wide_tiles(x, x_plane, gr, bias, res, y, y_plane, c0, c1);
          continue;
        }
#endif
        // (The weights' step a constant: a step in a register ran a 1-block
        // conv 1.12x slower.)
        if (gr.nb == 1) {
          if (strided_) tiles<1, 12, true, kB>(x, x_plane, gr, bias, res, y, y_plane, c0, c1);
          else tiles<1, 12, false, kB>(x, x_plane, gr, bias, res, y, y_plane, c0, c1);
        } else if (strided_) {
          tiles<2, 6, true, 2 * kB>(x, x_plane, gr, bias, res, y, y_plane, c0, c1);
        } else if (gr.step == 2 * kB) {
          tiles<2, 6, false, 2 * kB>(x, x_plane, gr, bias, res, y, y_plane, c0, c1);
        } else {
          tiles<2, 6, false, 4 * kB>(x, x_plane, gr, bias, res, y, y_plane, c0, c1);  // in a unit of 4
        }
      }
    }
    if (rest_.act != Epilogue::Act::kNone)
      for (int64_t ob = b0; ob < b1; ++ob) rest_.apply(y + ob * y_plane + p0 * kB, nullptr, (p1 - p0) * kB);
  }

 private:
  struct Group {
    int64_t ob, nb;    // first output block, blocks
    const float* w;    // its weights for input channel 0
    int64_t step;      // floats from one input channel's weights to the next
  };
  Group group(int64_t ob, int64_t nb) const {
    const float* w = wpack_.data();
    if (ob < full_) return {ob, nb, w + (ob / wide_) * k_ * wide_ * kB + (ob % wide_) * kB, wide_ * kB};
    const int64_t left = m_ / kB - full_;
    w += full_ * k_ * kB;
    if (left >= 2 && ob < full_ + 2) return {ob, nb, w + (ob - full_) * kB, 2 * kB};
    return {ob, nb, w + (left >= 2 ? 2 * kB * k_ : 0), kB};
  }

#if defined(__AVX512F__)
  static constexpr int64_t kWideBlocks = 4;
  static constexpr int kWidePixels = 12;

  // A group of 4 blocks: pixels [c0, c1) in as few tiles of at most 12
  // as there can be, of sizes that differ by one at most (13 pixels: 7
  // and 6, not 12 and a pixel alone, a chain of dependent FMAs).
  void wide_tiles(const float* x, int64_t x_plane, const Group& gr, const float* bias, const float* res, float* y,
                  int64_t y_plane, int64_t c0, int64_t c1) const {
    const int64_t n = (c1 - c0 + kWidePixels - 1) / kWidePixels, base = (c1 - c0) / n;
    int64_t p = c0;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t np = base + (t < (c1 - c0) % n ? 1 : 0);
      if (np == kWidePixels) wide_tile<kWidePixels>(x, x_plane, gr, bias, res, y, y_plane, p);
      else wide_rest(x, x_plane, gr, bias, res, y, y_plane, p, static_cast<int>(np));
      p += np;
    }
  }
  template <int NP = kWidePixels - 1>
  void wide_rest(const float* x, int64_t x_plane, const Group& gr, const float* bias, const float* res, float* y,
                 int64_t y_plane, int64_t p, int n) const {
    if constexpr (NP >= 1) {
      if (n == NP) return wide_tile<NP>(x, x_plane, gr, bias, res, y, y_plane, p);
      wide_rest<NP - 1>(x, x_plane, gr, bias, res, y, y_plane, p, n);
    }
  }

  // Output pixels [p, p + NP) of a group of 4 blocks: per input channel 2
  // weight vectors (blocks ob, ob + 1 and ob + 2, ob + 3), NP broadcasts,
  // 2 x NP FMAs; each lane the same chain as tile()'s.
  template <int NP>
  void wide_tile(const float* x, int64_t x_plane, const Group& gr, const float* bias, const float* res, float* y,
                 int64_t y_plane, int64_t p) const {
    __m512 acc[2][NP];
#pragma GCC unroll 12
    for (int i = 0; i < NP; ++i) acc[0][i] = acc[1][i] = _mm512_setzero_ps();
    const float* wp = gr.w;
    const float* xp = x + p * kB;
    for (int64_t cb = 0; cb < k_ / kB; ++cb, xp += x_plane) {
#pragma GCC unroll 1
      for (int j = 0; j < kB; ++j, wp += 4 * kB) {
        __m512 w0 = _mm512_loadu_ps(wp), w1 = _mm512_loadu_ps(wp + 2 * kB);
        asm("" : "+v"(w0), "+v"(w1));
#pragma GCC unroll 12
        for (int i = 0; i < NP; ++i) {
          const __m512 xv = _mm512_set1_ps(xp[i * kB + j]);
          acc[0][i] = _mm512_fmadd_ps(w0, xv, acc[0][i]);
          acc[1][i] = _mm512_fmadd_ps(w1, xv, acc[1][i]);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int64_t ob = gr.ob + 2 * h;
      const __m512 bv = bias != nullptr ? _mm512_loadu_ps(bias + ob * kB) : _mm512_setzero_ps();
#pragma GCC unroll 12
      for (int i = 0; i < NP; ++i) {
        const int64_t at = ob * y_plane + (p + i) * kB;
        __m512 v = acc[h][i];
        if (bias != nullptr) v = _mm512_add_ps(v, bv);
        if (res != nullptr) v = _mm512_add_ps(v, join(_mm256_loadu_ps(res + at), _mm256_loadu_ps(res + at + y_plane)));
        if (clamp_.on) v = clamp_(v);
        _mm256_storeu_ps(y + at, lower(v));
        _mm256_storeu_ps(y + at + y_plane, upper(v));
      }
    }
  }
  static __m512 join(__m256 lo, __m256 hi) {
    const __m512d l = _mm512_maskz_insertf64x4(0xff, _mm512_setzero_pd(), _mm256_castps_pd(lo), 0);
    return _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xff, l, _mm256_castps_pd(hi), 1));
  }
  static __m256 lower(__m512 v) { return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 0)); }
  static __m256 upper(__m512 v) { return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 1)); }
#else
  static constexpr int64_t kWideBlocks = 2;
#endif

  // Pixels [c0, c1) of the group's output blocks, NP at a time, then the
  // rest in one tile (not one at a time: a pixel alone is a chain of
  // dependent FMAs).
  template <int NB, int NP, bool kStrided, int64_t kStep>
  void tiles(const float* x, int64_t x_plane, const Group& gr, const float* bias, const float* res, float* y,
             int64_t y_plane, int64_t c0, int64_t c1) const {
    int64_t p = c0;
    for (; p + NP <= c1; p += NP) tile<NB, NP, kStrided, kStep>(x, x_plane, gr, bias, res, y, y_plane, p);
    if (p < c1) rest<NB, NP - 1, kStrided, kStep>(x, x_plane, gr, bias, res, y, y_plane, p, static_cast<int>(c1 - p));
  }
  template <int NB, int NP, bool kStrided, int64_t kStep>
  void rest(const float* x, int64_t x_plane, const Group& gr, const float* bias, const float* res, float* y,
            int64_t y_plane, int64_t p, int n) const {
    if constexpr (NP >= 1) {
      if (n == NP) return tile<NB, NP, kStrided, kStep>(x, x_plane, gr, bias, res, y, y_plane, p);
      rest<NB, NP - 1, kStrided, kStep>(x, x_plane, gr, bias, res, y, y_plane, p, n);
    }
  }

  // Output pixels [p, p + NP) of the group's blocks.
  template <int NB, int NP, bool kStrided, int64_t kStep>
  void tile(const float* x, int64_t x_plane, const Group& gr, const float* bias, const float* res, float* y,
            int64_t y_plane, int64_t p) const {
    __m256 acc[NB][NP];
#pragma GCC unroll 3
    for (int b = 0; b < NB; ++b)
#pragma GCC unroll 12
      for (int i = 0; i < NP; ++i) acc[b][i] = _mm256_setzero_ps();
    // One input channel a step: NB weight vectors (kept in registers: left
    // to itself GCC re-loaded them inside the FMAs of an unrolled step and
    // spilled), NP broadcasts, NB x NP FMAs.
    const float* wp = gr.w;
    int64_t off[NP];
#pragma GCC unroll 12
    for (int i = 0; i < NP; ++i)
      off[i] = kStrided ? ((p + i) / ow_ * sh_ * iw_ + (p + i) % ow_ * sw_) * kB : (p + i) * kB;
    const float* xp = x;
    for (int64_t cb = 0; cb < k_ / kB; ++cb, xp += x_plane) {
#pragma GCC unroll 1
      for (int j = 0; j < kB; ++j, wp += kStep) {
        __m256 wv[NB];
#pragma GCC unroll 3
        for (int b = 0; b < NB; ++b) {
          wv[b] = _mm256_loadu_ps(wp + b * kB);
          asm("" : "+x"(wv[b]));
        }
#pragma GCC unroll 12
        for (int i = 0; i < NP; ++i) {
          const __m256 xv = _mm256_broadcast_ss(xp + off[i] + j);
#pragma GCC unroll 3
          for (int b = 0; b < NB; ++b) acc[b][i] = _mm256_fmadd_ps(wv[b], xv, acc[b][i]);
        }
      }
    }
#pragma GCC unroll 3
    for (int b = 0; b < NB; ++b) {
      const int64_t ob = gr.ob + b;
      const __m256 bv = bias != nullptr ? _mm256_loadu_ps(bias + ob * kB) : _mm256_setzero_ps();
#pragma GCC unroll 12
      for (int i = 0; i < NP; ++i) {
        const int64_t at = ob * y_plane + (p + i) * kB;
        __m256 v = acc[b][i];
        if (bias != nullptr) v = _mm256_add_ps(v, bv);
        if (res != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(res + at));
        if (clamp_.on) v = clamp_(v);
        _mm256_storeu_ps(y + at, v);
      }
    }
  }

  int64_t k_, m_;
  Clamp8 clamp_;
  Epilogue rest_;  // the activation left for a pass over the stored outputs
  bool strided_;
  int64_t ow_, iw_, sh_, sw_;
  std::vector<float> wpack_;
  int64_t wide_ = 2, full_ = 0;  // blocks per unit of packed weights; blocks in whole units
  int64_t chunk_ = kChunkAlign;
};

class BlockedPointwiseOp : public ROp {
 public:
  BlockedPointwiseOp(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi, const KernelParams& p)
      : n_(c.batch), k_(c.cin), m_(c.cout), px_(c.oh * c.ow), in_px_(c.ih * c.iw), has_bias_(has_bias),
        residual_(epi.residual), pw_(w, c.cin, c.cout, epi, c.ow, c.iw, c.sh, c.sw) {
    const double flops = 2.0 * static_cast<double>(n_ * m_ * px_ * k_);
    const int64_t target = p.tasks > 0 ? p.tasks
                                       : std::clamp<int64_t>(static_cast<int64_t>(flops / kConvFlopsPerTask), 1,
                                                             kMaxDefaultTasks);
    // Output blocks split in units of the widest tile's blocks where there
    // are enough of them, else in pairs.
    const int64_t blocks = pw_.blocks(), per_image = std::max<int64_t>(1, (target + n_ - 1) / n_);
    ub_ = (blocks + pw_.unit() - 1) / pw_.unit() >= per_image ? pw_.unit() : 2;
    const int64_t groups = (blocks + ub_ - 1) / ub_;
    const int64_t pixel_tiles = std::max<int64_t>(1, px_ / Pointwise8::kChunkAlign);
    // Pixels first; ranges of units of output blocks where the plane runs
    // out of tiles, or where the weights outweigh it (every pixel block
    // reads all of them).
    if (m_ > px_ && per_image > 1) {
      gb_ = std::clamp<int64_t>(per_image, 1, groups);
      pb_ = std::clamp<int64_t>(per_image / gb_, 1, pixel_tiles);
    } else {
      pb_ = std::clamp<int64_t>(per_image, 1, pixel_tiles);
      gb_ = std::clamp<int64_t>(per_image / pb_, 1, groups);
    }
    if (n_ >= target) pb_ = gb_ = 1;
    tasks_ = n_ * pb_ * gb_;
    set_access({Access::kSpread, Access::kWhole, Access::kWhole, Access::kSpread}, Access::kSpread);
  }
  std::string_view path() const override { return pw_.strided() ? "blocked 1x1 strided" : "blocked 1x1"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(pw_.weights())}; }

  void run(int64_t task, const TaskArgs& args) const override {
    const int64_t img = task / (pb_ * gb_), rest = task % (pb_ * gb_);
    int64_t p0, p1, g0, g1;
    task_range(px_, pb_, rest / gb_, &p0, &p1);
    task_range((pw_.blocks() + ub_ - 1) / ub_, gb_, rest % gb_, &g0, &g1);
    if (p1 <= p0 || g1 <= g0) return;
    // Tile boundaries at multiples of kChunkAlign within the image.
    if (pb_ > 1) {
      p0 = p0 / Pointwise8::kChunkAlign * Pointwise8::kChunkAlign;
      p1 = rest / gb_ + 1 == pb_ ? px_ : p1 / Pointwise8::kChunkAlign * Pointwise8::kChunkAlign;
      if (p1 <= p0) return;
    }
    const float* x = static_cast<const float*>(args.in[0]) + img * k_ * in_px_;
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    const float* res = residual_ ? static_cast<const float*>(args.in[3]) + img * m_ * px_ : nullptr;
    float* y = static_cast<float*>(args.out[0]) + img * m_ * px_;
    pw_.run(x, in_px_ * kB, bias, res, y, px_ * kB, p0, p1, g0 * ub_, std::min(pw_.blocks(), g1 * ub_));
  }

 private:
  int64_t n_, k_, m_, px_, in_px_;
  bool has_bias_, residual_;
  Pointwise8 pw_;
  int64_t pb_ = 1, gb_ = 1;  // rTasks per image: pixel blocks x ranges of units of output blocks
  int64_t ub_ = 2;           // output blocks per unit
};

}  // namespace

std::unique_ptr<ROp> make_blocked_pointwise(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                            const KernelParams& p) {
  return std::unique_ptr<ROp>(new BlockedPointwiseOp(c, w, has_bias, epi, p));
}
#endif

}  // namespace tessera
