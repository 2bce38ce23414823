// The epilogue of a fused Conv or Gemm (TesseraFusedConv/TesseraFusedGemm,
// made by the compiler's fusion pass): y = act(y + residual), applied by
// each rTask to its own output tile while it is still in cache, instead of
// separate Add and activation ops that read and write the whole tensor
// again. The arithmetic is exactly that of the unfused ops (elementwise.cc),
// in the same order, so fusing never changes a result.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cpu/simd.h"

#include "ir/graph.h"
#include "kernels/cpu/fast_math.h"
#include "tessera/status.h"

namespace tessera {

struct Epilogue {
  enum class Act : uint8_t { kNone, kRelu, kClip, kLeakyRelu, kSigmoid, kTanh, kHardSigmoid, kHardSwish, kGelu, kSilu };
  Act act = Act::kNone;
  // Clip: min, max; LeakyRelu: alpha; HardSigmoid: alpha, beta; Gelu: the
  // divisor and the final factor of ((y * (erf(y / alpha) + 1)) * beta).
  float alpha = 0, beta = 0;
  bool residual = false;      // input 3 is added first

  bool empty() const { return act == Act::kNone && !residual; }

  // From a fused node's attributes; the default (no epilogue) for others.
  static Result<Epilogue> from_node(const Node& n) {
    Epilogue e;
    if (n.op_type.rfind("TesseraFused", 0) != 0 && n.op_type != "TesseraBlockedConv") return e;
    e.residual = n.input(3) != nullptr;
    const std::string a = n.attr_string("activation", "none");
    e.alpha = n.attr_float("activation_alpha", 0.f);
    e.beta = n.attr_float("activation_beta", 0.f);
    if (a == "none") e.act = Act::kNone;
    else if (a == "Relu") e.act = Act::kRelu;
    else if (a == "Clip") e.act = Act::kClip;
    else if (a == "LeakyRelu") e.act = Act::kLeakyRelu;
    else if (a == "Sigmoid") e.act = Act::kSigmoid;
    else if (a == "Tanh") e.act = Act::kTanh;
    else if (a == "HardSigmoid") e.act = Act::kHardSigmoid;
    else if (a == "HardSwish") e.act = Act::kHardSwish;
    else if (a == "Gelu") e.act = Act::kGelu;
    else if (a == "Silu") e.act = Act::kSilu;
    else return invalid_argument(n.label() + ": unknown fused activation '" + a + "'");
    return e;
  }

  // y[0, n) = act(y + res) (res may be null when there is no residual).
  void apply(float* __restrict y, const float* __restrict res, int64_t n) const {
    // Parameters in locals: loads through `this` inside the loops could
    // alias y, which would keep them from vectorizing.
    const float a = alpha, b = beta;
    if (residual) {
      // The common pairs in one pass over y: the same arithmetic as the
      // two passes below.
      if (act == Act::kRelu) {
        for (int64_t i = 0; i < n; ++i) {
          const float v = y[i] + res[i];
          y[i] = v > 0 ? v : 0.f;
        }
        return;
      }
      if (act == Act::kClip) {
        for (int64_t i = 0; i < n; ++i) {
          const float v = y[i] + res[i];
          y[i] = v < a ? a : (v > b ? b : v);
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] + res[i];
    }
    switch (act) {
      case Act::kNone: return;
      case Act::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0 ? y[i] : 0.f; return;
      case Act::kClip:
        for (int64_t i = 0; i < n; ++i) y[i] = y[i] < a ? a : (y[i] > b ? b : y[i]);
        return;
      case Act::kLeakyRelu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] >= 0 ? y[i] : a * y[i]; return;
      case Act::kSigmoid: sigmoid_n(y, y, n); return;
      case Act::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = fast_tanh(y[i]); return;
      case Act::kHardSigmoid:
        for (int64_t i = 0; i < n; ++i) y[i] = hard_sigmoid(y[i], a, b);
        return;
      case Act::kHardSwish:
        for (int64_t i = 0; i < n; ++i) y[i] = hard_swish(y[i]);
        return;
      case Act::kGelu:
        // PyTorch's exact GELU as exported: Div, Erf, Add 1, Mul by y, Mul,
        // each result rounded to float as the unfused ops store it (no step
        // contracts into the next).
        gelu_n(y, n, a, b);
        return;
      case Act::kSilu: silu_n(y, n); return;  // y * Sigmoid(y), as exported (either order: the same bits)
    }
  }
};

#if defined(TESSERA_SIMD)
// An epilogue of Relu or Clip with no residual, applied to a vector of
// outputs while they are still in a register (direct and depthwise convs),
// with the unfused ops' expressions lane by lane: Relu maps NaN to 0, Clip
// keeps it.
struct RegisterClamp {
  bool on = false, relu = false;
  float lo = 0, hi = 0;

  // Takes `epi` if it has that form; returns whether it did.
  bool take(const Epilogue& epi) {
    if (epi.residual) return false;
    if (epi.act == Epilogue::Act::kRelu) {
      on = relu = true;
    } else if (epi.act == Epilogue::Act::kClip) {
      on = true, lo = epi.alpha, hi = epi.beta;
    }
    return on;
  }

  simd::Vec::T operator()(simd::Vec::T v) const {
    if (relu) {
      const simd::Vec::T z = simd::Vec::zero();
      return v > z ? v : z;
    }
    const simd::Vec::T l = simd::Vec::set1(lo), h = simd::Vec::set1(hi);
    return v < l ? l : (v > h ? h : v);
  }
};
#endif

}  // namespace tessera
