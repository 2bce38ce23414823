// Launching the CUDA device's kernels (plan_kernel.cu): a Plan as one
// persistent cooperative launch, or one op's rTasks as one launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "devices/cuda/dev_op.h"

namespace tessera::cuda {

inline constexpr int kBlockThreads = 256;

// Every pointer is device memory: `ops` (one per step), `instrs` (the vEU
// lists back to back, vEU u's from begin[u] to begin[u + 1]), `counters`
// (one per vEU, zeroed here before the launch).
cudaError_t launch_plan(const DevOp* ops, const DevInstr* instrs, const int64_t* begin, int* counters, int veus,
                        cudaStream_t stream);
// Runs `tasks` rTasks of the op at `op` (device memory), a block each.
cudaError_t launch_op(const DevOp* op, int64_t tasks, cudaStream_t stream);

}  // namespace tessera::cuda
