// Direct convolution for grouped convs with few channels per group
// (RegNet's and ResNeXt's 3x3 convs: 4 to 64 channels per group). As
// im2col and one GEMM per group they are GEMMs 16 rows tall, gathered,
// packed and multiplied a group at a time (regnet_x_400mf's 400-channel,
// 25-group conv on 7x7 ran at 44 GFLOP/s of AVX2's 95 on one thread, and
// at half that inside the whole model, where its weights come from
// memory).
//
// Here the vector runs along output channels: a tile is kTile pixels x NV
// vectors of one group's output channels, its accumulators in registers
// over all of the group's taps. Per tap (ci, ky, kx): NV weight vectors
// (packed [group][block][ci][ky][kx][NV * lanes] when the op is made),
// one broadcast input per pixel, NV * kTile fused multiply-adds. The
// input rows a task reads are first copied, zero-padded, into scratch
// (RowPadder, a few vector loads and stores a row), so that the taps need
// no bounds: pixel p of a tile reads scratch at
// tap offset + its own offset. A tile's pixels run along the flattened
// output plane, across row ends; the last tile repeats its last pixel
// (computed, not stored).
//
// Each output is one chain of fused multiply-adds over the group's taps
// in (ci, ky, kx) order from 0, then the bias: its value does not depend
// on the tiling. A Relu or Clip is applied before the store, any other
// epilogue to the stored rows.
//
// rTasks are blocks of (image, group) planes, then blocks of output rows.
#include <algorithm>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/simd.h"

namespace tessera {
namespace {

#if defined(TESSERA_SIMD)
using simd::Vec;
constexpr int64_t kLanes = Vec::kLanes;
constexpr double kFlopsPerTask = 1 << 22;
// Channels per group this kernel takes: whole vectors, and taps few
// enough that a group's packed weights stay in L1 (64 x 9 x 16 floats:
// 36 KB).
constexpr int64_t kMaxChannelsPerGroup = 64;
// Accumulators per tile: 12 of AVX2's 16 registers (2 vectors of 8
// channels x 6 pixels; the weights and a broadcast take the rest), 24 of
// AVX-512's 32.
constexpr int kAccumulators = Vec::kRegisters >= 32 ? 24 : 12;
constexpr int kMaxVectors = 2;  // channel vectors per tile
// Pixels per tile, at most: their offsets stay in general registers.
constexpr int kMaxTile = 12;

class GroupedConvOp : public ROp {
 public:
  GroupedConvOp(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi, const KernelParams& p)
      : c_(c), has_bias_(has_bias), epi_(epi) {
    cin_g_ = c.cin / c.group;
    cout_g_ = c.cout / c.group;
    pixels_ = c.oh * c.ow;
    taps_ = cin_g_ * c.kh * c.kw;
    nv_ = cout_g_ % (kMaxVectors * kLanes) == 0 ? kMaxVectors : 1;
    cb_ = nv_ * kLanes;
    blocks_ = cout_g_ / cb_;
    // Weights: per group and block of cb_ channels, [tap][cb_].
    wpack_.assign(static_cast<size_t>(c.cout * taps_), 0.f);
    for (int64_t co = 0; co < c.cout; ++co) {
      const int64_t g = co / cout_g_, b = co % cout_g_ / cb_, j = co % cb_;
      float* dst = wpack_.data() + ((g * blocks_ + b) * taps_) * cb_ + j;
      for (int64_t t = 0; t < taps_; ++t) dst[t * cb_] = w[co * taps_ + t];
    }
    const double flops = 2.0 * c.batch * c.cout * pixels_ * taps_;
    const int64_t planes = c.batch * c.group;
    const int64_t target = p.tasks > 0 ? p.tasks
                                       : std::clamp<int64_t>(static_cast<int64_t>(flops / kFlopsPerTask), 2,
                                                             kMaxDefaultTasks);
    gb_ = std::min(planes, target);
    rb_ = std::clamp<int64_t>((target + gb_ - 1) / gb_, 1, c.oh);
    tasks_ = gb_ * rb_;
    // The padded rows of the tallest row block.
    const int64_t rows = (c.oh + rb_ - 1) / rb_;
    hp_ = (rows - 1) * c.sh + (c.kh - 1) * c.dh + 1;
    wp_ = (c.ow - 1) * c.sw + (c.kw - 1) * c.dw + 1;
    for (int64_t ci = 0; ci < cin_g_; ++ci)
      for (int64_t ky = 0; ky < c.kh; ++ky)
        for (int64_t kx = 0; kx < c.kw; ++kx)
          tap_off_.push_back(static_cast<int32_t>((ci * hp_ + ky * c.dh) * wp_ + kx * c.dw));
    scratch_bytes_ = static_cast<size_t>(cin_g_ * hp_ * wp_ + kPadRowSlack) * sizeof(float);
    clamp_.take(epi);
  }

  std::string_view path() const override { return "grouped direct"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(wpack_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    const float* x = static_cast<const float*>(args.in[0]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* pad = static_cast<float*>(args.scratch);
    int64_t q0, q1, r0, r1;
    task_range(c_.batch * c_.group, gb_, task / rb_, &q0, &q1);
    task_range(c_.oh, rb_, task % rb_, &r0, &r1);
    if (r1 <= r0) return;
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n = q / c_.group, g = q % c_.group;
      fill(x + (n * c_.cin + g * cin_g_) * c_.ih * c_.iw, r0, r1, pad);
      for (int64_t b = 0; b < blocks_; ++b) {
        const int64_t co0 = g * cout_g_ + b * cb_;
        const float* wb = wpack_.data() + (g * blocks_ + b) * taps_ * cb_;
        float* yb = y + (n * c_.cout + co0) * pixels_;
        const float* bb = bias != nullptr ? bias + co0 : nullptr;
        if (nv_ == 2) tiles<2>(pad, wb, bb, yb, r0, r1);
        else tiles<1>(pad, wb, bb, yb, r0, r1);
      }
      if (!epi_.empty() && !clamp_.on) {
        const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
        for (int64_t co = g * cout_g_; co < (g + 1) * cout_g_; ++co) {
          const int64_t off = (n * c_.cout + co) * pixels_ + r0 * c_.ow;
          epi_.apply(y + off, res != nullptr ? res + off : nullptr, (r1 - r0) * c_.ow);
        }
      }
    }
  }

 private:
  // pad[ci][r][col] = input (ci, r0 * sh - ph + r, col - pw) of the plane
  // at xg, zero outside it, for the rows output rows [r0, r1) read.
  void fill(const float* xg, int64_t r0, int64_t r1, float* pad) const {
    const int64_t rows = (r1 - r0 - 1) * c_.sh + (c_.kh - 1) * c_.dh + 1;
    const int64_t x0 = std::min(c_.pw, wp_), x1 = std::clamp(c_.pw + c_.iw, x0, wp_);
    const RowPadder padder(wp_, x0, x1);
    for (int64_t ci = 0; ci < cin_g_; ++ci)
      for (int64_t r = 0; r < rows; ++r) {
        float* dst = pad + (ci * hp_ + r) * wp_;
        const int64_t iy = r0 * c_.sh - c_.ph + r;
        if (iy < 0 || iy >= c_.ih) padder.zeros(dst);
        else padder.row(dst, xg + (ci * c_.ih + iy) * c_.iw - c_.pw);
      }
  }

  // Output rows [r0, r1) of one block of NV * kLanes channels, kTile
  // pixels at a time.
  template <int NV>
  void tiles(const float* pad, const float* wb, const float* bias, float* yb, int64_t r0, int64_t r1) const {
    constexpr int kTile = std::min(kAccumulators / NV, kMaxTile);
    const int64_t p0 = r0 * c_.ow, p1 = r1 * c_.ow, ow = c_.ow;
    for (int64_t t0 = p0; t0 < p1; t0 += kTile) {
      const int count = static_cast<int>(std::min<int64_t>(kTile, p1 - t0));
      int64_t off[kTile];
      for (int i = 0; i < kTile; ++i) {
        const int64_t q = t0 + std::min(i, count - 1);
        off[i] = (q / ow - r0) * c_.sh * wp_ + q % ow * c_.sw;
      }
      Vec::T acc[kTile][NV];
#pragma GCC unroll 24
      for (int i = 0; i < kTile; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[i][v] = Vec::zero();
      for (int64_t t = 0; t < taps_; ++t) {
        const float* src = pad + tap_off_[static_cast<size_t>(t)];
        Vec::T wv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) wv[v] = Vec::load(wb + (t * NV + v) * kLanes);
#pragma GCC unroll 24
        for (int i = 0; i < kTile; ++i) {
          const Vec::T xv = Vec::set1(src[off[i]]);
#pragma GCC unroll 2
          for (int v = 0; v < NV; ++v) acc[i][v] = Vec::fma(wv[v], xv, acc[i][v]);
        }
      }
      // Bias and clamp in registers, then the tile transposed into the
      // channel planes.
      alignas(64) float out[kTile][NV * kLanes];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        const Vec::T b = bias != nullptr ? Vec::load(bias + v * kLanes) : Vec::zero();
#pragma GCC unroll 24
        for (int i = 0; i < kTile; ++i) {
          Vec::T r = bias != nullptr ? Vec::add(acc[i][v], b) : acc[i][v];
          if (clamp_.on) r = clamp_(r);
          Vec::store(out[i] + v * kLanes, r);
        }
      }
      for (int64_t j = 0; j < NV * kLanes; ++j) {
        float* dst = yb + j * pixels_ + t0;
        for (int i = 0; i < count; ++i) dst[i] = out[i][j];
      }
    }
  }

  Conv2d c_;
  bool has_bias_;
  Epilogue epi_;
  RegisterClamp clamp_;  // Relu or Clip fused into the store
  int64_t cin_g_ = 1, cout_g_ = 1, pixels_ = 1, taps_ = 1;
  int64_t nv_ = 1, cb_ = 1, blocks_ = 1;  // channel vectors per tile, channels per block, blocks per group
  int64_t gb_ = 1, rb_ = 1;               // rTasks: blocks of (image, group) planes x blocks of rows
  int64_t hp_ = 1, wp_ = 1;               // the padded input rows in scratch
  std::vector<float> wpack_;              // [group][block][tap][cb_]
  std::vector<int32_t> tap_off_;          // per tap (ci, ky, kx): its offset in the padded rows
};
#endif

}  // namespace

bool grouped_conv_fits(const Conv2d& c) {
#if defined(TESSERA_SIMD)
  const int64_t cin_g = c.cin / c.group, cout_g = c.cout / c.group;
  return c.group > 1 && cin_g > 1 && cin_g <= kMaxChannelsPerGroup && cout_g % kLanes == 0 &&
         cout_g <= kMaxChannelsPerGroup && c.kh * c.kw > 1;
#else
  (void)c;
  return false;
#endif
}

std::unique_ptr<ROp> make_grouped_conv(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                       const KernelParams& p) {
#if defined(TESSERA_SIMD)
  return std::unique_ptr<ROp>(new GroupedConvOp(c, w, has_bias, epi, p));
#else
  (void)c, (void)w, (void)has_bias, (void)epi, (void)p;
  return nullptr;
#endif
}

}  // namespace tessera
