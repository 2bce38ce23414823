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
//   erf: 16 pieces of width 1/4 over [0, 4), a degree-6 polynomial on
//        each (coefficients picked by the interval index, no exp and no
//        division); +-1 from 4 on, where float erf rounds to 1. Within
//        1 ulp of the correctly rounded erf at every float (checked
//        exhaustively over [0, 4.5)). A NaN input stays NaN. std::erf was
//        a scalar call of ~2.4 ns, 13% of a tiny BERT's run time in its
//        GELUs; the earlier exp-based piecewise erf ~0.4 ns, this one ~0.17 ns.
#pragma once

#include <cstdint>
#include <cstring>

namespace tessera {

// fast_exp's constants, shared with its 16-lane form (row_math.h).
namespace exp_consts {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kLow = -87.3f, kHigh = 88.7f;
// e^r's Taylor coefficients, highest degree first (Horner order).
inline constexpr float kPoly[7] = {1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};
}  // namespace exp_consts

[[gnu::always_inline]] inline float fast_exp(float x) {
  using namespace exp_consts;
  // Written so that a NaN x clamps to the low bound: n stays finite and the
  // float-to-int conversion below is defined; the NaN is returned at the end.
  float xc = x > kLow ? x : kLow;
  xc = xc < kHigh ? xc : kHigh;
  float n = __builtin_floorf(xc * kLog2e + 0.5f);
  float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = kPoly[0];
  for (int i = 1; i < 7; ++i) p = p * r + kPoly[i];
  int32_t e = static_cast<int32_t>(n) + 127;
  e = e < 1 ? 1 : (e > 254 ? 254 : e);
  uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x != x ? x : p * scale;
}

[[gnu::always_inline]] inline float fast_sigmoid(float x) { return 1.f / (1.f + fast_exp(-x)); }

[[gnu::always_inline]] inline float fast_tanh(float x) { return 1.f - 2.f / (fast_exp(2.f * x) + 1.f); }

// erf's pieces: |x| in [i/4, (i+1)/4) for i < 16 is interval i, with
// u = 8 (|x| - kErfCenter[i]) in [-1, 1) (interval 0: u = 8 |x| in [0, 2))
// and erf = c0 + u (c1 + u (c2 + ... + u c6)), where interval 0 adds |x|
// instead of its c0 (so that erf(x) ~ 2x / sqrt(pi) keeps its relative
// accuracy near 0). Least-squares fits in double, each coefficient rounded
// to float in turn and the later ones refitted to what the rounding left.
namespace erf_table {
inline constexpr float kErfCenter[16] = {
    0.e+00f, 3.75e-01f, 6.25e-01f, 8.75e-01f, 1.125e+00f, 1.375e+00f, 1.625e+00f, 1.875e+00f, 2.125e+00f, 2.375e+00f,
    2.625e+00f, 2.875e+00f, 3.125e+00f, 3.375e+00f, 3.625e+00f, 3.875e+00f};
inline constexpr float kErfCoef[7][16] = {
    {  // c0
        0.e+00f, 4.041169e-01f, 6.232409e-01f, 7.840751e-01f, 8.883882e-01f, 9.4817007e-01f, 9.7844374e-01f,
        9.9199003e-01f, 9.97346e-01f, 9.9921703e-01f, 9.997946e-01f, 9.9995214e-01f, 9.999901e-01f, 9.999982e-01f,
        9.999997e-01f, 9.9999994e-01f},
    {  // c1
        1.6047396e-02f, 1.225441e-01f, 9.5437445e-02f, 6.559313e-02f, 3.9784245e-02f, 2.1294972e-02f, 1.0059033e-02f,
        4.193228e-03f, 1.5426025e-03f, 5.0080975e-04f, 1.4348442e-04f, 3.6278558e-05f, 8.094846e-06f, 1.5939715e-06f,
        2.7699127e-07f, 4.7856727e-08f},
    {  // c2
        -9.163698e-09f, -5.744155e-03f, -7.4561033e-03f, -7.1744313e-03f, -5.5945227e-03f, -3.660011e-03f,
        -2.043318e-03f, -9.825373e-04f, -4.0987384e-04f, -1.484224e-04f, -4.688405e-05f, -1.2968413e-05f,
        -3.1833113e-06f, -9.1665305e-07f, -9.957264e-08f, 1.5357034e-07f},
    {  // c3
        -7.345562e-04f, -4.5874823e-04f, -1.08746965e-04f, 1.814867e-04f, 3.1728632e-04f, 3.084716e-04f,
        2.2429862e-04f, 1.3172318e-04f, 6.452668e-05f, 2.6817359e-05f, 9.55138e-06f, 2.9344492e-06f, 7.8119535e-07f,
        1.807903e-07f, 3.646103e-08f, -6.543489e-09f},
    {  // c4
        -1.515435e-07f, 4.044217e-05f, 4.3197626e-05f, 2.7842521e-05f, 6.5289555e-06f, -7.583065e-06f,
        -1.1968871e-05f, -1.0868679e-05f, -6.1718065e-06f, -3.7682541e-06f, -1.7545885e-06f, -6.115661e-07f,
        -8.935218e-08f, 5.0241823e-07f, -6.465439e-08f, -3.990475e-07f},
    {  // c5
        3.5977005e-06f, 1.3908603e-06f, -8.1959536e-07f, -2.0383764e-06f, -1.8640288e-06f, -9.343176e-07f,
        -6.862997e-08f, 3.4556618e-07f, 3.8001383e-07f, 2.5517642e-07f, 1.2923971e-07f, 5.269677e-08f, 1.781293e-08f,
        5.076865e-09f, 1.2326886e-09f, 7.609667e-09f},
    {  // c6
        -7.210654e-08f, -4.5516817e-08f, -2.2936497e-07f, -2.8846884e-07f, 2.4476955e-07f, 1.6881498e-07f,
        -4.9976457e-08f, 3.5694669e-07f, -1.701916e-07f, 3.3589282e-07f, 2.5922918e-07f, 8.979921e-08f,
        -3.0679253e-08f, -3.3291678e-07f, 3.51495e-08f, 2.4994475e-07f},
};
}  // namespace erf_table

[[gnu::always_inline]] inline float fast_erf(float x) {
  const float a = __builtin_fabsf(x);
  // a < 4 is false for NaN: interval 0, which keeps the NaN.
  const int i = a < 4.f ? static_cast<int>(a * 4.f) : 0;
  const auto& c = erf_table::kErfCoef;
  const float u = (a - erf_table::kErfCenter[i]) * 8.f;
  float p = c[6][i];
  p = __builtin_fmaf(p, u, c[5][i]);
  p = __builtin_fmaf(p, u, c[4][i]);
  p = __builtin_fmaf(p, u, c[3][i]);
  p = __builtin_fmaf(p, u, c[2][i]);
  p = __builtin_fmaf(p, u, c[1][i]);
  const float r = __builtin_fmaf(p, u, a < 0.25f ? a : c[0][i]);
  return __builtin_copysignf(a >= 4.f ? 1.f : r, x);
}

// y[0, n) = erf(x[0, n)), equal to fast_erf element by element (y may be
// x). With AVX-512 the tables live in registers and each coefficient is a
// lane permute (a gather would cost more than the whole polynomial); with
// AVX2 two permutes and a blend per coefficient.
void erf_n(const float* x, float* y, int64_t n);

// y[0, n) = ((y * (erf(y / a) + 1)) * b), PyTorch's exact GELU as it
// exports it (Div, Erf, Add, Mul, Mul), each step rounded to float as its
// op stores it, in one pass.
void gelu_n(float* y, int64_t n, float a, float b);

}  // namespace tessera
