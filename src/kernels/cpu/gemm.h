// Row-major single-precision GEMM on one thread, the math inside heavy
// rTasks: C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C. Backed by
// oneDNN's dnnl_sgemm, chosen by measurement (docs/math-libraries.md).
#pragma once

#include <cstdint>

namespace tessera {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Reductions up to this length run gemm_rows in matmul_gemm.
inline constexpr int64_t kRowsGemmMaxK = 512;

// C = A * B, neither transposed, C overwritten: the MatMul kernel's and
// the fused attention's GEMM. Up to kRowsGemmMaxK it is gemm_rows
// (packed_gemm.h), which on one thread beats sgemm on the small tiles of
// transformer layers (8 rows x 512 x 128: 4.6 -> 4.4 us; 64 x 64 x 64:
// 2.6 -> 2.3 us) and gives every output the same value whatever the tile;
// the choice depends on k alone, so tiles of one product never mix the
// two. Longer reductions (and builds without AVX-512) use sgemm.
void matmul_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                 int64_t ldc);

}  // namespace tessera
