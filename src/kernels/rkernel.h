// The rKernel contract, the same for every backend.
//
// An rKernel implements one op on one backend. Given a node with bound
// shapes it makes an rOperator (ROp): the node's work cut into `tasks()`
// independent rTasks (tiles of the output: rows, channel blocks, spatial
// blocks; time steps of a recurrent op are split by the compiler, not
// here), each of which runs to completion with no synchronization inside.
// The tiling is a parameter (KernelParams::tasks), so the compiler can ask
// for several variants of the same op; a kernel honours it up to the
// parallelism the op has. A backend's kernels live beside it
// (kernels/cpu/kernel.h: the CPU's table and what only it needs).
//
//   auto op = kernel->make(node, KernelParams{.tasks = 8});
//   TaskArgs args{inputs, outputs, scratch};
//   for (int64_t i = 0; i < (*op)->tasks(); ++i) (*op)->run(i, args);
//
// Ownership: make() returns a unique_ptr the caller owns; an ROp keeps no
// pointer into the Node after make() returns. Thread-safety: run() is const
// and may be called for different tasks from different threads at once,
// each with its own scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "tessera/status.h"

namespace tessera {

// Argument pointers of one rOperator, resolved once before any run: one per
// node input (nullptr where an optional input is absent) and output.
struct TaskArgs {
  const void* const* in = nullptr;
  void* const* out = nullptr;
  void* scratch = nullptr;  // scratch_bytes() of this task's own memory
};

// How rTask t of an op's n rTasks touches a tensor, for the scheduler's
// cost of data that crosses vEUs (compiler/plan.h).
enum class Access : uint8_t {
  kWhole,   // all of it
  kSpread,  // about 1/n of it, spread through it
  kRange,   // the t-th of n equal flat ranges of it, in order
};

class ROp {
 public:
  virtual ~ROp() = default;
  int64_t tasks() const { return tasks_; }
  size_t scratch_bytes() const { return scratch_bytes_; }
  // How each rTask reads input i and writes the outputs (optional; by
  // default every input is read whole and the outputs written in parts
  // spread through them: the most an rTask can read from other vEUs).
  Access input_access(size_t i) const { return i < in_access_.size() ? in_access_[i] : Access::kWhole; }
  Access output_access() const { return out_access_; }
  void set_access(std::vector<Access> inputs, Access output) {
    in_access_ = std::move(inputs);
    out_access_ = output;
  }
  // Where an rTask reads far less of input i than its access says (a
  // recurrent cell reads one time step's row of the whole sequence's
  // projection), the bytes it reads: the scheduler charges those, drawn
  // from the producer's parts in proportion to where they ran. 0: as the
  // access says.
  double input_read_bytes(size_t i) const { return i < in_read_bytes_.size() ? in_read_bytes_[i] : 0; }
  void set_input_read_bytes(size_t i, double bytes) {
    if (in_read_bytes_.size() <= i) in_read_bytes_.resize(i + 1, 0);
    in_read_bytes_[i] = bytes;
  }
  // For rTasks that take the t-th of n flat ranges of the output: inputs
  // with as many elements as the output are read by the same ranges, the
  // others whole.
  void set_access_by_ranges(const Node& n);
  virtual void run(int64_t task, const TaskArgs& args) const = 0;
  // The algorithm chosen for these shapes where the rKernel has several
  // (a Conv: "winograd F(2,3)", "1x1 packed", "depthwise rows", ...; a MatMul:
  // "gemm_rows" or "sgemm"), for `tessera profile` and traces; empty
  // where there is one.
  virtual std::string_view path() const { return {}; }
  // What the op made once, when it was made, and reads in every run (its
  // weights packed or transformed), beside the node's constant inputs.
  // The profiler evicts both from the caches before it times an rTask of a
  // model whose weights a run reads from memory (ProfileOptions::
  // cold_llc_kb). Empty by default.
  virtual std::vector<std::span<const std::byte>> resident() const { return {}; }

 protected:
  int64_t tasks_ = 1;
  size_t scratch_bytes_ = 0;

 private:
  std::vector<Access> in_access_;
  std::vector<double> in_read_bytes_;
  Access out_access_ = Access::kSpread;
};

// One of ROp::resident()'s spans: a vector's elements as bytes.
template <typename T>
std::span<const std::byte> resident_bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

struct KernelParams {
  // Desired number of rTasks; 0 lets the kernel pick by its own grain.
  int64_t tasks = 0;
};

// A device's rKernels: a table the compiler chooses from (an op may have
// several; the first for an op is its default).
struct RKernel;
using KernelTable = std::span<const RKernel>;

// One way of computing an op. An op may have several (a Conv: Winograd,
// direct, im2col + GEMM, ...): each says which nodes it takes (`fits`),
// the compiler starts from the first in the table that fits, and the
// profiler and the policy choose among all that do.
struct RKernel {
  std::string_view op;
  std::string_view name;  // e.g. "conv.winograd"
  std::string_view description;
  // Fails (naming the node) for a node it does not fit.
  Result<std::unique_ptr<ROp>> (*make)(const Node& node, const KernelParams& params);
  // (optional) Whether it computes `node`; cheap, no packing. Default
  // (null): every node of its op.
  bool (*fits)(const Node& node) = nullptr;
};

// The first rKernel for `op_type` in `table`, or nullptr.
const RKernel* kernel_find(KernelTable table, std::string_view op_type);
// The first rKernel in `table` that fits `node` (its default), or nullptr.
const RKernel* kernel_for(KernelTable table, const Node& node);
// Every rKernel in `table` that fits `node`, the default first.
std::vector<const RKernel*> kernels_for(KernelTable table, const Node& node);

// Number of tasks for `work` units when a task should do at least `grain`:
// params.tasks if set (clamped to [1, work]), else ceil(work / grain) capped
// at kMaxDefaultTasks.
int64_t choose_tasks(int64_t work, int64_t grain, const KernelParams& params);
inline constexpr int64_t kMaxDefaultTasks = 64;
// The most rTasks an op may be asked for (KernelParams.tasks): far above
// any useful tiling, and low enough that the kernels' tiling arithmetic
// cannot overflow.
inline constexpr int64_t kMaxRequestedTasks = int64_t{1} << 20;

// The half-open range of `work` units that task i of n covers.
inline void task_range(int64_t work, int64_t n, int64_t i, int64_t* begin, int64_t* end) {
  *begin = work * i / n;
  *end = work * (i + 1) / n;
}

}  // namespace tessera
