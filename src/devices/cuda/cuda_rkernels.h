// The CUDA device's rKernels (cuda_rkernels.cc). Host code, built with or
// without a GPU: what the compiler needs of them (rTask counts, access)
// is known without one.
#pragma once

#include "devices/cuda/dev_op.h"
#include "kernels/rkernel.h"

namespace tessera::cuda {

// An rOperator whose rTasks run on the GPU: `op` is its DevOp, addresses
// not yet filled in.
class CudaOp : public ROp {
 public:
  explicit CudaOp(const DevOp& op) : op_(op) { tasks_ = op.tasks; }
  const DevOp& op() const { return op_; }
  // Not on a host thread: fails loudly.
  void run(int64_t task, const TaskArgs& args) const override;

 private:
  DevOp op_;
};

KernelTable cuda_kernels();

}  // namespace tessera::cuda
