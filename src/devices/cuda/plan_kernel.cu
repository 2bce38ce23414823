// The CUDA device's rTasks and the two ways of running them:
//
//   plan       one persistent launch of `veus` blocks, one resident per SM
//              (a cooperative launch guarantees they are all resident):
//              block u walks vEU u's instruction list, runs its rTasks,
//              publishes its count in global memory (release) and waits on
//              other blocks' counts (acquire). No host work per op.
//   two-layer  the control: one launch per op, a block per rTask, the
//              stream's order standing for the dependencies (replayable as
//              a CUDA graph).
//
// An rTask is a contiguous share of its op's work (elements, rows), run by
// the whole block; its sums are in a fixed order, so every run gives the
// same bits whichever executor or vEU runs it.
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cstdint>

#include "devices/cuda/dev_op.h"
#include "devices/cuda/plan_kernel.h"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ void share(int64_t work, int64_t tasks, int64_t t, int64_t* lo, int64_t* hi) {
  *lo = work * t / tasks;
  *hi = work * (t + 1) / tasks;
}

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

__device__ __forceinline__ float unary(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::kRelu: return x > 0.f ? x : 0.f;
    case UnaryOp::kSigmoid: return 1.f / (1.f + expf(-x));
    case UnaryOp::kTanh: return tanhf(x);
    case UnaryOp::kExp: return expf(x);
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kAbs: return fabsf(x);
    case UnaryOp::kSqrt: return sqrtf(x);
    case UnaryOp::kErf: return erff(x);
    case UnaryOp::kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
  }
  return 0.f;
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
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) y[e] = unary(static_cast<UnaryOp>(op.sub), x[e]);
}

__device__ void run_copy(const DevOp& op, int64_t t) {
  int64_t lo, hi;
  share(op.n, op.tasks, t, &lo, &hi);
  const unsigned char* x = static_cast<const unsigned char*>(op.in[0]);
  unsigned char* y = static_cast<unsigned char*>(op.out);
  if (x == y) return;
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) y[e] = x[e];
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

// Softmax (sub 0) or log-softmax (sub 1) of each row in the rTask's range:
// the block reduces a row's max and sum in shared memory, in a fixed tree.
__device__ void run_softmax(const DevOp& op, int64_t t) {
  __shared__ float red[kBlockThreads];
  int64_t lo, hi;
  share(op.rows, op.tasks, t, &lo, &hi);
  const float* x = static_cast<const float*>(op.in[0]);
  float* y = static_cast<float*>(op.out);
  for (int64_t r = lo; r < hi; ++r) {
    const float* xr = x + r * op.cols;
    float* yr = y + r * op.cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < op.cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
      __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int64_t c = threadIdx.x; c < op.cols; c += blockDim.x) sum += expf(xr[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
      __syncthreads();
    }
    sum = red[0];
    __syncthreads();
    if (op.sub == 1) {
      const float lse = m + logf(sum);
      for (int64_t c = threadIdx.x; c < op.cols; c += blockDim.x) yr[c] = xr[c] - lse;
    } else {
      for (int64_t c = threadIdx.x; c < op.cols; c += blockDim.x) yr[c] = expf(xr[c] - m) / sum;
    }
  }
}

__device__ void run_task(const DevOp& op, int64_t t) {
  switch (op.kind) {
    case DevKind::kBinary: run_binary(op, t); break;
    case DevKind::kUnary: run_unary(op, t); break;
    case DevKind::kGather: run_gather(op, t); break;
    case DevKind::kGemm:
    case DevKind::kMatMul: run_gemm(op, t); break;
    case DevKind::kSoftmax: run_softmax(op, t); break;
    case DevKind::kCopy: run_copy(op, t); break;
  }
}

// Block u walks vEU u's list. After an rTask every thread fences its
// writes and the block meets before thread 0 publishes the count
// (release); a wait is thread 0's acquire spin, then the block meets.
__global__ void __launch_bounds__(kBlockThreads) plan_kernel(const DevOp* ops, const DevInstr* instrs,
                                                             const int64_t* begin, int* counters) {
  const int u = blockIdx.x;
  for (int64_t i = begin[u]; i < begin[u + 1]; ++i) {
    const DevInstr in = instrs[i];
    if (in.kind == 0) {
      run_task(ops[in.a], in.b);
      __threadfence();
      __syncthreads();
    } else if (in.kind == 1) {
      if (threadIdx.x == 0) {
        ::cuda::atomic_ref<int, ::cuda::thread_scope_device> c(counters[u]);
        c.store(static_cast<int>(in.b), ::cuda::std::memory_order_release);
      }
    } else {
      if (threadIdx.x == 0) {
        ::cuda::atomic_ref<int, ::cuda::thread_scope_device> c(counters[in.a]);
        while (c.load(::cuda::std::memory_order_acquire) < in.b) {
        }
      }
      __syncthreads();
      __threadfence();
    }
  }
}

// The two-layer control: block i runs rTask i of one op.
__global__ void __launch_bounds__(kBlockThreads) op_kernel(const DevOp* op) { run_task(*op, blockIdx.x); }

}  // namespace

cudaError_t launch_plan(const DevOp* ops, const DevInstr* instrs, const int64_t* begin, int* counters, int veus,
                        cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(counters, 0, sizeof(int) * static_cast<size_t>(veus), stream);
  if (e != cudaSuccess) return e;
  void* args[] = {&ops, &instrs, &begin, &counters};
  return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(plan_kernel), dim3(static_cast<unsigned>(veus)),
                                     dim3(kBlockThreads), args, 0, stream);
}

cudaError_t launch_op(const DevOp* op, int64_t tasks, cudaStream_t stream) {
  op_kernel<<<dim3(static_cast<unsigned>(tasks)), dim3(kBlockThreads), 0, stream>>>(op);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
