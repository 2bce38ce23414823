#include "kernels/cpu/packed_gemm.h"

#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessera {
namespace {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;

// Output vector q of row r: bias, residual, clamp (see GemmPost).
inline __m512 finish(__m512 v, int r, int q, __mmask16 last, const GemmPost& post, bool full) {
  if (post.bias != nullptr) v = _mm512_add_ps(v, _mm512_set1_ps(post.bias[r]));
  if (post.res != nullptr) {
    const float* src = post.res + r * post.ldr + q * kLanes;
    v = _mm512_add_ps(v, full ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(last, src));
  }
  if (post.clamp == GemmPost::Clamp::kRelu) {
    const __m512 z = _mm512_setzero_ps();
    v = v > z ? v : z;
  } else if (post.clamp == GemmPost::Clamp::kClip) {
    const __m512 l = _mm512_set1_ps(post.lo), h = _mm512_set1_ps(post.hi);
    v = v < l ? l : (v > h ? h : v);
  }
  return v;
}

// kPackRows rows x kNv vectors of 16 columns, accumulated in registers over
// all of k, each packed A element broadcast from memory. Every loop over
// registers has a constant trip count (and is unrolled) so that the
// accumulators stay in registers.
// With kPost, `post` (its bias and residual already at this tile) is
// applied before the store.
template <int kNv, bool kPost>
void micro(const float* a, int64_t k, const float* b, int64_t ldb, __mmask16 last, float* c, int64_t ldc,
           int64_t rows, const GemmPost& post) {
  __m512 acc[kPackRows][kNv];
#pragma GCC unroll 8
  for (int r = 0; r < kPackRows; ++r)
#pragma GCC unroll 3
    for (int q = 0; q < kNv; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m512 x[kNv];
#pragma GCC unroll 3
    for (int q = 0; q < kNv; ++q)
      x[q] = q + 1 < kNv ? _mm512_loadu_ps(b + i * ldb + q * kLanes)
                         : _mm512_maskz_loadu_ps(last, b + i * ldb + q * kLanes);
    const float* w = a + i * kPackRows;
#pragma GCC unroll 8
    for (int r = 0; r < kPackRows; ++r) {
      const __m512 s = _mm512_set1_ps(w[r]);
#pragma GCC unroll 3
      for (int q = 0; q < kNv; ++q) acc[r][q] = _mm512_fmadd_ps(s, x[q], acc[r][q]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kPackRows; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 3
    for (int q = 0; q < kNv; ++q) {
      if constexpr (kPost) acc[r][q] = finish(acc[r][q], r, q, last, post, q + 1 < kNv);
      if (q + 1 < kNv) _mm512_storeu_ps(c + r * ldc + q * kLanes, acc[r][q]);
      else _mm512_mask_storeu_ps(c + r * ldc + q * kLanes, last, acc[r][q]);
    }
  }
}
#endif

}  // namespace

size_t packed_size(int64_t m, int64_t k) {
  return static_cast<size_t>((m + kPackRows - 1) / kPackRows * kPackRows * k);
}

void pack_rows(const float* a, int64_t m, int64_t k, int64_t lda, float* out) {
  for (int64_t b = 0; b * kPackRows < m; ++b)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = b * kPackRows + r;
        out[(b * k + i) * kPackRows + r] = row < m ? a[row * lda + i] : 0.f;
      }
}

namespace {

template <bool kPost>
void run_packed(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                int64_t ldc, const GemmPost& post) {
#if defined(__AVX512F__)
  // Column blocks of up to 3 vectors outside, row blocks inside: a block of
  // B (k x 48) stays in L1 while every row block passes over it.
  for (int64_t j = 0; j < n; j += 3 * kLanes) {
    const int64_t left = std::min<int64_t>(n - j, 3 * kLanes);
    const int nv = static_cast<int>((left + kLanes - 1) / kLanes);
    const int64_t tail = left - (nv - 1) * kLanes;
    const __mmask16 last = tail >= kLanes ? __mmask16(0xffff) : static_cast<__mmask16>((1u << tail) - 1);
    for (int64_t r = 0; r < m; r += kPackRows) {
      const float* a = packed + r * k;
      const int64_t rows = std::min(kPackRows, m - r);
      GemmPost at = post;
      if constexpr (kPost) {
        if (at.bias != nullptr) at.bias += r;
        if (at.res != nullptr) at.res += r * at.ldr + j;
      }
      if (nv == 3) micro<3, kPost>(a, k, b + j, ldb, last, c + r * ldc + j, ldc, rows, at);
      else if (nv == 2) micro<2, kPost>(a, k, b + j, ldb, last, c + r * ldc + j, ldc, rows, at);
      else micro<1, kPost>(a, k, b + j, ldb, last, c + r * ldc + j, ldc, rows, at);
    }
  }
#else
  // Portable: a row block's outputs accumulated over k, a column block at
  // a time (loops the compiler vectorizes along the columns).
  constexpr int64_t kCols = 64;
  float acc[kPackRows][kCols];
  for (int64_t j = 0; j < n; j += kCols) {
    const int64_t w = std::min(kCols, n - j);
    for (int64_t r = 0; r < m; r += kPackRows) {
      const float* a = packed + r * k;
      for (auto& row : acc) std::fill(row, row + w, 0.f);
      for (int64_t i = 0; i < k; ++i) {
        const float* x = b + i * ldb + j;
        for (int64_t q = 0; q < kPackRows; ++q) {
          const float s = a[i * kPackRows + q];
          for (int64_t p = 0; p < w; ++p) acc[q][p] += s * x[p];
        }
      }
      const int64_t rows = std::min(kPackRows, m - r);
      for (int64_t q = 0; q < rows; ++q) {
        float* out = c + (r + q) * ldc + j;
        for (int64_t p = 0; p < w; ++p) {
          float v = acc[q][p];
          if constexpr (kPost) {
            if (post.bias != nullptr) v = v + post.bias[r + q];
            if (post.res != nullptr) v = v + post.res[(r + q) * post.ldr + j + p];
            if (post.clamp == GemmPost::Clamp::kRelu) v = v > 0 ? v : 0.f;
            else if (post.clamp == GemmPost::Clamp::kClip) v = v < post.lo ? post.lo : (v > post.hi ? post.hi : v);
          }
          out[p] = v;
        }
      }
    }
  }
#endif
}

}  // namespace

void packed_gemm(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                 int64_t ldc) {
  run_packed<false>(packed, m, k, b, ldb, n, c, ldc, GemmPost());
}

void packed_gemm_post(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                      int64_t ldc, const GemmPost& post) {
  run_packed<true>(packed, m, k, b, ldb, n, c, ldc, post);
}

}  // namespace tessera
