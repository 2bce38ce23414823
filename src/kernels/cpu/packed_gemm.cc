#include "kernels/cpu/packed_gemm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/simd.h"

namespace tessera {
namespace {

// One output through `post` (row r, column col of the tile), as finish()
// does a vector of them. Used by the AVX-512 tail and the portable path
// only, so an AVX2 build leaves it unused.
[[maybe_unused]] inline float finish_one(float v, int64_t r, int64_t col, const GemmPost& post) {
  if (post.bias != nullptr) v = v + post.bias[r];
  if (post.res != nullptr) v = v + post.res[r * post.ldr + col];
  if (post.clamp == GemmPost::Clamp::kRelu) v = v > 0.f ? v : 0.f;
  else if (post.clamp == GemmPost::Clamp::kClip) v = v < post.lo ? post.lo : (v > post.hi ? post.hi : v);
  return v;
}

#if defined(TESSERA_SIMD)
#if defined(__AVX512F__) && defined(__AVX512VL__)
#define TESSERA_PACKED_TAIL 1
// Columns past a multiple of 3 vectors that a full block's pass computes
// beside it (micro's kTail): 24 accumulators, 3 vectors of B, A's
// column and these fill the 32 registers.
constexpr int64_t kMaxTail = 4;
#endif
using simd::Vec;
// Rows of accumulators per micro-kernel: 8 x 3 vectors in AVX-512's 32
// registers; 4 x 3 in AVX2's 16, beside 3 vectors of B and a broadcast.
constexpr int kTileRows = Vec::kRegisters >= 32 ? 8 : 4;
// Rows per tile for a column block of 1 or 2 vectors in gemm_rows: AVX2's
// 4 rows would hold 4 or 8 accumulators, too few to cover the FMA
// latency of two units (a 64 x 16 product ran 4.6 us with 4 rows, 2.9
// with 6); 12 rows of one vector ran slower than 8, their row pointers
// spilled.
constexpr int kNarrowRows1 = Vec::kRegisters >= 32 ? kTileRows : 8;
constexpr int kNarrowRows2 = Vec::kRegisters >= 32 ? kTileRows : 6;
// Most rows of A for which run_packed prefetches B's next column block
// (AVX2; see there).
constexpr int64_t kPrefetchMaxRows = 16;
// Longest reduction whose column block run_packed copies to a panel on
// the stack (AVX2: 48 KB).
constexpr int64_t kPanelMaxK = 512;
constexpr int64_t kLanes = Vec::kLanes;
using VecT = Vec::T;
using Mask = Vec::Mask;

// Output vector q of row r: bias, residual, clamp (see GemmPost), with
// what `post` holds fixed at compile time (store_tile's dispatch) so that
// a tile's epilogue has no branch per vector.
template <GemmPost::Clamp kClamp, bool kBias, bool kRes>
[[gnu::always_inline]] inline VecT finish(VecT v, VecT bias, const float* res, Mask last, bool full, VecT lo, VecT hi) {
  if constexpr (kBias) v = Vec::add(v, bias);
  if constexpr (kRes) v = Vec::add(v, full ? Vec::load(res) : Vec::load(res, last));
  if constexpr (kClamp == GemmPost::Clamp::kRelu) {
    const VecT z = Vec::zero();
    v = v > z ? v : z;
  } else if constexpr (kClamp == GemmPost::Clamp::kClip) {
    v = v < lo ? lo : (v > hi ? hi : v);
  }
  return v;
}

// Stores the first `rows` rows of a tile's accumulators through finish().
template <int kRows, int kNv, bool kFull, GemmPost::Clamp kClamp, bool kBias, bool kRes>
[[gnu::always_inline]] inline void store_tile(VecT (&acc)[kRows][kNv], Mask last, float* c, int64_t ldc, int64_t rows,
                       const GemmPost& post) {
  // Copies the stores to C cannot alias (`post` holds floats).
  const float* const bias = post.bias;
  const float* const res = post.res;
  const int64_t ldr = post.ldr;
  const VecT lo = Vec::set1(post.lo), hi = Vec::set1(post.hi);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    const VecT b = kBias ? Vec::set1(bias[r]) : Vec::zero();
#pragma GCC unroll 3
    for (int q = 0; q < kNv; ++q) {
      const bool full = kFull || q + 1 < kNv;
      const VecT v = finish<kClamp, kBias, kRes>(acc[r][q], b, kRes ? res + r * ldr + q * kLanes : nullptr, last,
                                                 full, lo, hi);
      if (full) Vec::store(c + r * ldc + q * kLanes, v);
      else Vec::store(c + r * ldc + q * kLanes, last, v);
    }
  }
}

// store_tile with `post`'s clamp, bias and residual as template arguments:
// case (clamp * 2 + bias) * 2 + residual.
template <int kRows, int kNv, bool kFull, int kCase>
[[gnu::always_inline]] inline void store_case(VecT (&acc)[kRows][kNv], Mask last, float* c, int64_t ldc,
                                              int64_t rows, const GemmPost& post) {
  store_tile<kRows, kNv, kFull, static_cast<GemmPost::Clamp>(kCase / 4), (kCase & 2) != 0, (kCase & 1) != 0>(
      acc, last, c, ldc, rows, post);
}

template <int kRows, int kNv, bool kFull, bool kPost>
[[gnu::always_inline]] inline void store_post(VecT (&acc)[kRows][kNv], Mask last, float* c, int64_t ldc,
                                              int64_t rows, const GemmPost& post) {
  if constexpr (!kPost) {
    store_case<kRows, kNv, kFull, 0>(acc, last, c, ldc, rows, post);
  } else {
    static_assert(static_cast<int>(GemmPost::Clamp::kNone) == 0 && static_cast<int>(GemmPost::Clamp::kRelu) == 1 &&
                  static_cast<int>(GemmPost::Clamp::kClip) == 2);
    switch ((static_cast<int>(post.clamp) * 2 + (post.bias != nullptr)) * 2 + (post.res != nullptr)) {
      case 0: store_case<kRows, kNv, kFull, 0>(acc, last, c, ldc, rows, post); break;
      case 1: store_case<kRows, kNv, kFull, 1>(acc, last, c, ldc, rows, post); break;
      case 2: store_case<kRows, kNv, kFull, 2>(acc, last, c, ldc, rows, post); break;
      case 3: store_case<kRows, kNv, kFull, 3>(acc, last, c, ldc, rows, post); break;
      case 4: store_case<kRows, kNv, kFull, 4>(acc, last, c, ldc, rows, post); break;
      case 5: store_case<kRows, kNv, kFull, 5>(acc, last, c, ldc, rows, post); break;
      case 6: store_case<kRows, kNv, kFull, 6>(acc, last, c, ldc, rows, post); break;
      case 7: store_case<kRows, kNv, kFull, 7>(acc, last, c, ldc, rows, post); break;
      case 8: store_case<kRows, kNv, kFull, 8>(acc, last, c, ldc, rows, post); break;
      case 9: store_case<kRows, kNv, kFull, 9>(acc, last, c, ldc, rows, post); break;
      case 10: store_case<kRows, kNv, kFull, 10>(acc, last, c, ldc, rows, post); break;
      default: store_case<kRows, kNv, kFull, 11>(acc, last, c, ldc, rows, post); break;
    }
  }
}

// A block of up to 3 vectors of columns from one with `left` columns to go:
// its vector count and the last vector's lanes.
struct ColumnBlock {
  int nv;
  Mask last;
  bool full;  // the last vector too: plain loads and stores (AVX2's masked ones cost more)
};
inline ColumnBlock column_block(int64_t left) {
  left = std::min<int64_t>(left, 3 * kLanes);
  const int nv = static_cast<int>((left + kLanes - 1) / kLanes);
  return {nv, Vec::first(left - (nv - 1) * kLanes), left == nv * kLanes};
}

// Where a kernel reads A's element (row r, reduction index i): blocks
// packed by pack_rows (from row `first` of a block), or rows read in place.
struct PackedA {
  const float* a;
  float operator()(int r, int64_t i) const { return a[i * kPackRows + r]; }
};
template <int kRows>
struct RowsA {
  const float* row[kRows];
  float operator()(int r, int64_t i) const { return row[r][i]; }
};

// kRows rows x kNv vectors of columns, accumulated in registers over
// all of k, each A element broadcast from memory. Every loop over
// registers has a constant trip count (and is unrolled) so that the
// accumulators stay in registers. Rows from `rows` on are computed (on
// whatever A gives there) but not stored.
// With kPost, `post` (its bias and residual already at this tile) is
// applied before the store.
//
// With kTail > 0 (AVX-512 with VL, a full block of 3 vectors, A packed in
// blocks of 8 rows), the kTail columns after the block are computed in
// the same pass over A: per column, its 8 rows in one 256-bit
// accumulator, A's 8 values at i loaded as one vector and the column's
// B value broadcast. A column left over past a multiple of 3 vectors (49
// = 48 + 1 pixels on a 7 x 7 plane) thus costs one more FMA per i, not a
// second pass over all of A's rows. Each output is the same chain of
// FMAs either way.
//
// With kNext, step i also prefetches the first and last float of row i of
// `next` (the next column block of B, rows `next_ld` bytes apart) into L1.
template <int kRows, int kNv, bool kPost, bool kFull, typename A, int kTail = 0, bool kCopy = false, bool kNext = false>
void micro(const A& a, int64_t k, const float* b, int64_t ldb, Mask last, float* c, int64_t ldc, int64_t rows,
           const GemmPost& post, float* panel = nullptr, const char* next = nullptr, int64_t next_ld = 0) {
  VecT acc[kRows][kNv];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
    for (int q = 0; q < kNv; ++q) acc[r][q] = Vec::zero();
#if defined(TESSERA_PACKED_TAIL)
  static_assert(kTail == 0 || (kRows == kPackRows && kNv == 3 && kFull && std::is_same_v<A, PackedA>));
  __m256 tail[kTail > 0 ? kTail : 1];
#pragma GCC unroll 4
  for (int e = 0; e < kTail; ++e) tail[e] = _mm256_setzero_ps();
#else
  static_assert(kTail == 0);
#endif
  if constexpr (kPost) {
    // The residual's lines of this tile, asked for now: their loads come
    // after the whole loop over k, beyond what the core runs ahead.
    if (post.res != nullptr) {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        __builtin_prefetch(post.res + r * post.ldr, 0, 3);
        __builtin_prefetch(post.res + r * post.ldr + kNv * kLanes - 1, 0, 3);
      }
    }
  }
  for (int64_t i = 0; i < k; ++i) {
    VecT x[kNv];
#pragma GCC unroll 3
    for (int q = 0; q < kNv; ++q) {
      x[q] = kFull || q + 1 < kNv ? Vec::load(b + i * ldb + q * kLanes) : Vec::load(b + i * ldb + q * kLanes, last);
      if constexpr (Vec::kRegisters < 32) asm("" : "+x"(x[q]));
      if constexpr (kCopy) Vec::store(panel + i * 3 * kLanes + q * kLanes, x[q]);
    }
    if constexpr (kNext) {
      __builtin_prefetch(next + i * next_ld, 0, 3);
      __builtin_prefetch(next + i * next_ld + (3 * kLanes - 1) * sizeof(float), 0, 3);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const VecT s = Vec::set1(a(r, i));
#pragma GCC unroll 3
      for (int q = 0; q < kNv; ++q) acc[r][q] = Vec::fma(s, x[q], acc[r][q]);
    }
#if defined(TESSERA_PACKED_TAIL)
    if constexpr (kTail > 0) {
      const __m256 col = _mm256_loadu_ps(a.a + i * kPackRows);
#pragma GCC unroll 4
      for (int e = 0; e < kTail; ++e)
        tail[e] = _mm256_fmadd_ps(col, _mm256_set1_ps(b[i * ldb + kNv * kLanes + e]), tail[e]);
    }
#endif
  }
  store_post<kRows, kNv, kFull, kPost>(acc, last, c, ldc, rows, post);
#if defined(TESSERA_PACKED_TAIL)
  for (int e = 0; e < kTail; ++e) {
    alignas(32) float rows_of[kPackRows];
    _mm256_store_ps(rows_of, tail[e]);
    const int64_t col = kNv * kLanes + e;
    for (int r = 0; r < rows; ++r) {
      c[r * ldc + col] = kPost ? finish_one(rows_of[r], r, col, post) : rows_of[r];
    }
  }
#endif
}

// micro() for a column block of nv vectors (1 to 3).
template <int kRows, bool kPost, bool kFull, typename A, bool kCopy, bool kNext>
[[gnu::always_inline]] inline void micro_nv(int nv, const A& a, int64_t k, const float* b, int64_t ldb, Mask last,
                                            float* c, int64_t ldc, int64_t rows, const GemmPost& post, float* panel,
                                            const char* next, int64_t next_ld) {
  if (nv == 3)
    micro<kRows, 3, kPost, kFull, A, 0, kCopy, kNext>(a, k, b, ldb, last, c, ldc, rows, post, panel, next, next_ld);
  else if (nv == 2)
    micro<kRows, 2, kPost, kFull, A, 0, kCopy, kNext>(a, k, b, ldb, last, c, ldc, rows, post, panel, next, next_ld);
  else
    micro<kRows, 1, kPost, kFull, A, 0, kCopy, kNext>(a, k, b, ldb, last, c, ldc, rows, post, panel, next, next_ld);
}

// micro() for column block `cb`; with kCopy, B's block is also stored
// to `panel` (rows 3 vectors apart) as it is read.
template <int kRows, bool kPost, typename A, bool kCopy = false, bool kNext = false>
void micro_block(const A& a, int64_t k, const float* b, int64_t ldb, const ColumnBlock& cb, float* c, int64_t ldc,
                 int64_t rows, const GemmPost& post, float* panel = nullptr, const char* next = nullptr,
                 int64_t next_ld = 0) {
  const Mask m = cb.last;
  if (cb.full)
    micro_nv<kRows, kPost, true, A, kCopy, kNext>(cb.nv, a, k, b, ldb, m, c, ldc, rows, post, panel, next, next_ld);
  else
    micro_nv<kRows, kPost, false, A, kCopy, kNext>(cb.nv, a, k, b, ldb, m, c, ldc, rows, post, panel, next, next_ld);
}

// kRows rows of C = A * B with A read in place (row r of the block at
// a + r * lda; rows past `rows` repeat the last one).
template <int kRows>
void rows_block(const float* a, int64_t lda, int64_t rows, int64_t k, const float* b, int64_t ldb,
                const ColumnBlock& cb, float* c, int64_t ldc) {
  RowsA<kRows> ar;
  for (int r = 0; r < kRows; ++r) ar.row[r] = a + (r < rows ? r : rows - 1) * lda;
  micro_block<kRows, false>(ar, k, b, ldb, cb, c, ldc, rows, GemmPost());
}

// rows_block for a column block of exactly kNv vectors.
template <int kRows, int kNv>
void rows_block_nv(const float* a, int64_t lda, int64_t rows, int64_t k, const float* b, int64_t ldb,
                   const ColumnBlock& cb, float* c, int64_t ldc) {
  RowsA<kRows> ar;
  for (int r = 0; r < kRows; ++r) ar.row[r] = a + (r < rows ? r : rows - 1) * lda;
  if (cb.full) micro<kRows, kNv, false, true>(ar, k, b, ldb, cb.last, c, ldc, rows, GemmPost());
  else micro<kRows, kNv, false, false>(ar, k, b, ldb, cb.last, c, ldc, rows, GemmPost());
}
#endif

#if defined(__AVX512F__)
// dst (16 x 16, row stride ldd) = the transpose of src (16 x 16, row
// stride lds): pairs of rows interleaved, then 4 x 4 blocks, then 128-bit
// lanes gathered in two rounds. (Zero-masking forms with every lane on:
// GCC 12 warns about the plain intrinsics' undefined pass-through.)
constexpr __mmask16 kAll = 0xffff;

constexpr int64_t kTransposeBlock = 16;
void transpose_block(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_ps(kAll, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[2 * i], r[2 * i + 1]);
  }
  // r[4i + m], lane k: column 4k + m of rows 4i .. 4i + 3.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    t[m] = _mm512_maskz_shuffle_f32x4(kAll, r[m], r[4 + m], 0x88);
    t[4 + m] = _mm512_maskz_shuffle_f32x4(kAll, r[m], r[4 + m], 0xDD);
    t[8 + m] = _mm512_maskz_shuffle_f32x4(kAll, r[8 + m], r[12 + m], 0x88);
    t[12 + m] = _mm512_maskz_shuffle_f32x4(kAll, r[8 + m], r[12 + m], 0xDD);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    _mm512_storeu_ps(dst + m * ldd, _mm512_maskz_shuffle_f32x4(kAll, t[m], t[8 + m], 0x88));
    _mm512_storeu_ps(dst + (4 + m) * ldd, _mm512_maskz_shuffle_f32x4(kAll, t[4 + m], t[12 + m], 0x88));
    _mm512_storeu_ps(dst + (8 + m) * ldd, _mm512_maskz_shuffle_f32x4(kAll, t[m], t[8 + m], 0xDD));
    _mm512_storeu_ps(dst + (12 + m) * ldd, _mm512_maskz_shuffle_f32x4(kAll, t[4 + m], t[12 + m], 0xDD));
  }
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// dst (8 x 8, row stride ldd) = the transpose of src (8 x 8, row stride
// lds): pairs of rows interleaved, then 2 x 2 blocks of pairs, then the
// 128-bit halves exchanged.
constexpr int64_t kTransposeBlock = 8;
void transpose_block(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // r[4i + m], 128-bit half h, lane k: column 4h + m of row 4i + k.
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    r[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    _mm256_storeu_ps(dst + m * ldd, _mm256_permute2f128_ps(r[m], r[4 + m], 0x20));
    _mm256_storeu_ps(dst + (4 + m) * ldd, _mm256_permute2f128_ps(r[m], r[4 + m], 0x31));
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
#if defined(TESSERA_SIMD)
  // Column blocks of up to 3 vectors outside, row blocks inside: a block of
  // B (k x 3 vectors) stays in L1 while every row block passes over it.
  // A packed block of kPackRows rows runs as kPackRows / kTileRows
  // micro-kernels of kTileRows rows.
  //
  // With AVX2 the block goes to a contiguous panel when more than one row
  // block reads it: B's rows are often a multiple of 4 KB apart (planes of
  // 32 x 32 floats), all in one set of the 8-way L1, so in place the block
  // did not stay there (copied, 32 x 160 by 160 x 1024 took half the
  // time). The first row block stores it there as it reads it, its FMAs
  // covering the loads from L2, rather than a copy pass first (whose
  // loads nothing hid). AVX-512 builds read B in place, as measured
  // before; their L1 has 12 ways.
  //
  // In packed_gemm_post (the 1 x 1 convs), where a panel is used and A
  // has few rows (rTasks of whole output planes), the second row block
  // prefetches the next column block of B. B's rows are planes apart,
  // each block a short piece of every one: more streams than the
  // hardware prefetchers follow. Where another core wrote B, each line
  // was a trip to that core's L2 (one thread, 16 x 32 by 32 x 1024, B
  // just written by the other core: 15.9 us without, 13.8 with; by this
  // core, 13.5 and 13.3). With many row blocks the lines came in too
  // early and left L1 again before their block. Winograd's B
  // (packed_gemm) is its rTask's own scratch, just written.
  alignas(64) float panel[Vec::kRegisters < 32 ? kPanelMaxK * 3 * kLanes : 1];
  const bool use_panel = Vec::kRegisters < 32 && m > kTileRows && k <= kPanelMaxK;
  for (int64_t j = 0; j < n; j += 3 * kLanes) {
    const ColumnBlock cb = column_block(n - j);
    const float* bj = b + j;
#if defined(TESSERA_PACKED_TAIL)
    // The last full block takes the few columns after it along.
    const int64_t tail = n - j - 3 * kLanes;
    if (tail > 0 && tail <= kMaxTail) {
      for (int64_t r = 0; r < m; r += kPackRows) {
        GemmPost at = post;
        if constexpr (kPost) {
          if (at.bias != nullptr) at.bias += r;
          if (at.res != nullptr) at.res += r * at.ldr + j;
        }
        const PackedA pa{packed + r * k};
        const int64_t rows = std::min<int64_t>(kPackRows, m - r);
        float* cr = c + r * ldc + j;
        switch (tail) {
          case 1: micro<kPackRows, 3, kPost, true, PackedA, 1>(pa, k, bj, ldb, cb.last, cr, ldc, rows, at); break;
          case 2: micro<kPackRows, 3, kPost, true, PackedA, 2>(pa, k, bj, ldb, cb.last, cr, ldc, rows, at); break;
          case 3: micro<kPackRows, 3, kPost, true, PackedA, 3>(pa, k, bj, ldb, cb.last, cr, ldc, rows, at); break;
          default: micro<kPackRows, 3, kPost, true, PackedA, 4>(pa, k, bj, ldb, cb.last, cr, ldc, rows, at); break;
        }
      }
      break;
    }
#endif
    for (int64_t r = 0; r < m; r += kTileRows) {
      const float* a = packed + r / kPackRows * kPackRows * k + r % kPackRows;
      const int64_t rows = std::min<int64_t>(kTileRows, m - r);
      GemmPost at = post;
      if constexpr (kPost) {
        if (at.bias != nullptr) at.bias += r;
        if (at.res != nullptr) at.res += r * at.ldr + j;
      }
      const PackedA pa{a};
      float* cr = c + r * ldc + j;
      if (use_panel && r == 0) {
        micro_block<kTileRows, kPost, PackedA, true>(pa, k, bj, ldb, cb, cr, ldc, rows, at, panel);
      } else if (kPost && use_panel && r == kTileRows && m <= kPrefetchMaxRows && j + 3 * kLanes < n) {
        micro_block<kTileRows, kPost, PackedA, false, true>(pa, k, panel, 3 * kLanes, cb, cr, ldc, rows, at, nullptr,
                                                            reinterpret_cast<const char*>(bj + 3 * kLanes),
                                                            ldb * static_cast<int64_t>(sizeof(float)));
      } else if (use_panel) {
        micro_block<kTileRows, kPost>(pa, k, panel, 3 * kLanes, cb, cr, ldc, rows, at);
      } else {
        micro_block<kTileRows, kPost>(pa, k, bj, ldb, cb, cr, ldc, rows, at);
      }
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
          out[p] = kPost ? finish_one(acc[q][p], r + q, j + p, post) : acc[q][p];
        }
      }
    }
  }
#endif
}

}  // namespace

void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
               int64_t ldc) {
#if defined(TESSERA_SIMD)
  // Column blocks of up to 3 vectors outside, blocks of kTileRows rows
  // inside (a last block of 1, 2 or up to half as many rows with fewer
  // accumulators).
  for (int64_t j = 0; j < n; j += 3 * kLanes) {
    const ColumnBlock cb = column_block(n - j);
    int64_t r = 0;
    // A block of 1 or 2 vectors takes more rows at a time (kNarrowRows1/2).
    if (cb.nv == 1 && kNarrowRows1 > kTileRows) {
      for (; r + kNarrowRows1 <= m; r += kNarrowRows1)
        rows_block_nv<kNarrowRows1, 1>(a + r * lda, lda, kNarrowRows1, k, b + j, ldb, cb, c + r * ldc + j, ldc);
    } else if (cb.nv == 2 && kNarrowRows2 > kTileRows) {
      for (; r + kNarrowRows2 <= m; r += kNarrowRows2)
        rows_block_nv<kNarrowRows2, 2>(a + r * lda, lda, kNarrowRows2, k, b + j, ldb, cb, c + r * ldc + j, ldc);
    }
    while (r < m) {
      const int64_t rows = std::min<int64_t>(kTileRows, m - r);
      const float* ar = a + r * lda;
      float* cr = c + r * ldc + j;
      if (rows > kTileRows / 2) rows_block<kTileRows>(ar, lda, rows, k, b + j, ldb, cb, cr, ldc);
      else if (rows > 2) rows_block<kTileRows / 2>(ar, lda, rows, k, b + j, ldb, cb, cr, ldc);
      else if (rows == 2) rows_block<2>(ar, lda, rows, k, b + j, ldb, cb, cr, ldc);
      else rows_block<1>(ar, lda, rows, k, b + j, ldb, cb, cr, ldc);
      r += rows;
    }
  }
#else
  // Portable: each row's outputs, a column block at a time, as the same
  // in-order chains of fused multiply-adds.
  constexpr int64_t kCols = 64;
  float acc[kCols];
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; j += kCols) {
      const int64_t w = std::min(kCols, n - j);
      std::fill(acc, acc + w, 0.f);
      for (int64_t i = 0; i < k; ++i) {
        const float s = a[r * lda + i];
        const float* x = b + i * ldb + j;
        for (int64_t p = 0; p < w; ++p) acc[p] = std::fma(s, x[p], acc[p]);
      }
      std::copy(acc, acc + w, c + r * ldc + j);
    }
#endif
}

int64_t packed_cols_width() {
#if defined(TESSERA_SIMD)
  return 3 * kLanes;
#else
  return 64;
#endif
}

size_t packed_cols_size(int64_t k, int64_t n) {
  const int64_t w = packed_cols_width();
  return static_cast<size_t>((n + w - 1) / w * w * k);
}

void pack_cols(const float* b, int64_t k, int64_t n, int64_t ldb, float* out) {
  const int64_t w = packed_cols_width();
  for (int64_t j = 0; j < n; j += w)
    for (int64_t i = 0; i < k; ++i) {
      float* dst = out + j * k + i * w;
      for (int64_t c = 0; c < w; ++c) dst[c] = j + c < n ? b[i * ldb + j + c] : 0.f;
    }
}

void gemm_rows_packed(int64_t m, int64_t n0, int64_t n1, int64_t k, const float* a, int64_t lda,
                      const float* packed, float* c, int64_t ldc) {
  // Panel by panel; a tile that starts inside a panel reads it from there.
  const int64_t w = packed_cols_width();
  for (int64_t col = n0; col < n1;) {
    const int64_t p = col / w, off = col % w, width = std::min(w - off, n1 - col);
    gemm_rows(m, width, k, a, lda, packed + p * w * k + off, w, c + (col - n0), ldc);
    col += width;
  }
}

void transpose(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  int64_t r0 = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  constexpr int64_t kB = kTransposeBlock;  // blocks in registers, scalar edges
  for (; r0 + kB <= rows; r0 += kB) {
    int64_t c0 = 0;
    for (; c0 + kB <= cols; c0 += kB) transpose_block(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
    for (; c0 < cols; ++c0)
      for (int64_t r = r0; r < r0 + kB; ++r) dst[c0 * ldd + r] = src[r * lds + c0];
  }
#endif
  for (; r0 < rows; ++r0)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r0] = src[r0 * lds + c];
}

void packed_gemm(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                 int64_t ldc) {
  run_packed<false>(packed, m, k, b, ldb, n, c, ldc, GemmPost());
}

void packed_gemm_post(const float* packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                      int64_t ldc, const GemmPost& post) {
  run_packed<true>(packed, m, k, b, ldb, n, c, ldc, post);
}

}  // namespace tessera
