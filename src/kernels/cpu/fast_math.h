// Vectorizable float exp, sigmoid, tanh and erf for rKernel inner loops.
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
//   erf: x P(x^2) for |x| < 1, P of degree 6; for 1 <= |x| < 4,
//        sign(x) (1 - exp(-x^2) Q(w)) with Q of degree 8 in
//        w = (1 / (1 + |x|) - 0.35) / 0.15, since erfc(a) e^(a^2) is
//        smooth in 1 / (1 + a) (it tends to 1 / (a sqrt(pi))); +-1 from 4
//        on, where float erf rounds to 1. Both are least-squares fits;
//        within 2 ulps of the correctly rounded erf on a grid of 600 001
//        points over [-6, 6] (the worst, 2.0, near -1, with or without
//        FMA contraction). A NaN input stays NaN. std::erf was a scalar call of
//        ~2.4 ns, 13% of a tiny BERT's run time in its GELUs.
#pragma once

#include <cstdint>
#include <cstring>

namespace tessera {

[[gnu::always_inline]] inline float fast_exp(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  // Written so that a NaN x clamps to the low bound: n stays finite and the
  // float-to-int conversion below is defined; the NaN is returned at the end.
  float xc = x > -87.3f ? x : -87.3f;
  xc = xc < 88.7f ? xc : 88.7f;
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
  return x != x ? x : p * scale;
}

[[gnu::always_inline]] inline float fast_sigmoid(float x) { return 1.f / (1.f + fast_exp(-x)); }

[[gnu::always_inline]] inline float fast_tanh(float x) { return 1.f - 2.f / (fast_exp(2.f * x) + 1.f); }

[[gnu::always_inline]] inline float fast_erf(float x) {
  const float a = x < 0 ? -x : x;
  const float x2 = x * x;
  float p = 7.93335057e-05f;
  p = p * x2 - 8.03480507e-04f;
  p = p * x2 + 5.19121392e-03f;
  p = p * x2 - 2.68553980e-02f;
  p = p * x2 + 1.12836257e-01f;
  p = p * x2 - 3.76126289e-01f;
  p = p * x2 + 1.12837923e+00f;
  const float small = x * p;
  const float w = (1.f / (1.f + a) - 0.35f) * (1.f / 0.15f);
  float q = 2.62262859e-07f;
  q = q * w - 1.02857427e-06f;
  q = q * w - 2.52499285e-06f;
  q = q * w + 4.30583277e-05f;
  q = q * w - 1.12101174e-04f;
  q = q * w - 1.38771953e-03f;
  q = q * w + 1.08529944e-02f;
  q = q * w + 1.46637753e-01f;
  q = q * w + 2.71552891e-01f;
  const float big = 1.f - fast_exp(-x2) * q;
  const float sign = x < 0 ? -1.f : 1.f;
  return a >= 4.f ? sign : (a >= 1.f ? sign * big : small);
}

}  // namespace tessera
