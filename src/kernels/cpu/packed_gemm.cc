#include "kernels/cpu/packed_gemm.h"

#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessera {
namespace {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;

// kPackRows rows x kNv vectors of 16 columns, accumulated in registers over
// all of k, each packed A element broadcast from memory. Every loop over
// registers has a constant trip count (and is unrolled) so that the
// accumulators stay in registers.
template <int kNv>
void micro(const float* a, int64_t k, const float* b, int64_t ldb, __mmask16 last, float* c, int64_t ldc,
           int64_t rows) {
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

void packed_gemm(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                 int64_t ldc) {
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
      if (nv == 3) micro<3>(a, k, b + j, ldb, last, c + r * ldc + j, ldc, rows);
      else if (nv == 2) micro<2>(a, k, b + j, ldb, last, c + r * ldc + j, ldc, rows);
      else micro<1>(a, k, b + j, ldb, last, c + r * ldc + j, ldc, rows);
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
      for (int64_t q = 0; q < rows; ++q) std::copy(acc[q], acc[q] + w, c + (r + q) * ldc + j);
    }
  }
#endif
}

}  // namespace tessera
