// Conformance of linear-algebra, convolution, pooling, normalization,
// reduction and recurrent ops against naive references.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/dw_strip.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/row_math.h"
#include "tests/conformance/harness.h"

namespace tessera::testing {
namespace {

class Nn : public ::testing::Test {
 protected:
  Rng rng{static_cast<uint64_t>(::testing::UnitTest::GetInstance()->random_seed()) * 13 + 5};
};

float at(const Tensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, d = 0;
  for (int64_t i : idx) off = off * t.shape().dims[d++] + i;
  return t.data<float>()[off];
}

// ------------------------------------------------------------- MatMul ---

Tensor matmul_ref(const Tensor& a, const Tensor& b) {
  Shape as = a.shape(), bs = b.shape();
  bool av = as.rank() == 1, bv = bs.rank() == 1;
  if (av) as = Shape{1, as[0]};
  if (bv) bs = Shape{bs[0], 1};
  int64_t m = as[as.rank() - 2], k = as[as.rank() - 1], n = bs[bs.rank() - 1];
  Shape ab(std::vector<int64_t>(as.dims.begin(), as.dims.end() - 2));
  Shape bb(std::vector<int64_t>(bs.dims.begin(), bs.dims.end() - 2));
  Shape batch = *broadcast_shapes(ab, bb);
  std::vector<int64_t> out = batch.dims;
  if (!av) out.push_back(m);
  if (!bv) out.push_back(n);
  Tensor y(DType::kFloat32, Shape(out));
  for (int64_t bi = 0; bi < batch.numel(); ++bi) {
    auto idx = unravel(bi, batch);
    int64_t ao = ravel_broadcast(idx, ab) * m * k, bo = ravel_broadcast(idx, bb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += double(a.data<float>()[ao + i * k + p]) * b.data<float>()[bo + p * n + j];
        y.data<float>()[bi * m * n + i * n + j] = static_cast<float>(acc);
      }
  }
  return y;
}

// The sgemm every heavy rKernel calls, around the widths it splits into
// whole 16-column vectors and the rest (33 to 63 columns, not a multiple
// of 16): every transpose, alpha and beta, and leading dims wider than the
// matrices, against a double-precision reference.
TEST_F(Nn, SgemmAcrossSplitWidths) {
  for (int64_t n : {16, 32, 33, 48, 49, 63, 64, 65}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t m = 5, k = 19, lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
        Tensor a = rng.floats(Shape{(ta ? k : m) * lda}), b = rng.floats(Shape{(tb ? n : k) * ldb});
        Tensor c = rng.floats(Shape{m * ldc});
        std::vector<float> got(c.data<float>(), c.data<float>() + c.numel());
        const float alpha = 0.75f, beta = ta ? 0.f : -0.5f;
        sgemm(ta, tb, m, n, k, alpha, a.data<float>(), lda, b.data<float>(), ldb, beta, got.data(), ldc);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            const float old = c.data<float>()[i * ldc + j];
            if (j >= n) {  // past the matrix: untouched
              ASSERT_EQ(got[static_cast<size_t>(i * ldc + j)], old) << "n " << n << " col " << j;
              continue;
            }
            double acc = 0;
            for (int64_t p = 0; p < k; ++p)
              acc += double(a.data<float>()[ta ? p * lda + i : i * lda + p]) *
                     b.data<float>()[tb ? j * ldb + p : p * ldb + j];
            const double want = alpha * acc + (beta == 0 ? 0.0 : beta * double(old));
            ASSERT_NEAR(got[static_cast<size_t>(i * ldc + j)], want, 1e-4)
                << "n " << n << " ta " << ta << " tb " << tb << " (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// matmul_gemm, the MatMul and attention GEMM: with AVX-512, for k up to
// kRowsGemmMaxK in products of at least kRowsGemmMinM rows or a B of at
// most kRowsGemmSmallB elements, each output is exactly the in-order fma
// chain over k (so any tile of C gives the same bits), else sgemm; products of 1 to 13 rows (whole, then in tiles that
// reach the 8-, 4-, 2- and 1-row blocks), widths around the 16-column
// vectors and the 48-column blocks, k = 0, short and long (sgemm), leading
// dims wider than the matrices, nothing written past a row's n columns.
TEST_F(Nn, MatmulGemmIsTheInOrderFmaChain) {
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{64}, int64_t{129}, kRowsGemmMaxK, kRowsGemmMaxK + 1}) {
    for (int64_t m : {1, 3, 5, 8, 9, 10, 11, 13}) {
      for (int64_t n : {1, 15, 16, 17, 47, 48, 49, 100}) {
        const int64_t lda = k + 3, ldb = n + 2, ldc = n + 1;
        Tensor a = rng.floats(Shape{m * lda}), b = rng.floats(Shape{std::max<int64_t>(k, 1) * ldb});
        std::vector<float> got(static_cast<size_t>(m * ldc), 7.f), tiled(got);
        const float* pa = a.data<float>();
        const float* pb = b.data<float>();
        matmul_gemm(m, n, k, pa, lda, pb, ldb, got.data(), ldc, m, n);
        // The same product in tiles of 3 rows x 20 columns.
        for (int64_t r = 0; r < m; r += 3)
          for (int64_t c = 0; c < n; c += 20)
            matmul_gemm(std::min<int64_t>(3, m - r), std::min<int64_t>(20, n - c), k, pa + r * lda, lda, pb + c, ldb,
                        tiled.data() + r * ldc + c, ldc, m, n);
        const bool exact = k <= kRowsGemmMaxK && (m >= kRowsGemmMinM || n * k <= kRowsGemmSmallB);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            SCOPED_TRACE(str_cat("m ", m, " n ", n, " k ", k, " (", i, ", ", j, ")"));
            if (j >= n) {
              ASSERT_EQ(got[at], 7.f);
              ASSERT_EQ(tiled[at], 7.f);
              continue;
            }
            float chain = 0;
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) {
              chain = std::fma(pa[i * lda + p], pb[p * ldb + j], chain);
              acc += double(pa[i * lda + p]) * pb[p * ldb + j];
            }
            if (exact) {
              ASSERT_EQ(got[at], chain);
              ASSERT_EQ(tiled[at], chain);
            } else {
              ASSERT_NEAR(got[at], acc, 1e-4);
              ASSERT_NEAR(tiled[at], acc, 1e-4);
            }
          }
        }
      }
    }
  }
}

// At its own grain a MatMul cuts rows into whole blocks of 8 where m is a
// multiple of 8 (the row kernel's register block): tiny BERT's 64 x 384
// QKV projection, 6.3 MFLOP, asks for 6 rTasks of 10-11 rows and gets 8 of
// 8. Each rTask writes whole rows of its block, and together they write C.
TEST_F(Nn, MatMulDefaultTilesRowsInBlocksOf8) {
  struct Case { int64_t m, k, n; };
  for (const Case& cs : {Case{64, 128, 384}, Case{64, 128, 512}, Case{40, 256, 256}, Case{48, 128, 640}}) {
    SCOPED_TRACE(str_cat(cs.m, " x ", cs.k, " by ", cs.k, " x ", cs.n));
    Graph g;
    Value* a = g.add_input("a", DType::kFloat32, Shape{cs.m, cs.k});
    Value* b = g.add_constant("b", rng.floats(Shape{cs.k, cs.n}));
    Node* n = g.add_node("MatMul", "mm", {a, b}, 1);
    n->outputs[0]->dtype = DType::kFloat32;
    n->outputs[0]->shape = Shape{cs.m, cs.n};
    const RKernel* kern = cpu_kernel_find("MatMul");
    ASSERT_NE(kern, nullptr);
    auto op = kern->make(*n, KernelParams{});
    ASSERT_TRUE(op.ok()) << op.status().to_string();
    ASSERT_GT((*op)->tasks(), 1);
    Tensor in = rng.floats(Shape{cs.m, cs.k});
    std::vector<int> covered(static_cast<size_t>(cs.m * cs.n), 0);
    for (int64_t t = 0; t < (*op)->tasks(); ++t) {
      std::vector<float> out(static_cast<size_t>(cs.m * cs.n), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> scratch((*op)->scratch_bytes() / sizeof(float) + 1);
      const void* ins[] = {in.raw(), b->constant->raw()};
      void* outs[] = {out.data()};
      (*op)->run(t, TaskArgs{ins, outs, scratch.data()});
      int64_t rows = 0;
      for (int64_t i = 0; i < cs.m; ++i) {
        int64_t written = 0;
        for (int64_t j = 0; j < cs.n; ++j) {
          const bool w = !std::isnan(out[static_cast<size_t>(i * cs.n + j)]);
          written += w;
          covered[static_cast<size_t>(i * cs.n + j)] += w;
        }
        rows += written > 0;
      }
      EXPECT_EQ(rows % 8, 0) << "rTask " << t << " of " << (*op)->tasks() << " writes " << rows << " rows";
    }
    for (size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << "element " << i;
  }
}

// transpose, the attention's K^T copy: 16 x 16 register blocks and the
// scalar edges, with row strides wider than the matrices.
TEST_F(Nn, TransposeWithEdgesAndStrides) {
  for (int64_t rows : {1, 15, 16, 17, 33, 64}) {
    for (int64_t cols : {1, 16, 20, 64}) {
      const int64_t lds = cols + 5, ldd = rows + 3;
      Tensor src = rng.floats(Shape{rows * lds});
      std::vector<float> dst(static_cast<size_t>(cols * ldd), 9.f);
      transpose(src.data<float>(), lds, rows, cols, dst.data(), ldd);
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < ldd; ++r)
          ASSERT_EQ(dst[static_cast<size_t>(c * ldd + r)], r < rows ? src.data<float>()[r * lds + c] : 9.f)
              << rows << " x " << cols << " at (" << c << ", " << r << ")";
    }
  }
}

TEST_F(Nn, MatMulBatchedBroadcast) {
  std::vector<std::pair<Shape, Shape>> cases = {
      {{5, 7}, {7, 3}},          {{1, 64}, {64, 33}},         {{2, 3, 4, 5}, {5, 6}},  {{2, 1, 4, 5}, {3, 5, 2}},
      {{7}, {7, 4}},             {{3, 7}, {7}},               {{7}, {7}},              {{0, 4}, {4, 3}},
      {{4, 0}, {0, 3}},          {{2, 2, 65, 70}, {2, 2, 70, 129}},
  };
  for (auto& [as, bs] : cases) {
    SCOPED_TRACE(as.to_string() + " x " + bs.to_string());
    Tensor a = rng.floats(as), b = rng.floats(bs);
    expect_matches({"MatMul", {{a}, {b}}}, {matmul_ref(a, b)});
    expect_matches({"MatMul", {{a}, {b, true}}}, {matmul_ref(a, b)});
  }
}

TEST_F(Nn, GemmTransposesAlphaBetaBias) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Shape& cs : {Shape{}, Shape{9}, Shape{6, 1}, Shape{6, 9}, Shape{1, 9}}) {
        int64_t m = 6, k = 11, n = 9;
        Tensor a = rng.floats(ta ? Shape{k, m} : Shape{m, k}), b = rng.floats(tb ? Shape{n, k} : Shape{k, n});
        Tensor c = rng.floats(cs);
        float alpha = 0.7f, beta = 1.3f;
        Tensor y(DType::kFloat32, Shape{m, n});
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p)
              acc += double(ta ? at(a, {p, i}) : at(a, {i, p})) * (tb ? at(b, {j, p}) : at(b, {p, j}));
            acc = alpha * acc + beta * c.data<float>()[ravel_broadcast({i, j}, cs)];
            y.data<float>()[i * n + j] = static_cast<float>(acc);
          }
        OpCase oc{"Gemm", {{a}, {b, true}, {c, true}},
                  {{"transA", attr_i(ta)}, {"transB", attr_i(tb)}, {"alpha", attr_f(alpha)}, {"beta", attr_f(beta)}}};
        expect_matches(oc, {y});
      }
  Tensor a = rng.floats(Shape{4, 5}), b = rng.floats(Shape{5, 3});
  expect_matches({"Gemm", {{a}, {b}}}, {matmul_ref(a, b)});
}

TEST_F(Nn, EinsumMatmulPatterns) {
  Tensor a = rng.floats(Shape{2, 3, 5, 4}), b = rng.floats(Shape{2, 3, 6, 4});
  // "bhqd,bhkd->bhqk": attention scores.
  Tensor y(DType::kFloat32, Shape{2, 3, 5, 6});
  for (int64_t i = 0; i < y.numel(); ++i) {
    auto ix = unravel(i, y.shape());
    double acc = 0;
    for (int64_t d = 0; d < 4; ++d) acc += double(at(a, {ix[0], ix[1], ix[2], d})) * at(b, {ix[0], ix[1], ix[3], d});
    y.data<float>()[i] = static_cast<float>(acc);
  }
  expect_matches({"Einsum", {{a}, {b}}, {{"equation", attr_s("bhqd,bhkd->bhqk")}}}, {y});
  Tensor x = rng.floats(Shape{4, 7}), w = rng.floats(Shape{7, 3});
  expect_matches({"Einsum", {{x}, {w}}, {{"equation", attr_s("ij,jk->ik")}}}, {matmul_ref(x, w)});
  expect_matches({"Einsum", {{x}, {w}}, {{"equation", attr_s("ij,jk")}}}, {matmul_ref(x, w)});
}

// --------------------------------------------------------------- Conv ---

struct ConvSpec {
  int64_t n, c, h, w, m, kh, kw, group;
  std::vector<int64_t> strides, dilations, pads;
  std::string auto_pad = "NOTSET";
};

Tensor conv_ref(const Tensor& x, const Tensor& wt, const Tensor* bias, const ConvSpec& s, int64_t oh, int64_t ow,
                int64_t pt, int64_t pl) {
  Tensor y(DType::kFloat32, Shape{s.n, s.m, oh, ow});
  int64_t cg = s.c / s.group, mg = s.m / s.group;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bias ? bias->data<float>()[m] : 0;
          int64_t g = m / mg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t ky = 0; ky < s.kh; ++ky)
              for (int64_t kx = 0; kx < s.kw; ++kx) {
                int64_t iy = i * s.strides[0] - pt + ky * s.dilations[0];
                int64_t ix = j * s.strides[1] - pl + kx * s.dilations[1];
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                acc += double(at(x, {n, g * cg + c, iy, ix})) * at(wt, {m, c, ky, kx});
              }
          y.data<float>()[((n * s.m + m) * oh + i) * ow + j] = static_cast<float>(acc);
        }
  return y;
}

TEST_F(Nn, ConvGroupsDepthwiseStridesDilationsPads) {
  std::vector<ConvSpec> specs = {
      {1, 3, 9, 11, 4, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {2, 8, 10, 7, 6, 3, 2, 2, {2, 1}, {1, 2}, {0, 1, 2, 0}},
      {1, 16, 12, 12, 16, 3, 3, 16, {1, 1}, {1, 1}, {1, 1, 1, 1}},   // depthwise
      {1, 16, 13, 13, 16, 5, 5, 16, {2, 2}, {1, 1}, {2, 2, 2, 2}},   // depthwise strided
      {1, 8, 9, 9, 16, 3, 3, 8, {1, 1}, {2, 2}, {2, 2, 2, 2}},       // depthwise multiplier 2, dilated
      // Depthwise outputs narrower than 16 that the direct path does not
      // take (or all of them without AVX-512) run 16 channels per vector;
      // a batch of 2 with 20 channels ends each image on a partial group.
      {2, 20, 9, 9, 20, 3, 3, 20, {1, 1}, {2, 2}, {2, 1, 0, 2}},     // dilated, asymmetric
      {2, 20, 20, 20, 20, 3, 3, 20, {3, 3}, {1, 1}, {1, 1, 1, 1}},   // stride 3: by channels everywhere
      {1, 8, 20, 21, 8, 3, 3, 8, {1, 1}, {1, 1}, {1, 1, 1, 1}},      // depthwise by rows (21 wide)
      {1, 8, 33, 34, 8, 3, 3, 8, {2, 2}, {1, 1}, {1, 1, 1, 1}},      // depthwise by rows, stride 2 (17 wide)
      {1, 4, 400, 12, 4, 3, 3, 4, {1, 1}, {1, 1}, {1, 1, 1, 1}},     // narrow but too tall for by-channels
      // Wide rows read straight from the input with masked loads (stride 1
      // with any dilation, stride 2 undilated): tiles of rows x 16-column
      // blocks, with partial blocks, leftover rows and leftover blocks.
      {1, 6, 11, 70, 6, 3, 3, 6, {1, 1}, {1, 1}, {1, 1, 1, 1}},      // 5 blocks, 11 rows
      {2, 5, 15, 45, 5, 5, 5, 5, {2, 2}, {1, 1}, {2, 1, 2, 3}},      // 5x5 stride 2, asymmetric pads
      {1, 4, 10, 36, 4, 4, 4, 4, {2, 2}, {1, 1}, {1, 1, 2, 2}},      // even kernel width, stride 2
      {1, 3, 10, 40, 3, 3, 3, 3, {1, 1}, {2, 3}, {2, 3, 2, 3}},      // dilated (2, 3)
      // Square 3x3 and 5x5 windows at stride 1 run input rows outermost:
      // tiles of 4 blocks x 3 rows, 3 x 4 and 2 x 6, leftover rows, a
      // partial last block, asymmetric and zero pads (oh != ih).
      {1, 3, 9, 50, 3, 5, 5, 3, {1, 1}, {1, 1}, {2, 1, 2, 3}},       // 5x5, 4 blocks, 9 rows
      {2, 2, 17, 40, 2, 5, 5, 2, {1, 1}, {1, 1}, {2, 2, 2, 2}},      // 5x5, 3 blocks, 17 rows
      {1, 4, 13, 33, 4, 3, 3, 4, {1, 1}, {1, 1}, {0, 0, 0, 0}},      // 3x3 unpadded: 31 wide, 11 rows
      {1, 2, 30, 80, 2, 3, 3, 2, {1, 1}, {1, 1}, {1, 0, 1, 2}},      // 5 blocks (4 + 1), 30 rows
      // 3x3 and 5x5 at stride 1 or 2 with AVX2: strips of 8 output
      // columns down the rows, the last strip partial (stored whole but
      // on the rTask's last row), masked loads at the row's ends, pads 0
      // to 2, asymmetric, one strip only, row tiles (3 to 8 rows) with
      // leftovers.
      {1, 8, 16, 19, 8, 3, 3, 8, {1, 1}, {1, 1}, {1, 1, 1, 1}},      // 19 wide: 8 + 8 + 3
      {2, 6, 23, 29, 6, 3, 3, 6, {2, 2}, {1, 1}, {1, 0, 1, 2}},      // stride 2, 15 wide: 8 + 7
      {1, 5, 12, 13, 5, 3, 3, 5, {2, 2}, {1, 1}, {0, 0, 0, 0}},      // stride 2, unpadded: one strip of 6
      {1, 4, 9, 8, 4, 3, 3, 4, {1, 1}, {1, 1}, {2, 2, 0, 0}},        // pads of 2: one strip of 8
      {1, 3, 40, 50, 3, 3, 3, 3, {2, 2}, {1, 1}, {1, 1, 1, 1}},      // stride 2, 25 wide: 3 + 1 lane
      {1, 6, 7, 7, 6, 3, 3, 6, {1, 1}, {1, 1}, {1, 1, 1, 1}},        // 7x7: flat (less than one strip)
      {1, 4, 9, 5, 4, 3, 3, 4, {2, 2}, {1, 1}, {1, 1, 1, 1}},        // rows of 3: a store spans 3 rows
      {2, 3, 6, 2, 3, 3, 3, 3, {2, 2}, {1, 1}, {1, 1, 1, 1}},        // rows of 1
      {1, 4, 14, 14, 4, 5, 5, 4, {1, 1}, {1, 1}, {2, 2, 2, 2}},      // 5x5 on 14x14: 8 + 6, tiles of 8 rows
      {2, 3, 27, 35, 3, 5, 5, 3, {2, 2}, {1, 1}, {2, 2, 2, 1}},      // 5x5 stride 2, 17 wide: 8 + 8 + 1
      // Narrow planes at stride 1, output as wide as the input: flat runs
      // of 16 pixels across rows.
      {2, 5, 9, 10, 5, 3, 3, 5, {1, 1}, {1, 2}, {0, 1, 2, 3}},       // dilated, asymmetric, oh != ih
      {1, 7, 7, 7, 7, 5, 5, 7, {1, 1}, {1, 1}, {2, 2, 2, 2}},        // 7x7, 5x5 kernel
      {1, 3, 14, 14, 3, 3, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}},      // 14x14: 13 blocks (8 + 5)
      {1, 4, 12, 50, 4, 3, 3, 4, {3, 3}, {1, 1}, {1, 1, 1, 1}},      // stride 3: padded-copy path
      {1, 4, 12, 50, 4, 3, 3, 4, {2, 2}, {2, 2}, {2, 2, 2, 2}},      // stride 2 dilated: padded-copy path
      // Stride 1 with the output as wide as the input: im2col by masked
      // 16-pixel blocks across rows (grouped, dilated, asymmetric pads).
      {2, 8, 9, 10, 6, 3, 3, 2, {1, 1}, {1, 2}, {0, 1, 2, 3}},
      {1, 12, 7, 7, 12, 3, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      // Column stride 2: im2col by 32 loaded inputs split to even lanes
      // (rows of 21 and 19 outputs: a full and a partial block).
      {1, 3, 8, 40, 4, 3, 3, 1, {2, 2}, {1, 2}, {1, 2, 1, 3}},
      {1, 3, 20, 37, 4, 7, 7, 1, {2, 2}, {1, 1}, {3, 3, 3, 3}},
      {1, 32, 7, 7, 48, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},      // pointwise
      {2, 16, 4, 5, 40, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},      // pointwise, more channels than pixels
      {1, 6, 8, 8, 4, 1, 1, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}},        // strided 1x1
      {1, 5, 10, 9, 7, 3, 3, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}, "SAME_UPPER"},
      {1, 5, 10, 9, 7, 4, 4, 1, {3, 2}, {1, 1}, {0, 0, 0, 0}, "SAME_LOWER"},
      {1, 5, 10, 9, 7, 3, 3, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, "VALID"},
      {1, 64, 14, 14, 64, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {1, 64, 13, 13, 32, 3, 3, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}},    // 49 pixels: one chunk of 48, then 1
      {1, 300, 7, 7, 40, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},     // pointwise, K > 256 (sgemm): 48 + 1 pixels
      // Winograd F(2x2, 3x3): odd output height and width (half tiles),
      // tile rows of 18 (a full and a partial vector), 12 output channels
      // (a partial block of 8), batch 2; asymmetric, zero and double pads;
      // weights over 1 MB (rTasks split by output channels).
      {2, 8, 9, 35, 12, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {1, 8, 10, 20, 8, 3, 3, 1, {1, 1}, {1, 1}, {0, 2, 1, 0}},
      {1, 16, 12, 13, 16, 3, 3, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      {1, 8, 5, 40, 9, 3, 3, 1, {1, 1}, {1, 1}, {2, 2, 2, 2}},
      {1, 136, 6, 6, 128, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      // grouped: 16 channels in and 12 out per group; 16 per group on 7x7
      {1, 32, 9, 21, 24, 3, 3, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {2, 48, 7, 7, 48, 3, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      // Grouped, whole vectors of output channels per group (the grouped
      // direct path): stride 2, batch 2; 32 out per group (two channel
      // blocks with AVX2) with asymmetric pads; 8 out per group, dilated,
      // column stride 2; a 5x5 window with 24 channels per group.
      {2, 32, 15, 15, 32, 3, 3, 2, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {1, 16, 10, 11, 64, 3, 3, 2, {1, 1}, {1, 1}, {0, 1, 2, 1}},
      {1, 8, 9, 9, 16, 3, 3, 2, {1, 2}, {2, 1}, {2, 1, 1, 2}},
      {1, 48, 12, 12, 48, 5, 5, 2, {1, 1}, {1, 1}, {2, 2, 2, 2}},
      // Few input channels (the direct path of CNN stems, with AVX-512):
      // 7x7 stride 2 with asymmetric pads, 12 outputs (a partial block of
      // 8) and batch 2 (4 column blocks: 2 + 2); 3x3 stride 2 with 115
      // outputs a row (3 + 3 + 2 blocks, the last partial); stride 1 with
      // one input channel; an even kernel at stride 2 with 4 channels;
      // row stride 1 with column stride 2; stride 3 (not direct).
      {2, 3, 23, 100, 12, 7, 7, 1, {2, 2}, {1, 1}, {3, 3, 2, 1}},
      {1, 3, 9, 230, 16, 3, 3, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {1, 1, 12, 37, 8, 5, 5, 1, {1, 1}, {1, 1}, {2, 2, 2, 2}},
      {1, 4, 9, 20, 9, 4, 4, 1, {2, 2}, {1, 1}, {1, 2, 1, 2}},
      {1, 3, 10, 33, 8, 3, 3, 1, {1, 2}, {1, 1}, {0, 1, 0, 0}},
      {1, 3, 10, 33, 8, 3, 3, 1, {3, 3}, {1, 1}, {1, 1, 1, 1}},
  };
  for (const auto& s : specs) {
    SCOPED_TRACE(::testing::Message() << "c=" << s.c << " m=" << s.m << " k=" << s.kh << "x" << s.kw << " g=" << s.group
                                      << " auto_pad=" << s.auto_pad);
    Tensor x = rng.floats(Shape{s.n, s.c, s.h, s.w});
    Tensor w = rng.floats(Shape{s.m, s.c / s.group, s.kh, s.kw});
    Tensor b = rng.floats(Shape{s.m});
    int64_t pt = s.pads[0], pl = s.pads[1], pb = s.pads[2], pr = s.pads[3], oh, ow;
    int64_t ekh = (s.kh - 1) * s.dilations[0] + 1, ekw = (s.kw - 1) * s.dilations[1] + 1;
    if (s.auto_pad == "SAME_UPPER" || s.auto_pad == "SAME_LOWER") {
      oh = (s.h + s.strides[0] - 1) / s.strides[0];
      ow = (s.w + s.strides[1] - 1) / s.strides[1];
      int64_t th = std::max<int64_t>(0, (oh - 1) * s.strides[0] + ekh - s.h);
      int64_t tw = std::max<int64_t>(0, (ow - 1) * s.strides[1] + ekw - s.w);
      pt = s.auto_pad == "SAME_UPPER" ? th / 2 : th - th / 2;
      pl = s.auto_pad == "SAME_UPPER" ? tw / 2 : tw - tw / 2;
    } else {
      if (s.auto_pad == "VALID") pt = pl = pb = pr = 0;
      oh = (s.h + pt + pb - ekh) / s.strides[0] + 1;
      ow = (s.w + pl + pr - ekw) / s.strides[1] + 1;
    }
    std::map<std::string, Attribute> attrs = {{"strides", attr_ints(s.strides)},
                                              {"dilations", attr_ints(s.dilations)},
                                              {"group", attr_i(s.group)}};
    if (s.auto_pad == "NOTSET") attrs["pads"] = attr_ints(s.pads);
    else attrs["auto_pad"] = attr_s(s.auto_pad);
    // The paths with their own sums (conv.cc): depthwise, Winograd (3x3,
    // stride 1, 8 or more channels per group) and, in AVX-512 or AVX2
    // builds, pointwise with K <= 256, direct (1 to 4 input channels) and
    // grouped direct (2 to 64 channels per group, whole vectors of output
    // channels); the others multiply with sgemm.
    const bool simd = std::string(kernel_isa()) != "portable";
    const int64_t lanes = std::string(kernel_isa()) == "avx512" ? 16 : 8;
    const int64_t cg = s.c / s.group, mg = s.m / s.group, taps = cg * s.kh * s.kw;
    const bool undilated = s.dilations[0] == 1 && s.dilations[1] == 1;
    const bool unit = s.strides[0] == 1 && s.strides[1] == 1;
    // Grouped convs run Winograd from 8 channels per group; with AVX2,
    // from 32 and 400 output pixels (winograd.cc).
    const bool avx2 = std::string(kernel_isa()) == "avx2";
    const bool winograd = s.kh == 3 && s.kw == 3 && unit && undilated && cg >= 8 && mg >= 8 &&
                          (s.group == 1 || !avx2 || (cg >= 32 && oh * ow >= 400));
    const bool exact = (cg == 1 && s.m == s.group) ||
                       (simd && s.kh == 1 && s.kw == 1 && unit && oh == s.h && ow == s.w && cg <= 256) || winograd ||
                       (simd && s.group > 1 && cg > 1 && cg <= 64 && mg % lanes == 0 && mg <= 64) ||
                       (simd && s.group == 1 && s.c <= 4 && taps <= 160 && undilated && s.m >= 8 &&
                        (s.strides[1] == 1 || s.strides[1] == 2));
    OpCase with_bias{"Conv", {{x}, {w, true}, {b, true}}, attrs}, no_bias{"Conv", {{x}, {w, true}}, attrs};
    with_bias.exact_tiling = no_bias.exact_tiling = exact;
    expect_matches(with_bias, {conv_ref(x, w, &b, s, oh, ow, pt, pl)}, 1e-5);
    expect_matches(no_bias, {conv_ref(x, w, nullptr, s, oh, ow, pt, pl)}, 1e-5);
  }
}

// DwStrip stores a row's partial last strip whole, its extra lanes on
// the next rows; it must never write outside the rTask's rows [r0, r1),
// which another rTask may own (rows narrower than a vector included: a
// store then spans several rows). Every split of a plane's rows gives the
// bits of the whole plane, and the floats around the split stay as they
// were.
TEST_F(Nn, DepthwiseStripsWriteOnlyTheirRows) {
#if defined(TESSERA_DW_STRIP)
  struct Geo {
    int64_t h, w, k, s;
  };
  for (const Geo& g : {Geo{9, 2, 3, 2}, Geo{9, 5, 3, 2}, Geo{7, 3, 3, 1}, Geo{12, 15, 3, 2}, Geo{10, 19, 3, 1},
                       Geo{11, 21, 5, 2}, Geo{9, 6, 5, 1}}) {
    SCOPED_TRACE(::testing::Message() << g.h << "x" << g.w << " k=" << g.k << " s=" << g.s);
    Conv2d c{};
    c.batch = c.cin = c.cout = c.group = 1;
    c.ih = g.h, c.iw = g.w, c.kh = c.kw = g.k, c.sh = c.sw = g.s, c.dh = c.dw = 1, c.ph = c.pw = g.k / 2;
    c.oh = (g.h + 2 * c.ph - g.k) / g.s + 1, c.ow = (g.w + 2 * c.pw - g.k) / g.s + 1;
    DwStrip strip;
    ASSERT_TRUE(strip.init(c));
    Tensor x = rng.floats(Shape{g.h, g.w}), w = rng.floats(Shape{g.k, g.k});
    std::vector<float> scratch(static_cast<size_t>(strip.scratch_floats()));
    const int64_t plane = c.oh * c.ow, guard = 16;
    std::vector<float> whole(static_cast<size_t>(plane));
    strip.rows(x.data<float>(), w.data<float>(), 0.5f, scratch.data(), whole.data(), 0, c.oh);
    const float sentinel = -12345.f;
    for (int64_t r0 = 0; r0 < c.oh; ++r0)
      for (int64_t r1 = r0 + 1; r1 <= c.oh; ++r1) {
        std::vector<float> y(static_cast<size_t>(plane + 2 * guard), sentinel);
        strip.rows(x.data<float>(), w.data<float>(), 0.5f, scratch.data(), y.data() + guard, r0, r1);
        for (int64_t i = 0; i < plane + 2 * guard; ++i) {
          const int64_t p = i - guard;
          const bool mine = p >= r0 * c.ow && p < r1 * c.ow;
          const float want = mine ? whole[static_cast<size_t>(p)] : sentinel;
          ASSERT_EQ(std::memcmp(&y[static_cast<size_t>(i)], &want, sizeof want), 0)
              << "rows [" << r0 << ", " << r1 << "), float " << p << " of the plane";
        }
      }
  }
#else
  GTEST_SKIP() << "DwStrip is the AVX2 build's depthwise kernel; this build is " << kernel_isa();
#endif
}

// A grouped 3x3 conv cut into a given number of rTasks splits its groups,
// as its default tiling does: each rTask writes whole output channels and
// reads only its groups' weights. (Cut by rows instead, every rTask would
// transform every group's weights: regnet's grouped convs ran 30 % slower
// with Winograd.) With AVX-512 this conv runs Winograd, with AVX2 the
// grouped direct kernel.
TEST_F(Nn, GroupedConvCutIntoRTasksSplitsGroups) {
  Graph g;
  const int64_t c = 48, groups = 3, h = 7, w = 7;
  Value* x = g.add_input("x", DType::kFloat32, Shape{1, c, h, w});
  Value* wt = g.add_constant("w", rng.floats(Shape{c, c / groups, 3, 3}));
  Node* n = g.add_node("Conv", "conv", {x, wt}, 1);
  n->attrs["group"] = attr_i(groups);
  n->attrs["pads"] = attr_ints({1, 1, 1, 1});
  n->outputs[0]->dtype = DType::kFloat32;
  n->outputs[0]->shape = Shape{1, c, h, w};
  const RKernel* k = cpu_kernel_find("Conv");
  ASSERT_NE(k, nullptr);
  Tensor in = rng.floats(Shape{1, c, h, w});
  for (int64_t tasks : {2, 3}) {
    auto op = k->make(*n, KernelParams{tasks});
    ASSERT_TRUE(op.ok()) << op.status().to_string();
    ASSERT_EQ((*op)->tasks(), tasks);
    std::vector<float> out(static_cast<size_t>(c * h * w), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> scratch((*op)->scratch_bytes() / sizeof(float) + 1);
    const void* ins[] = {in.raw(), wt->constant->raw()};
    void* outs[] = {out.data()};
    (*op)->run(0, TaskArgs{ins, outs, scratch.data()});
    int64_t whole = 0;
    for (int64_t ch = 0; ch < c; ++ch) {
      int64_t written = 0;
      for (int64_t i = 0; i < h * w; ++i) written += !std::isnan(out[static_cast<size_t>(ch * h * w + i)]);
      ASSERT_TRUE(written == 0 || written == h * w) << tasks << " rTasks: channel " << ch << " is partly written";
      whole += written == h * w;
    }
    EXPECT_GT(whole, 0) << tasks << " rTasks";
    EXPECT_LT(whole, c) << tasks << " rTasks";
    EXPECT_EQ(whole % (c / groups), 0) << tasks << " rTasks: rTask 0 wrote part of a group";
  }
}

TEST_F(Nn, Conv1d) {
  ConvSpec s{2, 4, 1, 17, 6, 1, 3, 2, {1, 2}, {1, 1}, {0, 1, 0, 1}};
  Tensor x = rng.floats(Shape{2, 4, 17}), w = rng.floats(Shape{6, 2, 3});
  Tensor ref = conv_ref(x.reshaped(Shape{2, 4, 1, 17}), w.reshaped(Shape{6, 2, 1, 3}), nullptr, s, 1, 9, 0, 1);
  expect_matches({"Conv", {{x}, {w, true}}, {{"strides", attr_ints({2})}, {"pads", attr_ints({1, 1})}, {"group", attr_i(2)}}},
                 {ref.reshaped(Shape{2, 6, 9})});
}

TEST_F(Nn, ConvTranspose) {
  struct Case { int64_t c, m, group, h, w, kh, kw, sh, sw, ph, pw, oph, opw; };
  for (const Case& k : {Case{4, 6, 1, 5, 6, 3, 3, 2, 2, 1, 1, 1, 0}, Case{6, 4, 2, 4, 4, 4, 4, 2, 2, 1, 1, 0, 0},
                        Case{3, 5, 1, 3, 7, 2, 3, 1, 3, 0, 1, 0, 2}}) {
    Tensor x = rng.floats(Shape{2, k.c, k.h, k.w});
    Tensor w = rng.floats(Shape{k.c, k.m / k.group, k.kh, k.kw});
    Tensor b = rng.floats(Shape{k.m});
    int64_t oh = (k.h - 1) * k.sh + k.kh - 2 * k.ph + k.oph, ow = (k.w - 1) * k.sw + k.kw - 2 * k.pw + k.opw;
    Tensor y(DType::kFloat32, Shape{2, k.m, oh, ow});
    int64_t cg = k.c / k.group, mg = k.m / k.group;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t m = 0; m < k.m; ++m)
        for (int64_t i = 0; i < oh * ow; ++i) y.data<float>()[(n * k.m + m) * oh * ow + i] = b.data<float>()[m];
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < k.c; ++c)
        for (int64_t iy = 0; iy < k.h; ++iy)
          for (int64_t ix = 0; ix < k.w; ++ix)
            for (int64_t mo = 0; mo < mg; ++mo)
              for (int64_t ky = 0; ky < k.kh; ++ky)
                for (int64_t kx = 0; kx < k.kw; ++kx) {
                  int64_t oy = iy * k.sh - k.ph + ky, ox = ix * k.sw - k.pw + kx;
                  if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                  int64_t m = (c / cg) * mg + mo;
                  y.data<float>()[((n * k.m + m) * oh + oy) * ow + ox] += at(x, {n, c, iy, ix}) * at(w, {c, mo, ky, kx});
                }
    OpCase op{"ConvTranspose", {{x}, {w, true}, {b, true}},
              {{"strides", attr_ints({k.sh, k.sw})}, {"pads", attr_ints({k.ph, k.pw, k.ph, k.pw})},
               {"output_padding", attr_ints({k.oph, k.opw})}, {"group", attr_i(k.group)}}};
    op.exact_tiling = false;  // W^T times the input by sgemm, per block of output channels
    expect_matches(op, {y});
  }
}

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
                        Case{8, 23, 2, 3, 1, 1, 0, 2, 0, 2, 0, 0, 1, 2}}) {
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

// layer_norm_rows and softmax_rows take rows 4 at a time (with AVX-512):
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

}  // namespace
}  // namespace tessera::testing
