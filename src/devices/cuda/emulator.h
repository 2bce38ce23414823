// The CUDA device's rTasks (rtasks.h) run on the CPU, for testing them
// where there is no GPU: each rTask as one block of 256 threads, the
// threads fibers that take turns at every barrier. Slow (every barrier
// switches 256 stacks), exact: the same code and the same order of sums
// as on the GPU, so the outputs are bitwise those the GPU gives where the
// math library agrees (expf, tanhf and erff may differ in the last bit).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "compiler/program.h"
#include "devices/cuda/dev_op.h"
#include "tessera/status.h"

namespace tessera::cuda {

// Runs rTask `t` of `op`, whose addresses are host memory.
void emulate_task(const DevOp& op, int64_t t);

// A Program compiled with the cuda rKernels, laid out in host memory as
// the loader lays it out on the GPU (the same DevOps), run step by step.
class EmulatedProgram {
 public:
  static Result<std::unique_ptr<EmulatedProgram>> load(const Program& p);
  // Input i of the model (bytes as the Program takes them).
  void* input(size_t i);
  const void* output(size_t i) const;
  // Every step's rTasks in step order (what any valid Plan computes).
  void run();
  // The Plan's vEU lists, interleaved as `seed` picks (each vEU runs
  // until a wait is not yet met, in a seeded order), every wait honoured:
  // one of the orders the GPU may run them in. Fails where the lists
  // cannot finish (a wait on a count never published).
  Status run_plan(uint64_t seed);
  // Step s's rTasks alone, and where its tensor slot i lies.
  void run_step(size_t s);
  const void* slot(int i) const { return slot_[static_cast<size_t>(i)]; }

 private:
  EmulatedProgram() = default;
  const Program* p_ = nullptr;
  std::vector<unsigned char> arena_;
  std::vector<std::vector<unsigned char>> extra_;  // scratch, tickets, part tables
  std::vector<void*> slot_;
  std::vector<DevOp> ops_;
};

}  // namespace tessera::cuda
