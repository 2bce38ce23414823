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

// Block u walks vEU u's list. After an rTask every thread fences its
// writes and the block meets before thread 0 publishes the count
// (release); a wait is thread 0's acquire spin, then the block meets. A
// wait longer than kWaitLimitNs (a Plan that cannot finish) is recorded in
// `stall` and every block still waiting gives up, so the launch ends and
// the host reports it instead of hanging.
__global__ void __launch_bounds__(kBlockThreads) plan_kernel(const DevOp* ops, const DevInstr* instrs,
                                                             const int64_t* begin, int* counters, PlanStall* stall) {
  __shared__ float sm[kSmemFloats];
  __shared__ int give_up;
  const int u = blockIdx.x;
  for (int64_t i = begin[u]; i < begin[u + 1]; ++i) {
    const DevInstr in = instrs[i];
    if (in.kind == 0) {
      run_task(ops[in.a], in.b, sm);
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
              stall->index = i - begin[u];
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
__global__ void __launch_bounds__(kBlockThreads) op_kernel(const DevOp* op) {
  __shared__ float sm[kSmemFloats];
  run_task(*op, blockIdx.x, sm);
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
