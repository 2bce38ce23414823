// What a CUDA rTask needs to run, as plain data that the host fills and the
// device reads: one DevOp per step (its kind, its tensors' device
// addresses, its geometry) and one DevInstr per Plan instruction. Shared
// by the host code (cuda_device.cc, cuda_rkernels.cc) and the kernels
// (plan_kernel.cu); no CUDA types.
#pragma once

#include <cstdint>

namespace tessera::cuda {

inline constexpr int kMaxRank = 6;
inline constexpr int kMaxInputs = 3;

enum class DevKind : int32_t {
  kBinary,      // out = in0 (op) in1, numpy broadcasting through strides
  kUnary,       // out = f(in0)
  kGather,      // out[o, i, r] = in0[o, idx[i], r]
  kGemm,        // out = alpha * op(A) op(B) + beta * C (broadcast)
  kMatMul,      // batched: out[b] = A[b] B[b] (strides 0 for broadcast batches)
  kSoftmax,     // along the last axis; sub 1: log-softmax
  kCopy,        // Reshape, Flatten, Identity, Squeeze, Unsqueeze: bytes as they are
};

enum class BinaryOp : int32_t { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow };
enum class UnaryOp : int32_t { kRelu, kSigmoid, kTanh, kExp, kNeg, kAbs, kSqrt, kErf, kGelu };

struct DevOp {
  DevKind kind = DevKind::kCopy;
  int32_t sub = 0;          // BinaryOp / UnaryOp / softmax flavour
  int64_t tasks = 1;        // rTasks: each a contiguous share of the work
  int64_t n = 0;            // output elements (kCopy: bytes)
  const void* in[kMaxInputs] = {nullptr, nullptr, nullptr};
  void* out = nullptr;
  // Elementwise: the output's dims, and each input's strides over them
  // (0 where it is broadcast).
  int32_t rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[2][kMaxRank] = {};
  // Gemm / MatMul: out [batch, m, n] from A [m, k] and B [k, n] (after
  // the transposes); lda/ldb the row pitches as stored; C broadcast by
  // (c_rs, c_cs) element strides; batch strides in elements.
  int64_t m = 0, nn = 0, k = 0, lda = 0, ldb = 0;
  int32_t ta = 0, tb = 0;
  float alpha = 1, beta = 0;
  int64_t c_rs = 0, c_cs = 0;
  int64_t batch = 1, a_bs = 0, b_bs = 0;
  // Gather: outer x axis x inner data; `count` indices (int64 when
  // idx64, else int32).
  int64_t outer = 1, axis = 1, inner = 1, count = 0;
  int32_t idx64 = 1;
  // Softmax: rows x cols.
  int64_t rows = 0, cols = 0;
};

// One instruction of a vEU's list (compiler/plan.h, Instr).
struct DevInstr {
  int32_t kind;  // 0 run, 1 signal, 2 wait
  int32_t a;     // run: step; wait: vEU
  int64_t b;     // run: rTask; signal, wait: count
};

}  // namespace tessera::cuda
