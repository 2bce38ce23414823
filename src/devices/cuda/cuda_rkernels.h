// The CUDA device's rKernels (cuda_rkernels.cc). Host code, built with or
// without a GPU: what the compiler needs of them (rTask counts, access)
// is known without one.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "devices/cuda/dev_op.h"
#include "compiler/program.h"
#include "devices/device.h"
#include "kernels/rkernel.h"

namespace tessera::cuda {

// An rOperator whose rTasks run on the GPU: `op` is its DevOp, addresses
// not yet filled in.
class CudaOp : public ROp {
 public:
  explicit CudaOp(const DevOp& op, std::string_view path = {}) : op_(op), path_(path) { tasks_ = op.tasks; }
  const DevOp& op() const { return op_; }
  std::string_view path() const override { return path_; }
  // Not on a host thread: fails loudly.
  void run(int64_t task, const TaskArgs& args) const override;

  // Device memory the loader gives the op beside its tensors: split-k
  // partial sums (floats) and tickets (ints, zeroed once), and for a
  // Concat/Split the starts of its parts along the axis.
  int64_t scratch_floats = 0;
  int64_t tickets = 0;
  std::vector<int64_t> part_off;

 private:
  DevOp op_;
  std::string_view path_;
};

KernelTable cuda_kernels();
// The passes the device compiles with (Device::passes): no fusion (these
// rKernels have no fused ops), no Concat in place, and recurrent layers as
// a cell per step, each stacked layer's projection one per step of the
// layer below, so the Plan runs the layers as a diagonal wavefront.
Device::Passes cuda_passes();
// A CompileConfig with these rKernels and passes, no profile (for tests
// and the emulator; sessions get theirs from the Runtime).
CompileConfig cuda_compile_config();

// Memory beside the tensors: `bytes` holding a copy of `init`, or zeros
// where it is null; the address the kernels will use.
using DevAlloc = std::function<Result<void*>(size_t bytes, const void* init)>;
// One DevOp per step of `p` (compiled with these rKernels), with the
// addresses filled in: tensor slot i at slot[i], and each op's scratch,
// tickets and part tables from `alloc`. Shared by the GPU's loader and the
// emulator.
Result<std::vector<DevOp>> dev_ops(const Program& p, const std::vector<void*>& slot, const DevAlloc& alloc);

}  // namespace tessera::cuda
