// Vectorizable float exp, sigmoid, tanh and erf for rKernel inner loops,
// and HardSwish's expression (the op and the fused epilogue share it).
//
// std::exp and std::tanh are scalar library calls the compiler cannot
// vectorize (errno, no libmvec without -ffast-math); in LSTM gates they were
// most of the run time. These are branch-free, so loops over them
// vectorize:
//   exp: Cody-Waite range reduction x = n ln2 + r with |r| <= ln2/2, a
//        degree-6 Taylor polynomial for e^r (truncation < 2e-7 relative),
//        scaled by 2^n through the exponent bits; inputs clamped to
//        [-87.3, 88.7]. Below -87.3 the result is 0, not a subnormal:
//        arithmetic on subnormals takes a microcode assist on Intel cores
//        (a masked softmax's zeros made a tiny BERT's attention 20x
//        slower there). Above 88.7 it saturates to a finite extreme; a NaN
//        input stays NaN.
//   sigmoid: 1 / (1 + exp(-x)), 0 below -87.3 as exp; tanh: an odd
//        polynomial below |x| = 0.625,
//        1 - 2 / (exp(2|x|) + 1) with x's sign from there.
//   erf: pieces over [0, 4), a polynomial on each (16 pieces of degree
//        6 where the kernels are AVX-512, else 4 of degree 10;
//        coefficients picked by the interval index, no exp and no
//        division); +-1 from 4 on, where float erf rounds to 1. Within
//        1 ulp of the correctly rounded erf at every float (checked
//        exhaustively over [-4.5, 4.5]).
//        A NaN input stays NaN. std::erf was a scalar call of ~2.4 ns, 13%
//        of a tiny BERT's run time in its GELUs.
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

// a * b + c, fused where the machine has the instruction: the steps of the
// 16- and 8-lane forms (row_math.h), whatever the compiler would contract
// (GCC forms no FMA below -O2); a build without FMA has no vector forms.
[[gnu::always_inline]] inline float madd(float a, float b, float c) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

[[gnu::always_inline]] inline float fast_exp(float x) {
  using namespace exp_consts;
  // Written so that a NaN x clamps to the low bound: n stays finite and the
  // float-to-int conversion below is defined; the NaN is returned at the end.
  float xc = x > kLow ? x : kLow;
  xc = xc < kHigh ? xc : kHigh;
  float n = __builtin_floorf(madd(xc, kLog2e, 0.5f));
  float r = madd(-n, kLn2Lo, madd(-n, kLn2Hi, xc));
  float p = kPoly[0];
#pragma GCC unroll 8
  for (int i = 1; i < 7; ++i) p = madd(p, r, kPoly[i]);  // unrolled: the callers' loops then vectorize
  int32_t e = static_cast<int32_t>(n) + 127;
  e = e < 1 ? 1 : (e > 254 ? 254 : e);
  uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x != x ? x : (x < kLow ? 0.f : p * scale);
}

// 0 below exp's clamp, as exp: 1 / (1 + e^-x) is subnormal from there down.
// A NaN x is returned as it is (through -x its sign would flip, and x *
// sigmoid(x), SiLU, would then give either NaN by the order of the Mul's
// operands).
[[gnu::always_inline]] inline float fast_sigmoid(float x) {
  return x != x ? x : x < exp_consts::kLow ? 0.f : 1.f / (1.f + fast_exp(-x));
}

// t clamped to [lo, hi] by comparisons, NaN kept: a loop of these
// vectorizes (compares and blends), where fmaxf and fminf, whose NaN rule
// differs, stay one libm call each per element.
[[gnu::always_inline]] inline float clamp_keep_nan(float t, float lo, float hi) {
  return t < lo ? lo : (t > hi ? hi : t);
}

// HardSwish as PyTorch computes it, x * clamp(x + 3, 0, 6) / 6: near x =
// -3, x + 3 is exact where x / 6 + 0.5 would cancel to a few ulps. The op
// and the fused epilogue share it.
[[gnu::always_inline]] inline float hard_swish(float x) { return x * clamp_keep_nan(x + 3.f, 0.f, 6.f) / 6.f; }

// HardSigmoid, max(0, min(1, alpha x + beta)); NaN stays NaN, as in
// PyTorch and the ONNX reference. The op and the fused epilogue share it.
[[gnu::always_inline]] inline float hard_sigmoid(float x, float alpha, float beta) {
  return clamp_keep_nan(alpha * x + beta, 0.f, 1.f);
}

// tanh: below |x| = 0.625 an odd polynomial x + x^3 P(x^2) (P of degree 4,
// fitted to relative error, under 1 ulp there), so that tanh keeps its
// relative accuracy near 0, where 1 - 2 / (e^2x + 1) has only the absolute
// accuracy of 1 - q (a 1e-5 relative error at x = 0.005, all of it below
// 1e-7); from 0.625 on, 1 - 2 / (e^2|x| + 1); then x's sign. Within 1.7 ulp
// of tanh at every float (checked over [-10, 10]). Both forms are computed
// and one is picked, so loops still vectorize.
namespace tanh_consts {
inline constexpr float kSmall = 0.625f;
// P's coefficients, highest degree first (Horner order).
inline constexpr float kPoly[5] = {-0.00570499199f, 0.0206390936f, -0.0537397191f, 0.133314416f, -0.333332807f};
}  // namespace tanh_consts

[[gnu::always_inline]] inline float fast_tanh(float x) {
  using namespace tanh_consts;
  const float a = __builtin_fabsf(x), x2 = x * x;
  float p = kPoly[0];
#pragma GCC unroll 8
  for (int i = 1; i < 5; ++i) p = madd(p, x2, kPoly[i]);
  const float small = madd(a * x2, p, a);
  const float large = 1.f - 2.f / (fast_exp(2.f * a) + 1.f);
  return __builtin_copysignf(a < kSmall ? small : large, x);  // tanh(-0) = -0
}

// erf's pieces: with w = 1 / kErfPerUnit, |x| in [i w, (i + 1) w) for
// i < kErfPieces is interval i, with u = 2 (|x| - kErfCenter[i]) / w in
// [-1, 1) (interval 0: u = 2 |x| / w in [0, 2)), exact in float, and
// erf = c0 + u (c1 + u (c2 + ...)), where interval 0 adds |x| instead of
// its c0 (so that erf(x) ~ 2x / sqrt(pi) keeps its relative accuracy near
// 0). Each coefficient is one permute of a table held in a register: with
// AVX-512 a 16-entry table (vpermps), so 16 pieces of degree 6, a third
// fewer instructions a vector than 4 pieces of degree 10; with AVX2 a
// 4-entry table per 128-bit lane (16 pieces took two cross-lane permutes
// and a blend per coefficient there). The fits are weighted to ulps and
// pushed towards minimax in double; each coefficient is rounded to float
// in turn and the later ones refitted to what the rounding left
// (scripts/fit_erf.py prints both tables; `make check-erf` checks the
// kernel at every float).
namespace erf_table {
#if defined(__AVX512F__)
inline constexpr int kErfPieces = 16, kErfTerms = 7;  // c0 .. c6
inline constexpr float kErfCenter[kErfPieces] = {0.f, 0.375f, 0.625f, 0.875f, 1.125f, 1.375f, 1.625f, 1.875f, 2.125f, 2.375f, 2.625f, 2.875f, 3.125f, 3.375f, 3.625f, 3.875f};
inline constexpr float kErfCoef[kErfTerms][kErfPieces] = {
    {0.f, 0.404116899f, 0.623240888f, 0.784075081f, 0.888388216f, 0.948170066f, 0.978443742f, 0.99199003f, 0.997345984f, 0.999217033f, 0.999794602f, 0.999952137f, 0.999990106f, 0.999998212f, 0.999999702f, 0.99999994f},  // c0
    {0.0160473958f, 0.122544102f, 0.0954374447f, 0.0655931309f, 0.0397842452f, 0.0212949719f, 0.0100590326f, 0.00419322867f, 0.00154260255f, 0.000500809751f, 0.000143484402f, 3.62785431e-5f, 8.09483936e-6f, 1.59396916e-6f, 2.76990505e-7f, 4.2484789e-8f},  // c1
    {-7.18365145e-9f, -0.00574406283f, -0.00745615456f, -0.00717460876f, -0.00559438905f, -0.00365995057f, -0.00204339251f, -0.000982292229f, -0.000409991248f, -0.000148172447f, -4.66915481e-5f, -1.29007258e-5f, -3.20411436e-6f, -1.15556838e-6f, -7.41951496e-8f, 3.12730293e-7f},  // c2
    {-0.000734563684f, -0.000458747731f, -0.000108749911f, 0.000181487092f, 0.000317286205f, 0.00030847147f, 0.000224298143f, 0.000131721434f, 6.45266846e-5f, 2.68173535e-5f, 9.55142878e-6f, 2.93449943e-6f, 7.81217182e-7f, 1.80798409e-7f, 3.64636534e-8f, 9.476706e-8f},  // c3
    {-1.42535043e-7f, 4.01540783e-5f, 4.33549212e-5f, 2.8396782e-5f, 6.1105784e-6f, -7.77244986e-6f, -1.17365471e-5f, -1.16360679e-5f, -5.80412006e-6f, -4.55112104e-6f, -2.3575044e-6f, -8.23558253e-7f, -2.41985934e-8f, 1.2506955e-6f, -1.44135939e-7f, -7.88244165e-7f},  // c4
    {3.59352703e-6f, 1.38879045e-6f, -8.15530598e-7f, -2.03875402e-6f, -1.86384466e-6f, -9.34211528e-7f, -6.80245265e-8f, 3.46910241e-7f, 3.79991292e-7f, 2.55182073e-7f, 1.29207379e-7f, 5.26621058e-8f, 1.77982216e-8f, 5.07145037e-9f, 1.23092403e-9f, -1.13243679e-7f},  // c5
    {-7.14709074e-8f, 1.54057702e-7f, -3.37238646e-7f, -6.75635647e-7f, 5.37476353e-7f, 3.01247411e-7f, -2.11953164e-7f, 8.93945639e-7f, -4.27503096e-7f, 8.83779478e-7f, 6.81175777e-7f, 2.38159274e-7f, -7.62760735e-8f, -8.5659434e-7f, 9.07741295e-8f, 4.62200006e-7f},  // c6
};
#else
inline constexpr int kErfPieces = 4, kErfTerms = 11;  // c0 .. c10
inline constexpr float kErfCenter[kErfPieces] = {0.f, 1.5f, 2.5f, 3.5f};
inline constexpr float kErfCoef[kErfTerms][kErfPieces] = {
    {0.f, 0.966105163f, 0.999593019f, 0.999999285f},  // c0
    {0.0641895831f, 0.0594651438f, 0.00108914217f, 2.69970496e-6f},  // c1
    {4.32174652e-8f, -0.0445996784f, -0.0013600185f, -6.10244433e-6f},  // c2
    {-0.0470164455f, 0.0173440184f, 0.00104376022f, 5.28454302e-6f},  // c3
    {3.70178327e-6f, -0.00278089428f, -0.000550145109f, 6.77345952e-6f},  // c4
    {0.00351573993f, -0.000464684941f, 0.000191172236f, 2.60437446e-6f},  // c5
    {1.60047075e-5f, 0.00028371904f, -1.22697966e-5f, -3.1995889e-5f},  // c6
    {-0.00022310784f, -3.67684806e-5f, 4.226697e-6f, 3.21722212e-7f},  // c7
    {4.57126725e-6f, 1.15817857e-5f, -3.4906785e-5f, 3.49642978e-5f},  // c8
    {1.12684138e-5f, 3.02739977e-6f, -4.79081564e-7f, 1.52750587e-7f},  // c9
    {-1.48052447e-6f, -8.37845801e-6f, 1.44359819e-5f, -1.3978929e-5f},  // c10
};
#endif
// Pieces per unit of |x|; the first piece ends at 1 / kErfPerUnit.
inline constexpr float kErfPerUnit = kErfPieces / 4.f;
}  // namespace erf_table

[[gnu::always_inline]] inline float fast_erf(float x) {
  const float a = __builtin_fabsf(x);
  using erf_table::kErfPerUnit;
  // a < 4 is false for NaN: interval 0, which keeps the NaN.
  const int i = a < 4.f ? static_cast<int>(a * kErfPerUnit) : 0;
  const auto& c = erf_table::kErfCoef;
  const float u = (a - erf_table::kErfCenter[i]) * (2.f * kErfPerUnit);
  float p = c[erf_table::kErfTerms - 1][i];
#pragma GCC unroll 16
  for (int k = erf_table::kErfTerms - 2; k >= 1; --k) p = __builtin_fmaf(p, u, c[k][i]);
  const float r = __builtin_fmaf(p, u, a < 1.f / kErfPerUnit ? a : c[0][i]);
  return __builtin_copysignf(a >= 4.f ? 1.f : r, x);
}

// y[0, n) = erf(x[0, n)), equal to fast_erf element by element (y may be
// x). With AVX-512 and AVX2 the tables live in registers and each
// coefficient is one permute by the interval index (a gather would cost
// more than the whole polynomial).
void erf_n(const float* x, float* y, int64_t n);

// y[0, n) = sigmoid(x[0, n)), equal to fast_sigmoid element by element (y
// may be x); with AVX-512 and AVX2 its steps on whole vectors (what the
// compiler made of the scalar loop ran 1.7x slower).
void sigmoid_n(const float* x, float* y, int64_t n);

// y[0, n) = y * sigmoid(y): SiLU as PyTorch exports it (Sigmoid, Mul), the
// sigmoid rounded to float as its op stores it.
void silu_n(float* y, int64_t n);

// y[0, n) = ((y * (erf(y / a) + 1)) * b), PyTorch's exact GELU as it
// exports it (Div, Erf, Add, Mul, Mul), each step rounded to float as its
// op stores it, in one pass.
void gelu_n(float* y, int64_t n, float a, float b);

}  // namespace tessera
