#include <omp.h>

#include <algorithm>
#include <vector>

#include "base/strings.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/simd.h"

namespace tessera {

std::span<const RKernel> cpu_kernels() {
  static const std::vector<RKernel> all = [] {
    std::vector<RKernel> v;
    for (auto table : {elementwise_kernels(), matmul_kernels(), conv_kernels(), conv_transpose_kernels(),
                       inverted_residual_kernels(),
                       pool_kernels(), norm_kernels(), reduce_kernels(), layout_kernels(), rnn_kernels(),
                       resize_kernels(), rnn_lowered_kernels(), blocked_kernels()})
      v.insert(v.end(), table.begin(), table.end());
    return v;
  }();
  return all;
}

const char* kernel_isa() {
#if defined(TESSERA_SIMD)
  return simd::Vec::kIsa;
#else
  return "portable";
#endif
}

const RKernel* cpu_kernel_find(std::string_view op) { return kernel_find(cpu_kernels(), op); }


void cpu_kernels_thread_init() {
  thread_local bool done = false;
  if (!done) omp_set_num_threads(1);
  done = true;
}

Status cpu_evaluate(const Node& node, std::vector<Tensor>* outputs) {
  // The first rKernel that fits this node (a Conv's default, Winograd,
  // takes only some convs).
  const RKernel* k = kernel_for(cpu_kernels(), node);
  if (k == nullptr) return unimplemented(str_cat(node.label(), ": no CPU kernel"));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ROp> op, k->make(node, KernelParams{1}));
  outputs->clear();
  std::vector<const void*> in;
  std::vector<void*> out;
  for (Value* v : node.inputs) in.push_back(v && v->is_constant() ? v->constant->raw() : nullptr);
  for (Value* v : node.outputs) {
    outputs->emplace_back(v->dtype, v->shape);
    out.push_back(outputs->back().raw());
  }
  std::vector<unsigned char> scratch(op->scratch_bytes() + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
  TaskArgs args{in.data(), out.data(), aligned};
  cpu_kernels_thread_init();
  for (int64_t i = 0; i < op->tasks(); ++i) op->run(i, args);
  return Status();
}

}  // namespace tessera
