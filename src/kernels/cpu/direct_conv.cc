// Direct convolution for few input channels: the stems of CNNs (3 input
// channels, 3x3 or 7x7, stride 2). im2col makes those a GEMM with a tiny K
// (27 or 147) whose gather costs as much as the multiply: 70-160 GFLOP/s.
// Here every input vector loaded feeds 8 output channels at once and the
// output tile's 8 x B accumulators stay in registers over all taps
// (simd.h: B <= 3 vectors of 16 with AVX-512, B = 1 vector of 8 with AVX2).
//
// Per output row, the input rows it reads are first copied into a panel,
// zero-padded and split by column phase: panel[ci][ky][phase][q] holds
// input column q * stride + phase - pad (0 outside the row). Output column
// ox's tap kx is then panel[ci][ky][kx % stride][ox + kx / stride], so
// every tap of a vector of outputs is one unaligned load: no masks, no
// permutes in the inner loop. The copy is ~3% of the multiply-adds.
//
// An output tile is one row, 8 output channels and B vectors of columns;
// taps are added in (ci, ky, kx) order, weights packed
// [block][ci][ky][kx][8] when the op is made. The bias is added after the
// sum, as the im2col path does; a fused Relu or Clip is applied before the
// store, any other epilogue to the stored rows.
//
// rTasks are blocks of output rows (of one image).
#include <algorithm>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/simd.h"

namespace tessera {
namespace {

#if defined(TESSERA_SIMD)
using simd::Vec;
constexpr double kFlopsPerTask = 1 << 22;
constexpr int64_t kMaxTaps = 160;  // cin * kh * kw
constexpr int64_t kMaxCin = 4;
constexpr int kCb = 8;             // output channels per packed weight block
constexpr int64_t kLanes = Vec::kLanes;
// Output channels per tile (of a weight block) and up to kMaxB vectors of
// columns: kTileC x B accumulators, B inputs and a weight in the
// registers. With AVX2, 4 x 3 (8 x 1, 9 loads per 8 FMAs, ran ResNet-18's
// 7x7 stem at 22 GFLOP/s).
constexpr int kTileC = Vec::kRegisters >= 32 ? 8 : 4;
constexpr int kMaxB = 3;

class DirectConvOp : public ROp {
 public:
  DirectConvOp(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi, const KernelParams& p)
      : c_(c), has_bias_(has_bias), epi_(epi) {
    blocks_ = (c.cout + kCb - 1) / kCb;
    taps_ = c.cin * c.kh * c.kw;
    wpack_.assign(static_cast<size_t>(blocks_ * taps_ * kCb), 0.f);
    for (int64_t co = 0; co < c.cout; ++co)
      for (int64_t t = 0; t < taps_; ++t)
        wpack_[static_cast<size_t>(((co / kCb) * taps_ + t) * kCb + co % kCb)] = w[co * taps_ + t];
    nblk_ = (c.ow + kLanes - 1) / kLanes;
    // Panel rows: whole vectors, wide enough for the last block's
    // last tap.
    pwid_ = (nblk_ * kLanes + (c.kw - 1) / c.sw + kLanes) / kLanes * kLanes;
    for (int64_t ci = 0; ci < c.cin; ++ci)
      for (int64_t ky = 0; ky < c.kh; ++ky)
        for (int64_t kx = 0; kx < c.kw; ++kx)
          off_.push_back(static_cast<int32_t>(((ci * c.kh + ky) * c.sw + kx % c.sw) * pwid_ + kx / c.sw));
    const double flops = 2.0 * c.batch * c.cout * c.oh * c.ow * taps_;
    const int64_t target =
        p.tasks > 0 ? p.tasks
                    : std::clamp<int64_t>(static_cast<int64_t>(flops / kFlopsPerTask), 2, kMaxDefaultTasks);
    rb_ = std::clamp<int64_t>((target + c.batch - 1) / c.batch, 1, c.oh);
    tasks_ = c.batch * rb_;
    scratch_bytes_ = static_cast<size_t>(c.cin * c.kh * c.sw * pwid_) * sizeof(float);
    // Relu or Clip with no residual: applied in registers before the
    // store, with the unfused ops' expressions lane by lane (Relu maps NaN
    // to 0, Clip keeps it).
    clamp_.take(epi);
  }

  std::string_view path() const override { return "direct"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(wpack_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    const float* x = static_cast<const float*>(args.in[0]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* panel = static_cast<float*>(args.scratch);
    const int64_t n = task / rb_;
    int64_t r0, r1;
    task_range(c_.oh, rb_, task % rb_, &r0, &r1);
    for (int64_t oy = r0; oy < r1; ++oy) {
      if (c_.sw == 1) fill_panel<1>(x, n, oy, panel);
      else fill_panel<2>(x, n, oy, panel);
      for (int64_t k = 0; k < blocks_; ++k)
        for (int c0 = 0; c0 < kCb && k * kCb + c0 < c_.cout; c0 += kTileC)
          for (int64_t blk = 0; blk < nblk_;) {
            // Tiles of 3 blocks, but 2 + 2 rather than 3 + 1 at the end: a
            // 1-block tile has too few accumulators to keep the FMAs busy.
            const int64_t left = nblk_ - blk;
            const int64_t nb = left == 4 ? 2 : std::min<int64_t>(kMaxB, left);
            if (nb == 3) tile<3>(panel, bias, y, n, oy, k, c0, blk);
            else if (nb == 2) tile<2>(panel, bias, y, n, oy, k, c0, blk);
            else tile<1>(panel, bias, y, n, oy, k, c0, blk);
            blk += nb;
          }
    }
    if (!epi_.empty() && !clamp_.on) {
      const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
      for (int64_t co = 0; co < c_.cout; ++co) {
        const int64_t off = ((n * c_.cout + co) * c_.oh + r0) * c_.ow;
        epi_.apply(y + off, res != nullptr ? res + off : nullptr, (r1 - r0) * c_.ow);
      }
    }
  }

 private:
  // The panel of output row oy: for each (ci, ky, phase), pwid_ columns
  // q holding input column q * S + phase - pw of input row oy * sh - ph +
  // ky, zero outside the plane. Stride 2 loads 2 vectors of consecutive
  // inputs per vector of columns and keeps the lanes of its phase.
  template <int S>
  void fill_panel(const float* x, int64_t n, int64_t oy, float* panel) const {
    const int64_t iw = c_.iw;
    for (int64_t ci = 0; ci < c_.cin; ++ci)
      for (int64_t ky = 0; ky < c_.kh; ++ky) {
        const int64_t iy = oy * c_.sh - c_.ph + ky;
        float* dst = panel + (ci * c_.kh + ky) * S * pwid_;
        if (iy < 0 || iy >= c_.ih) {
          std::fill(dst, dst + S * pwid_, 0.f);
          continue;
        }
        const float* row = x + ((n * c_.cin + ci) * c_.ih + iy) * iw;
        for (int64_t q = 0; q < pwid_; q += kLanes) {
          if constexpr (S == 1) {
            const int64_t a = q - c_.pw;
            Vec::store(dst + q, Vec::load(row + a, Vec::from_bits(lane_bits(-a, iw - a))));
          } else {
            const int64_t a = 2 * q - c_.pw;  // input column of lane 0, phase 0
            const uint32_t m = lane_bits(-a, iw - a);
            const Vec::T lo = Vec::load(row + a, Vec::from_bits(m));
            const Vec::T hi = Vec::load(row + a + kLanes, Vec::from_bits(m >> kLanes));
            Vec::T even, odd;
            Vec::deinterleave(lo, hi, &even, &odd);
            Vec::store(dst + q, even);
            Vec::store(dst + pwid_ + q, odd);
          }
        }
      }
  }

  // Channels c0 .. c0 + kTileC - 1 of weight block k.
  template <int B>
  void tile(const float* panel, const float* bias, float* y, int64_t n, int64_t oy, int64_t k, int c0,
            int64_t blk0) const {
    const float* wk = wpack_.data() + k * taps_ * kCb + c0;
    const int32_t* off = off_.data();
    const float* base = panel + blk0 * kLanes;
    const int64_t taps = taps_;
    Vec::T acc[kTileC][B];
#pragma GCC unroll 8
    for (int c = 0; c < kTileC; ++c)
#pragma GCC unroll 3
      for (int j = 0; j < B; ++j) acc[c][j] = Vec::zero();
    for (int64_t t = 0; t < taps; ++t) {
      const float* src = base + off[t];
      const float* wt = wk + t * kCb;
      // B inputs, then one weight at a time: kTileC x B accumulators, B
      // inputs and one weight fit the vector registers (all the weights
      // held at once would spill an accumulator). The inputs are kept in
      // registers, not folded into each FMA as loads.
      Vec::T v[B];
#pragma GCC unroll 3
      for (int j = 0; j < B; ++j) {
        v[j] = Vec::load(src + j * kLanes);
        if constexpr (Vec::kRegisters < 32) asm("" : "+x"(v[j]));
      }
#pragma GCC unroll 8
      for (int c = 0; c < kTileC; ++c) {
        const Vec::T w = Vec::set1(wt[c]);
#pragma GCC unroll 3
        for (int j = 0; j < B; ++j) acc[c][j] = Vec::fma(w, v[j], acc[c][j]);
      }
    }
    const int64_t ow = c_.ow;
#pragma GCC unroll 8
    for (int c = 0; c < kTileC; ++c) {
      const int64_t co = k * kCb + c0 + c;
      if (co >= c_.cout) break;
      const Vec::T b = Vec::set1(bias != nullptr ? bias[co] : 0.f);
      float* out = y + ((n * c_.cout + co) * c_.oh + oy) * ow;
#pragma GCC unroll 3
      for (int j = 0; j < B; ++j) {
        const int64_t ox = (blk0 + j) * kLanes, count = std::min<int64_t>(kLanes, ow - ox);
        Vec::T v = bias != nullptr ? Vec::add(acc[c][j], b) : acc[c][j];
        if (clamp_.on) v = clamp_(v);
        if (count == kLanes) Vec::store(out + ox, v);
        else Vec::store(out + ox, Vec::first(count), v);
      }
    }
  }

  Conv2d c_;
  bool has_bias_;
  Epilogue epi_;
  RegisterClamp clamp_;  // Relu or Clip fused into the store
  int64_t blocks_ = 0, taps_ = 0, nblk_ = 0, pwid_ = 0, rb_ = 1;
  std::vector<float> wpack_;   // [block][ci][ky][kx][kCb]
  std::vector<int32_t> off_;   // per tap (ci, ky, kx): its panel offset for output column 0
};
#endif

}  // namespace

bool direct_conv_fits(const Conv2d& c) {
#if defined(TESSERA_SIMD)
  return c.group == 1 && c.cin <= kMaxCin && c.cin * c.kh * c.kw <= kMaxTaps && c.dh == 1 && c.dw == 1 &&
         (c.sw == 1 || c.sw == 2) && c.cout >= kCb;
#else
  (void)c;
  return false;
#endif
}

std::unique_ptr<ROp> make_direct_conv(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                      const KernelParams& p) {
#if defined(TESSERA_SIMD)
  return std::unique_ptr<ROp>(new DirectConvOp(c, w, has_bias, epi, p));
#else
  (void)c, (void)w, (void)has_bias, (void)epi, (void)p;
  return nullptr;
#endif
}

}  // namespace tessera
