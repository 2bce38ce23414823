// Row-major single-precision GEMM on one thread, the math inside heavy
// rTasks: C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C. Backed by
// oneDNN's dnnl_sgemm, chosen by measurement (docs/math-libraries.md).
#pragma once

#include <cstdint>

namespace tessera {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace tessera
