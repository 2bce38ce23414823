// CPU rKernels: the table of every CPU rKernel (one file per op family)
// on the contract of kernels/rkernel.h, and what only the CPU needs.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/rkernel.h"

namespace tessera {

// Every CPU rKernel; an op may have several.
std::span<const RKernel> cpu_kernels();
// The default rKernel for an op type, or nullptr.
const RKernel* cpu_kernel_find(std::string_view op);

// Evaluates a node on constant inputs (for constant folding and tests):
// allocates outputs, runs every rTask in order on this thread.
Status cpu_evaluate(const Node& node, std::vector<Tensor>* outputs);

// Must run on every thread that runs rTasks: makes the math library
// single-threaded there (parallelism comes from rTasks, not from inside;
// left multi-threaded, it also sums in another order). Once per thread:
// later calls only read a thread-local flag.
void cpu_kernels_thread_init();

// The instruction set the kernels were built for (simd.h): "avx512",
// "avx2" or "portable".
const char* kernel_isa();

// Whether a lowered LSTM cell that carries the next layer's projection
// (next_slice) runs the two fused, the tile's FMAs in the idle slots of
// the GEMV's stream: built for AVX-512 only, whose 32 registers hold the
// GEMV's sums and the 8 x 32 tile's at once. Elsewhere such a cell runs
// them one after the other, slower than projecting separately, so the
// CPU device does not ask the compiler to carry (Device::Passes).
bool rnn_carry_fused();

// --- helpers for kernel files ----------------------------------------------

// Bits [lo, hi) of a 32-bit lane mask, both ends clamped to [0, 32] (empty
// when hi <= lo): the lanes of one or two 16-float vectors whose element
// lies inside a row, for masked loads and stores.
inline uint32_t lane_bits(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : (lo > 32 ? 32 : lo);
  hi = hi < lo ? lo : (hi > 32 ? 32 : hi);
  return static_cast<uint32_t>(((uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1));
}

// Per-family kernel tables, concatenated by registry.cc.
std::span<const RKernel> elementwise_kernels();
std::span<const RKernel> matmul_kernels();
std::span<const RKernel> conv_kernels();
std::span<const RKernel> conv_transpose_kernels();
std::span<const RKernel> inverted_residual_kernels();
std::span<const RKernel> pool_kernels();
std::span<const RKernel> norm_kernels();
std::span<const RKernel> reduce_kernels();
std::span<const RKernel> layout_kernels();
std::span<const RKernel> rnn_kernels();
std::span<const RKernel> resize_kernels();
std::span<const RKernel> rnn_lowered_kernels();
// The channel-blocked layout's (blocked.cc): empty where the build has no
// AVX2 with FMA.
std::span<const RKernel> blocked_kernels();

}  // namespace tessera
