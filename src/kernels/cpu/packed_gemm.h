// GEMM with a constant left operand packed once, ahead of time: C = A * B
// with A (rows x reduction) packed in blocks of kPackRows rows and B
// (reduction x columns) read in place, its columns the vector dimension.
// Winograd's per-point GEMMs (winograd.cc) use it: their B is the
// transformed input, already laid out with tiles along rows, and a
// library sgemm would pack both operands again on every call.
//
// 1x1 convs with a short reduction (conv.cc) use it too, with their bias,
// residual and Relu/Clip applied to the accumulators before the store
// (GemmPost): on one thread a 96x16 by 16x3136 product with bias and Clip
// takes 49 us this way against 62 us for sgemm and a pass over the output.
// With AVX-512, so do 1x1 convs on small planes at any reduction: there
// the weights outweigh the plane, and a plane of 48 + 1 to 4 pixels costs
// one pass over them (conv.cc). The im2col paths, with long reductions,
// keep sgemm: they measured no better with it inside whole models
// (ResNet-18 on two vEUs slower: 9.7 -> 12.2 ms).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/simd.h"  // TESSERA_SIMD: the kernels run in vector registers

namespace tessera {

// Rows of A per packed block: the kernel keeps kPackRows x 48 outputs in
// registers.
inline constexpr int64_t kPackRows = 8;

// The 1 x 1 convs (conv.cc) and the inverted residual's project
// (inverted_residual.cc) multiply with packed_gemm up to this reduction,
// with sgemm beyond (conv.cc gives the measurements).
inline constexpr int64_t kPackedGemmMaxK = 256;

// Floats that pack_rows writes for an m x k matrix.
size_t packed_size(int64_t m, int64_t k);

// Packs A (m x k, row stride lda) as blocks of kPackRows rows, each stored
// [k][kPackRows], the last block zero-padded.
void pack_rows(const float* a, int64_t m, int64_t k, int64_t lda, float* out);

// C[0, m) x [0, n) = A * B: A packed by pack_rows (start at a block:
// packed + (r0 / kPackRows) * k * kPackRows for rows from r0, a multiple of
// kPackRows), B k x n with row stride ldb, C with row stride ldc.
void packed_gemm(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                 int64_t ldc);

// C[0, m) x [0, n) = A * B with A (m x k, row stride lda) and B (k x n,
// row stride ldb) both read in place, 8 rows x 48 columns of accumulators
// in registers with AVX-512 (4 x 24 with AVX2 and FMA; portable loops
// otherwise). Each output is one chain of fused multiply-adds over
// i = 0 .. k-1 from 0, so its value does not depend on the tiling of C
// (the fused attention's score block equals the unfused MatMul's) nor on
// the instruction set.
void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
               int64_t ldc);

// A constant B (k x n) packed for gemm_rows_packed: panels of
// packed_cols_width() columns, each stored [k][width] (the last panel
// zero-padded), so that a kernel's column block reads one contiguous run.
// In place, a block of B's columns touches a row of B in every step of
// the reduction; rows a multiple of 2 KB apart (n = 512) fall into a few
// sets of AVX2's L1, and a 32 x 512 by 512 x 128 product ran at 57
// GFLOP/s in place against 87 packed, on one thread.
int64_t packed_cols_width();
size_t packed_cols_size(int64_t k, int64_t n);
void pack_cols(const float* b, int64_t k, int64_t n, int64_t ldb, float* out);

// gemm_rows with B packed by pack_cols (B has `n` columns): C[0, m) x
// [0, n1 - n0) = A * B[:, n0 : n1), C with row stride ldc. Each output is
// the same chain of fused multiply-adds as gemm_rows gives it: the same
// bits whether B is packed or not, whatever the tile.
void gemm_rows_packed(int64_t m, int64_t n0, int64_t n1, int64_t k, const float* a, int64_t lda,
                      const float* packed, float* c, int64_t ldc);

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: a GEMM
// operand transposed (16 x 16 blocks in registers with AVX-512, 8 x 8 with
// AVX2).
void transpose(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd);

// What packed_gemm_post applies to each output before storing it, in the
// order of the unfused ops: c = clamp((A * B + bias[row]) + res). The
// clamp is Relu (NaN becomes 0) or Clip to [lo, hi] (NaN stays).
struct GemmPost {
  const float* bias = nullptr;  // one per row of C, or none
  const float* res = nullptr;   // m x n with row stride ldr, or none
  int64_t ldr = 0;
  enum class Clamp : uint8_t { kNone, kRelu, kClip } clamp = Clamp::kNone;
  float lo = 0, hi = 0;
};

// packed_gemm with `post` applied in registers.
void packed_gemm_post(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                      int64_t ldc, const GemmPost& post);

}  // namespace tessera
