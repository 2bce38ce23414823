// The CUDA device's rKernels (cuda_rkernels.cc). Host code, built with or
// without a GPU: what the compiler needs of them (rTask counts, access)
// is known without one.
#pragma once

#include <string_view>
#include <vector>

#include "devices/cuda/dev_op.h"
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

}  // namespace tessera::cuda
