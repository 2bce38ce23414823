// Winograd F(2x2, 3x3) for 3x3 convs at stride 1, undilated, with at
// least 8 channels per group in and out and constant weights (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2016).
//
// A 2x2 block of outputs (a tile) is computed from the 4x4 input patch d
// under it as A^T [U . (B^T d B)] A, where U = G g G^T is the 3x3 filter g
// transformed once, when the op is made. Summed over input channels, each
// of the 16 transform points t is a GEMM:
//
//   M[t] (cout x tiles) = U[t] (cout x cin) * V[t] (cin x tiles)
//
// 16 multiplies per tile and channel pair instead of 36: 2.25x fewer
// FLOPs, for the price of transforming the input (V) and the output (M)
// through scratch. The transforms' coefficients are 0 and +-1 (input,
// output) and +-1/2 (weights), so the rounding error stays close to the
// direct sum's: rel-L2 against fp64 of 2.6e-7 to 5e-7 on ResNet-18's
// shapes, where PyTorch's direct fp32 conv has 2.2e-7.
//
// rTasks and chunks are cut as winograd_tiling.h says (a tile row is 2
// output rows); a chunk's input is transformed, its 16 GEMMs run, then the
// output transform adds the bias and applies the fused epilogue to the
// chunk's output rows while they are hot.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/winograd_tiling.h"
#include "kernels/prepared.h"

namespace tessera {
namespace {

constexpr int64_t kPoints = 16;                    // 4x4 transform points
#if defined(TESSERA_SIMD)
constexpr int64_t kLanes = simd::Vec::kLanes;  // floats (tiles) per vector
#endif
// Channels per group, and output pixels, from which a grouped conv runs
// Winograd rather than the grouped direct kernel (grouped_conv.cc). Each
// group's 16 point GEMMs are cin_g deep and as wide as its tiles; with
// AVX2's 4 x 24 register tile, shallow or narrow ones lose. One thread,
// regnet_x_400mf's 16-channel groups against im2col and sgemm: 400
// channels on 7x7 242 against 123 us, 160 on 14x14 220 against 145; the
// grouped direct kernel is faster still. 32 channels per group against
// the grouped direct kernel: 64 channels on 28x28 344 against 542 us, 128
// on 14x14 217 against 170, 256 on 7x7 133 against 72. AVX-512's 8 x 48
// tile took 16-channel groups from 8 channels (400 on 7x7: 58 against 62
// us with sgemm).
#if defined(TESSERA_SIMD) && !defined(__AVX512F__)
constexpr int64_t kMinGroupedChannels = 32;
constexpr int64_t kMinGroupedPixels = 400;
#else
constexpr int64_t kMinGroupedChannels = 8;
constexpr int64_t kMinGroupedPixels = 0;
#endif

class WinogradOp : public ROp {
 public:
  WinogradOp(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi, const KernelParams& p)
      : c_(c), has_bias_(has_bias), epi_(epi), t_(c, 2, kPoints, false, p) {
    // rTasks split by output channels where the transformed weights are
    // large (each redoing the input transform), measured on 3x3, 512
    // channels, 7x7: 1 rTask 0.85 ms, 2 channel blocks 0.99, 2 row blocks
    // 1.63.
    wp_ = 2 * t_.tw + 2;
    tasks_ = t_.tasks();
    const int64_t nt = t_.chunk_tiles();
    scratch_bytes_ = static_cast<size_t>(kPoints * (t_.cin_g + t_.cout_g) * nt + 8 * wp_) * sizeof(float);
    static constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    u_ = prepared<float>(w, winograd_weights_key(c, 4), [&] { return winograd_weights(c, w, &kG[0][0], 4); });
  }

  std::string_view path() const override { return "winograd F(2,3)"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(*u_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    const float* x = static_cast<const float*>(args.in[0]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* scratch = static_cast<float*>(args.scratch);
    t_.for_each_chunk(task, [&](int64_t n, int64_t ty0, int64_t ty1, int64_t g, int64_t co0, int64_t co1) {
      chunk(x, bias, res, y, scratch, n, ty0, ty1, g, co0, co1);
    });
  }

 private:
  // Tile rows [ty0, ty1) of image n, group gr's output channels [co0, co1).
  void chunk(const float* x, const float* bias, const float* res, float* y, float* scratch, int64_t n, int64_t ty0,
             int64_t ty1, int64_t gr, int64_t co0, int64_t co1) const {
    const int64_t nt = (ty1 - ty0) * t_.tw, cin = t_.cin_g, cout = t_.cout_g;
    float* v = scratch;
    float* m = v + kPoints * cin * nt;
    float* rows = m + kPoints * cout * nt;  // the portable transforms' row buffers
    for (int64_t ci = 0; ci < cin; ++ci) {
      const float* xc = x + (n * c_.cin + gr * cin + ci) * c_.ih * c_.iw;
      for (int64_t ty = ty0; ty < ty1; ++ty) input_row(xc, ty, v + ci * nt + (ty - ty0) * t_.tw, cin * nt, rows);
    }
    // One GEMM per point: M[t] (cout x nt) = U[t] (cout x cin) * V[t] (cin x nt).
    for (int64_t t = 0; t < kPoints; ++t)
      packed_gemm(u_->data() + u_index(gr, t, co0, 0), co1 - co0, cin, v + t * cin * nt, nt, nt,
                  m + (t * cout + co0) * nt, nt);
    const int64_t oy0 = 2 * ty0, oy1 = std::min(2 * ty1, c_.oh), ow = c_.ow;
    for (int64_t co = co0; co < co1; ++co) {
      const int64_t oc = gr * cout + co;  // in the whole output
      const float b = bias != nullptr ? bias[oc] : 0.f;
      float* yc = y + (n * c_.cout + oc) * c_.oh * ow;
      for (int64_t ty = ty0; ty < ty1; ++ty) output_row(m + co * nt + (ty - ty0) * t_.tw, cout * nt, b, yc, ty, rows);
      if (!epi_.empty()) {
        const int64_t off = (n * c_.cout + oc) * c_.oh * ow + oy0 * ow;
        epi_.apply(y + off, res != nullptr ? res + off : nullptr, (oy1 - oy0) * ow);
      }
    }
  }

  // The input transform of tile row ty of one channel plane xc: V = B^T d B
  // with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], rows combined, then
  // columns. Point t of tile tx goes to v[t * ps + tx].
  void input_row(const float* xc, int64_t ty, float* v, int64_t ps, float* buf) const {
#if defined(__AVX512F__)
    (void)buf;
    input_row_avx512(xc, ty, v, ps);
#elif defined(TESSERA_SIMD)
    (void)buf;
    input_row_avx2(xc, ty, v, ps);
#else
    float* d = buf;  // 4 input rows, zero outside the plane: column q is input column q - pw
    float* tr = buf + 4 * wp_;
    const int64_t q0 = std::clamp<int64_t>(c_.pw, 0, wp_);
    const int64_t q1 = std::clamp<int64_t>(c_.pw + c_.iw, q0, wp_);
    for (int64_t r = 0; r < 4; ++r) {
      float* row = d + r * wp_;
      const int64_t iy = 2 * ty - c_.ph + r;
      std::fill(row, row + wp_, 0.f);
      if (iy >= 0 && iy < c_.ih)
        std::memcpy(row + q0, xc + iy * c_.iw + (q0 - c_.pw), static_cast<size_t>(q1 - q0) * sizeof(float));
    }
    for (int64_t q = 0; q < wp_; ++q) {
      tr[q] = d[q] - d[2 * wp_ + q];
      tr[wp_ + q] = d[wp_ + q] + d[2 * wp_ + q];
      tr[2 * wp_ + q] = d[2 * wp_ + q] - d[wp_ + q];
      tr[3 * wp_ + q] = d[wp_ + q] - d[3 * wp_ + q];
    }
    for (int i = 0; i < 4; ++i) {
      const float* ti = tr + i * wp_;
      float* vi = v + i * 4 * ps;
      for (int64_t tx = 0; tx < t_.tw; ++tx) {
        const float a = ti[2 * tx], b = ti[2 * tx + 1], c = ti[2 * tx + 2], e = ti[2 * tx + 3];
        vi[tx] = a - c;
        vi[ps + tx] = b + c;
        vi[2 * ps + tx] = c - b;
        vi[3 * ps + tx] = b - e;
      }
    }
#endif
  }

  // The output transform of tile row ty of one channel: A^T M A + bias with
  // A^T = [1 1 1 0; 0 1 -1 -1], rows combined, then columns; point t of
  // tile tx is m[t * ps + tx]. Writes output rows 2ty and 2ty + 1 of yc.
  void output_row(const float* m, int64_t ps, float bias, float* yc, int64_t ty, float* buf) const {
#if defined(__AVX512F__)
    (void)buf;
    output_row_avx512(m, ps, bias, yc, ty);
#elif defined(TESSERA_SIMD)
    (void)buf;
    output_row_avx2(m, ps, bias, yc, ty);
#else
    float* o0 = buf;
    float* o1 = buf + wp_;
    for (int64_t tx = 0; tx < t_.tw; ++tx) {
      float s0[4], s1[4];
      for (int c = 0; c < 4; ++c) {
        const float p0 = m[c * ps + tx], p1 = m[(4 + c) * ps + tx];
        const float p2 = m[(8 + c) * ps + tx], p3 = m[(12 + c) * ps + tx];
        s0[c] = p0 + p1 + p2;
        s1[c] = p1 - p2 - p3;
      }
      o0[2 * tx] = s0[0] + s0[1] + s0[2] + bias;
      o0[2 * tx + 1] = s0[1] - s0[2] - s0[3] + bias;
      o1[2 * tx] = s1[0] + s1[1] + s1[2] + bias;
      o1[2 * tx + 1] = s1[1] - s1[2] - s1[3] + bias;
    }
    const int64_t ow = c_.ow;
    std::memcpy(yc + 2 * ty * ow, o0, static_cast<size_t>(ow) * sizeof(float));
    if (2 * ty + 1 < c_.oh) std::memcpy(yc + (2 * ty + 1) * ow, o1, static_cast<size_t>(ow) * sizeof(float));
#endif
  }

  size_t u_index(int64_t gr, int64_t t, int64_t co, int64_t ci) const {
    return winograd_u_index(c_, kPoints, gr, t, co, ci);
  }

#if defined(__AVX512F__)
  // 16 tiles a vector, straight from the plane: tile tx reads input
  // columns 2tx - pw .. 2tx - pw + 3, so 32 consecutive columns split into
  // even and odd lanes give its columns 0 and 1, and the 32 from 2 further
  // its 2 and 3. Loads are masked to the plane (padding reads as zero).
  void input_row_avx512(const float* xc, int64_t ty, float* v, int64_t ps) const {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t tx = 0; tx < t_.tw; tx += kLanes) {
      const __mmask16 k = static_cast<__mmask16>(lane_bits(0, t_.tw - tx));
      const int64_t ix = 2 * tx - c_.pw;
      const uint32_t m0 = lane_bits(-ix, c_.iw - ix), m2 = lane_bits(-ix - 2, c_.iw - ix - 2);
      __m512 a[4], b[4], c[4], d[4];  // columns 0..3 of the 4 rows
      for (int r = 0; r < 4; ++r) {
        const int64_t iy = 2 * ty - c_.ph + r;
        if (iy < 0 || iy >= c_.ih) {
          a[r] = b[r] = c[r] = d[r] = _mm512_setzero_ps();
          continue;
        }
        const float* p = xc + iy * c_.iw + ix;
        const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m0), p);
        const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m0 >> 16), p + kLanes);
        const __m512 lo2 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m2), p + 2);
        const __m512 hi2 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m2 >> 16), p + 2 + kLanes);
        a[r] = _mm512_permutex2var_ps(lo, even, hi);
        b[r] = _mm512_permutex2var_ps(lo, odd, hi);
        c[r] = _mm512_permutex2var_ps(lo2, even, hi2);
        d[r] = _mm512_permutex2var_ps(lo2, odd, hi2);
      }
      __m512* cols[4] = {a, b, c, d};
      for (auto* col : cols) {  // B^T d: rows combined, in place
        const __m512 x0 = col[0], x1 = col[1], x2 = col[2], x3 = col[3];
        col[0] = _mm512_sub_ps(x0, x2);
        col[1] = _mm512_add_ps(x1, x2);
        col[2] = _mm512_sub_ps(x2, x1);
        col[3] = _mm512_sub_ps(x1, x3);
      }
      for (int i = 0; i < 4; ++i) {  // then columns
        float* vi = v + i * 4 * ps + tx;
        _mm512_mask_storeu_ps(vi, k, _mm512_sub_ps(a[i], c[i]));
        _mm512_mask_storeu_ps(vi + ps, k, _mm512_add_ps(b[i], c[i]));
        _mm512_mask_storeu_ps(vi + 2 * ps, k, _mm512_sub_ps(c[i], b[i]));
        _mm512_mask_storeu_ps(vi + 3 * ps, k, _mm512_sub_ps(b[i], d[i]));
      }
    }
  }

  // 16 tiles a vector; the two output rows' columns interleaved by a
  // permute and stored masked to the plane's width (and height).
  void output_row_avx512(const float* m, int64_t ps, float bias, float* yc, int64_t ty) const {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512 vb = _mm512_set1_ps(bias);
    const int64_t ow = c_.ow;
    float* y0 = yc + 2 * ty * ow;
    float* y1 = y0 + ow;
    const bool second = 2 * ty + 1 < c_.oh;
    for (int64_t tx = 0; tx < t_.tw; tx += kLanes) {
      const __mmask16 k = static_cast<__mmask16>(lane_bits(0, t_.tw - tx));
      const uint32_t cols = lane_bits(0, ow - 2 * tx);
      __m512 s0[4], s1[4];
      for (int c = 0; c < 4; ++c) {
        const __m512 p0 = _mm512_maskz_loadu_ps(k, m + c * ps + tx);
        const __m512 p1 = _mm512_maskz_loadu_ps(k, m + (4 + c) * ps + tx);
        const __m512 p2 = _mm512_maskz_loadu_ps(k, m + (8 + c) * ps + tx);
        const __m512 p3 = _mm512_maskz_loadu_ps(k, m + (12 + c) * ps + tx);
        s0[c] = _mm512_add_ps(_mm512_add_ps(p0, p1), p2);
        s1[c] = _mm512_sub_ps(_mm512_sub_ps(p1, p2), p3);
      }
      const __m512 y00 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]), vb);
      const __m512 y01 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3]), vb);
      _mm512_mask_storeu_ps(y0 + 2 * tx, static_cast<__mmask16>(cols), _mm512_permutex2var_ps(y00, lo, y01));
      _mm512_mask_storeu_ps(y0 + 2 * tx + kLanes, static_cast<__mmask16>(cols >> 16),
                            _mm512_permutex2var_ps(y00, hi, y01));
      if (!second) continue;
      const __m512 y10 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]), vb);
      const __m512 y11 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3]), vb);
      _mm512_mask_storeu_ps(y1 + 2 * tx, static_cast<__mmask16>(cols), _mm512_permutex2var_ps(y10, lo, y11));
      _mm512_mask_storeu_ps(y1 + 2 * tx + kLanes, static_cast<__mmask16>(cols >> 16),
                            _mm512_permutex2var_ps(y10, hi, y11));
    }
  }
#elif defined(TESSERA_SIMD)
  // input_row_avx512 on 8 tiles a vector: 16 consecutive columns (two
  // loads, masked to the plane) split into even and odd lanes give tile
  // columns 0 and 1, the 16 from 2 further columns 2 and 3. The same
  // operations in the same order as the portable loops, so the same bits.
  void input_row_avx2(const float* xc, int64_t ty, float* v, int64_t ps) const {
    using Vec = simd::Vec;
    for (int64_t tx = 0; tx < t_.tw; tx += kLanes) {
      const bool full = t_.tw - tx >= kLanes;
      const Vec::Mask k = Vec::first(t_.tw - tx);
      const int64_t ix = 2 * tx - c_.pw;
      const uint32_t m0 = lane_bits(-ix, c_.iw - ix), m2 = lane_bits(-ix - 2, c_.iw - ix - 2);
      const Vec::Mask lo_m = Vec::from_bits(m0), hi_m = Vec::from_bits(m0 >> kLanes);
      const Vec::Mask lo2_m = Vec::from_bits(m2), hi2_m = Vec::from_bits(m2 >> kLanes);
      Vec::T a[4], b[4], c[4], d[4];  // columns 0..3 of the 4 rows
      for (int r = 0; r < 4; ++r) {
        const int64_t iy = 2 * ty - c_.ph + r;
        if (iy < 0 || iy >= c_.ih) {
          a[r] = b[r] = c[r] = d[r] = Vec::zero();
          continue;
        }
        const float* p = xc + iy * c_.iw + ix;
        Vec::deinterleave(Vec::load(p, lo_m), Vec::load(p + kLanes, hi_m), &a[r], &b[r]);
        Vec::deinterleave(Vec::load(p + 2, lo2_m), Vec::load(p + 2 + kLanes, hi2_m), &c[r], &d[r]);
      }
      Vec::T* cols[4] = {a, b, c, d};
      for (auto* col : cols) {  // B^T d: rows combined, in place
        const Vec::T x0 = col[0], x1 = col[1], x2 = col[2], x3 = col[3];
        col[0] = _mm256_sub_ps(x0, x2);
        col[1] = _mm256_add_ps(x1, x2);
        col[2] = _mm256_sub_ps(x2, x1);
        col[3] = _mm256_sub_ps(x1, x3);
      }
      for (int i = 0; i < 4; ++i) {  // then columns
        float* vi = v + i * 4 * ps + tx;
        const Vec::T out[4] = {_mm256_sub_ps(a[i], c[i]), _mm256_add_ps(b[i], c[i]), _mm256_sub_ps(c[i], b[i]),
                               _mm256_sub_ps(b[i], d[i])};
        for (int q = 0; q < 4; ++q) {
          if (full) Vec::store(vi + q * ps, out[q]);
          else Vec::store(vi + q * ps, k, out[q]);
        }
      }
    }
  }

  // output_row_avx512 on 8 tiles a vector; a tile's two columns
  // interleaved by unpack and a swap of 128-bit halves.
  void output_row_avx2(const float* m, int64_t ps, float bias, float* yc, int64_t ty) const {
    using Vec = simd::Vec;
    const Vec::T vb = Vec::set1(bias);
    const int64_t ow = c_.ow;
    float* y0 = yc + 2 * ty * ow;
    float* y1 = y0 + ow;
    const bool second = 2 * ty + 1 < c_.oh;
    // Stores 2 * kLanes outputs from y_even (columns 2j) and y_odd (2j + 1).
    auto store_pair = [&](float* out, Vec::T y_even, Vec::T y_odd, uint32_t cols) {
      const Vec::T lo = _mm256_unpacklo_ps(y_even, y_odd), hi = _mm256_unpackhi_ps(y_even, y_odd);
      const Vec::T first = _mm256_permute2f128_ps(lo, hi, 0x20), second_half = _mm256_permute2f128_ps(lo, hi, 0x31);
      if (cols == 0xffff) {
        Vec::store(out, first);
        Vec::store(out + kLanes, second_half);
      } else {
        Vec::store(out, Vec::from_bits(cols), first);
        Vec::store(out + kLanes, Vec::from_bits(cols >> kLanes), second_half);
      }
    };
    for (int64_t tx = 0; tx < t_.tw; tx += kLanes) {
      const bool full = t_.tw - tx >= kLanes;
      const Vec::Mask k = Vec::first(t_.tw - tx);
      const uint32_t cols = lane_bits(0, ow - 2 * tx) & 0xffff;
      Vec::T s0[4], s1[4];
      for (int c = 0; c < 4; ++c) {
        const float* mc = m + c * ps + tx;
        const Vec::T p0 = full ? Vec::load(mc) : Vec::load(mc, k);
        const Vec::T p1 = full ? Vec::load(mc + 4 * ps) : Vec::load(mc + 4 * ps, k);
        const Vec::T p2 = full ? Vec::load(mc + 8 * ps) : Vec::load(mc + 8 * ps, k);
        const Vec::T p3 = full ? Vec::load(mc + 12 * ps) : Vec::load(mc + 12 * ps, k);
        s0[c] = _mm256_add_ps(_mm256_add_ps(p0, p1), p2);
        s1[c] = _mm256_sub_ps(_mm256_sub_ps(p1, p2), p3);
      }
      store_pair(y0 + 2 * tx, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]), vb),
                 _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]), vb), cols);
      if (!second) continue;
      store_pair(y1 + 2 * tx, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]), vb),
                 _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]), vb), cols);
    }
  }
#endif

  Conv2d c_;
  bool has_bias_;
  Epilogue epi_;
  WinogradTiling t_;
  int64_t wp_ = 4;  // padded input row: 2 * tw + 2 columns
  std::shared_ptr<const std::vector<float>> u_;  // transformed weights, [16] x packed (cout x cin)
};

}  // namespace

WinogradTiling::WinogradTiling(const Conv2d& c, int64_t tile, int64_t points, bool whole_chunks,
                               const KernelParams& p)
    : batch(c.batch), group(c.group), cin_g(c.cin / c.group), cout_g(c.cout / c.group) {
  th = (c.oh + tile - 1) / tile;
  tw = (c.ow + tile - 1) / tile;
  const int64_t rows = c.batch * th;
  const double flops = 2.0 * c.batch * c.cout * cin_g * 9 * c.oh * c.ow;
  units = c.group > 1 ? c.group : (c.cout + kCoUnit - 1) / kCoUnit;
  const int64_t max_ob = c.group > 1 ? units : std::max<int64_t>(1, units / kMinCoUnits);
  const bool big = points * c.cout * cin_g * static_cast<int64_t>(sizeof(float)) > kWeightsInL2;
  if (p.tasks > 0) {  // grouped: blocks of groups first, as by default
    ob = big || c.group > 1 ? std::clamp<int64_t>(p.tasks, 1, max_ob) : 1;
    rb = std::clamp<int64_t>(p.tasks / ob, 1, rows);
    if (rb * ob < p.tasks) ob = std::clamp<int64_t>(p.tasks / rb, 1, max_ob);
  } else {
    const int64_t want = std::clamp<int64_t>(static_cast<int64_t>(flops / kFlopsPerTask), 1, kMaxDefaultTasks);
    const int64_t max_rb = whole_chunks ? std::max<int64_t>(1, rows * tw / kMinChunkTiles) : rows;
    ob = big ? std::min<int64_t>(kDefaultChannelBlocks, max_ob) : 1;
    rb = big ? 1 : std::clamp<int64_t>(want, 1, max_rb);
    if (c.group > 1) {  // groups are independent work: at least kMinTasks blocks of them
      ob = std::clamp<int64_t>(std::max(want, kMinTasks), 1, units);
      rb = std::clamp<int64_t>(want / ob, 1, rows);
    }
  }
  const int64_t min_rows = (kMinChunkTiles + tw - 1) / tw;
  const int64_t tile_bytes = points * (cin_g + cout_g) * static_cast<int64_t>(sizeof(float));
  chunk_rows = std::clamp<int64_t>(static_cast<int64_t>(kChunkBytes) / (tile_bytes * tw), min_rows,
                                   std::max<int64_t>(min_rows, (rows + rb - 1) / rb));
  chunk_rows = std::min(chunk_rows, th);
}

std::vector<float> winograd_weights(const Conv2d& c, const float* w, const double* g_matrix, int side) {
  const int64_t cin_g = c.cin / c.group, cout_g = c.cout / c.group, points = side * side;
  const size_t block = packed_size(cout_g, cin_g);  // one (group, point)'s packed cout x cin
  std::vector<float> u(static_cast<size_t>(c.group * points) * block, 0.f);
  std::vector<double> gg(static_cast<size_t>(side) * 3);  // G g
  for (int64_t gr = 0; gr < c.group; ++gr)
    for (int64_t co = 0; co < cout_g; ++co)
      for (int64_t ci = 0; ci < cin_g; ++ci) {
        const float* g = w + ((gr * cout_g + co) * cin_g + ci) * 9;
        for (int i = 0; i < side; ++i)
          for (int k = 0; k < 3; ++k) {
            const double* gi = g_matrix + i * 3;
            gg[static_cast<size_t>(i * 3 + k)] = gi[0] * g[k] + gi[1] * g[3 + k] + gi[2] * g[6 + k];
          }
        // winograd_u_index(c, points, gr, t, co, ci), its point t apart.
        float* at = u.data() + static_cast<size_t>(gr * points) * block +
                    static_cast<size_t>((co / kPackRows * cin_g + ci) * kPackRows + co % kPackRows);
        for (int i = 0; i < side; ++i)
          for (int l = 0; l < side; ++l) {
            const double* a = &gg[static_cast<size_t>(i * 3)];
            const double* gl = g_matrix + l * 3;
            at[static_cast<size_t>(i * side + l) * block] = static_cast<float>(a[0] * gl[0] + a[1] * gl[1] + a[2] * gl[2]);
          }
      }
  return u;
}

std::string winograd_weights_key(const Conv2d& c, int side) {
  return "winograd U side " + std::to_string(side) + ", " + std::to_string(c.cout) + "x" + std::to_string(c.cin) +
         "/" + std::to_string(c.group);
}

bool winograd_fits(const Conv2d& c) {
  const int64_t cin_g = c.cin / c.group, cout_g = c.cout / c.group;
  if (c.kh != 3 || c.kw != 3 || c.sh != 1 || c.sw != 1 || c.dh != 1 || c.dw != 1 || cin_g < 8 || cout_g < 8 ||
      c.oh < 2 || c.ow < 2)
    return false;
  // On small maps with many channels the transformed weights (16/9 the
  // direct ones' bytes) are the cost: whether the 2.25x fewer FLOPs pay
  // for reading them depends on the host's memory, so the profiler
  // measures it, with the weights evicted where a run reads them from
  // memory (profiler.h, ProfileOptions::cold_llc_kb).
  return c.group == 1 || (cin_g >= kMinGroupedChannels && c.oh * c.ow >= kMinGroupedPixels);
}

std::unique_ptr<ROp> make_winograd(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                   const KernelParams& p) {
  return std::unique_ptr<ROp>(new WinogradOp(c, w, has_bias, epi, p));
}

}  // namespace tessera
