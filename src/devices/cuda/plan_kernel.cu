// The CUDA device's two ways of running a Program's rTasks (rtasks.h):
//
//   plan       one persistent launch of `veus` blocks, one resident per SM
//              (a cooperative launch guarantees they are all resident):
//              block u walks vEU u's instruction list, runs its rTasks,
//              publishes its count in global memory (release) and waits on
//              other blocks' counts (acquire). No host work per op.
//   two-layer  the control: one launch per op, a block per rTask, the
//              stream's order standing for the dependencies (replayable as
//              a CUDA graph).
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cstdint>

#include "devices/cuda/plan_kernel.h"
#include "devices/cuda/rtasks.h"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The block's copy of the DevOp it runs (one coalesced load instead of a
// chain of dependent loads from global memory, field by field, in every
// thread); kept while the next rTask is of the same op.
__device__ __forceinline__ const DevOp& stage_op(const DevOp* ops, int32_t index, unsigned char* buf, int* held) {
  if (*held != index) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(ops + index);
    uint32_t* dst = reinterpret_cast<uint32_t*>(buf);
    for (unsigned w = threadIdx.x; w < sizeof(DevOp) / 4; w += blockDim.x) dst[w] = src[w];
    __syncthreads();
    if (threadIdx.x == 0) *held = index;  // read by all only after the next barrier
  }
  return *reinterpret_cast<const DevOp*>(buf);
}

constexpr int kListChunk = 128;  // instructions staged in shared memory at a time

// Block u walks vEU u's list, staged kListChunk instructions at a time.
// Between its own rTasks a barrier orders the block's writes; before a
// signal every thread fences its writes and the block meets, then thread
// 0 publishes the count (release). A wait is thread 0's acquire spin, then
// the block meets. A wait longer than kWaitLimitNs (a Plan that cannot
// finish) is recorded in `stall` and every block still waiting gives up,
// so the launch ends and the host reports it instead of hanging.
__global__ void __launch_bounds__(kBlockThreads, 1) plan_kernel(const DevOp* ops, const DevInstr* instrs,
                                                             const int64_t* begin, int* counters, PlanStall* stall) {
  __shared__ float sm[kSmemFloats];
  __shared__ alignas(16) unsigned char op_buf[sizeof(DevOp)];
  __shared__ DevInstr list[kListChunk];
  __shared__ int give_up, held;
  const int u = blockIdx.x;
  const int64_t b0 = begin[u], b1 = begin[u + 1];
  if (threadIdx.x == 0) held = -1;
  for (int64_t i = b0; i < b1; ++i) {
    if ((i - b0) % kListChunk == 0) {
      __syncthreads();
      for (int64_t j = i + threadIdx.x; j < b1 && j < i + kListChunk; j += blockDim.x) list[j - i] = instrs[j];
      __syncthreads();
    }
    const DevInstr in = list[(i - b0) % kListChunk];
    if (in.kind == 0) {
      run_task(stage_op(ops, in.a, op_buf, &held), in.b, sm);
      __syncthreads();
    } else if (in.kind == 1) {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) {
        ::cuda::atomic_ref<int, ::cuda::thread_scope_device> c(counters[u]);
        c.store(static_cast<int>(in.b), ::cuda::std::memory_order_release);
      }
    } else {
      if (threadIdx.x == 0) {
        ::cuda::atomic_ref<int, ::cuda::thread_scope_device> c(counters[in.a]);
        ::cuda::atomic_ref<int, ::cuda::thread_scope_device> stalled(stall->stalled);
        give_up = 0;
        const uint64_t t0 = globaltimer();
        for (uint32_t spins = 1; c.load(::cuda::std::memory_order_acquire) < in.b; ++spins) {
          if (spins % 1024 != 0) continue;
          if (stalled.load(::cuda::std::memory_order_relaxed) != 0) {
            give_up = 1;
            break;
          }
          if (globaltimer() - t0 > kWaitLimitNs) {
            if (stalled.exchange(1, ::cuda::std::memory_order_relaxed) == 0) {
              stall->veu = u;
              stall->on = in.a;
              stall->count = in.b;
              stall->index = i - b0;
            }
            give_up = 1;
            break;
          }
        }
      }
      __syncthreads();
      if (give_up) return;
    }
  }
}

// The two-layer control: block i runs rTask i of one op.
__global__ void __launch_bounds__(kBlockThreads, 1) op_kernel(const DevOp* op) {
  __shared__ float sm[kSmemFloats];
  __shared__ alignas(16) unsigned char op_buf[sizeof(DevOp)];
  __shared__ int held;
  if (threadIdx.x == 0) held = -1;
  __syncthreads();
  run_task(stage_op(op, 0, op_buf, &held), blockIdx.x, sm);
}

}  // namespace

cudaError_t launch_plan(const DevOp* ops, const DevInstr* instrs, const int64_t* begin, int* counters, int veus,
                        PlanStall* stall, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(counters, 0, sizeof(int) * static_cast<size_t>(veus), stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(stall, 0, sizeof(PlanStall), stream);
  if (e != cudaSuccess) return e;
  void* args[] = {&ops, &instrs, &begin, &counters, &stall};
  return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(plan_kernel), dim3(static_cast<unsigned>(veus)),
                                     dim3(kBlockThreads), args, 0, stream);
}

cudaError_t launch_op(const DevOp* op, int64_t tasks, cudaStream_t stream) {
  op_kernel<<<dim3(static_cast<unsigned>(tasks)), dim3(kBlockThreads), 0, stream>>>(op);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
