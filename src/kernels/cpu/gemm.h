// Row-major single-precision GEMM on one thread, the math inside heavy
// rTasks: C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C. Backed by
// oneDNN's dnnl_sgemm, chosen by measurement (docs/math-libraries.md).
#pragma once

#include <cstdint>

namespace tessera {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// matmul_gemm runs gemm_rows for reductions of at most kRowsGemmMaxK in
// products of at least kRowsGemmMinM rows, or of a B of at most
// kRowsGemmSmallB elements.
inline constexpr int64_t kRowsGemmMaxK = 512;
inline constexpr int64_t kRowsGemmMinM = 8;
inline constexpr int64_t kRowsGemmSmallB = 32768;

// C = A * B, neither transposed, C overwritten: the MatMul kernel's and
// the fused attention's GEMM, on a tile of a product of product_m x
// product_n outputs. Where the constants above allow, it is gemm_rows
// (packed_gemm.h), which on one thread beats sgemm on the small tiles of
// transformer layers, by far on tiny products where sgemm's per-call cost
// dominates (6 x 48 x 48: 0.16 against 0.36 us), and gives every output the
// same value whatever the tile. Longer reductions (sgemm's k blocking
// wins), products of a few rows with a large B (gemm_rows walks B in
// 48-column panels with a little reuse per row: a 1 x 1024 x 256 GEMV
// takes 8.4 us in sgemm, 35 in gemm_rows) use sgemm. The choice depends
// on the product, never on the tile, so the tiles of one product never mix
// the two.
void matmul_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                 int64_t ldc, int64_t product_m, int64_t product_n);

// Whether matmul_gemm runs gemm_rows (else sgemm) for a product of
// product_m x k by k x product_n.
inline bool matmul_uses_rows(int64_t k, int64_t product_m, int64_t product_n) {
  return k <= kRowsGemmMaxK && (product_m >= kRowsGemmMinM || product_n * k <= kRowsGemmSmallB);
}

}  // namespace tessera
