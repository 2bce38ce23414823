// What the channel-blocked rKernels share (blocked.cc: the layout
// conversions, the depthwise and grouped convs and the factories;
// blocked_pointwise.cc: the 1x1 conv): the block, the clamp applied in
// registers, and the 1x1 conv's maker. Blocks exist with AVX2 and FMA
// (AVX-512 builds have them too); elsewhere TESSERA_BLOCKED is undefined
// and nothing here is declared.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TESSERA_BLOCKED 1
#endif

#include <memory>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/kernel.h"

namespace tessera {

#if defined(TESSERA_BLOCKED)
inline constexpr int64_t kB = 8;  // channels per block: one __m256

// A Relu or Clip on a vector, with the unfused ops' expressions lane by
// lane (Relu maps NaN to 0, Clip keeps it).
struct Clamp8 {
  bool on = false, relu = false;
  float lo = 0, hi = 0;
  bool take(const Epilogue& e) {
    if (e.act == Epilogue::Act::kRelu) on = relu = true;
    else if (e.act == Epilogue::Act::kClip) on = true, lo = e.alpha, hi = e.beta;
    return on;
  }
  // vmaxps and vminps return their second operand where either is NaN or
  // both are equal: max(v, 0) is v > 0 ? v : 0 (NaN and -0 to +0), and
  // min(hi, max(lo, v)) is v < lo ? lo : (v > hi ? hi : v) (NaN kept).
  __m256 operator()(__m256 v) const {
    if (relu) return _mm256_max_ps(v, _mm256_setzero_ps());
    return _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), v));
  }
#if defined(__AVX512F__)
  __m512 operator()(__m512 v) const {
    // (The maskz forms: GCC 12 warns about the plain ones' undefined
    // pass-through operand.)
    constexpr __mmask16 kAll = 0xffff;
    if (relu) return _mm512_maskz_max_ps(kAll, v, _mm512_setzero_ps());
    return _mm512_maskz_min_ps(kAll, _mm512_set1_ps(hi), _mm512_maskz_max_ps(kAll, _mm512_set1_ps(lo), v));
  }
#endif
};

// The blocked 1x1 conv (no padding; any stride) of weights w [cout][cin],
// its epilogue fused.
std::unique_ptr<ROp> make_blocked_pointwise(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                            const KernelParams& p);
#endif

}  // namespace tessera
