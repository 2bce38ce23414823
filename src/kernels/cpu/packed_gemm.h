// GEMM with a constant left operand packed once, ahead of time: C = A * B
// with A (rows x reduction) packed in blocks of kPackRows rows and B
// (reduction x columns) read in place, its columns the vector dimension.
// Winograd's per-point GEMMs (winograd.cc) use it: their B is the
// transformed input, already laid out with tiles along rows, and a
// library sgemm would pack both operands again on every call.
//
// The conv GEMM paths measured no better with it than with sgemm inside
// whole models (ResNet-18 on two vEUs slower: 9.7 -> 12.2 ms), where B
// rows are activation rows far apart in memory; they keep sgemm.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// Rows of A per packed block: the kernel keeps kPackRows x 48 outputs in
// registers.
inline constexpr int64_t kPackRows = 8;

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

}  // namespace tessera
