// What rtasks.h needs of CUDA, for compiling it as host C++: the emulator
// (emulator.cc) runs a block's 256 threads as fibers on one CPU thread, one
// at a time, each until its next barrier. Included only where __CUDACC__
// is not defined; nothing else includes it (its macros name CUDA's
// built-ins).
#pragma once

#include <math.h>

#include <atomic>
#include <cmath>
#include <cstdint>

namespace tessera::cuda::emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
extern Dim3 thread_idx;  // the emulated thread now running
inline constexpr Dim3 block_dim{256, 1, 1};
// A block-wide barrier: the running thread waits until every thread of
// the block reaches it (or ends).
void sync_threads();
// A warp's butterfly exchange: lane l gets the value of lane l ^ mask.
float shfl_xor(float v, int mask);

}  // namespace tessera::cuda::emu

#define __device__ inline
#define __global__
#define __forceinline__
#define __shared__ static
#define threadIdx (::tessera::cuda::emu::thread_idx)
#define blockDim (::tessera::cuda::emu::block_dim)
#define __syncthreads() ::tessera::cuda::emu::sync_threads()
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)

inline float __shfl_xor_sync(unsigned, float v, int mask) { return ::tessera::cuda::emu::shfl_xor(v, mask); }
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }

// libcu++'s atomic_ref, as much of it as rtasks.h uses.
namespace cuda {
enum thread_scope { thread_scope_device };
template <typename T, thread_scope>
struct atomic_ref : ::std::atomic_ref<T> {
  using ::std::atomic_ref<T>::atomic_ref;
};
namespace std {
using ::std::memory_order_acq_rel;
using ::std::memory_order_acquire;
using ::std::memory_order_relaxed;
using ::std::memory_order_release;
}  // namespace std
}  // namespace cuda
