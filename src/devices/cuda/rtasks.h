// The CUDA device's rTasks: what one block does for rTask t of an op
// (DevOp). Included by the kernels (plan_kernel.cu) and, compiled as host
// C++, by the emulator that runs them on the CPU without a GPU
// (emulator.cc, emulate.h), so that the same code is tested everywhere.
//
// An rTask is a share of its op's work (elements, rows, output tiles,
// panels), run by the whole block; every sum is in a fixed order, so every
// run gives the same bits whichever executor or vEU runs it.
#pragma once

#include <cstdint>

#include "devices/cuda/dev_op.h"

#if defined(__CUDACC__)
#include <cuda/atomic>
#define TESSERA_UNROLL _Pragma("unroll")
#define TESSERA_UNROLL16 _Pragma("unroll 16")
#else
#include "devices/cuda/emulate.h"
#define TESSERA_UNROLL
#define TESSERA_UNROLL16
#endif

namespace tessera::cuda {

// One block's shared memory, lent to whichever rTask it runs.
constexpr int kSmemFloats = 4096;


__device__ __forceinline__ void share(int64_t work, int64_t tasks, int64_t t, int64_t* lo, int64_t* hi) {
  *lo = work * t / tasks;
  *hi = work * (t + 1) / tasks;
}

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

__device__ __forceinline__ float binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMax: return fmaxf(a, b);
    case BinaryOp::kMin: return fminf(a, b);
    case BinaryOp::kPow: return powf(a, b);
  }
  return 0.f;
}

__device__ __forceinline__ float unary(const DevOp& op, float x) {
  switch (static_cast<UnaryOp>(op.sub)) {
    case UnaryOp::kRelu: return x > 0.f ? x : 0.f;
    case UnaryOp::kSigmoid: return sigmoid(x);
    case UnaryOp::kTanh: return tanhf(x);
    case UnaryOp::kExp: return expf(x);
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kAbs: return fabsf(x);
    case UnaryOp::kSqrt: return sqrtf(x);
    case UnaryOp::kErf: return erff(x);
    case UnaryOp::kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case UnaryOp::kClip: return fminf(fmaxf(x, op.lo), op.hi);
  }
  return 0.f;
}

// The block's sum (or max) of one value per thread, in a fixed tree; every
// thread gets it. `red` holds blockDim.x floats.
template <bool kMax>
__device__ float block_reduce(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      red[threadIdx.x] = kMax ? fmaxf(red[threadIdx.x], red[threadIdx.x + s]) : red[threadIdx.x] + red[threadIdx.x + s];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

// Offset of output element e in an input with strides `st` over `dims`.
__device__ __forceinline__ int64_t offset_of(const DevOp& op, int which, int64_t e) {
  int64_t off = 0;
  for (int d = op.rank - 1; d >= 0; --d) {
    const int64_t i = e % op.dims[d];
    e /= op.dims[d];
    off += i * op.strides[which][d];
  }
  return off;
}

// ------------------------------------------------------------ elementwise ---

__device__ void run_binary(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const float* a = static_cast<const float*>(op.in[0]);
  const float* b = static_cast<const float*>(op.in[1]);
  float* y = static_cast<float*>(op.out);
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x)
    y[e] = binary(static_cast<BinaryOp>(op.sub), a[offset_of(op, 0, e)], b[offset_of(op, 1, e)]);
}

__device__ void run_unary(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const float* x = static_cast<const float*>(op.in[0]);
  float* y = static_cast<float*>(op.out);
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) y[e] = unary(op, x[e]);
}

__device__ void run_copy(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const unsigned char* x = static_cast<const unsigned char*>(op.in[0]);
  unsigned char* y = static_cast<unsigned char*>(op.out);
  if (x == y) return;
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) y[e] = x[e];
}

__device__ void run_strided(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  if (op.esize == 8) {
    const int64_t* x = static_cast<const int64_t*>(op.in[0]);
    int64_t* y = static_cast<int64_t*>(op.out);
    for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) y[e] = x[offset_of(op, 0, e)];
  } else {
    const int32_t* x = static_cast<const int32_t*>(op.in[0]);
    int32_t* y = static_cast<int32_t*>(op.out);
    for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) y[e] = x[offset_of(op, 0, e)];
  }
}

__device__ __forceinline__ float load_as_float(const void* p, DTypeCode c, int64_t i) {
  switch (c) {
    case DTypeCode::kF32: return static_cast<const float*>(p)[i];
    case DTypeCode::kI64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case DTypeCode::kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DTypeCode::kBool: return static_cast<const unsigned char*>(p)[i] != 0 ? 1.f : 0.f;
  }
  return 0.f;
}

__device__ void run_cast(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const DTypeCode from = static_cast<DTypeCode>(op.sub / 16), to = static_cast<DTypeCode>(op.sub % 16);
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    if (to == DTypeCode::kF32) {
      static_cast<float*>(op.out)[e] = load_as_float(op.in[0], from, e);
      continue;
    }
    // Integer targets: from integers exactly, from floats truncated.
    int64_t v;
    if (from == DTypeCode::kI64) v = static_cast<const int64_t*>(op.in[0])[e];
    else if (from == DTypeCode::kI32) v = static_cast<const int32_t*>(op.in[0])[e];
    else if (from == DTypeCode::kBool) v = static_cast<const unsigned char*>(op.in[0])[e] != 0;
    else v = static_cast<int64_t>(static_cast<const float*>(op.in[0])[e]);
    if (to == DTypeCode::kI64) static_cast<int64_t*>(op.out)[e] = v;
    else if (to == DTypeCode::kI32) static_cast<int32_t*>(op.out)[e] = static_cast<int32_t>(v);
    else static_cast<unsigned char*>(op.out)[e] = v != 0;
  }
}

__device__ void run_gather(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const float* x = static_cast<const float*>(op.in[0]);
  float* y = static_cast<float*>(op.out);
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    const int64_t r = e % op.inner, i = (e / op.inner) % op.count, o = e / (op.inner * op.count);
    int64_t idx = op.idx64 ? static_cast<const int64_t*>(op.in[1])[i] : static_cast<const int32_t*>(op.in[1])[i];
    if (idx < 0) idx += op.axis;
    // Indices were checked on the host where they are constant; a runtime
    // index out of range reads row 0 rather than outside the tensor.
    if (idx < 0 || idx >= op.axis) idx = 0;
    y[e] = x[(o * op.axis + idx) * op.inner + r];
  }
}

// BatchNormalization with its statistics: y = (x - mean) scale / sqrt(var
// + eps) + B, per channel.
__device__ void run_batchnorm(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const float* x = static_cast<const float*>(op.in[0]);
  const float* scale = static_cast<const float*>(op.in[1]);
  const float* b = static_cast<const float*>(op.in[2]);
  const float* mean = static_cast<const float*>(op.in[3]);
  const float* var = static_cast<const float*>(op.in[4]);
  float* y = static_cast<float*>(op.out);
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    const int64_t c = (e / op.inner) % op.axis;
    y[e] = (x[e] - mean[c]) * (scale[c] / sqrtf(var[c] + op.eps)) + b[c];
  }
}

// The part of a Concat/Split holding position `a` along the axis.
__device__ __forceinline__ int64_t part_of(const DevOp& op, int64_t a) {
  int64_t lo = 0, hi = op.parts - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (op.part_off[mid] <= a) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Concat (output elements) or Split (input elements): element e of the
// whole is [o, a, r]; its part j holds it at [o, a - off_j, r].
template <typename T>
__device__ void run_parts(const DevOp& op, int64_t t, bool concat) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    const int64_t r = e % op.inner, a = (e / op.inner) % op.axis, o = e / (op.inner * op.axis);
    const int64_t j = part_of(op, a);
    const int64_t len = op.part_off[j + 1] - op.part_off[j];
    const int64_t pe = (o * len + a - op.part_off[j]) * op.inner + r;
    if (concat) static_cast<T*>(op.out)[e] = static_cast<const T*>(op.part_ptr[j])[pe];
    else static_cast<T*>(op.part_ptr[j])[pe] = static_cast<const T*>(op.in[0])[e];
  }
}

// ------------------------------------------------------------- reductions ---

// A warp's sum (or max) of one value per lane, in a fixed butterfly;
// every lane gets it. Every lane of the warp must call it.
template <bool kMax>
__device__ __forceinline__ float warp_reduce(float v) {
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  return v;
}

// Rows this short are reduced by a warp each (no block barriers, eight
// rows at once); longer ones by the whole block.
constexpr int64_t kWarpRowCols = 1024;

// Softmax (sub 0) or log-softmax (sub 1) of one row, by the calling warp
// (lanes strided over it) or the whole block.
template <bool kWarp>
__device__ __forceinline__ void softmax_row(const DevOp& op, const float* xr, float* yr, bool write, float* sm) {
  const int64_t first = kWarp ? threadIdx.x % 32 : threadIdx.x, step = kWarp ? 32 : blockDim.x;
  float m = -INFINITY;
  for (int64_t c = first; c < op.cols; c += step) m = fmaxf(m, xr[c]);
  m = kWarp ? warp_reduce<true>(m) : block_reduce<true>(m, sm);
  float sum = 0.f;
  for (int64_t c = first; c < op.cols; c += step) sum += expf(xr[c] - m);
  sum = kWarp ? warp_reduce<false>(sum) : block_reduce<false>(sum, sm);
  if (!write) return;
  if (op.sub == 1) {
    const float lse = m + logf(sum);
    for (int64_t c = first; c < op.cols; c += step) yr[c] = xr[c] - lse;
  } else {
    for (int64_t c = first; c < op.cols; c += step) yr[c] = expf(xr[c] - m) / sum;
  }
}

// LayerNormalization of one row: its mean, then the mean square of the
// deviations (two passes), by the calling warp or the whole block.
template <bool kWarp>
__device__ __forceinline__ void layernorm_row(const DevOp& op, const float* xr, float* yr, bool write, float* sm) {
  const float* scale = static_cast<const float*>(op.in[1]);
  const float* bias = static_cast<const float*>(op.in[2]);
  const int64_t first = kWarp ? threadIdx.x % 32 : threadIdx.x, step = kWarp ? 32 : blockDim.x;
  const float inv_n = 1.f / static_cast<float>(op.cols);
  float s = 0.f;
  for (int64_t c = first; c < op.cols; c += step) s += xr[c];
  const float mean = (kWarp ? warp_reduce<false>(s) : block_reduce<false>(s, sm)) * inv_n;
  float v = 0.f;
  for (int64_t c = first; c < op.cols; c += step) {
    const float d = xr[c] - mean;
    v += d * d;
  }
  const float inv = rsqrtf((kWarp ? warp_reduce<false>(v) : block_reduce<false>(v, sm)) * inv_n + op.eps);
  if (!write) return;
  for (int64_t c = first; c < op.cols; c += step)
    yr[c] = (xr[c] - mean) * inv * scale[c] + (bias != nullptr ? bias[c] : 0.f);
}

// The rTask's rows of a row op (Softmax, LayerNorm): short rows a warp
// each, every warp taking the same number of turns (a warp past the last
// row reduces the rTask's first row again and writes nothing, so that the
// warps' shuffles stay in step); long rows one after another by the block.
template <typename RowFn>
__device__ void run_rows(const DevOp& op, int64_t t, RowFn row) {
  int64_t lo, hi;
  share(op.rows, op.tasks, t, &lo, &hi);
  const float* x = static_cast<const float*>(op.in[0]);
  float* y = static_cast<float*>(op.out);
  if (op.cols <= kWarpRowCols) {
    const int64_t warps = blockDim.x / 32;
    for (int64_t r0 = lo; r0 < hi; r0 += warps) {
      const int64_t r = r0 + threadIdx.x / 32;
      const bool live = r < hi;
      row(x + (live ? r : lo) * op.cols, y + r * op.cols, live, true);
    }
  } else {
    for (int64_t r = lo; r < hi; ++r) row(x + r * op.cols, y + r * op.cols, true, false);
  }
}

__device__ void run_softmax(const DevOp& op, int64_t t, float* sm) {
  run_rows(op, t, [&](const float* xr, float* yr, bool write, bool warp) {
    if (warp) softmax_row<true>(op, xr, yr, write, sm);
    else softmax_row<false>(op, xr, yr, write, sm);
  });
}

__device__ void run_layernorm(const DevOp& op, int64_t t, float* sm) {
  run_rows(op, t, [&](const float* xr, float* yr, bool write, bool warp) {
    if (warp) layernorm_row<true>(op, xr, yr, write, sm);
    else layernorm_row<false>(op, xr, yr, write, sm);
  });
}

// GlobalAveragePool: a warp per row, its lanes' sums added in a fixed
// butterfly.
__device__ void run_row_mean(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.rows, op.tasks, t, &lo, &hi);
  const float* x = static_cast<const float*>(op.in[0]);
  float* y = static_cast<float*>(op.out);
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  // Every warp takes the same number of turns, so the shuffles are uniform.
  for (int64_t r0 = lo; r0 < hi; r0 += warps) {
    const int64_t r = r0 + threadIdx.x / 32;
    float s = 0.f;
    if (r < hi)
      for (int64_t c = lane; c < op.cols; c += 32) s += x[r * op.cols + c];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && r < hi) y[r] = s / static_cast<float>(op.cols);
  }
}

// ----------------------------------------------------------------- window ---

__device__ void run_pool(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const ConvGeo& g = op.conv;
  const float* x = static_cast<const float*>(op.in[0]);
  float* y = static_cast<float*>(op.out);
  const bool max = op.sub == 0;
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    const int64_t ox = e % g.ow, oy = (e / g.ow) % g.oh, plane = e / (g.ow * g.oh);
    const float* xp = x + plane * g.h * g.w;
    float acc = max ? -INFINITY : 0.f;
    int64_t count = 0;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
        const float v = xp[iy * g.w + ix];
        acc = max ? fmaxf(acc, v) : acc + v;
        ++count;
      }
    }
    if (!max) acc /= static_cast<float>(g.include_pad ? g.kh * g.kw : (count > 0 ? count : 1));
    y[e] = acc;
  }
}

// Grouped and depthwise Conv: a thread per output, its sum over the
// group's channels and the window in order.
__device__ void run_conv_direct(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const ConvGeo& g = op.conv;
  const float* x = static_cast<const float*>(op.in[0]);
  const float* w = static_cast<const float*>(op.in[1]);
  const float* bias = static_cast<const float*>(op.in[2]);
  float* y = static_cast<float*>(op.out);
  const int64_t cin_g = g.cin / g.groups, cout_g = g.cout / g.groups;
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    const int64_t ox = e % g.ow, oy = (e / g.ow) % g.oh, co = (e / (g.ow * g.oh)) % g.cout;
    const int64_t b = e / (g.ow * g.oh * g.cout);
    const int64_t c0 = co / cout_g * cin_g;
    const float* wc = w + co * cin_g * g.kh * g.kw;
    float acc = 0.f;
    for (int64_t ci = 0; ci < cin_g; ++ci) {
      const float* xp = x + ((b * g.cin) + c0 + ci) * g.h * g.w;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
          if (ix >= 0 && ix < g.w) acc = fmaf(xp[iy * g.w + ix], wc[(ci * g.kh + ky) * g.kw + kx], acc);
        }
      }
    }
    y[e] = acc + (bias != nullptr ? bias[co] : 0.f);
  }
}

// ---------------------------------------------------------------- GEMMs ---

// out[b, r, c] = alpha * sum_k A[b, r, k] B[b, k, c] + beta * C[r, c]: an
// rTask is a range of (batch, row) pairs; each thread one output at a
// time, the k-sum in order.
__device__ void run_gemm(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.batch * op.m, op.tasks, t, &lo, &hi);
  const float* A = static_cast<const float*>(op.in[0]);
  const float* B = static_cast<const float*>(op.in[1]);
  const float* C = static_cast<const float*>(op.in[2]);
  float* y = static_cast<float*>(op.out);
  const int64_t outs = (hi - lo) * op.nn;
  for (int64_t q = threadIdx.x; q < outs; q += blockDim.x) {
    const int64_t row = lo + q / op.nn, c = q % op.nn;
    const int64_t bi = row / op.m, r = row % op.m;
    const float* a = A + bi * op.a_bs;
    const float* b = B + bi * op.b_bs;
    float acc = 0.f;
    for (int64_t k = 0; k < op.k; ++k) {
      const float av = op.ta ? a[k * op.lda + r] : a[r * op.lda + k];
      const float bv = op.tb ? b[c * op.ldb + k] : b[k * op.ldb + c];
      acc = fmaf(av, bv, acc);
    }
    float v = op.alpha * acc;
    if (C != nullptr) v += op.beta * C[r * op.c_rs + c * op.c_cs];
    y[row * op.nn + c] = v;
  }
}

// B(k, n) of a tiled GEMM: strided, or the im2col of a Conv's input
// (k = (ci, ky, kx), n = (oy, ox); 0 in the padding).
__device__ __forceinline__ float tiled_b(const DevOp& op, const float* B, int64_t b, int64_t k, int64_t n) {
  if (!op.conv_b) return B[b * op.b_bs + k * op.b_rs + n * op.b_cs];
  const ConvGeo& g = op.conv;
  const int64_t kx = k % g.kw, ky = (k / g.kw) % g.kh, ci = k / (g.kw * g.kh);
  const int64_t ox = n % g.ow, oy = n / g.ow;
  const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.f;
  return B[((b * g.cin + ci) * g.h + iy) * g.w + ix];
}

// One output tile of TM x TN per unit of work, its k-range staged through
// shared memory kTileK at a time (the next slice loaded into registers
// while this one is used); each thread a (TM/16) x (TN/16) block of sums
// in k order. With splits > 1 a unit is a (tile, k-range) pair: each
// writes its partial sums to scratch, and the tile's last unit to finish
// (a ticket) adds the partials in split order, so the bits do not depend
// on which finished last.
template <int TM, int TN>
__device__ void run_tiled(const DevOp& op, int64_t t, float* sm) {
  constexpr int BK = kTileK, RM = TM / 16, RN = TN / 16, PA = TM + 4, PB = TN + 4;
  constexpr int LA = TM * BK / 256, LB = TN * BK / 256;
  static_assert(LA >= 1 && LB >= 1 && BK * (PA + PB) <= kSmemFloats, "the tile does not fit in shared memory");
  __shared__ int last_flag;
  // A Conv's inputs are X, W, bias: A is W, B the im2col of X.
  const float* A = static_cast<const float*>(op.in[op.conv_b ? 1 : 0]);
  const float* B = static_cast<const float*>(op.in[op.conv_b ? 0 : 1]);
  const float* C = static_cast<const float*>(op.in[2]);
  float* y = static_cast<float*>(op.out);
  float* As = sm;
  float* Bs = sm + BK * PA;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t tiles_m = (op.m + TM - 1) / TM, tiles_n = (op.nn + TN - 1) / TN;
  const int64_t units = op.batch * tiles_m * tiles_n * op.splits;
  int64_t lo, hi;
  share(units, op.tasks, t, &lo, &hi);
  for (int64_t u = lo; u < hi; ++u) {
    const int64_t tile = u / op.splits, s = u % op.splits;
    const int64_t b = tile / (tiles_m * tiles_n), r = tile % (tiles_m * tiles_n);
    const int64_t m0 = r / tiles_n * TM, n0 = r % tiles_n * TN;
    const int64_t kb = op.k * s / op.splits, ke = op.k * (s + 1) / op.splits;
    float acc[RM][RN];
TESSERA_UNROLL
    for (int i = 0; i < RM; ++i)
TESSERA_UNROLL
      for (int j = 0; j < RN; ++j) acc[i][j] = 0.f;
    float ra[LA], rb[LB];
    auto load = [&](int64_t k0) {
TESSERA_UNROLL
      for (int l = 0; l < LA; ++l) {
        const int i = threadIdx.x + l * 256, mm = i / BK, kk = i % BK;
        const int64_t gm = m0 + mm, gk = k0 + kk;
        ra[l] = gm < op.m && gk < ke ? A[b * op.a_bs + gm * op.a_rs + gk * op.a_cs] : 0.f;
      }
TESSERA_UNROLL
      for (int l = 0; l < LB; ++l) {
        const int i = threadIdx.x + l * 256, kk = i / TN, nn = i % TN;
        const int64_t gn = n0 + nn, gk = k0 + kk;
        rb[l] = gn < op.nn && gk < ke ? tiled_b(op, B, b, gk, gn) : 0.f;
      }
    };
    if (kb < ke) load(kb);
    for (int64_t k0 = kb; k0 < ke; k0 += BK) {
TESSERA_UNROLL
      for (int l = 0; l < LA; ++l) {
        const int i = threadIdx.x + l * 256;
        As[(i % BK) * PA + i / BK] = ra[l];
      }
TESSERA_UNROLL
      for (int l = 0; l < LB; ++l) {
        const int i = threadIdx.x + l * 256;
        Bs[(i / TN) * PB + i % TN] = rb[l];
      }
      __syncthreads();
      if (k0 + BK < ke) load(k0 + BK);
TESSERA_UNROLL
      for (int kk = 0; kk < BK; ++kk) {
        float av[RM], bv[RN];
TESSERA_UNROLL
        for (int i = 0; i < RM; ++i) av[i] = As[kk * PA + ty * RM + i];
TESSERA_UNROLL
        for (int j = 0; j < RN; ++j) bv[j] = Bs[kk * PB + tx * RN + j];
TESSERA_UNROLL
        for (int i = 0; i < RM; ++i)
TESSERA_UNROLL
          for (int j = 0; j < RN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
    auto finish = [&](int64_t gm, int64_t gn, float v) {
      v *= op.alpha;
      if (C != nullptr) v += op.bias_rows ? C[gm] : op.beta * C[gm * op.c_rs + gn * op.c_cs];
      y[b * op.y_bs + gm * op.nn + gn] = v;
    };
    if (op.splits == 1) {
TESSERA_UNROLL
      for (int i = 0; i < RM; ++i)
TESSERA_UNROLL
        for (int j = 0; j < RN; ++j) {
          const int64_t gm = m0 + ty * RM + i, gn = n0 + tx * RN + j;
          if (gm < op.m && gn < op.nn) finish(gm, gn, acc[i][j]);
        }
      continue;
    }
    const int64_t whole = op.batch * op.m * op.nn;
TESSERA_UNROLL
    for (int i = 0; i < RM; ++i)
TESSERA_UNROLL
      for (int j = 0; j < RN; ++j) {
        const int64_t gm = m0 + ty * RM + i, gn = n0 + tx * RN + j;
        if (gm < op.m && gn < op.nn) op.scratch[s * whole + b * op.m * op.nn + gm * op.nn + gn] = acc[i][j];
      }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      ::cuda::atomic_ref<int, ::cuda::thread_scope_device> ticket(op.tickets[tile]);
      const int before = ticket.fetch_add(1, ::cuda::std::memory_order_acq_rel);
      last_flag = before == op.splits - 1;
      if (last_flag) ticket.store(0, ::cuda::std::memory_order_relaxed);  // ready for the next run
    }
    __syncthreads();
    if (!last_flag) continue;
    __threadfence();
    for (int q = threadIdx.x; q < TM * TN; q += blockDim.x) {
      const int64_t gm = m0 + q / TN, gn = n0 + q % TN;
      if (gm >= op.m || gn >= op.nn) continue;
      const int64_t at = b * op.m * op.nn + gm * op.nn + gn;
      float v = 0.f;
      for (int64_t p = 0; p < op.splits; ++p) v += __ldcg(op.scratch + p * whole + at);
      finish(gm, gn, v);
    }
    __syncthreads();
  }
}

// ------------------------------------------------------------- recurrent ---

// The projection of an LSTM/GRU layer's inputs in the cells' panel order:
// out[r, p * W + j] = bias[p * W + j] + sum_k x[r, k] Wp[p, k, j] (W =
// gates * units). An rTask is a range of panels; each of its panels' W
// columns is summed by (256 / W) threads over consecutive k-ranges, added
// in order.
// One panel's product: for the panel's W columns, sum_k v[k] w[k, col] over
// k < K, w the panel ([K, W] row-major). Each column is summed by the
// block's blockDim.x / W threads over consecutive k-ranges (16 loads in
// flight: the weights stream from L2), the partial sums added in order;
// thread col < W returns `init` plus its column's sum, the others 0.
__device__ __forceinline__ float panel_gemv(const float* v, const float* w, int64_t K, int W, float init, float* red) {
  const int Q = blockDim.x / W, col = threadIdx.x % W, q = threadIdx.x / W;
  float acc = 0.f;
  if (q < Q) {
    TESSERA_UNROLL16
    for (int64_t k = K * q / Q; k < K * (q + 1) / Q; ++k) acc = fmaf(v[k], w[k * W + col], acc);
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  float s = 0.f;
  if (threadIdx.x < W) {
    s = init;
    for (int i = 0; i < Q; ++i) s += red[i * W + threadIdx.x];
  }
  __syncthreads();
  return s;
}

__device__ void run_rnn_proj(const DevOp& op, int64_t t, float* sm) {
  int64_t lo, hi;
  share(op.panels, op.tasks, t, &lo, &hi);
  const float* wp = static_cast<const float*>(op.in[0]);
  const float* bias = static_cast<const float*>(op.in[1]);
  const float* x = static_cast<const float*>(op.in[2]);
  float* y = static_cast<float*>(op.out);
  const int W = static_cast<int>(op.gates * op.units);
  const int64_t K = op.k, C = op.panels * W;
  for (int64_t r = 0; r < op.rows; ++r)
    for (int64_t p = lo; p < hi; ++p) {
      const float init = threadIdx.x < W ? bias[p * W + threadIdx.x] : 0.f;
      const float s = panel_gemv(x + r * K, wp + p * K * W, K, W, init, sm);
      if (threadIdx.x < W) y[r * C + p * W + threadIdx.x] = s;
    }
}

// One LSTM step for a range of panels (kernels/cpu/rnn_cell.h's layout,
// gates i, o, f, c): the panel's h_prev R^T as in the projection, then the
// gate math for its units. Absent states are zeros.
__device__ void run_lstm_cell(const DevOp& op, int64_t t, float* sm) {
  int64_t lo, hi;
  share(op.panels, op.tasks, t, &lo, &hi);
  const float* xp = static_cast<const float*>(op.in[0]);
  const float* hp = static_cast<const float*>(op.in[1]);
  const float* cp = static_cast<const float*>(op.in[2]);
  const float* rp = static_cast<const float*>(op.in[3]);
  float* h = static_cast<float*>(op.out);
  float* c = static_cast<float*>(op.out2);
  const int U = static_cast<int>(op.units), W = 4 * U;
  const int64_t H = op.hidden, C = op.panels * W;
  float* hs = sm;             // h_prev of the row, H floats
  float* red = sm + H;        // blockDim.x partial sums
  float* gates = red + blockDim.x;
  for (int64_t r = 0; r < op.rows; ++r) {
    for (int64_t k = threadIdx.x; k < H; k += blockDim.x) hs[k] = hp != nullptr ? hp[r * H + k] : 0.f;
    __syncthreads();
    const float* x = xp + (op.step * op.rows + r) * C;
    for (int64_t p = lo; p < hi; ++p) {
      const float init = threadIdx.x < W ? x[p * W + threadIdx.x] : 0.f;
      const float s = panel_gemv(hs, rp + p * H * W, H, W, init, red);
      if (threadIdx.x < W) gates[threadIdx.x] = s;
      __syncthreads();
      if (threadIdx.x < U) {
        const int64_t unit = p * U + threadIdx.x;
        if (unit < H) {
          const int j = threadIdx.x;
          const float ig = sigmoid(gates[j]), og = sigmoid(gates[U + j]), fg = sigmoid(gates[2 * U + j]);
          const float cc = tanhf(gates[3 * U + j]);
          const float cv = fg * (cp != nullptr ? cp[r * H + unit] : 0.f) + ig * cc;
          c[r * H + unit] = cv;
          h[r * H + unit] = og * tanhf(cv);
        }
      }
      __syncthreads();
    }
  }
}

__device__ void run_task(const DevOp& op, int64_t t, float* sm) {
  switch (op.kind) {
    case DevKind::kBinary: run_binary(op, t); break;
    case DevKind::kUnary: run_unary(op, t); break;
    case DevKind::kGather: run_gather(op, t); break;
    case DevKind::kGemm:
    case DevKind::kMatMul: run_gemm(op, t); break;
    case DevKind::kSoftmax: run_softmax(op, t, sm); break;
    case DevKind::kCopy: run_copy(op, t); break;
    case DevKind::kTiled:
      if (static_cast<TileShape>(op.sub) == TileShape::k64x64) run_tiled<64, 64>(op, t, sm);
      else run_tiled<32, 32>(op, t, sm);
      break;
    case DevKind::kConvDirect: run_conv_direct(op, t); break;
    case DevKind::kPool: run_pool(op, t); break;
    case DevKind::kRowMean: run_row_mean(op, t); break;
    case DevKind::kLayerNorm: run_layernorm(op, t, sm); break;
    case DevKind::kStrided: run_strided(op, t); break;
    case DevKind::kConcat:
    case DevKind::kSplit: {
      const bool concat = op.kind == DevKind::kConcat;
      if (op.esize == 8) run_parts<int64_t>(op, t, concat);
      else if (op.esize == 4) run_parts<int32_t>(op, t, concat);
      else run_parts<unsigned char>(op, t, concat);
      break;
    }
    case DevKind::kCast: run_cast(op, t); break;
    case DevKind::kRnnProj: run_rnn_proj(op, t, sm); break;
    case DevKind::kLstmCell: run_lstm_cell(op, t, sm); break;
    case DevKind::kBatchNorm: run_batchnorm(op, t); break;
  }
}

}  // namespace tessera::cuda
