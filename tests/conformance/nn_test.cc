// Conformance of pooling, normalization, softmax, reduction and recurrent
// ops against naive references.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/strings.h"
#include "compiler/program.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/row_math.h"
#include "kernels/cpu/rnn_cell.h"
#include "tests/conformance/harness.h"

namespace tessera::testing {
namespace {

// ------------------------------------------------------------ Pooling ---

TEST_F(Nn, MaxAndAveragePool) {
  struct Case { int64_t h, w, kh, kw, sh, sw, pt, pl, pb, pr; int ceil; int include_pad; int64_t dh = 1, dw = 1; };
  for (const Case& k : {Case{9, 9, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0}, Case{8, 7, 2, 3, 2, 2, 0, 1, 0, 1, 1, 0},
                        Case{10, 10, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1}, Case{7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1},
                        Case{5, 6, 5, 6, 1, 1, 0, 0, 0, 0, 0, 0},
                        // rows of several 16-wide vectors with a partial one,
                        // stride 1 and 2 (with ceil_mode's partial window)
                        Case{6, 37, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0}, Case{7, 40, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1},
                        Case{5, 35, 2, 2, 2, 2, 0, 0, 0, 0, 1, 0},
                        // square windows at stride 1 (2x2 with one-sided
                        // pads, 5x5 over two and a half vectors), a row
                        // stride of 2 with unit column stride, and MaxPool
                        // dilated along rows, along columns
                        Case{9, 20, 2, 2, 1, 1, 0, 0, 1, 1, 0, 0}, Case{12, 37, 5, 5, 1, 1, 2, 2, 2, 2, 0, 0},
                        Case{9, 21, 3, 2, 2, 1, 1, 0, 1, 1, 1, 0}, Case{11, 19, 3, 3, 1, 1, 2, 1, 2, 1, 0, 0, 2, 1},
                        Case{8, 23, 2, 3, 1, 1, 0, 2, 0, 2, 0, 0, 1, 2},
                        // rows of whole vectors, whose last block masks
                        // only its last taps (one for 3x3 and 2x2, two
                        // for 5x5) and whose first only its first
                        Case{6, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1}, Case{7, 48, 5, 5, 1, 1, 2, 2, 2, 2, 0, 0},
                        Case{5, 16, 2, 2, 1, 1, 0, 0, 1, 1, 0, 1}}) {
    Tensor x = rng.floats(Shape{2, 3, k.h, k.w});
    auto out_len = [&](int64_t in, int64_t kk, int64_t s, int64_t p0, int64_t p1) {
      int64_t span = in + p0 + p1 - kk;  // kk: the dilated window's extent
      int64_t o = (k.ceil ? (span + s - 1) / s : span / s) + 1;
      if (k.ceil && (o - 1) * s >= in + p0) --o;
      return o;
    };
    int64_t oh = out_len(k.h, (k.kh - 1) * k.dh + 1, k.sh, k.pt, k.pb);
    int64_t ow = out_len(k.w, (k.kw - 1) * k.dw + 1, k.sw, k.pl, k.pr);
    Tensor mx(DType::kFloat32, Shape{2, 3, oh, ow}), av(DType::kFloat32, Shape{2, 3, oh, ow});
    for (int64_t pl = 0; pl < 6; ++pl)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          float m = -std::numeric_limits<float>::infinity();
          double s = 0;
          int64_t cnt = 0;
          int64_t y0 = i * k.sh - k.pt, x0 = j * k.sw - k.pl;
          for (int64_t a = 0; a < k.kh; ++a)
            for (int64_t b = 0; b < k.kw; ++b) {
              int64_t y = y0 + a * k.dh, xx = x0 + b * k.dw;
              if (y < 0 || y >= k.h || xx < 0 || xx >= k.w) continue;
              float v = x.data<float>()[(pl * k.h + y) * k.w + xx];
              m = std::max(m, v);
              s += v;
              ++cnt;
            }
          if (k.include_pad) {
            int64_t ye = std::min(y0 + k.kh, k.h + k.pb), xe = std::min(x0 + k.kw, k.w + k.pr);
            cnt = (ye - y0) * (xe - x0);
          }
          mx.data<float>()[(pl * oh + i) * ow + j] = m;
          av.data<float>()[(pl * oh + i) * ow + j] = static_cast<float>(s / cnt);
        }
    std::map<std::string, Attribute> attrs = {{"kernel_shape", attr_ints({k.kh, k.kw})},
                                              {"strides", attr_ints({k.sh, k.sw})},
                                              {"pads", attr_ints({k.pt, k.pl, k.pb, k.pr})},
                                              {"ceil_mode", attr_i(k.ceil)}};
    if (k.dh != 1 || k.dw != 1) {  // AveragePool has no dilations before opset 19
      attrs["dilations"] = attr_ints({k.dh, k.dw});
      expect_matches({"MaxPool", {{x}}, attrs}, {mx});
      continue;
    }
    expect_matches({"MaxPool", {{x}}, attrs}, {mx});
    attrs["count_include_pad"] = attr_i(k.include_pad);
    expect_matches({"AveragePool", {{x}}, attrs}, {av});
  }
  {
    // A NaN inside a window makes its max NaN (at stride 1 and 2); the
    // other outputs stay finite.
    for (int64_t stride : {1, 2}) {
      Tensor xn = rng.floats(Shape{1, 1, 4, 40});
      xn.data<float>()[1 * 40 + 21] = std::numeric_limits<float>::quiet_NaN();
      std::map<std::string, Attribute> attrs = {{"kernel_shape", attr_ints({3, 3})},
                                                {"strides", attr_ints({stride, stride})},
                                                {"pads", attr_ints({1, 1, 1, 1})}};
      auto out = run_case({"MaxPool", {{xn}}, attrs}, Executor::kSequential, 0);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      const Tensor& y = (*out)[0];
      const int64_t oh = y.shape()[2], ow = y.shape()[3];
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const bool covers = i * stride - 1 <= 1 && 1 <= i * stride + 1 && j * stride - 1 <= 21 && 21 <= j * stride + 1;
          EXPECT_EQ(std::isnan(y.data<float>()[i * ow + j]), covers) << "stride " << stride << " at " << i << "," << j;
        }
    }
  }
  // Planes of 21 (one running sum) and of 143 (partial sums, a tail of 15).
  for (Shape s : {Shape{2, 5, 3, 7}, Shape{1, 3, 13, 11}}) {
    Tensor x = rng.floats(s);
    const int64_t planes = s[0] * s[1], size = s[2] * s[3];
    Tensor g(DType::kFloat32, Shape{s[0], s[1], 1, 1});
    for (int64_t p = 0; p < planes; ++p) {
      double sum = 0;
      for (int64_t i = 0; i < size; ++i) sum += x.data<float>()[p * size + i];
      g.data<float>()[p] = static_cast<float>(sum / static_cast<double>(size));
    }
    expect_matches({"GlobalAveragePool", {{x}}}, {g});
  }
}

// ------------------------------------------------------ Normalization ---

TEST_F(Nn, BatchInstanceLayerNorm) {
  Tensor x = rng.floats(Shape{2, 4, 3, 5});
  Tensor sc = rng.floats(Shape{4}, 0.5, 1.5), bi = rng.floats(Shape{4}), mean = rng.floats(Shape{4}),
         var = rng.floats(Shape{4}, 0.5, 2);
  Tensor bn(DType::kFloat32, x.shape()), in(DType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t c = (i / 15) % 4;
    bn.data<float>()[i] = static_cast<float>((x.data<float>()[i] - mean.data<float>()[c]) /
                                                 std::sqrt(var.data<float>()[c] + 1e-3) * sc.data<float>()[c] +
                                             bi.data<float>()[c]);
  }
  for (int64_t p = 0; p < 8; ++p) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < 15; ++i) s += x.data<float>()[p * 15 + i];
    double mu = s / 15;
    for (int64_t i = 0; i < 15; ++i) q += std::pow(x.data<float>()[p * 15 + i] - mu, 2);
    for (int64_t i = 0; i < 15; ++i)
      in.data<float>()[p * 15 + i] = static_cast<float>((x.data<float>()[p * 15 + i] - mu) / std::sqrt(q / 15 + 1e-5) *
                                                            sc.data<float>()[p % 4] + bi.data<float>()[p % 4]);
  }
  expect_matches({"BatchNormalization", {{x}, {sc, true}, {bi, true}, {mean, true}, {var, true}},
                  {{"epsilon", attr_f(1e-3f)}}},
                 {bn});
  expect_matches({"InstanceNormalization", {{x}, {sc, true}, {bi, true}}}, {in});

  for (int axis : {-1, 2, 1}) {
    // 38 and 152 columns: full 16-lane blocks of the row sums and a tail.
    Tensor lx = rng.floats(Shape{3, 4, 38}, -2, 2);
    int64_t cols = axis == 1 ? 152 : 38;
    Shape ps = axis == 1 ? Shape{4, 38} : Shape{38};
    Tensor g = rng.floats(ps, 0.5, 1.5), b = rng.floats(ps);
    Tensor ln(DType::kFloat32, lx.shape());
    for (int64_t r = 0; r < lx.numel() / cols; ++r) {
      double s = 0, q = 0;
      for (int64_t i = 0; i < cols; ++i) s += lx.data<float>()[r * cols + i];
      double mu = s / cols;
      for (int64_t i = 0; i < cols; ++i) q += std::pow(lx.data<float>()[r * cols + i] - mu, 2);
      for (int64_t i = 0; i < cols; ++i)
        ln.data<float>()[r * cols + i] = static_cast<float>((lx.data<float>()[r * cols + i] - mu) /
                                                                std::sqrt(q / cols + 1e-5) * g.data<float>()[i] +
                                                            b.data<float>()[i]);
    }
    expect_matches({"LayerNormalization", {{lx}, {g, true}, {b, true}}, {{"axis", attr_i(axis)}}}, {ln});
  }
}

// layer_norm_rows and softmax_rows take rows 4 at a time (with AVX-512
// and with AVX2):
// a row's result must not depend on its group (the fused attention and
// MatMul + LayerNorm rely on it to equal the unfused ops bit for bit), and
// must match a double reference; a NaN spoils only its own softmax row,
// and -inf scores get weight 0.
TEST_F(Nn, RowFunctionsSameInAGroupOrAlone) {
  for (int64_t n : {1, 15, 16, 37, 128}) {
    const int64_t rows = 9, ld = n + 3;
    Tensor x = rng.floats(Shape{rows * ld}, -4, 4), g = rng.floats(Shape{n}, 0.5, 1.5), b = rng.floats(Shape{n});
    std::vector<float> in(x.data<float>(), x.data<float>() + x.numel());
    if (n > 1) in[static_cast<size_t>(5 * ld + n / 2)] = -std::numeric_limits<float>::infinity();
    std::vector<float> lnall(in.size()), lnone(in.size()), small(in), smone(in), mean(rows), inv(rows);
    layer_norm_rows(in.data(), ld, lnall.data(), ld, rows, n, 1e-5f, g.data<float>(), b.data<float>(), mean.data(),
                    inv.data());
    in[static_cast<size_t>(2 * ld + n - 1)] = std::numeric_limits<float>::quiet_NaN();
    small = in;
    softmax_rows(small.data(), ld, small.data(), ld, rows, n);
    for (int64_t r = 0; r < rows; ++r) {
      SCOPED_TRACE(str_cat("n ", n, " row ", r));
      float m1, i1;
      layer_norm_rows(x.data<float>() + r * ld, ld, lnone.data() + r * ld, ld, 1, n, 1e-5f, g.data<float>(),
                      b.data<float>(), &m1, &i1);
      softmax_rows(in.data() + r * ld, ld, smone.data() + r * ld, ld, 1, n);
      if (r != 5 || n == 1) {  // row 5 holds the -inf for the norm's input above
        ASSERT_EQ(std::memcmp(lnall.data() + r * ld, lnone.data() + r * ld, n * sizeof(float)), 0);
        ASSERT_EQ(mean[static_cast<size_t>(r)], m1);
        ASSERT_EQ(inv[static_cast<size_t>(r)], i1);
      }
      ASSERT_EQ(std::memcmp(small.data() + r * ld, smone.data() + r * ld, n * sizeof(float)), 0);
      const float* xr = in.data() + r * ld;
      if (r == 2) {
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(small[static_cast<size_t>(r * ld + i)])) << i;
        continue;
      }
      double mx = -1e30, s = 0, mu = 0, q = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max<double>(mx, xr[i]);
      for (int64_t i = 0; i < n; ++i) s += std::exp(double(xr[i]) - mx);
      const float* lr = x.data<float>() + r * ld;
      for (int64_t i = 0; i < n; ++i) mu += lr[i] / double(n);
      for (int64_t i = 0; i < n; ++i) q += (lr[i] - mu) * (lr[i] - mu) / double(n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(small[static_cast<size_t>(r * ld + i)], std::exp(double(xr[i]) - mx) / s, 1e-6) << i;
        if (r != 5 || n == 1) {
          ASSERT_NEAR(lnall[static_cast<size_t>(r * ld + i)],
                      (lr[i] - mu) / std::sqrt(q + 1e-5) * g.data<float>()[i] + b.data<float>()[i], 1e-4)
              << i;
        }
      }
    }
  }
}

TEST_F(Nn, SoftmaxAndLogSoftmaxAnyAxis) {
  // Short lines, and lines of 37 and 111 (16-lane blocks and a tail).
  for (Tensor x : {rng.floats(Shape{3, 4, 5}, -5, 5), rng.floats(Shape{2, 3, 37}, -30, 30)}) {
    for (int axis : {-1, 0, 1}) {
      for (int64_t opset : {int64_t{17}, int64_t{11}}) {
        Tensor sm(DType::kFloat32, x.shape()), lsm(DType::kFloat32, x.shape());
        int64_t ax = axis < 0 ? axis + 3 : axis;
        // opset < 13 normalizes over every dim from `axis` on.
        int64_t inner = 1, len = x.shape()[static_cast<int>(ax)];
        for (int d = static_cast<int>(ax) + 1; d < 3; ++d) inner *= x.shape()[d];
        if (opset < 13) {
          len *= inner;
          inner = 1;
        }
        int64_t outer = x.numel() / (len * inner);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            double mx = -1e30, s = 0;
            for (int64_t k = 0; k < len; ++k) mx = std::max<double>(mx, x.data<float>()[(o * len + k) * inner + i]);
            for (int64_t k = 0; k < len; ++k) s += std::exp(x.data<float>()[(o * len + k) * inner + i] - mx);
            for (int64_t k = 0; k < len; ++k) {
              int64_t off = (o * len + k) * inner + i;
              sm.data<float>()[off] = static_cast<float>(std::exp(x.data<float>()[off] - mx) / s);
              lsm.data<float>()[off] = static_cast<float>(x.data<float>()[off] - mx - std::log(s));
            }
          }
        OpCase a{"Softmax", {{x}}, {{"axis", attr_i(axis)}}};
        a.opset = opset;
        OpCase b{"LogSoftmax", {{x}}, {{"axis", attr_i(axis)}}};
        b.opset = opset;
        expect_matches(a, {sm});
        expect_matches(b, {lsm});
      }
    }
  }
}

// ---------------------------------------------------------- Reductions ---

TEST_F(Nn, ReduceAnyAxesKeepdims) {
  Tensor x = rng.floats(Shape{3, 4, 5, 2});
  std::vector<std::vector<int64_t>> axes_list = {{}, {0}, {3}, {1, 2}, {0, 2}, {-1, -3}, {0, 1, 2, 3}};
  for (auto& axes : axes_list)
    for (int keep : {0, 1})
      for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
        SCOPED_TRACE(::testing::Message() << op << " keepdims=" << keep << " axes=" << axes.size());
        std::vector<bool> red(4, axes.empty());
        for (int64_t a : axes) red[a < 0 ? a + 4 : a] = true;
        std::vector<int64_t> od, kd;
        for (int d = 0; d < 4; ++d) {
          kd.push_back(red[d] ? 1 : x.shape()[d]);
          if (!red[d]) od.push_back(x.shape()[d]);
          else if (keep) od.push_back(1);
        }
        Shape keep_shape(kd);
        Tensor y(DType::kFloat32, keep_shape);
        std::vector<double> acc(y.numel(), std::string(op) == "ReduceMax" ? -1e30 : std::string(op) == "ReduceMin" ? 1e30 : 0);
        int64_t count = x.numel() / y.numel();
        for (int64_t i = 0; i < x.numel(); ++i) {
          auto idx = unravel(i, x.shape());
          int64_t o = 0;
          for (int d = 0; d < 4; ++d) o = o * kd[d] + (red[d] ? 0 : idx[d]);
          double v = x.data<float>()[i];
          if (std::string(op) == "ReduceMax") acc[o] = std::max(acc[o], v);
          else if (std::string(op) == "ReduceMin") acc[o] = std::min(acc[o], v);
          else acc[o] += v;
        }
        for (int64_t o = 0; o < y.numel(); ++o)
          y.data<float>()[o] = static_cast<float>(std::string(op) == "ReduceMean" ? acc[o] / count : acc[o]);
        OpCase c{op, {{x}}, {{"keepdims", attr_i(keep)}}};
        if (!axes.empty()) {
          if (std::string(op) == "ReduceSum") c.inputs.push_back({Tensor::from_int64s(axes, Shape{int64_t(axes.size())}), true});
          else c.attrs["axes"] = attr_ints(axes);
        }
        expect_matches(c, {y.reshaped(Shape(od))});
      }
}

TEST_F(Nn, ArgMaxAndCumSum) {
  Tensor x = rng.ints(Shape{3, 6, 4}, 0, 4, DType::kInt64);  // ties on purpose
  Tensor xf(DType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) xf.data<float>()[i] = static_cast<float>(x.data<int64_t>()[i]);
  for (int last : {0, 1}) {
    Tensor am(DType::kInt64, Shape{3, 1, 4});
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t i = 0; i < 4; ++i) {
        int64_t best = 0;
        for (int64_t k = 1; k < 6; ++k) {
          float v = at(xf, {o, k, i}), b = at(xf, {o, best, i});
          if (v > b || (last && v == b)) best = k;
        }
        am.data<int64_t>()[o * 4 + i] = best;
      }
    expect_matches({"ArgMax", {{xf}}, {{"axis", attr_i(1)}, {"select_last_index", attr_i(last)}}}, {am});
  }
  for (int ex : {0, 1})
    for (int rev : {0, 1}) {
      Tensor cs(DType::kFloat32, xf.shape());
      for (int64_t o = 0; o < 3; ++o)
        for (int64_t i = 0; i < 4; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < 6; ++j) {
            int64_t k = rev ? 5 - j : j;
            double v = at(xf, {o, k, i});
            if (ex) {
              cs.data<float>()[(o * 6 + k) * 4 + i] = static_cast<float>(acc);
              acc += v;
            } else {
              acc += v;
              cs.data<float>()[(o * 6 + k) * 4 + i] = static_cast<float>(acc);
            }
          }
        }
      expect_matches({"CumSum", {{xf}, {Tensor::from_int64s({-2}, Shape{}), true}},
                      {{"exclusive", attr_i(ex)}, {"reverse", attr_i(rev)}}},
                     {cs});
    }
}

// ---------------------------------------------------------- Recurrent ---

double sig(double x) { return 1 / (1 + std::exp(-x)); }

// Every direction, both GRU variants, hidden sizes below and across the
// lowered cells' 16-unit panels (37: three panels, the last partial), and
// with B, initial_h and initial_c absent. Forward LSTMs and GRUs with
// linear_before_reset are also run lowered to per-step cells.
TEST_F(Nn, LstmAndGruAllDirections) {
  const int64_t seq = 5, batch = 3, in = 4;
  for (int64_t h : {6, 37})
  for (bool absent : {false, true})
  for (std::string dir : {"forward", "reverse", "bidirectional"}) {
    int64_t dirs = dir == "bidirectional" ? 2 : 1;
    for (bool lstm : {true, false}) {
      for (int lbr : {0, 1}) {
        if (lstm && lbr) continue;
        int64_t G = lstm ? 4 : 3;
        Tensor x = rng.floats(Shape{seq, batch, in}), w = rng.floats(Shape{dirs, G * h, in}),
               r = rng.floats(Shape{dirs, G * h, h}), b = rng.floats(Shape{dirs, 2 * G * h}),
               h0 = rng.floats(Shape{dirs, batch, h}), c0 = rng.floats(Shape{dirs, batch, h});
        if (absent)  // the reference sees zeros; the op gets no input
          for (Tensor* t : {&b, &h0, &c0}) std::fill(t->data<float>(), t->data<float>() + t->numel(), 0.f);
        Tensor y(DType::kFloat32, Shape{seq, dirs, batch, h}), yh(DType::kFloat32, Shape{dirs, batch, h}),
            yc(DType::kFloat32, Shape{dirs, batch, h});
        for (int64_t d = 0; d < dirs; ++d)
          for (int64_t bi = 0; bi < batch; ++bi) {
            std::vector<double> H(h), C(h);
            for (int64_t j = 0; j < h; ++j) {
              H[j] = at(h0, {d, bi, j});
              C[j] = at(c0, {d, bi, j});
            }
            bool rev = dir == "reverse" || d == 1;
            for (int64_t s = 0; s < seq; ++s) {
              int64_t t = rev ? seq - 1 - s : s;
              std::vector<double> xw(G * h), hr(G * h);
              for (int64_t gi = 0; gi < G * h; ++gi) {
                xw[gi] = at(b, {d, gi});
                hr[gi] = at(b, {d, G * h + gi});
                for (int64_t k = 0; k < in; ++k) xw[gi] += at(x, {t, bi, k}) * at(w, {d, gi, k});
                for (int64_t k = 0; k < h; ++k) hr[gi] += H[k] * at(r, {d, gi, k});
              }
              std::vector<double> nh(h);
              if (lstm) {
                for (int64_t j = 0; j < h; ++j) {
                  double ig = sig(xw[j] + hr[j]), og = sig(xw[h + j] + hr[h + j]), fg = sig(xw[2 * h + j] + hr[2 * h + j]);
                  double cg = std::tanh(xw[3 * h + j] + hr[3 * h + j]);
                  C[j] = fg * C[j] + ig * cg;
                  nh[j] = og * std::tanh(C[j]);
                }
              } else {
                std::vector<double> rg(h), z(h);
                for (int64_t j = 0; j < h; ++j) {
                  z[j] = sig(xw[j] + hr[j]);
                  rg[j] = sig(xw[h + j] + hr[h + j]);
                }
                for (int64_t j = 0; j < h; ++j) {
                  double cand;
                  if (lbr) {
                    cand = std::tanh(xw[2 * h + j] + rg[j] * hr[2 * h + j]);
                  } else {
                    double acc = at(b, {d, G * h + 2 * h + j});
                    for (int64_t k = 0; k < h; ++k) acc += rg[k] * H[k] * at(r, {d, 2 * h + j, k});
                    cand = std::tanh(xw[2 * h + j] + acc);
                  }
                  nh[j] = (1 - z[j]) * cand + z[j] * H[j];
                }
              }
              H = nh;
              for (int64_t j = 0; j < h; ++j) y.data<float>()[((t * dirs + d) * batch + bi) * h + j] = static_cast<float>(H[j]);
            }
            for (int64_t j = 0; j < h; ++j) {
              yh.data<float>()[(d * batch + bi) * h + j] = static_cast<float>(H[j]);
              yc.data<float>()[(d * batch + bi) * h + j] = static_cast<float>(C[j]);
            }
          }
        SCOPED_TRACE(str_cat(lstm ? "LSTM " : "GRU ", dir, " lbr=", lbr, " h=", h, absent ? " without B and states" : ""));
        std::map<std::string, Attribute> attrs = {{"hidden_size", attr_i(h)}, {"direction", attr_s(dir)}};
        const Tensor none;
        const bool lowerable = dir == "forward" && (lstm || lbr);
        if (lstm) {
          OpCase c{"LSTM", {{x}, {w, true}, {r, true}, {absent ? none : b, true}, {none}, {absent ? none : h0},
                            {absent ? none : c0}}, attrs, 3};
          expect_matches(c, {y, yh, yc});
          c.lower_recurrent = lowerable;  // per-step cells (with projection, states, Y_h, Y_c)
          if (lowerable) expect_matches(c, {y, yh, yc});
        } else {
          attrs["linear_before_reset"] = attr_i(lbr);
          OpCase c{"GRU", {{x}, {w, true}, {r, true}, {absent ? none : b, true}, {none}, {absent ? none : h0}}, attrs, 2};
          expect_matches(c, {y, yh});
          c.lower_recurrent = lowerable;
          if (lowerable) expect_matches(c, {y, yh});
        }
      }
    }
  }
}

// A lowered layer's projection and its cells, cut into the same number of
// rTasks, cut the hidden units alike: cell task t reads only projection
// columns that projection task t wrote, so a Plan that keeps task t of
// both on one vEU never makes a cell fetch its inputs from another core.
// Checked by running each task pair alone over NaN-filled buffers.
TEST_F(Nn, RnnProjectionTasksFeedTheirCellTasks) {
  const int64_t seq = 3, batch = 2, in = 24;
  for (bool lstm : {true, false})
  for (int64_t h : {80, 37}) {
    const int64_t G = lstm ? 4 : 3;
    Graph g;
    Value* x = g.add_input("x", DType::kFloat32, Shape{seq, batch, in});
    x->shape_known = true;
    std::vector<Value*> ins = {x, g.add_constant("w", rng.floats(Shape{1, G * h, in})),
                               g.add_constant("r", rng.floats(Shape{1, G * h, h})),
                               g.add_constant("b", rng.floats(Shape{1, 2 * G * h}))};
    Node* n = g.add_node(lstm ? "LSTM" : "GRU", "rnn", ins, lstm ? 3 : 2);
    n->attrs["hidden_size"] = attr_i(h);
    if (!lstm) n->attrs["linear_before_reset"] = attr_i(1);
    const Status inferred = op_infer(*n);
    ASSERT_TRUE(inferred.ok()) << inferred.to_string();
    g.mark_output(n->outputs[0]);
    auto lowered = lower_recurrent(g, 0, true);
    ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
    ASSERT_EQ(*lowered, 1);
    const Node* proj = nullptr;
    const Node* cell = nullptr;
    for (const auto& node : g.nodes()) {
      if (node->dead) continue;
      if (node->op_type == "TesseraRnnProj") proj = node.get();
      if (node->name == "rnn/step1") cell = node.get();
    }
    ASSERT_NE(proj, nullptr);
    ASSERT_NE(cell, nullptr);
    const int64_t cols = proj->outputs[0]->shape[1], panels = rnn_panels(h);
    ASSERT_EQ(cols, rnn_projection_cols(G, h));
    const Tensor xs = rng.floats(Shape{seq, batch, in}), hs = rng.floats(Shape{batch, h}),
                 cs = rng.floats(Shape{batch, h});
    for (int64_t tasks = 2; tasks <= panels; ++tasks) {
      SCOPED_TRACE(str_cat(lstm ? "LSTM" : "GRU", " h=", h, ", ", tasks, " rTasks"));
      auto pop = cpu_kernel_find("TesseraRnnProj")->make(*proj, KernelParams{tasks});
      auto cop = cpu_kernel_find(cell->op_type)->make(*cell, KernelParams{tasks});
      ASSERT_TRUE(pop.ok() && cop.ok());
      ASSERT_EQ((*pop)->tasks(), tasks);
      ASSERT_EQ((*cop)->tasks(), tasks);
      std::vector<int> covered(static_cast<size_t>(h), 0);
      for (int64_t t = 0; t < tasks; ++t) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> xp(static_cast<size_t>(seq * batch * cols), nan), hy(static_cast<size_t>(batch * h), nan),
            cy(static_cast<size_t>(batch * h), nan);
        std::vector<float> scratch((*pop)->scratch_bytes() / sizeof(float) + 1);
        ASSERT_EQ(proj->inputs.size(), 4u);  // Wp, bias, X, and Rp to prefetch
        const void* pin[] = {proj->inputs[0]->constant->raw(), proj->inputs[1]->constant->raw(), xs.raw(),
                             proj->inputs[3]->constant->raw()};
        void* pout[] = {xp.data()};
        (*pop)->run(t, TaskArgs{pin, pout, scratch.data()});
        const void* rp = cell->inputs[lstm ? 3 : 2]->constant->raw();
        const void* rb = lstm || cell->input(3) == nullptr ? nullptr : cell->inputs[3]->constant->raw();
        const void* cin_lstm[] = {xp.data(), hs.raw(), cs.raw(), rp};
        const void* cin_gru[] = {xp.data(), hs.raw(), rp, rb};
        void* cout[] = {hy.data(), cy.data()};
        (*cop)->run(t, TaskArgs{lstm ? cin_lstm : cin_gru, cout, nullptr});
        for (int64_t u = 0; u < h; ++u) {
          bool written = !std::isnan(hy[static_cast<size_t>(u)]);
          for (int64_t b = 0; b < batch; ++b)
            EXPECT_EQ(!std::isnan(hy[static_cast<size_t>(b * h + u)]), written)
                << "cell rTask " << t << ", unit " << u << ": some batch rows read unwritten projection columns";
          covered[static_cast<size_t>(u)] += written;
        }
      }
      for (int64_t u = 0; u < h; ++u)
        EXPECT_EQ(covered[static_cast<size_t>(u)], 1) << "unit " << u << " computed from the rTask's own projection "
                                                      << covered[static_cast<size_t>(u)] << " times";
    }
  }
}

// The projection before a layer's first step takes R only to pull it
// into cache: its output is bitwise that of the same projection without
// R, for every rTask count. Its shape inference checks R and the flag.
TEST_F(Nn, RnnProjectionPrefetchChangesNothing) {
  const int64_t seq = 5, in = 40, h = 48;
  for (int64_t G : {4, 3}) {
    SCOPED_TRACE(str_cat("gates ", G));
    const int64_t panels = rnn_panels(h), width = G * kRnnPanelUnits, cols = panels * width;
    Graph g;
    Value* x = g.add_input("x", DType::kFloat32, Shape{seq, in});
    x->shape_known = true;
    Value* wp = g.add_constant("wp", rng.floats(Shape{panels, in, width}));
    Value* bias = g.add_constant("bias", rng.floats(Shape{cols}));
    Value* rp = g.add_constant("rp", rng.floats(Shape{panels, h, width}));
    Node* with = g.add_node("TesseraRnnProj", "with", {wp, bias, x, rp}, 1);
    with->attrs["gates"] = attr_i(G);
    with->attrs["prefetch_r"] = attr_i(1);
    Node* without = g.add_node("TesseraRnnProj", "without", {wp, bias, x}, 1);
    without->attrs["gates"] = attr_i(G);
    // The layout is the node's to name: none is an error, not a default.
    EXPECT_NE(op_infer(*without).to_string().find("panel_units 0"), std::string::npos);
    for (Node* n : {with, without}) n->attrs["panel_units"] = attr_i(kRnnPanelUnits);
    for (Node* n : {with, without}) {
      const Status st = op_infer(*n);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(n->outputs[0]->shape, (Shape{seq, cols}));
    }
    const Tensor xs = rng.floats(Shape{seq, in});
    for (int64_t tasks = 1; tasks <= panels; ++tasks) {
      auto a = cpu_kernel_find("TesseraRnnProj")->make(*with, KernelParams{tasks});
      auto b = cpu_kernel_find("TesseraRnnProj")->make(*without, KernelParams{tasks});
      ASSERT_TRUE(a.ok() && b.ok());
      std::vector<float> ya(static_cast<size_t>(seq * cols), 1.f), yb(ya.size(), 2.f);
      const void* ina[] = {wp->constant->raw(), bias->constant->raw(), xs.raw(), rp->constant->raw()};
      const void* inb[] = {wp->constant->raw(), bias->constant->raw(), xs.raw()};
      void* outa[] = {ya.data()};
      void* outb[] = {yb.data()};
      for (int64_t t = 0; t < (*a)->tasks(); ++t) (*a)->run(t, TaskArgs{ina, outa, nullptr});
      for (int64_t t = 0; t < (*b)->tasks(); ++t) (*b)->run(t, TaskArgs{inb, outb, nullptr});
      EXPECT_EQ(ya, yb) << tasks << " rTasks";
    }
    // An R of another panel width, a flag other than 0 or 1.
    Value* bad_r = g.add_constant("bad_r", rng.floats(Shape{panels, h, width + 1}));
    Node* bad = g.add_node("TesseraRnnProj", "bad", {wp, bias, x, bad_r}, 1);
    bad->attrs["gates"] = attr_i(G);
    bad->attrs["panel_units"] = attr_i(kRnnPanelUnits);
    bad->attrs["prefetch_r"] = attr_i(1);
    const Status st = op_infer(*bad);
    EXPECT_NE(st.to_string().find("Rp has shape"), std::string::npos) << st.to_string();
    bad->attrs["prefetch_r"] = attr_i(2);
    EXPECT_NE(op_infer(*bad).to_string().find("prefetch_r 2"), std::string::npos);
    // A layout of half-width panels is a consistent IR, but not one the
    // CPU's rKernel takes: it refuses the node by its layout.
    const int64_t half = kRnnPanelUnits / 2, half_panels = (h + half - 1) / half;
    Value* wp8 = g.add_constant("wp8", rng.floats(Shape{half_panels, in, G * half}));
    Value* bias8 = g.add_constant("bias8", rng.floats(Shape{half_panels * G * half}));
    Node* narrow = g.add_node("TesseraRnnProj", "narrow", {wp8, bias8, x}, 1);
    narrow->attrs["gates"] = attr_i(G);
    narrow->attrs["panel_units"] = attr_i(half);
    ASSERT_TRUE(op_infer(*narrow).ok()) << op_infer(*narrow).to_string();
    auto refused = cpu_kernel_find("TesseraRnnProj")->make(*narrow, KernelParams{1});
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("panel_units 8"), std::string::npos) << refused.status().to_string();
  }
}


// A constant Wp is packed again into the GEMM's own column panels; the
// projection's output is bitwise that of the cells' panels, which a Wp
// known only at run time still uses, for every rTask count (tasks of 96
// columns or more run on the packed copy, narrower ones on the panels),
// with and without R to prefetch, on partial panels and rows past a
// block of 16.
TEST_F(Nn, RnnProjectionPackedMatchesCellPanels) {
  for (int64_t G : {4, 3})
  for (int64_t h : {48, 37})
  for (int64_t seq : {5, 37}) {
    SCOPED_TRACE(str_cat("gates ", G, ", h=", h, ", ", seq, " rows"));
    const int64_t in = 29, panels = rnn_panels(h), width = G * kRnnPanelUnits, cols = panels * width;
    Graph g;
    Value* x = g.add_input("x", DType::kFloat32, Shape{seq, in});
    x->shape_known = true;
    const Tensor wt = rng.floats(Shape{panels, in, width});
    Value* wp = g.add_constant("wp", wt);
    Value* wp_late = g.add_input("wp_late", DType::kFloat32, Shape{panels, in, width});
    wp_late->shape_known = true;
    Value* bias = g.add_constant("bias", rng.floats(Shape{cols}));
    Value* rp = g.add_constant("rp", rng.floats(Shape{panels, h, width}));
    for (bool prefetch : {false, true}) {
      std::vector<Value*> packed_in = {wp, bias, x}, panel_in = {wp_late, bias, x};
      if (prefetch) packed_in.push_back(rp), panel_in.push_back(rp);
      Node* packed = g.add_node("TesseraRnnProj", str_cat("packed", prefetch), packed_in, 1);
      Node* panel = g.add_node("TesseraRnnProj", str_cat("panel", prefetch), panel_in, 1);
      for (Node* n : {packed, panel}) {
        n->attrs["gates"] = attr_i(G);
        n->attrs["panel_units"] = attr_i(kRnnPanelUnits);
        if (prefetch) n->attrs["prefetch_r"] = attr_i(1);
        const Status st = op_infer(*n);
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
      const Tensor xs = rng.floats(Shape{seq, in});
      for (int64_t tasks = 1; tasks <= panels; ++tasks) {
        auto a = cpu_kernel_find("TesseraRnnProj")->make(*packed, KernelParams{tasks});
        auto b = cpu_kernel_find("TesseraRnnProj")->make(*panel, KernelParams{tasks});
        ASSERT_TRUE(a.ok() && b.ok());
        EXPECT_EQ((*a)->path(), "gemm panels");
        EXPECT_EQ((*b)->path(), "cell panels");
        std::vector<float> ya(static_cast<size_t>(seq * cols), 1.f), yb(ya.size(), 2.f);
        std::vector<const void*> ina = {wp->constant->raw(), bias->constant->raw(), xs.raw()};
        std::vector<const void*> inb = {wt.raw(), bias->constant->raw(), xs.raw()};
        if (prefetch) ina.push_back(rp->constant->raw()), inb.push_back(rp->constant->raw());
        void* outa[] = {ya.data()};
        void* outb[] = {yb.data()};
        for (int64_t t = 0; t < (*a)->tasks(); ++t) (*a)->run(t, TaskArgs{ina.data(), outa, nullptr});
        for (int64_t t = 0; t < (*b)->tasks(); ++t) (*b)->run(t, TaskArgs{inb.data(), outb, nullptr});
        ASSERT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)), 0)
            << tasks << " rTasks" << (prefetch ? ", prefetching R" : "");
      }
    }
  }
}

// A step that carries slice j of the next layer's projection (next_slice)
// writes its piece [panels / 8, 8, G x 16] bitwise equal to the
// projection of the same 8 rows, next-layer panels j, 8 + j, ..., and its
// own h and c unchanged, for every rTask count; a step reading its
// projection in that blocked layout (xp_blocked) computes what it
// computes from the row-major one.
TEST_F(Nn, RnnCellCarriesTheNextProjection) {
  const int64_t h = 256, panels = rnn_panels(h), width = 4 * kRnnPanelUnits, cols = panels * width, rows = 16;
  Graph g;
  Value* xp = g.add_constant("xp", rng.floats(Shape{rows, cols}));
  Value* hp = g.add_constant("h_prev", rng.floats(Shape{1, 1, 1, h}));
  Value* cp = g.add_constant("c_prev", rng.floats(Shape{1, h}));
  Value* rp = g.add_constant("rp", rng.floats(Shape{panels, h, width}));
  Value* wn = g.add_constant("wn", rng.floats(Shape{panels, h, width}));
  Value* bn = g.add_constant("bn", rng.floats(Shape{cols}));
  std::vector<Value*> arows;
  for (int r = 0; r < 8; ++r) arows.push_back(g.add_constant(str_cat("a", r), rng.floats(Shape{1, 1, 1, h})));
  // The reference projection of the 8 rows.
  Value* x8 = g.add_input("x8", DType::kFloat32, Shape{8, h});
  x8->shape_known = true;
  Node* proj = g.add_node("TesseraRnnProj", "proj", {wn, bn, x8}, 1);
  proj->attrs["gates"] = attr_i(4);
  proj->attrs["panel_units"] = attr_i(kRnnPanelUnits);
  ASSERT_TRUE(op_infer(*proj).ok());
  std::vector<float> a8;
  for (Value* v : arows) a8.insert(a8.end(), v->constant->data<float>(), v->constant->data<float>() + h);
  std::vector<float> ref(static_cast<size_t>(8 * cols));
  {
    auto op = cpu_kernel_find("TesseraRnnProj")->make(*proj, KernelParams{1});
    ASSERT_TRUE(op.ok());
    const void* in[] = {wn->constant->raw(), bn->constant->raw(), a8.data()};
    void* out[] = {ref.data()};
    (*op)->run(0, TaskArgs{in, out, nullptr});
  }
  const int64_t step = 11;
  Node* plain = g.add_node("TesseraLstmCell", "plain", {xp, hp, cp, rp}, 2);
  std::vector<Value*> ins = {xp, hp, cp, rp, wn, bn};
  ins.insert(ins.end(), arows.begin(), arows.end());
  for (Node* n : {plain}) {
    n->attrs["hidden_size"] = attr_i(h);
    n->attrs["batch"] = attr_i(1);
    n->attrs["step"] = attr_i(step);
    n->attrs["panel_units"] = attr_i(kRnnPanelUnits);
    ASSERT_TRUE(op_infer(*n).ok());
  }
  const int64_t piece = panels / 8 * 8 * width;
  auto run = [&](Node* n, int64_t tasks, const std::vector<const void*>& in, int64_t slices = 1) {
    auto op = cpu_kernel_find("TesseraLstmCell")->make(*n, KernelParams{tasks});
    EXPECT_TRUE(op.ok());
    std::vector<std::vector<float>> outs = {std::vector<float>(static_cast<size_t>(h), NAN),
                                            std::vector<float>(static_cast<size_t>(h), NAN),
                                            std::vector<float>(static_cast<size_t>(slices * piece), NAN)};
    void* out[] = {outs[0].data(), outs[1].data(), outs[2].data()};
    for (int64_t t = 0; t < (*op)->tasks(); ++t) (*op)->run(t, TaskArgs{in.data(), out, nullptr});
    return outs;
  };
  const std::vector<const void*> plain_in = {xp->constant->raw(), hp->constant->raw(), cp->constant->raw(),
                                             rp->constant->raw()};
  const auto want = run(plain, 1, plain_in);
  // One slice, or two (slices j and j + 1, as the last block's steps carry
  // them), each piece after the other.
  const std::pair<int64_t, int64_t> carried[] = {{0, 1}, {5, 1}, {7, 1}, {0, 2}, {4, 2}, {6, 2}};
  for (auto [j, slices] : carried) {
    Node* carry = g.add_node("TesseraLstmCell", str_cat("carry", j, "x", slices), ins, 3);
    carry->attrs["hidden_size"] = attr_i(h);
    carry->attrs["batch"] = attr_i(1);
    carry->attrs["step"] = attr_i(step);
    carry->attrs["next_slice"] = attr_i(j);
    if (slices > 1) carry->attrs["next_slices"] = attr_i(slices);
    carry->attrs["panel_units"] = attr_i(kRnnPanelUnits);
    carry->attrs["block_rows"] = attr_i(kRnnBlockRows);
    const Status st = op_infer(*carry);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(carry->outputs[2]->shape, (Shape{slices, panels / 8, 8, width}));
    std::vector<const void*> in;
    for (Value* v : ins) in.push_back(v->constant->raw());
    for (int64_t tasks : {1, 2, 3, 4, 8, 16}) {
      SCOPED_TRACE(str_cat("slice ", j, " of ", slices, ", ", tasks, " rTasks"));
      const auto got = run(carry, tasks, in, slices);
      EXPECT_EQ(got[0], want[0]);
      EXPECT_EQ(got[1], want[1]);
      int64_t bad = 0;
      for (int64_t sl = 0; sl < slices; ++sl)
        for (int64_t m = 0; m < panels / 8; ++m)
          for (int64_t r = 0; r < 8; ++r)
            for (int64_t c = 0; c < width; ++c)
              bad += got[2][static_cast<size_t>(sl * piece + (m * 8 + r) * width + c)] !=
                     ref[static_cast<size_t>(r * cols + (m * 8 + j + sl) * width + c)];
      EXPECT_EQ(bad, 0);
    }
  }
  // A step carries one or two slices, ending at slice 7 at most.
  for (auto [j, slices] : {std::pair<int64_t, int64_t>{7, 2}, {0, 3}, {-1, 2}, {2, 0}}) {
    Node* bad = g.add_node("TesseraLstmCell", str_cat("bad", j, "x", slices), ins, 3);
    for (auto [key, v] : {std::pair<const char*, int64_t>{"hidden_size", h}, {"batch", 1}, {"step", step},
                          {"next_slice", j}, {"next_slices", slices}, {"panel_units", kRnnPanelUnits},
                          {"block_rows", kRnnBlockRows}})
      bad->attrs[key] = attr_i(v);
    const Status st = op_infer(*bad);
    EXPECT_NE(st.message().find("next_slices"), std::string::npos) << j << " x " << slices << ": " << st.to_string();
  }
  // The blocked layout: pieces (row / 8) * 8 + p % 8 of [panels / 8, 8, width].
  auto blocked_at = [&](int64_t row, int64_t p) {
    return static_cast<size_t>(((row / 8 * 8 + p % 8) * (panels / 8) + p / 8) * 8 * width + row % 8 * width);
  };
  Tensor blocked(DType::kFloat32, Shape{rows, panels / 8, 8, width});
  const float* x = xp->constant->data<float>();
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t p = 0; p < panels; ++p)
      for (int64_t c = 0; c < width; ++c)
        blocked.data<float>()[blocked_at(row, p) + static_cast<size_t>(c)] =
            x[row * cols + p * width + c];
  Value* xb = g.add_constant("xb", std::move(blocked));
  Node* reader = g.add_node("TesseraLstmCell", "reader", {xb, hp, cp, rp}, 2);
  reader->attrs["hidden_size"] = attr_i(h);
  reader->attrs["batch"] = attr_i(1);
  reader->attrs["step"] = attr_i(step);
  reader->attrs["xp_blocked"] = attr_i(1);
  reader->attrs["panel_units"] = attr_i(kRnnPanelUnits);
  reader->attrs["block_rows"] = attr_i(kRnnBlockRows);
  ASSERT_TRUE(op_infer(*reader).ok());
  const auto got = run(reader, 2, {xb->constant->raw(), hp->constant->raw(), cp->constant->raw(),
                                   rp->constant->raw()});
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[1], want[1]);
  // A projection writing the blocked layout (attribute blocked) of 12
  // rows: bitwise the row-major projection's values at their blocked
  // places, rows padded to 16 and the padding not written.
  Value* x12 = g.add_constant("x12", rng.floats(Shape{12, h}));
  Node* rowwise = g.add_node("TesseraRnnProj", "rowwise", {wn, bn, x12}, 1);
  Node* inblocks = g.add_node("TesseraRnnProj", "inblocks", {wn, bn, x12}, 1);
  for (Node* n : {rowwise, inblocks}) n->attrs["gates"] = attr_i(4);
  for (Node* n : {rowwise, inblocks}) n->attrs["panel_units"] = attr_i(kRnnPanelUnits);
  inblocks->attrs["blocked"] = attr_i(1);
  inblocks->attrs["block_rows"] = attr_i(kRnnBlockRows);
  ASSERT_TRUE(op_infer(*rowwise).ok());
  ASSERT_TRUE(op_infer(*inblocks).ok());
  ASSERT_EQ(inblocks->outputs[0]->shape, (Shape{16, panels / 8, 8, width}));
  for (int64_t tasks : {1, 2, 3}) {
    SCOPED_TRACE(str_cat("blocked projection, ", tasks, " rTasks"));
    std::vector<float> flat(static_cast<size_t>(12 * cols)), pieces(static_cast<size_t>(16 * cols), NAN);
    const void* in[] = {wn->constant->raw(), bn->constant->raw(), x12->constant->raw()};
    for (auto [n, out] : {std::pair{rowwise, flat.data()}, std::pair{inblocks, pieces.data()}}) {
      auto op = cpu_kernel_find("TesseraRnnProj")->make(*n, KernelParams{tasks});
      ASSERT_TRUE(op.ok());
      void* outs[] = {out};
      for (int64_t t = 0; t < (*op)->tasks(); ++t) (*op)->run(t, TaskArgs{in, outs, nullptr});
    }
    int64_t bad = 0, padding = 0;
    for (int64_t row = 0; row < 16; ++row)
      for (int64_t p = 0; p < panels; ++p)
        for (int64_t c = 0; c < width; ++c) {
          const float v = pieces[blocked_at(row, p) + static_cast<size_t>(c)];
          if (row >= 12) padding += !std::isnan(v);
          else bad += v != flat[static_cast<size_t>(row * cols + p * width + c)];
        }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(padding, 0);
  }
  // Shapes checked: a GRU or a slice of 8 is refused.
  Node* bad = g.add_node("TesseraLstmCell", "bad", ins, 3);
  bad->attrs["hidden_size"] = attr_i(h);
  bad->attrs["batch"] = attr_i(1);
  bad->attrs["step"] = attr_i(step);
  bad->attrs["panel_units"] = attr_i(kRnnPanelUnits);
  bad->attrs["block_rows"] = attr_i(kRnnBlockRows);
  bad->attrs["next_slice"] = attr_i(8);
  EXPECT_NE(op_infer(*bad).to_string().find("next_slice 8"), std::string::npos);
  // And a carried slice without the blocked layout's rows.
  bad->attrs["next_slice"] = attr_i(3);
  bad->attrs.erase("block_rows");
  EXPECT_NE(op_infer(*bad).to_string().find("block_rows in [1, "), std::string::npos) << op_infer(*bad).to_string();
}

}  // namespace
}  // namespace tessera::testing
