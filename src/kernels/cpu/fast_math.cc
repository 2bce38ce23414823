#include "kernels/cpu/fast_math.h"

#include "kernels/cpu/row_math.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace tessera {

#if defined(__AVX512F__)
namespace {

// fast_erf on 16 lanes: the same operations in the same order, each table
// read a permute of a register holding the 16-entry table. (The
// zero-masking forms with every lane on are the plain instructions; GCC 12
// warns about the plain intrinsics' undefined pass-through operand.)
constexpr __mmask16 kAll = 0xffff;
using erf_table::kErfPerUnit;
using erf_table::kErfTerms;
static_assert(erf_table::kErfPieces == 16);

struct ErfTables {
  __m512 c[kErfTerms];
  __m512 center;
  ErfTables() {
    for (int k = 0; k < kErfTerms; ++k) c[k] = _mm512_loadu_ps(erf_table::kErfCoef[k]);
    center = _mm512_loadu_ps(erf_table::kErfCenter);
  }
};

// Entry i of table (the low 4 bits of i).
[[gnu::always_inline]] inline __m512 pick(__m512i i, __m512 table) { return _mm512_maskz_permutexvar_ps(kAll, i, table); }

[[gnu::always_inline]] inline __m512 erf16(__m512 x, const ErfTables& t) {
  const __m512 a = _mm512_abs_ps(x);
  // For a >= 4 (or NaN) the index is anything; that lane's result is
  // replaced (or stays NaN) below.
  const __m512i i = _mm512_maskz_cvttps_epi32(kAll, _mm512_mul_ps(a, _mm512_set1_ps(kErfPerUnit)));
  const __m512 u = _mm512_mul_ps(_mm512_sub_ps(a, pick(i, t.center)), _mm512_set1_ps(2.f * kErfPerUnit));
  __m512 p = pick(i, t.c[kErfTerms - 1]);
#pragma GCC unroll 16
  for (int k = kErfTerms - 2; k >= 1; --k) p = _mm512_fmadd_ps(p, u, pick(i, t.c[k]));
  const __mmask16 first = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.f / kErfPerUnit), _CMP_LT_OQ);
  const __m512 add = _mm512_mask_blend_ps(first, pick(i, t.c[0]), a);
  __m512 r = _mm512_fmadd_ps(p, u, add);
  r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(4.f), _CMP_GE_OQ), r, _mm512_set1_ps(1.f));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

// PyTorch's exact GELU as exported, each step rounded as its op stores it.
// One vector at a time: unlike AVX2's erf8_ways, interleaving 2 to 6
// vectors gained nothing on a Zen 4 core, whose FP pipes the table
// permutes and FMAs of one vector already fill.
[[gnu::always_inline]] inline __m512 gelu16(__m512 y, __m512 a, __m512 b, const ErfTables& tables) {
  __m512 t = _mm512_div_ps(y, a);
  t = erf16(t, tables);
  t = _mm512_add_ps(t, _mm512_set1_ps(1.f));
  t = _mm512_mul_ps(y, t);
  return _mm512_mul_ps(t, b);
}

}  // namespace
#elif defined(__AVX2__) && defined(__FMA__)
namespace {

// fast_erf on 8 lanes, the same operations in the same order as erf16:
// each table read is an in-lane permute of the 4-entry table held in both
// 128-bit lanes (the index's low 2 bits select).
using erf_table::kErfTerms;
static_assert(erf_table::kErfPieces == 4);

struct ErfTables {
  __m256 c[kErfTerms];
  __m256 center;
  ErfTables() {
    for (int k = 0; k < kErfTerms; ++k)
      c[k] = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(erf_table::kErfCoef[k]));
    center = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(erf_table::kErfCenter));
  }
};

[[gnu::always_inline]] inline __m256 pick(__m256i i, __m256 table) { return _mm256_permutevar_ps(table, i); }

[[gnu::always_inline]] inline __m256 erf8(__m256 x, const ErfTables& t) {
  const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  const __m256 a = _mm256_andnot_ps(sign_bit, x);
  // For a >= 4 (or NaN) the index is anything; that lane's result is
  // replaced (or stays NaN) below.
  const __m256i i = _mm256_cvttps_epi32(a);
  const __m256 u = _mm256_mul_ps(_mm256_sub_ps(a, pick(i, t.center)), _mm256_set1_ps(2.f));
  __m256 p = pick(i, t.c[kErfTerms - 1]);
#pragma GCC unroll 16
  for (int k = kErfTerms - 2; k >= 1; --k) p = _mm256_fmadd_ps(p, u, pick(i, t.c[k]));
  const __m256 first = _mm256_cmp_ps(a, _mm256_set1_ps(1.f), _CMP_LT_OQ);
  const __m256 add = _mm256_blendv_ps(pick(i, t.c[0]), a, first);
  __m256 r = _mm256_fmadd_ps(p, u, add);
  r = _mm256_blendv_ps(r, _mm256_set1_ps(1.f), _mm256_cmp_ps(a, _mm256_set1_ps(4.f), _CMP_GE_OQ));
  return _mm256_or_ps(r, _mm256_and_ps(x, sign_bit));
}

[[gnu::always_inline]] inline __m256 gelu8(__m256 y, __m256 a, __m256 b, const ErfTables& t) {
  __m256 v = _mm256_div_ps(y, a);
  v = erf8(v, t);
  v = _mm256_add_ps(v, _mm256_set1_ps(1.f));
  v = _mm256_mul_ps(y, v);
  return _mm256_mul_ps(v, b);
}

// erf8 on kErfWays vectors at once, each coefficient's table read from
// memory once for all of them: one vector's polynomial is a chain of 10
// dependent FMAs, and the out-of-order window overlapped too few of
// them (a 16K-element GELU: 17 us one vector at a time, 10.6 four at a
// time, on a Zen 3 core). Lane by lane the same operations as erf8.
constexpr int kErfWays = 4;

[[gnu::always_inline]] inline __m256 table(const float* t) {
  return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(t));
}

[[gnu::always_inline]] inline void erf8_ways(const __m256* x, __m256* r) {
  const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  __m256 a[kErfWays], u[kErfWays], p[kErfWays];
  __m256i i[kErfWays];
  const __m256 center = table(erf_table::kErfCenter), top = table(erf_table::kErfCoef[kErfTerms - 1]);
#pragma GCC unroll 4
  for (int v = 0; v < kErfWays; ++v) {
    a[v] = _mm256_andnot_ps(sign_bit, x[v]);
    i[v] = _mm256_cvttps_epi32(a[v]);
    u[v] = _mm256_mul_ps(_mm256_sub_ps(a[v], pick(i[v], center)), _mm256_set1_ps(2.f));
    p[v] = pick(i[v], top);
  }
#pragma GCC unroll 16
  for (int k = kErfTerms - 2; k >= 1; --k) {
    const __m256 c = table(erf_table::kErfCoef[k]);
#pragma GCC unroll 4
    for (int v = 0; v < kErfWays; ++v) p[v] = _mm256_fmadd_ps(p[v], u[v], pick(i[v], c));
  }
  const __m256 c0 = table(erf_table::kErfCoef[0]);
#pragma GCC unroll 4
  for (int v = 0; v < kErfWays; ++v) {
    const __m256 first = _mm256_cmp_ps(a[v], _mm256_set1_ps(1.f), _CMP_LT_OQ);
    const __m256 add = _mm256_blendv_ps(pick(i[v], c0), a[v], first);
    __m256 e = _mm256_fmadd_ps(p[v], u[v], add);
    e = _mm256_blendv_ps(e, _mm256_set1_ps(1.f), _mm256_cmp_ps(a[v], _mm256_set1_ps(4.f), _CMP_GE_OQ));
    r[v] = _mm256_or_ps(e, _mm256_and_ps(x[v], sign_bit));
  }
}

}  // namespace
#endif

void gelu_n(float* y, int64_t n, float a, float b) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const ErfTables tables;
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(y + i), va, vb, tables));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, y + i), va, vb, tables));
    return;
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  for (; i + 8 * kErfWays <= n; i += 8 * kErfWays) {
    __m256 in[kErfWays], t[kErfWays];
#pragma GCC unroll 4
    for (int v = 0; v < kErfWays; ++v) {
      in[v] = _mm256_loadu_ps(y + i + 8 * v);
      t[v] = _mm256_div_ps(in[v], va);
    }
    erf8_ways(t, t);
#pragma GCC unroll 4
    for (int v = 0; v < kErfWays; ++v) {
      const __m256 g = _mm256_mul_ps(in[v], _mm256_add_ps(t[v], _mm256_set1_ps(1.f)));
      _mm256_storeu_ps(y + i + 8 * v, _mm256_mul_ps(g, vb));
    }
  }
  const ErfTables tables;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu8(_mm256_loadu_ps(y + i), va, vb, tables));
#endif
  for (; i < n; ++i) {
    float t = y[i] / a;
    t = fast_erf(t);
    t = t + 1.f;
    t = y[i] * t;
    y[i] = t * b;
  }
}

void erf_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const ErfTables tables;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, erf16(_mm512_loadu_ps(x + i), tables));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, erf16(_mm512_maskz_loadu_ps(m, x + i), tables));
    return;
  }
#elif defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 * kErfWays <= n; i += 8 * kErfWays) {
    __m256 t[kErfWays];
#pragma GCC unroll 4
    for (int v = 0; v < kErfWays; ++v) t[v] = _mm256_loadu_ps(x + i + 8 * v);
    erf8_ways(t, t);
#pragma GCC unroll 4
    for (int v = 0; v < kErfWays; ++v) _mm256_storeu_ps(y + i + 8 * v, t[v]);
  }
  const ErfTables tables;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, erf8(_mm256_loadu_ps(x + i), tables));
#endif
  for (; i < n; ++i) y[i] = fast_erf(x[i]);
}

void sigmoid_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, row_math_detail::sigmoid16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, row_math_detail::sigmoid16(_mm512_maskz_loadu_ps(m, x + i)));
    return;
  }
#elif defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, row_math_detail::sigmoid8(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = fast_sigmoid(x[i]);
}

void silu_n(float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(y + i);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(v, row_math_detail::sigmoid16(v)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, y + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, row_math_detail::sigmoid16(v)));
    return;
  }
#elif defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(y + i);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, row_math_detail::sigmoid8(v)));
  }
#endif
  for (; i < n; ++i) {
    const float s = fast_sigmoid(y[i]);
    y[i] = y[i] * s;
  }
}

}  // namespace tessera
