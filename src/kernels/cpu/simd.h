// One vector of floats and the operations the register-blocked kernels
// need, for the instruction set the build targets (-march=native):
// AVX-512 (16 lanes, 32 registers, a __mmask16 per partial vector) or AVX2
// with FMA (8 lanes, 16 registers, an integer lane mask). A kernel written
// over Vec runs on both; it picks its tile shape from Vec::kRegisters so
// that its accumulators stay in registers. Without either, TESSERA_SIMD is
// undefined and the kernels fall back to portable loops.
#pragma once

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TESSERA_SIMD 1
#include <immintrin.h>

#include <cstdint>

namespace tessera::simd {

#if defined(__AVX512F__)
struct Vec {
  using T = __m512;
  using Mask = __mmask16;
  static constexpr int64_t kLanes = 16;
  static constexpr int kRegisters = 32;
  static constexpr const char* kIsa = "avx512";
  // Lanes [0, n) (all of them for n >= kLanes).
  static Mask first(int64_t n) { return n >= kLanes ? Mask(0xffff) : static_cast<Mask>((1u << n) - 1); }
  // Lane j on where bit j of `bits` is set.
  static Mask from_bits(uint32_t bits) { return static_cast<Mask>(bits); }
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float s) { return _mm512_set1_ps(s); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, Mask m, T v) { _mm512_mask_storeu_ps(p, m, v); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  // p's lanes in m, `fill` in the others.
  static T load_or(const float* p, Mask m, T fill) { return _mm512_mask_loadu_ps(fill, m, p); }
  // v where v > acc or v is NaN, else acc.
  static T max_nan(T acc, T v) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), acc,
                                v);
  }
  // a / b where b > 0, else 0.
  static T div_positive(T a, T b) {
    return _mm512_maskz_div_ps(_mm512_cmp_ps_mask(b, _mm512_setzero_ps(), _CMP_GT_OQ), a, b);
  }
  // The even and the odd lanes of the 2 * kLanes floats lo, hi.
  static void deinterleave(T lo, T hi, T* even, T* odd) {
    const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i o = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *even = _mm512_permutex2var_ps(lo, e, hi);
    *odd = _mm512_permutex2var_ps(lo, o, hi);
  }
  // deinterleave's inverse: lo, hi = a0 b0 a1 b1 ... (2 * kLanes floats).
  static void interleave(T a, T b, T* lo, T* hi) {
    const __m512i l = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i h = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    *lo = _mm512_permutex2var_ps(a, l, b);
    *hi = _mm512_permutex2var_ps(a, h, b);
  }
};
#else
struct Vec {
  using T = __m256;
  using Mask = __m256i;
  static constexpr int64_t kLanes = 8;
  static constexpr int kRegisters = 16;
  static constexpr const char* kIsa = "avx2";
  static Mask first(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < kLanes ? n : kLanes)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Mask from_bits(uint32_t bits) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits & 0xff)), bit), bit);
  }
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float s) { return _mm256_set1_ps(s); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, Mask m, T v) { _mm256_maskstore_ps(p, m, v); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T load_or(const float* p, Mask m, T fill) {
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static T max_nan(T acc, T v) {
    return _mm256_blendv_ps(acc, v, _mm256_or_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  }
  static T div_positive(T a, T b) {
    return _mm256_and_ps(_mm256_div_ps(a, b), _mm256_cmp_ps(b, _mm256_setzero_ps(), _CMP_GT_OQ));
  }
  static void deinterleave(T lo, T hi, T* even, T* odd) {
    // Within each 128-bit half: lo's pair then hi's pair; then the 64-bit
    // quarters reordered to lo, lo, hi, hi.
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
  }
  static void interleave(T a, T b, T* lo, T* hi) {
    // Within each 128-bit half a's and b's lanes alternate; then the
    // halves are regrouped.
    const T l = _mm256_unpacklo_ps(a, b), h = _mm256_unpackhi_ps(a, b);
    *lo = _mm256_permute2f128_ps(l, h, 0x20);
    *hi = _mm256_permute2f128_ps(l, h, 0x31);
  }
};
#endif

}  // namespace tessera::simd

#endif
