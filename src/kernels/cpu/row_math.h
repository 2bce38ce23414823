// Reductions and normalizations of one contiguous row, for LayerNorm,
// Softmax and the fused attention.
//
// A plain `s += x[i]` loop is a serial chain of dependent adds (4 cycles
// each) that GCC may not vectorize, since that would reorder the float sum.
// These keep 16 partial results (one vector), combine them pairwise at the
// end and fold the tail in last, so the loops vectorize and the order of
// operations is fixed by this code, not by the compiler: the same on every
// build, every vEU and every executor.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/fast_math.h"

namespace tessera {

namespace row_math_detail {
constexpr int kLanes = 16;

inline float combine(float (&acc)[kLanes]) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
}  // namespace row_math_detail

inline float row_sum(const float* x, int64_t n) {
  using namespace row_math_detail;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += x[i];
  return combine(acc) + tail;
}

// Sum of (x - mean)^2.
inline float row_sq_dev(const float* x, int64_t n, float mean) {
  using namespace row_math_detail;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float d = x[i + j] - mean;
      acc[j] += d * d;
    }
  float tail = 0;
  for (; i < n; ++i) tail += (x[i] - mean) * (x[i] - mean);
  return combine(acc) + tail;
}

// Largest element; NaNs are skipped (as std::max(m, x) does), -inf when n is 0.
inline float row_max(const float* x, int64_t n) {
  using namespace row_math_detail;
  float acc[kLanes];
  for (float& a : acc) a = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = acc[j] < x[i + j] ? x[i + j] : acc[j];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = m < x[i] ? x[i] : m;
  for (float a : acc) m = m < a ? a : m;
  return m;
}

namespace row_math_detail {
// sum(exp(x - mx)); with kStore, also y = exp(x - mx) (y may be x).
template <bool kStore>
inline float exp_sum(const float* x, float* y, int64_t n, float mx) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = fast_exp(x[i + j] - mx);
      if constexpr (kStore) y[i + j] = v;
      acc[j] += v;
    }
  float tail = 0;
  for (; i < n; ++i) {
    const float v = fast_exp(x[i] - mx);
    if constexpr (kStore) y[i] = v;
    tail += v;
  }
  return combine(acc) + tail;
}
}  // namespace row_math_detail

// LayerNormalization of one row with a scale and an optional bias of one
// value per element: y = (x - mean) * inv * scale + bias, inv =
// 1 / sqrt(var + eps); y may be x. The LayerNormalization kernel and the
// MatMul epilogue that absorbs one both call this, so they agree bitwise.
// Returns the mean; *inv_out (when not null) gets inv.
inline float layer_norm_row(const float* x, float* y, int64_t n, float eps, const float* __restrict scale,
                            const float* __restrict bias, float* inv_out = nullptr) {
  const float mean = n ? row_sum(x, n) / static_cast<float>(n) : 0.f;
  const float var = n ? row_sq_dev(x, n, mean) / static_cast<float>(n) : 0.f;
  const float inv = 1.f / std::sqrt(var + eps);
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i];
  }
  if (inv_out != nullptr) *inv_out = inv;
  return mean;
}

// y = exp(x - max) / sum(exp(x - max)); y may be x.
inline void softmax_row(const float* x, float* y, int64_t n) {
  const float inv = 1.f / row_math_detail::exp_sum<true>(x, y, n, row_max(x, n));
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// y = x - max - log(sum(exp(x - max))); y may be x.
inline void log_softmax_row(const float* x, float* y, int64_t n) {
  const float mx = row_max(x, n);
  const float lse = std::log(row_math_detail::exp_sum<false>(x, y, n, mx));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mx - lse;
}

}  // namespace tessera
