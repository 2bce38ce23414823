// What a CUDA rTask needs to run, as plain data that the host fills and the
// device reads: one DevOp per step (its kind, its tensors' device
// addresses, its geometry) and one DevInstr per Plan instruction. Shared
// by the host code (cuda_device.cc, cuda_rkernels.cc) and the kernels
// (plan_kernel.cu); no CUDA types.
#pragma once

#include <cstdint>

namespace tessera::cuda {

inline constexpr int kMaxRank = 6;
inline constexpr int kMaxInputs = 5;

enum class DevKind : int32_t {
  kBinary,      // out = in0 (op) in1, numpy broadcasting through strides
  kUnary,       // out = f(in0) (kClip: lo, hi)
  kGather,      // out[o, i, r] = in0[o, idx[i], r]
  kGemm,        // out = alpha * op(A) op(B) + beta * C (broadcast), one row range per rTask
  kMatMul,      // batched: out[b] = A[b] B[b] (strides 0 for broadcast batches)
  kSoftmax,     // along the last axis; sub 1: log-softmax
  kCopy,        // Reshape, Flatten, Identity, Squeeze, Unsqueeze: bytes as they are
  kTiled,       // tiled GEMM (sub: TileShape), A and B by strides or B as a Conv's im2col; split over k
  kConvDirect,  // grouped / depthwise Conv: a thread per output
  kPool,        // MaxPool (sub 0), AveragePool (sub 1)
  kRowMean,     // GlobalAveragePool: the mean of each row of cols
  kLayerNorm,   // rows x cols, scale and bias over cols
  kStrided,     // out[e] = in0[strides[0] . index(e)]: Transpose (elements of `esize` bytes)
  kConcat,      // outer x (parts along the axis) x inner, `parts` inputs
  kSplit,       // the reverse: `parts` outputs
  kCast,        // sub: from * 16 + to (DTypeCode)
  kRnnProj,     // rows of in2 x the panel-packed W (in0) + bias (in1): the cells' layout
  kLstmCell,    // one step: xp (in0), h_prev (in1), c_prev (in2), packed R (in3) -> h (out), c (out2)
  kBatchNorm,   // inference: x (in0) per channel `axis` of [outer, axis, inner] by scale, B, mean, var (in1..4)
};

enum class BinaryOp : int32_t { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow };
enum class UnaryOp : int32_t { kRelu, kSigmoid, kTanh, kExp, kNeg, kAbs, kSqrt, kErf, kGelu, kClip };
enum class DTypeCode : int32_t { kF32, kI64, kI32, kBool };

// A tiled GEMM's output tile: rows x columns of one rTask's share.
enum class TileShape : int32_t { k64x64, k32x32 };
inline constexpr int kTileK = 16;  // k-slice staged in shared memory per step

struct ConvGeo {
  int64_t cin = 0, h = 0, w = 0, cout = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
  int64_t groups = 1;
  int32_t include_pad = 0;  // AveragePool
};

struct DevOp {
  DevKind kind = DevKind::kCopy;
  int32_t sub = 0;          // BinaryOp / UnaryOp / softmax flavour / TileShape / pool kind / cast
  int64_t tasks = 1;        // rTasks: each a contiguous share of the work
  int64_t n = 0;            // output elements (kCopy: bytes)
  const void* in[kMaxInputs] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  void* out = nullptr;
  void* out2 = nullptr;     // kLstmCell: c
  // Elementwise and kStrided: the output's dims, and each input's strides
  // over them (0 where it is broadcast).
  int32_t rank = 0;
  int32_t esize = 4;        // kStrided, kConcat, kSplit: bytes per element
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
  // kTiled: A(m, k) at a_rs * m + a_cs * k, B(k, n) at b_rs * k + b_cs * n
  // (or the im2col of in[1] by `conv`), out [batch, m, n]; `splits` k-ranges
  // per tile, summed in order by the tile's last rTask through `scratch`
  // ([splits, batch * m * n]) and `tickets` (one per tile, left at 0).
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0, y_bs = 0;
  int32_t conv_b = 0;       // B is the im2col of a Conv input
  int32_t bias_rows = 0;    // C (in[2]) is a bias per row of the output (Conv)
  int64_t splits = 1;
  float* scratch = nullptr;
  int* tickets = nullptr;
  ConvGeo conv;
  // Gather: outer x axis x inner data; `count` indices (int64 when
  // idx64, else int32).
  int64_t outer = 1, axis = 1, inner = 1, count = 0;
  int32_t idx64 = 1;
  // Softmax, LayerNorm, RowMean: rows x cols. LayerNorm: eps.
  int64_t rows = 0, cols = 0;
  float eps = 0, lo = 0, hi = 0;
  // Concat / Split: `parts` tensors, their device addresses at `part_ptr`
  // and their starts along the axis at `part_off` ([parts + 1]); outer and
  // inner above, the axis `axis` long.
  int64_t parts = 0;
  void* const* part_ptr = nullptr;
  const int64_t* part_off = nullptr;
  // Recurrent (kernels/cpu/rnn_cell.h's layout): hidden units, panels of
  // `units`, `gates`; the projection's input width `k`; the cell reads xp
  // rows step * rows .. + rows - 1.
  int64_t hidden = 0, panels = 0, units = 16, gates = 4, step = 0;
};

// One instruction of a vEU's list (compiler/plan.h, Instr).
struct DevInstr {
  int32_t kind;  // 0 run, 1 signal, 2 wait
  int32_t a;     // run: step; wait: vEU
  int64_t b;     // run: rTask; signal, wait: count
};

}  // namespace tessera::cuda
