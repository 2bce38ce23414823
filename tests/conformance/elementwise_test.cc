// Conformance of elementwise ops against naive references: broadcasting,
// odd sizes, empty and size-1 dimensions, every supported dtype.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/row_math.h"
#include "tests/conformance/harness.h"

namespace tessera::testing {
namespace {

class Elementwise : public ::testing::Test {
 protected:
  Rng rng{static_cast<uint64_t>(::testing::UnitTest::GetInstance()->random_seed()) * 7 + 1};
};

Tensor unary_ref(const Tensor& x, const std::function<double(double)>& f) {
  Tensor y(x.dtype(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = f(x.value_as_double(i));
    if (x.dtype() == DType::kFloat32) y.data<float>()[i] = static_cast<float>(v);
    else if (x.dtype() == DType::kInt64) y.data<int64_t>()[i] = static_cast<int64_t>(v);
    else if (x.dtype() == DType::kInt32) y.data<int32_t>()[i] = static_cast<int32_t>(v);
    else y.data<uint8_t>()[i] = static_cast<uint8_t>(v);
  }
  return y;
}

struct UnaryCase {
  const char* op;
  std::function<double(double)> f;
  float lo, hi;
  std::map<std::string, Attribute> attrs;
};

TEST_F(Elementwise, UnaryFloatOps) {
  double a = 0.3, b = 0.6;
  std::vector<UnaryCase> cases = {
      {"Abs", [](double x) { return std::fabs(x); }, -3, 3, {}},
      {"Neg", [](double x) { return -x; }, -3, 3, {}},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0, 9, {}},
      {"Reciprocal", [](double x) { return 1 / x; }, 0.5, 4, {}},
      {"Exp", [](double x) { return std::exp(x); }, -5, 5, {}},
      {"Log", [](double x) { return std::log(x); }, 0.01, 10, {}},
      {"Erf", [](double x) { return std::erf(x); }, -3, 3, {}},
      {"Tanh", [](double x) { return std::tanh(x); }, -5, 5, {}},
      {"Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8, {}},
      {"Relu", [](double x) { return x > 0 ? x : 0; }, -3, 3, {}},
      {"LeakyRelu", [a](double x) { return x >= 0 ? x : a * x; }, -3, 3, {{"alpha", attr_f(0.3f)}}},
      {"LeakyRelu", [](double x) { return x >= 0 ? x : 0.01 * x; }, -3, 3, {}},
      {"Elu", [a](double x) { return x >= 0 ? x : a * (std::exp(x) - 1); }, -3, 3, {{"alpha", attr_f(0.3f)}}},
      {"Elu", [a](double x) { return x >= 0 ? x : a * (std::exp(x) - 1); }, -0.01f, 0, {{"alpha", attr_f(0.3f)}}},
      {"HardSigmoid", [a, b](double x) { return std::max(0.0, std::min(1.0, a * x + b)); }, -4, 4,
       {{"alpha", attr_f(0.3f)}, {"beta", attr_f(0.6f)}}},
      {"HardSwish", [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); }, -5, 5, {}},
      // Near -3, where the gate is close to 0: computed as x / 6 + 0.5 it
      // cancels to ~1e-5 relative error.
      {"HardSwish", [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); }, -3.01f, -2.99f, {}},
      {"Softplus", [](double x) { return std::log1p(std::exp(x)); }, -20, 20, {}},
  };
  for (const Shape& s : {Shape{7}, Shape{3, 17, 5}, Shape{1}, Shape{}, Shape{2, 0, 3}, Shape{40000}}) {
    for (auto& c : cases) {
      SCOPED_TRACE(std::string(c.op) + " " + s.to_string());
      Tensor x = rng.floats(s, c.lo, c.hi);
      OpCase oc{c.op, {{x}}, c.attrs};
      expect_matches(oc, {unary_ref(x, c.f)}, 2e-6);
    }
  }
}

// HardSigmoid and HardSwish keep NaN, as PyTorch and the ONNX reference
// do (their clamps are compares, not fmax and fmin, which would map a NaN
// gate to a bound: HardSigmoid(NaN) = 1), at positions in the vector
// loops' bodies and in their tails; every other element as the formula.
TEST_F(Elementwise, HardActivationsKeepNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = rng.floats(Shape{37}, -5, 5);
  for (int64_t i : {0, 5, 16, 33, 36}) x.data<float>()[i] = nan;
  const double a = 0.3, b = 0.6;
  const auto keep = [](const std::function<double(double)>& f) {
    return [f](double v) { return std::isnan(v) ? v : f(v); };
  };
  expect_matches({"HardSigmoid", {{x}}, {{"alpha", attr_f(0.3f)}, {"beta", attr_f(0.6f)}}},
                 {unary_ref(x, keep([a, b](double v) { return std::max(0.0, std::min(1.0, a * v + b)); }))}, 2e-6);
  expect_matches({"HardSwish", {{x}}, {}},
                 {unary_ref(x, keep([](double v) { return v * std::max(0.0, std::min(1.0, v / 6 + 0.5)); }))}, 2e-6);
}

// The Erf kernel's approximation, point by point: within 1 ulp of erf
// (computed in double, then rounded) on a dense grid over all its pieces
// (4 or 16), their edges and the clamp, in the vector path (erf_n, its tail too) and
// the scalar one, which agree bit for bit; erf(-0) = -0, erf(+-inf) = +-1,
// NaN stays NaN.
TEST_F(Elementwise, FastErfWithinOneUlp) {
  std::vector<float> xs;
  for (int i = -300000; i <= 300000; ++i) xs.push_back(static_cast<float>(i) * 2e-5f);
  for (int k = 0; k <= 16; ++k)  // quarter points (every piece's edge) and their neighbours
    for (float e : {k / 4.f, -k / 4.f})
      xs.insert(xs.end(), {e, std::nextafter(e, -INFINITY), std::nextafter(e, INFINITY)});
  for (float x : {1e-30f, -3e-39f, 1e-3f, 0.999999f, 1.f, 1.000001f, 3.999999f, 4.f, 9.f}) xs.push_back(x);
  xs.push_back(0.5f);  // an odd count: erf_n's masked tail
  std::vector<float> got(xs.size());
  erf_n(xs.data(), got.data(), static_cast<int64_t>(xs.size()));
  float worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i];
    const float want = static_cast<float>(std::erf(static_cast<double>(x)));
    const float ulp = std::nextafter(std::fabs(want), std::numeric_limits<float>::infinity()) - std::fabs(want);
    const float e = x == 0 ? std::fabs(got[i]) : std::fabs(got[i] - want) / ulp;
    worst = std::max(worst, e);
    ASSERT_LE(e, 1.f) << "x = " << x << ": " << got[i] << " against " << want;
    const float scalar = fast_erf(x);
    ASSERT_EQ(std::memcmp(&scalar, &got[i], sizeof(float)), 0) << "x = " << x << ": scalar " << scalar;
  }
  const float special[] = {-0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  // Repeated over 44 floats: erf_n's blocks of 4 vectors, of one vector
  // and its scalar tail all see each.
  constexpr int kLen = 44;
  float in[kLen], vec[kLen];
  for (int j = 0; j < kLen; ++j) in[j] = special[j % 4];
  erf_n(in, vec, kLen);
  for (int j = 0; j < kLen; j += 4) {
    float scalar[4];
    for (int k = 0; k < 4; ++k) scalar[k] = fast_erf(special[k]);
    for (const float* r : {static_cast<const float*>(vec + j), static_cast<const float*>(scalar)}) {
      EXPECT_TRUE(r[0] == 0 && std::signbit(r[0])) << "at " << j;
      EXPECT_EQ(r[1], 1.f) << "at " << j;
      EXPECT_EQ(r[2], -1.f) << "at " << j;
      EXPECT_TRUE(std::isnan(r[3])) << "at " << j;
    }
  }
  RecordProperty("worst_ulps", std::to_string(worst));
}

// The Sigmoid kernel's vector path (sigmoid_n, its tail too) bit for bit
// equal to the scalar fast_sigmoid on a dense grid, around exp's clamps
// (-87.3, where both return 0 below, and 88.7), at +-0, +-inf, and NaN of
// either sign, returned as it came (so that x * sigmoid(x) gives x's NaN
// whichever operand the product takes first); and within 4 ulp of sigmoid
// computed in double where it is not 0.
TEST_F(Elementwise, FastSigmoidVectorsMatchScalar) {
  std::vector<float> xs;
  for (int i = -250000; i <= 250000; ++i) xs.push_back(static_cast<float>(i) * 4e-4f);
  for (float e : {-87.3f, 87.3f, -88.7f, 88.7f, 0.f})
    for (int k = 0; k < 8; ++k) xs.insert(xs.end(), {e, e = std::nextafter(e, -INFINITY)});
  for (float x : {-0.f, 1e-30f, -3e-39f, 1e4f, -1e4f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN()})
    xs.push_back(x);
  for (const int64_t tail : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{15}}) {
    const int64_t n = static_cast<int64_t>(xs.size()) - tail;
    std::vector<float> got(static_cast<size_t>(n));
    sigmoid_n(xs.data() + tail, got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float x = xs[static_cast<size_t>(i + tail)], scalar = fast_sigmoid(x);
      if (std::isnan(x)) {
        EXPECT_EQ(std::memcmp(&x, &scalar, sizeof(float)), 0) << "scalar: NaN in, another out";
        EXPECT_EQ(std::memcmp(&x, &got[static_cast<size_t>(i)], sizeof(float)), 0) << "vector: NaN in, another out";
        continue;
      }
      ASSERT_EQ(std::memcmp(&scalar, &got[static_cast<size_t>(i)], sizeof(float)), 0)
          << "x = " << x << ": vector " << got[static_cast<size_t>(i)] << ", scalar " << scalar;
      const float want = static_cast<float>(1 / (1 + std::exp(-static_cast<double>(x))));
      if (scalar == 0 || want < std::numeric_limits<float>::min()) continue;
      const float ulp = std::nextafter(want, std::numeric_limits<float>::infinity()) - want;
      ASSERT_LE(std::fabs(scalar - want), 4 * ulp) << "x = " << x << ": " << scalar << " against " << want;
    }
  }
}

// tanh against tanh computed in double, within 2 ulp (1.615 is the worst
// over every float in [-10, 10]) on a dense grid and at magnitudes down to
// denormals, where 1 - 2 / (e^2x + 1) alone loses all relative accuracy
// (tanh(1e-8) came out 0), and across the switch between its two forms.
TEST_F(Elementwise, FastTanhWithinTwoUlps) {
  std::vector<float> xs;
  for (int i = -200000; i <= 200000; ++i) xs.push_back(static_cast<float>(i) * 5e-5f);
  for (float m = 1e-38f; m < 10.f; m *= 1.01f) xs.insert(xs.end(), {m, -m});
  for (float e : {0.625f, -0.625f})
    for (int k = 0; k < 64; ++k, e = std::nextafter(e, INFINITY))
      xs.insert(xs.end(), {e, std::nextafter(e, -INFINITY)});
  xs.insert(xs.end(), {3e-45f, -3e-45f, 20.f, -20.f, 100.f});
  float worst = 0;
  for (float x : xs) {
    const float got = fast_tanh(x), want = static_cast<float>(std::tanh(static_cast<double>(x)));
    const float ulp = std::nextafter(std::fabs(want), std::numeric_limits<float>::infinity()) - std::fabs(want);
    const float e = std::fabs(got - want) / ulp;
    worst = std::max(worst, e);
    ASSERT_LE(e, 2.f) << "x = " << x << ": " << got << " against " << want;
  }
  const float z = fast_tanh(-0.f);
  EXPECT_TRUE(z == 0 && std::signbit(z));
  RecordProperty("worst_ulps", std::to_string(worst));
}

// exp and the functions built on it at the edges: NaN stays NaN (without a
// NaN-to-int conversion inside, which the sanitizer build would flag), the
// clamps give finite extremes, and values at the clamps are still accurate.
TEST_F(Elementwise, FastExpSpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(fast_exp(nan)));
  EXPECT_TRUE(std::isnan(fast_exp(-nan)));
  EXPECT_TRUE(std::isnan(fast_sigmoid(nan)));
  EXPECT_TRUE(std::isnan(fast_tanh(nan)));
  EXPECT_TRUE(std::isfinite(fast_exp(inf)));
  EXPECT_GT(fast_exp(inf), 1e38f);
  EXPECT_EQ(fast_exp(-inf), 0.f);
  EXPECT_EQ(fast_sigmoid(-inf), 0.f);
  EXPECT_EQ(fast_sigmoid(inf), 1.f);
  EXPECT_EQ(fast_tanh(inf), 1.f);
  EXPECT_EQ(fast_tanh(-inf), -1.f);
  for (float x : {-87.f, -20.f, -1.f, 0.f, 0.5f, 30.f, 88.f}) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_LE(std::fabs(fast_exp(x) - want) / want, 4e-7) << "x = " << x;
  }
}

// exp and sigmoid never return a subnormal (arithmetic on one takes a
// microcode assist on Intel cores): 0 below exp's clamp, at least the
// smallest normal float above it. A softmax over masked scores (-10000
// added, as BERT's mask does) gives exact zeros there, in the 16-lane path
// (rows in groups) and the scalar one alike.
TEST_F(Elementwise, ExpUnderflowsToZeroNotSubnormal) {
  const float tiny = std::numeric_limits<float>::min();
  for (float x = -120.f; x < -80.f; x += 1.f / 64) {
    const float e = fast_exp(x), sg = fast_sigmoid(x);
    EXPECT_TRUE(e == 0.f || e >= tiny) << "x = " << x << ": " << e;
    EXPECT_TRUE(sg == 0.f || sg >= tiny) << "sigmoid, x = " << x << ": " << sg;
    if (x < -87.3f) {
      EXPECT_EQ(e, 0.f) << "x = " << x;
    }
  }
  const int64_t rows = 7, n = 37;
  std::vector<float> s(rows * n), y(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) s[r * n + i] = 0.01f * static_cast<float>(i) + ((i + r) % 3 == 0 ? -10000.f : 0.f);
  for (bool grouped : {true, false}) {
    if (grouped)
      softmax_rows(s.data(), n, y.data(), n, rows, n);
    else
      for (int64_t r = 0; r < rows; ++r) softmax_row(s.data() + r * n, y.data() + r * n, n);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const float v = y[r * n + i];
        if ((i + r) % 3 == 0)
          EXPECT_EQ(v, 0.f) << "row " << r << " column " << i << (grouped ? " (rows)" : " (one row)");
        else
          EXPECT_GE(v, 1e-3f) << "row " << r << " column " << i;
      }
  }
}

TEST_F(Elementwise, UnaryIntegerOps) {
  for (DType dt : {DType::kInt64, DType::kInt32}) {
    Tensor x = rng.ints(Shape{5, 9}, -50, 50, dt);
    expect_matches({"Abs", {{x}}}, {unary_ref(x, [](double v) { return std::fabs(v); })});
    expect_matches({"Neg", {{x}}}, {unary_ref(x, [](double v) { return -v; })});
    expect_matches({"Relu", {{x}}}, {unary_ref(x, [](double v) { return v > 0 ? v : 0; })});
  }
  Tensor bl = rng.bools(Shape{4, 33});
  expect_matches({"Not", {{bl}}}, {unary_ref(bl, [](double v) { return v == 0; })});
}

// Broadcasting binary reference.
Tensor binary_ref(const Tensor& a, const Tensor& b, const Shape& out, DType out_dt,
                  const std::function<double(double, double)>& f) {
  Tensor y(out_dt, out);
  for (int64_t i = 0; i < y.numel(); ++i) {
    auto idx = unravel(i, out);
    double v = f(a.value_as_double(ravel_broadcast(idx, a.shape())), b.value_as_double(ravel_broadcast(idx, b.shape())));
    if (out_dt == DType::kFloat32) y.data<float>()[i] = static_cast<float>(v);
    else if (out_dt == DType::kInt64) y.data<int64_t>()[i] = static_cast<int64_t>(v);
    else if (out_dt == DType::kInt32) y.data<int32_t>()[i] = static_cast<int32_t>(v);
    else y.data<uint8_t>()[i] = static_cast<uint8_t>(v);
  }
  return y;
}

struct ShapePair {
  Shape a, b, out;
};

const std::vector<ShapePair>& broadcast_shapes_list() {
  static const std::vector<ShapePair> v = {
      {{7}, {7}, {7}},
      {{3, 5}, {5}, {3, 5}},
      {{3, 5}, {3, 1}, {3, 5}},
      {{1}, {4, 6}, {4, 6}},
      {{}, {2, 3}, {2, 3}},
      {{2, 1, 4}, {3, 1}, {2, 3, 4}},
      {{5, 1, 7, 1}, {1, 6, 1, 3}, {5, 6, 7, 3}},
      {{2, 0, 3}, {3}, {2, 0, 3}},
      {{1, 1}, {1, 1}, {1, 1}},
      {{128, 257}, {257}, {128, 257}},
  };
  return v;
}

TEST_F(Elementwise, BinaryArithmeticBroadcasts) {
  std::vector<std::pair<const char*, std::function<double(double, double)>>> ops = {
      {"Add", [](double x, double y) { return x + y; }},
      {"Sub", [](double x, double y) { return x - y; }},
      {"Mul", [](double x, double y) { return x * y; }},
      {"Div", [](double x, double y) { return x / y; }},
      {"Min", [](double x, double y) { return std::min(x, y); }},
      {"Max", [](double x, double y) { return std::max(x, y); }},
  };
  for (const auto& sp : broadcast_shapes_list()) {
    for (auto& [op, f] : ops) {
      SCOPED_TRACE(std::string(op) + " " + sp.a.to_string() + " , " + sp.b.to_string());
      Tensor a = rng.floats(sp.a), b = rng.floats(sp.b, 0.5f, 2.f);
      expect_matches({op, {{a}, {b}}}, {binary_ref(a, b, sp.out, DType::kFloat32, f)});
      // Same with the second operand constant (weights are constants).
      expect_matches({op, {{a}, {b, true}}}, {binary_ref(a, b, sp.out, DType::kFloat32, f)});
    }
  }
}

TEST_F(Elementwise, PowAndIntegerArithmetic) {
  Tensor a = rng.floats(Shape{4, 9}, 0.1f, 3.f), e = rng.floats(Shape{9}, -2.f, 2.f);
  expect_matches({"Pow", {{a}, {e}}}, {binary_ref(a, e, Shape{4, 9}, DType::kFloat32, [](double x, double y) {
                   return std::pow(x, y);
                 })}, 2e-6);
  for (DType dt : {DType::kInt64, DType::kInt32}) {
    Tensor x = rng.ints(Shape{3, 8}, -100, 100, dt), y = rng.ints(Shape{8}, 1, 9, dt);
    expect_matches({"Add", {{x}, {y}}}, {binary_ref(x, y, Shape{3, 8}, dt, [](double p, double q) { return p + q; })});
    expect_matches({"Mul", {{x}, {y}}}, {binary_ref(x, y, Shape{3, 8}, dt, [](double p, double q) { return p * q; })});
    expect_matches({"Div", {{x}, {y}}}, {binary_ref(x, y, Shape{3, 8}, dt, [](double p, double q) {
                     return std::trunc(p / q);
                   })});
  }
}

TEST_F(Elementwise, ModPythonAndCSemantics) {
  for (DType dt : {DType::kInt64, DType::kInt32}) {
    Tensor x = rng.ints(Shape{4, 9}, -50, 50, dt), y = rng.ints(Shape{9}, -7, 7, dt);
    for (int64_t i = 0; i < y.numel(); ++i)
      if (y.value_as_int64(i) == 0) {
        if (dt == DType::kInt64) y.data<int64_t>()[i] = 3;
        else y.data<int32_t>()[i] = 3;
      }
    expect_matches({"Mod", {{x}, {y}}}, {binary_ref(x, y, Shape{4, 9}, dt, [](double p, double q) {
                     double r = std::fmod(p, q);
                     return (r != 0 && ((r < 0) != (q < 0))) ? r + q : r;
                   })});
    expect_matches({"Mod", {{x}, {y}}, {{"fmod", attr_i(1)}}},
                   {binary_ref(x, y, Shape{4, 9}, dt, [](double p, double q) { return std::fmod(p, q); })});
  }
  Tensor a = rng.floats(Shape{3, 5}, -10, 10), b = rng.floats(Shape{5}, 0.5, 3);
  expect_matches({"Mod", {{a}, {b}}, {{"fmod", attr_i(1)}}},
                 {binary_ref(a, b, Shape{3, 5}, DType::kFloat32, [](double p, double q) { return std::fmod(p, q); })}, 1e-5);
}

TEST_F(Elementwise, ComparisonsAndLogic) {
  for (const auto& sp : broadcast_shapes_list()) {
    Tensor a = rng.ints(sp.a, -3, 3, DType::kInt64), b = rng.ints(sp.b, -3, 3, DType::kInt64);
    Tensor fa = rng.floats(sp.a), fb = rng.floats(sp.b);
    expect_matches({"Equal", {{a}, {b}}}, {binary_ref(a, b, sp.out, DType::kBool, [](double x, double y) { return x == y; })});
    expect_matches({"Less", {{fa}, {fb}}}, {binary_ref(fa, fb, sp.out, DType::kBool, [](double x, double y) { return x < y; })});
    expect_matches({"Greater", {{fa}, {fb}}},
                   {binary_ref(fa, fb, sp.out, DType::kBool, [](double x, double y) { return x > y; })});
    Tensor ba = rng.bools(sp.a), bb = rng.bools(sp.b);
    expect_matches({"And", {{ba}, {bb}}}, {binary_ref(ba, bb, sp.out, DType::kBool, [](double x, double y) {
                     return x != 0 && y != 0;
                   })});
  }
}

TEST_F(Elementwise, VariadicMinMax) {
  Tensor a = rng.floats(Shape{2, 3, 4}), b = rng.floats(Shape{4}), c = rng.floats(Shape{3, 1});
  Tensor ab = binary_ref(a, b, Shape{2, 3, 4}, DType::kFloat32, [](double x, double y) { return std::max(x, y); });
  expect_matches({"Max", {{a}, {b}, {c}}},
                 {binary_ref(ab, c, Shape{2, 3, 4}, DType::kFloat32, [](double x, double y) { return std::max(x, y); })});
  expect_matches({"Min", {{a}}}, {a});
}

TEST_F(Elementwise, WhereBroadcasts) {
  Tensor cond = rng.bools(Shape{3, 1, 5});
  Tensor x = rng.floats(Shape{4, 5}), y = rng.floats(Shape{1});
  Shape out{3, 4, 5};
  Tensor ref(DType::kFloat32, out);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    auto idx = unravel(i, out);
    bool c = cond.data<uint8_t>()[ravel_broadcast(idx, cond.shape())];
    ref.data<float>()[i] = c ? x.data<float>()[ravel_broadcast(idx, x.shape())] : y.data<float>()[0];
  }
  expect_matches({"Where", {{cond}, {x}, {y}}}, {ref});
  Tensor xi = rng.ints(Shape{3, 4, 5}, -9, 9), yi = rng.ints(Shape{5}, -9, 9);
  Tensor refi(DType::kInt64, out);
  for (int64_t i = 0; i < refi.numel(); ++i) {
    auto idx = unravel(i, out);
    bool c = cond.data<uint8_t>()[ravel_broadcast(idx, cond.shape())];
    refi.data<int64_t>()[i] = c ? xi.data<int64_t>()[i] : yi.data<int64_t>()[idx[2]];
  }
  expect_matches({"Where", {{cond}, {xi}, {yi}}}, {refi});
}

TEST_F(Elementwise, CastBetweenTypes) {
  Tensor f = rng.floats(Shape{6, 7}, -100, 100);
  Tensor to_i(DType::kInt64, f.shape()), to_b(DType::kBool, f.shape()), half(DType::kFloat32, f.shape());
  for (int64_t i = 0; i < f.numel(); ++i) {
    float v = f.data<float>()[i];
    to_i.data<int64_t>()[i] = static_cast<int64_t>(v);
    to_b.data<uint8_t>()[i] = v != 0;
    half.data<float>()[i] = half_to_float(float_to_half(v));
  }
  expect_matches({"Cast", {{f}}, {{"to", attr_i(7)}}}, {to_i});
  expect_matches({"Cast", {{f}}, {{"to", attr_i(9)}}}, {to_b});
  expect_matches({"Cast", {{f}}, {{"to", attr_i(10)}}}, {half}, 0);
  Tensor i = rng.ints(Shape{33}, -1000, 1000);
  Tensor to_f(DType::kFloat32, i.shape()), to_i32(DType::kInt32, i.shape());
  for (int64_t k = 0; k < i.numel(); ++k) {
    to_f.data<float>()[k] = static_cast<float>(i.data<int64_t>()[k]);
    to_i32.data<int32_t>()[k] = static_cast<int32_t>(i.data<int64_t>()[k]);
  }
  expect_matches({"Cast", {{i}}, {{"to", attr_i(1)}}}, {to_f}, 0);
  expect_matches({"Cast", {{i}}, {{"to", attr_i(6)}}}, {to_i32});
}

TEST_F(Elementwise, ClipWithOptionalBounds) {
  Tensor x = rng.floats(Shape{5, 11}, -3, 3);
  Tensor lo = Tensor::from_floats({-0.5f}, Shape{}), hi = Tensor::from_floats({1.25f}, Shape{});
  expect_matches({"Clip", {{x}, {lo, true}, {hi, true}}},
                 {unary_ref(x, [](double v) { return std::clamp(v, -0.5, 1.25); })});
  expect_matches({"Clip", {{x}, {Tensor()}, {hi}}}, {unary_ref(x, [](double v) { return std::min(v, 1.25); })});
  expect_matches({"Clip", {{x}, {lo}}}, {unary_ref(x, [](double v) { return std::max(v, -0.5); })});
  expect_matches({"Clip", {{x}}}, {x});
}

TEST_F(Elementwise, IdentityAndDropoutPassThrough) {
  Tensor x = rng.floats(Shape{3, 4});
  expect_matches({"Identity", {{x}}}, {x});
  Tensor mask(DType::kBool, x.shape());
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<uint8_t>()[i] = 1;
  OpCase d{"Dropout", {{x}}, {}, 2};
  expect_matches(d, {x, mask});
}

}  // namespace
}  // namespace tessera::testing
