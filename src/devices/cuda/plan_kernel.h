// Launching the CUDA device's kernels (plan_kernel.cu): a Plan as one
// persistent cooperative launch, or one op's rTasks as one launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "devices/cuda/dev_op.h"

namespace tessera::cuda {

inline constexpr int kBlockThreads = 256;
// A wait this long means the Plan cannot finish (a vEU waits on a count
// that is never published): the launch gives up and says where.
inline constexpr uint64_t kWaitLimitNs = 2'000'000'000;

// Where a Plan stalled, in device memory; zeroed at each launch.
struct PlanStall {
  int stalled;    // 0: it did not
  int veu, on;    // vEU `veu` waited on vEU `on`
  int64_t count;  // for this count
  int64_t index;  // at this instruction of its list
};

// Every pointer is device memory: `ops` (one per step), `instrs` (the vEU
// lists back to back, vEU u's from begin[u] to begin[u + 1]), `counters`
// (one per vEU, zeroed here before the launch) and `stall` (zeroed too).
cudaError_t launch_plan(const DevOp* ops, const DevInstr* instrs, const int64_t* begin, int* counters, int veus,
                        PlanStall* stall, cudaStream_t stream);
// Runs `tasks` rTasks of the op at `op` (device memory), a block each.
cudaError_t launch_op(const DevOp* op, int64_t tasks, cudaStream_t stream);

}  // namespace tessera::cuda
