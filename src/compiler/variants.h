// rKernel variants: the same op cut into different numbers of rTasks, or
// computed by another rKernel that fits it, and the choice among them by
// their effect on the Plan.
//
// Every op starts (compile_graph) from at most one rTask per vEU. Heavy ops
// (Conv, ConvTranspose, MatMul, Gemm and their fused forms, fused
// elementwise chains, recurrent cells and input projections) get up to
// three tilings: that start, the kernel's own grain (fine: many small
// rTasks, best when an op must spread over idle vEUs), and the whole op as
// one rTask (coarse: least overhead and the largest GEMM tiles, best when
// other work keeps the vEUs busy). Where other rKernels fit the op too (a
// 3x3 Conv: Winograd or im2col + GEMM), each of them adds the same three
// tilings, after the default rKernel's; once costed, those whose least work
// is not clearly (10 %) below the default's are dropped. Each variant has its rKernel,
// rTask count, scratch need and measured (or analytic) cost per rTask.
//
// How a variant is chosen depends on the policy:
//   wavefront       per BFS wave: when the wave's rTasks (most efficient
//                   variants) do not fill the vEUs, each op takes its
//                   fastest variant for its share of the vEUs; when they
//                   do, its most resource-efficient (least total work);
//   critical-path   start from the most efficient variants, then for the
//                   heaviest ops try each alternative and keep it when the
//                   predicted makespan drops;
//   auto            both; the lower predicted makespan wins.
//
// Thread-safety: compile-time only, on the compiling thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/plan.h"
#include "kernels/rkernel.h"
#include "tessera/status.h"

namespace tessera {

class Program;
struct Step;

struct Variant {
  const RKernel* kernel = nullptr;
  KernelParams params;
  std::unique_ptr<ROp> op;  // null while it is the step's chosen op
  double cost_us = 0;       // one rTask
};

// Whether ops of this type (ONNX or Tessera) get variants.
bool is_heavy_op(const std::string& op_type);

// Per step, its variants: first the step's current op (held by the step),
// then, for heavy ops, the other tilings for `veus` vEUs and those of the
// other rKernels in `kernels` that fit (none if veus is 0). Costs are
// filled by cost_variants.
Result<std::vector<std::vector<Variant>>> make_variants(const Program& p, int veus, KernelTable kernels);

// Costs every variant with `cost_of` (the profiler or the analytic model;
// given the step and its index), reporting (done, total) to `progress`;
// then drops other rKernels' variants that do not clearly beat the
// default's.
using CostFn = std::function<double(const Step&, size_t)>;
void cost_variants(const Program& p, std::vector<std::vector<Variant>>& variants, const CostFn& cost_of,
                   const std::function<void(size_t, size_t)>& progress);

// Chooses a variant per step (installing it in p.steps) and schedules.
// `cost` receives the chosen per-rTask costs.
Result<Plan> schedule_with_variants(Program& p, std::vector<std::vector<Variant>>& variants,
                                    const ScheduleOptions& options, std::vector<double>* cost);

}  // namespace tessera
