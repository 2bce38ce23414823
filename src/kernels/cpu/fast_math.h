// Vectorizable float exp, sigmoid and tanh for rKernel inner loops.
//
// std::exp and std::tanh are scalar library calls the compiler cannot
// vectorize (errno, no libmvec without -ffast-math); in LSTM gates they were
// most of the run time. These are branch-free, so loops over them
// vectorize:
//   exp: Cody-Waite range reduction x = n ln2 + r with |r| <= ln2/2, a
//        degree-6 Taylor polynomial for e^r (truncation < 2e-7 relative),
//        scaled by 2^n through the exponent bits; inputs clamped to
//        [-87.3, 88.7] (results saturate to 0/inf-ish finite extremes, and
//        a NaN input stays NaN).
//   sigmoid: 1 / (1 + exp(-x)); tanh: 1 - 2 / (exp(2x) + 1).
#pragma once

#include <cstdint>
#include <cstring>

namespace tessera {

inline float fast_exp(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  xc = x != x ? x : xc;  // keep NaN
  float n = __builtin_floorf(xc * kLog2e + 0.5f);
  float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  int32_t e = static_cast<int32_t>(n) + 127;
  e = e < 1 ? 1 : (e > 254 ? 254 : e);
  uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

inline float fast_sigmoid(float x) { return 1.f / (1.f + fast_exp(-x)); }

inline float fast_tanh(float x) { return 1.f - 2.f / (fast_exp(2.f * x) + 1.f); }

}  // namespace tessera
