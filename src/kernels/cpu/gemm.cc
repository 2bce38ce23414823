#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "base/check.h"
#include "kernels/cpu/packed_gemm.h"

namespace tessera {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // empty sum
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  // oneDNN's sgemm runs a few vectors' width of columns slowly when they
  // end in a partial vector: whole 16-column vectors first, then the rest
  // (ResNet-18's 512-channel 3x3 convs on 7x7, an rTask of 49 pixels with
  // K = 4608: 48 + 1 in 590 us, 49 at once in 750).
  if (n > 32 && n <= 64 && n % 16 != 0) {
    const int64_t head = n / 16 * 16;
    sgemm(trans_a, trans_b, m, head, k, alpha, a, lda, b, ldb, beta, c, ldc);
    sgemm(trans_a, trans_b, m, n - head, k, alpha, a, lda, trans_b ? b + head * ldb : b + head, ldb, beta, c + head,
          ldc);
    return;
  }
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  TESSERA_CHECK_MSG(st == dnnl_success, "dnnl_sgemm(%lld, %lld, %lld) failed: %d", static_cast<long long>(m),
                    static_cast<long long>(n), static_cast<long long>(k), static_cast<int>(st));
}

void matmul_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                 int64_t ldc, int64_t product_m, int64_t product_n) {
  if (matmul_uses_rows(k, product_m, product_n)) gemm_rows(m, n, k, a, lda, b, ldb, c, ldc);
  else sgemm(false, false, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
}

}  // namespace tessera
