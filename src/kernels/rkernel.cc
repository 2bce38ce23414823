#include "kernels/rkernel.h"

#include <algorithm>

namespace tessera {

const RKernel* kernel_find(KernelTable table, std::string_view op_type) {
  for (const RKernel& k : table)
    if (k.op == op_type) return &k;
  return nullptr;
}

const RKernel* kernel_for(KernelTable table, const Node& node) {
  for (const RKernel& k : table)
    if (k.op == node.op_type && (k.fits == nullptr || k.fits(node))) return &k;
  return nullptr;
}

std::vector<const RKernel*> kernels_for(KernelTable table, const Node& node) {
  std::vector<const RKernel*> out;
  for (const RKernel& k : table)
    if (k.op == node.op_type && (k.fits == nullptr || k.fits(node))) out.push_back(&k);
  return out;
}

void ROp::set_access_by_ranges(const Node& n) {
  const int64_t count = n.outputs.empty() ? 0 : n.outputs[0]->shape.numel();
  in_access_.clear();
  for (const Value* v : n.inputs)
    in_access_.push_back(v != nullptr && v->shape.numel() == count ? Access::kRange : Access::kWhole);
  out_access_ = Access::kRange;
}

int64_t choose_tasks(int64_t work, int64_t grain, const KernelParams& params) {
  if (work <= 1) return 1;
  if (params.tasks > 0) return std::min(params.tasks, work);
  int64_t n = (work + grain - 1) / std::max<int64_t>(grain, 1);
  return std::clamp<int64_t>(n, 1, std::min(work, kMaxDefaultTasks));
}

}  // namespace tessera
