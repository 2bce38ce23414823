// Reductions and normalizations of one contiguous row, for LayerNorm,
// Softmax and the fused attention.
//
// A plain `s += x[i]` loop is a serial chain of dependent adds (4 cycles
// each) that GCC may not vectorize, since that would reorder the float sum.
// These keep 16 partial results (one vector), combine them pairwise at the
// end and fold the tail in last, so the loops vectorize and the order of
// operations is fixed by this code, not by the compiler: the same on every
// build, every vEU and every executor.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/fast_math.h"

// Row groups (layer_norm_group, softmax_group below): 16 lanes with
// AVX-512, 8 with AVX2 and FMA.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TESSERA_ROW_GROUPS 1
#include <immintrin.h>
#endif

namespace tessera {

namespace row_math_detail {
constexpr int kLanes = 16;

inline float combine(float (&acc)[kLanes]) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
}  // namespace row_math_detail

inline float row_sum(const float* x, int64_t n) {
  using namespace row_math_detail;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += x[i];
  return combine(acc) + tail;
}

// Sum of (x - mean)^2.
inline float row_sq_dev(const float* x, int64_t n, float mean) {
  using namespace row_math_detail;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float d = x[i + j] - mean;
      acc[j] += d * d;
    }
  float tail = 0;
  for (; i < n; ++i) tail += (x[i] - mean) * (x[i] - mean);
  return combine(acc) + tail;
}

// Largest element; NaNs are skipped (as std::max(m, x) does), -inf when n is 0.
inline float row_max(const float* x, int64_t n) {
  using namespace row_math_detail;
  float acc[kLanes];
  for (float& a : acc) a = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = acc[j] < x[i + j] ? x[i + j] : acc[j];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = m < x[i] ? x[i] : m;
  for (float a : acc) m = m < a ? a : m;
  return m;
}

namespace row_math_detail {
// sum(exp(x - mx)); with kStore, also y = exp(x - mx) (y may be x).
template <bool kStore>
inline float exp_sum(const float* x, float* y, int64_t n, float mx) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = fast_exp(x[i + j] - mx);
      if constexpr (kStore) y[i + j] = v;
      acc[j] += v;
    }
  float tail = 0;
  for (; i < n; ++i) {
    const float v = fast_exp(x[i] - mx);
    if constexpr (kStore) y[i] = v;
    tail += v;
  }
  return combine(acc) + tail;
}
}  // namespace row_math_detail

// LayerNormalization of one row with a scale and an optional bias of one
// value per element: y = (x - mean) * inv * scale + bias, inv =
// 1 / sqrt(var + eps); y may be x. Without AVX-512 the LayerNormalization
// kernel and the MatMul epilogue that absorbs one both reach this through
// layer_norm_rows (below), so they agree bitwise.
// Returns the mean; *inv_out (when not null) gets inv.
inline float layer_norm_row(const float* x, float* y, int64_t n, float eps, const float* __restrict scale,
                            const float* __restrict bias, float* inv_out = nullptr) {
  const float mean = n ? row_sum(x, n) / static_cast<float>(n) : 0.f;
  const float var = n ? row_sq_dev(x, n, mean) / static_cast<float>(n) : 0.f;
  const float inv = 1.f / std::sqrt(var + eps);
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i];
  }
  if (inv_out != nullptr) *inv_out = inv;
  return mean;
}

// y = exp(x - max) / sum(exp(x - max)); y may be x.
inline void softmax_row(const float* x, float* y, int64_t n) {
  const float inv = 1.f / row_math_detail::exp_sum<true>(x, y, n, row_max(x, n));
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// y = x - max - log(sum(exp(x - max))); y may be x.
inline void log_softmax_row(const float* x, float* y, int64_t n) {
  const float mx = row_max(x, n);
  const float lse = std::log(row_math_detail::exp_sum<false>(x, y, n, mx));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mx - lse;
}

// Many rows at once: the LayerNormalization kernel, the MatMul epilogue
// that absorbs one, the Softmax kernel and the fused attention call these,
// so each pair still agrees bitwise. With AVX-512, 4 rows go through each
// step together: a row's sums are chains of dependent vector adds (or
// FMAs), and interleaving 4 independent rows hides their latency (a
// 128-wide LayerNorm row was ~27 ns alone, a 64-wide softmax row ~35 ns).
// Each row's arithmetic is the same whether it is in a group of 4 or
// alone: 16 lanes, the partial sums (with the tail's lanes masked to 0) in
// lane order, then combined pairwise. With AVX2 both take 4 rows at once
// the same way on 8 lanes (the one-row loops left the sums and the max
// unvectorized: a 64 x 64 head's softmax took 6.1 us, the groups 3.0).
// Without either they are the one-row functions above, row by row.
#if defined(__AVX512F__)
namespace row_math_detail {

// Zero-masking forms with every lane on are the plain instructions; GCC 12
// warns about the plain intrinsics' undefined pass-through operand.
constexpr __mmask16 kAll = 0xffff;

inline __mmask16 lanes_left(int64_t left) {
  return left >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

// Lanes j and j + 8 combined, then j and j + 4, ... (op256 and op128: the
// same operation on 8 and 4 lanes); lane 0 of the last step is the result.
template <typename Op256, typename Op128>
inline float lane_reduce(__m512 v, Op256 op256, Op128 op128) {
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 1));
  const __m256 s8 = op256(lo, hi);
  const __m128 s4 = op128(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = op128(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(op128(s2, _mm_movehdup_ps(s2)));
}

// The sum in the order of combine().
inline float pairwise_sum(__m512 v) {
  return lane_reduce(v, [](__m256 a, __m256 b) { return _mm256_add_ps(a, b); },
                     [](__m128 a, __m128 b) { return _mm_add_ps(a, b); });
}

// Largest lane (no lane is NaN here).
inline float lane_max(__m512 v) {
  return lane_reduce(v, [](__m256 a, __m256 b) { return _mm256_max_ps(a, b); },
                     [](__m128 a, __m128 b) { return _mm_max_ps(a, b); });
}

// fast_exp on 16 lanes, the same steps.
inline __m512 exp16(__m512 x) {
  using namespace exp_consts;
  __m512 xc = _mm512_maskz_max_ps(kAll, x, _mm512_set1_ps(kLow));  // a NaN x gives the bound (second operand)
  xc = _mm512_maskz_min_ps(kAll, xc, _mm512_set1_ps(kHigh));
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), _mm512_set1_ps(0.5f));
  const __m512 n = _mm512_maskz_roundscale_ps(kAll, t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kPoly[i]));
  __m512i e = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, n), _mm512_set1_epi32(127));
  e = _mm512_maskz_max_epi32(kAll, e, _mm512_set1_epi32(1));
  e = _mm512_maskz_min_epi32(kAll, e, _mm512_set1_epi32(254));
  __m512 v = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, e, 23)));
  v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_NLT_UQ), v);  // 0 below the bound
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), v, x);
}

// fast_sigmoid on 16 lanes, the same steps.
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 e = exp16(_mm512_castsi512_ps(
      _mm512_maskz_xor_epi32(kAll, _mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0x80000000u)))));
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
  const __m512 z = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_consts::kLow), _CMP_NLT_UQ), s);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), z, x);
}

template <int R>
inline void layer_norm_group(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n, float eps,
                             const float* __restrict scale, const float* __restrict bias, float* mean_out,
                             float* inv_out) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_add_ps(acc[r], _mm512_maskz_loadu_ps(m, x + r * ldx + i));
  }
  __m512 mean[R], inv[R];
  for (int r = 0; r < R; ++r) {
    const float mu = n ? pairwise_sum(acc[r]) / static_cast<float>(n) : 0.f;
    if (mean_out) mean_out[r] = mu;
    mean[r] = _mm512_set1_ps(mu);
    acc[r] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + r * ldx + i), mean[r]);
      acc[r] = _mm512_fmadd_ps(d, d, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float var = n ? pairwise_sum(acc[r]) / static_cast<float>(n) : 0.f;
    const float iv = 1.f / std::sqrt(var + eps);
    if (inv_out) inv_out[r] = iv;
    inv[r] = _mm512_set1_ps(iv);
  }
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    const __m512 sc = _mm512_maskz_loadu_ps(m, scale + i);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + i) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const __m512 t = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + r * ldx + i), mean[r]), inv[r]);
      _mm512_mask_storeu_ps(y + r * ldy + i, m, bias ? _mm512_fmadd_ps(t, sc, b) : _mm512_mul_ps(t, sc));
    }
  }
}

template <int R>
inline void softmax_group(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = ninf;
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    // A NaN element is skipped: max returns its second operand then.
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_maskz_max_ps(kAll, _mm512_mask_loadu_ps(ninf, m, x + r * ldx + i), acc[r]);
  }
  __m512 mx[R];
  for (int r = 0; r < R; ++r) {
    mx[r] = _mm512_set1_ps(lane_max(acc[r]));
    acc[r] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + r * ldx + i), mx[r]);
      const __m512 v = _mm512_maskz_mov_ps(m, exp16(d));
      _mm512_mask_storeu_ps(y + r * ldy + i, m, v);
      acc[r] = _mm512_add_ps(acc[r], v);
    }
  }
  __m512 inv[R];
  for (int r = 0; r < R; ++r) inv[r] = _mm512_set1_ps(1.f / pairwise_sum(acc[r]));
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    for (int r = 0; r < R; ++r)
      _mm512_mask_storeu_ps(y + r * ldy + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + r * ldy + i), inv[r]));
  }
}

}  // namespace row_math_detail
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
namespace row_math_detail {

// The first `left` of 8 lanes (all 8 from 8 on), as a load/store mask.
inline __m256i lanes8(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left < 8 ? left : 8)), idx);
}

// Lanes j and j + 4 combined, then j and j + 2, then 0 and 1.
template <typename Op128>
inline float lane_reduce8(__m256 v, Op128 op128) {
  const __m128 s4 = op128(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = op128(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(op128(s2, _mm_movehdup_ps(s2)));
}

// exp16's steps on 8 lanes.
inline __m256 exp8(__m256 x) {
  using namespace exp_consts;
  __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(kLow));  // a NaN x gives the bound (second operand)
  xc = _mm256_min_ps(xc, _mm256_set1_ps(kHigh));
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kPoly[i]));
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  e = _mm256_max_epi32(e, _mm256_set1_epi32(1));
  e = _mm256_min_epi32(e, _mm256_set1_epi32(254));
  __m256 v = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
  v = _mm256_and_ps(v, _mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_NLT_UQ));  // 0 below the bound
  return _mm256_blendv_ps(v, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// fast_sigmoid on 8 lanes, the same steps.
inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.f)));
  const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
  const __m256 z = _mm256_and_ps(s, _mm256_cmp_ps(x, _mm256_set1_ps(exp_consts::kLow), _CMP_NLT_UQ));
  return _mm256_blendv_ps(z, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// layer_norm_group on 8-lane vectors (the AVX-512 one's steps): R rows at once, each row's
// arithmetic the same for any R (8 partial sums, the tail's lanes 0,
// combined by lane_reduce8).
template <int R>
inline void layer_norm_group(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n, float eps,
                             const float* __restrict scale, const float* __restrict bias, float* mean_out,
                             float* inv_out) {
  const auto add = [](__m128 a, __m128 b) { return _mm_add_ps(a, b); };
  const int64_t whole = n / 8 * 8;
  const __m256i tail = lanes8(n - whole);
  const __m256 tail_ps = _mm256_castsi256_ps(tail);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < whole; i += 8)
    for (int r = 0; r < R; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(x + r * ldx + i));
  if (whole < n)
    for (int r = 0; r < R; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_maskload_ps(x + r * ldx + whole, tail));
  __m256 mean[R], inv[R];
  for (int r = 0; r < R; ++r) {
    const float mu = n ? lane_reduce8(acc[r], add) / static_cast<float>(n) : 0.f;
    if (mean_out) mean_out[r] = mu;
    mean[r] = _mm256_set1_ps(mu);
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < whole; i += 8)
    for (int r = 0; r < R; ++r) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + r * ldx + i), mean[r]);
      acc[r] = _mm256_fmadd_ps(d, d, acc[r]);
    }
  if (whole < n)
    for (int r = 0; r < R; ++r) {
      const __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + r * ldx + whole, tail), mean[r]), tail_ps);
      acc[r] = _mm256_fmadd_ps(d, d, acc[r]);
    }
  for (int r = 0; r < R; ++r) {
    const float var = n ? lane_reduce8(acc[r], add) / static_cast<float>(n) : 0.f;
    const float iv = 1.f / std::sqrt(var + eps);
    if (inv_out) inv_out[r] = iv;
    inv[r] = _mm256_set1_ps(iv);
  }
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 sc = _mm256_loadu_ps(scale + i);
    const __m256 b = bias ? _mm256_loadu_ps(bias + i) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + r * ldx + i), mean[r]), inv[r]);
      _mm256_storeu_ps(y + r * ldy + i, bias ? _mm256_fmadd_ps(t, sc, b) : _mm256_mul_ps(t, sc));
    }
  }
  if (whole < n) {
    const __m256 sc = _mm256_maskload_ps(scale + whole, tail);
    const __m256 b = bias ? _mm256_maskload_ps(bias + whole, tail) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + r * ldx + whole, tail), mean[r]), inv[r]);
      _mm256_maskstore_ps(y + r * ldy + whole, tail, bias ? _mm256_fmadd_ps(t, sc, b) : _mm256_mul_ps(t, sc));
    }
  }
}

// softmax_group on 8-lane vectors (the AVX-512 one's steps): R rows at once, each row's arithmetic
// the same for any R (8 partial maxima and sums, the tail's lanes as -inf
// and 0, combined by lane_reduce8). Whole vectors load and store plainly:
// AVX2's masked forms cost more, the store most.
template <int R>
inline void softmax_group(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const int64_t whole = n / 8 * 8;
  const __m256i tail = lanes8(n - whole);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = ninf;
  // A NaN element is skipped: max returns its second operand then.
  for (int64_t i = 0; i < whole; i += 8)
    for (int r = 0; r < R; ++r) acc[r] = _mm256_max_ps(_mm256_loadu_ps(x + r * ldx + i), acc[r]);
  if (whole < n)
    for (int r = 0; r < R; ++r) {
      const __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + r * ldx + whole, tail), _mm256_castsi256_ps(tail));
      acc[r] = _mm256_max_ps(v, acc[r]);
    }
  __m256 mx[R];
  for (int r = 0; r < R; ++r) {
    mx[r] = _mm256_set1_ps(lane_reduce8(acc[r], [](__m128 a, __m128 b) { return _mm_max_ps(a, b); }));
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < whole; i += 8)
    for (int r = 0; r < R; ++r) {
      const __m256 v = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + r * ldx + i), mx[r]));
      _mm256_storeu_ps(y + r * ldy + i, v);
      acc[r] = _mm256_add_ps(acc[r], v);
    }
  if (whole < n)
    for (int r = 0; r < R; ++r) {
      const __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + r * ldx + whole, tail), mx[r]);
      const __m256 v = _mm256_and_ps(exp8(d), _mm256_castsi256_ps(tail));
      _mm256_maskstore_ps(y + r * ldy + whole, tail, v);
      acc[r] = _mm256_add_ps(acc[r], v);
    }
  __m256 inv[R];
  for (int r = 0; r < R; ++r)
    inv[r] = _mm256_set1_ps(1.f / lane_reduce8(acc[r], [](__m128 a, __m128 b) { return _mm_add_ps(a, b); }));
  for (int64_t i = 0; i < whole; i += 8)
    for (int r = 0; r < R; ++r)
      _mm256_storeu_ps(y + r * ldy + i, _mm256_mul_ps(_mm256_loadu_ps(y + r * ldy + i), inv[r]));
  if (whole < n)
    for (int r = 0; r < R; ++r)
      _mm256_maskstore_ps(y + r * ldy + whole, tail,
                          _mm256_mul_ps(_mm256_maskload_ps(y + r * ldy + whole, tail), inv[r]));
}

}  // namespace row_math_detail
#endif

// layer_norm_row on `rows` rows (x and y with row strides ldx and ldy; y
// may be x); each row's mean and inv into mean_out[r] and inv_out[r] when
// those are not null.
inline void layer_norm_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n, float eps,
                            const float* __restrict scale, const float* __restrict bias, float* mean_out = nullptr,
                            float* inv_out = nullptr) {
  int64_t r = 0;
#if defined(TESSERA_ROW_GROUPS)
  using row_math_detail::layer_norm_group;
  for (; r + 4 <= rows; r += 4)
    layer_norm_group<4>(x + r * ldx, ldx, y + r * ldy, ldy, n, eps, scale, bias, mean_out ? mean_out + r : nullptr,
                        inv_out ? inv_out + r : nullptr);
  for (; r < rows; ++r)
    layer_norm_group<1>(x + r * ldx, ldx, y + r * ldy, ldy, n, eps, scale, bias, mean_out ? mean_out + r : nullptr,
                        inv_out ? inv_out + r : nullptr);
#else
  for (; r < rows; ++r) {
    float inv;
    const float mean = layer_norm_row(x + r * ldx, y + r * ldy, n, eps, scale, bias, &inv);
    if (mean_out) mean_out[r] = mean;
    if (inv_out) inv_out[r] = inv;
  }
#endif
}

// softmax_row on `rows` rows (y may be x).
inline void softmax_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n) {
  int64_t r = 0;
#if defined(TESSERA_ROW_GROUPS)
  for (; r + 4 <= rows; r += 4) row_math_detail::softmax_group<4>(x + r * ldx, ldx, y + r * ldy, ldy, n);
  for (; r < rows; ++r) row_math_detail::softmax_group<1>(x + r * ldx, ldx, y + r * ldy, ldy, n);
#else
  for (; r < rows; ++r) softmax_row(x + r * ldx, y + r * ldy, n);
#endif
}

}  // namespace tessera
