// Conformance of MatMul, Gemm and Einsum, and of the GEMM routines under
// them, against naive references.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/packed_gemm.h"
#include "tests/conformance/harness.h"

namespace tessera::testing {
namespace {

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
// chain over k (so any tile of C gives the same bits), else sgemm;
// products of 1 to 16 rows (whole, then in tiles that reach the 8-, 6-,
// 4-, 2- and 1-row blocks; AVX2 takes 8 rows at a time for a block one
// vector wide and 6 for two), widths around the vectors (8 or 16 columns)
// and the column blocks (24 or 48), k = 0, short and long (sgemm), leading
// dims wider than the matrices, nothing written past a row's n columns.
TEST_F(Nn, MatmulGemmIsTheInOrderFmaChain) {
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{64}, int64_t{129}, kRowsGemmMaxK, kRowsGemmMaxK + 1}) {
    for (int64_t m : {1, 3, 5, 6, 8, 9, 10, 11, 12, 13, 16}) {
      for (int64_t n : {1, 8, 15, 16, 17, 40, 47, 48, 49, 100}) {
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

// The packed GEMM with its epilogue (the 1 x 1 convs' bias, residual and
// Relu or Clip, applied in registers) in each of its 12 cases: every
// output is the in-order FMA chain from 0, then + bias, + residual and the
// clamp as the unfused ops do them, bit for bit. Rows and columns around
// the register tiles (4 x 24 with AVX2, 8 x 48 with AVX-512, and the
// columns past a block that AVX-512 takes along), NaNs through both
// clamps (Relu makes them 0, Clip keeps them), and nothing written past
// a row's n columns.
TEST_F(Nn, PackedGemmPostMatchesTheUnfusedOps) {
  using Clamp = GemmPost::Clamp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t m : {3, 4, 9, 16}) {
    for (int64_t n : {7, 24, 49, 53, 100}) {
      const int64_t k = 37, ldb = n + 5, ldc = n + 3, ldr = n + 1;
      Tensor a = rng.floats(Shape{m * k}), b = rng.floats(Shape{k * ldb});
      Tensor bias = rng.floats(Shape{m}), res = rng.floats(Shape{m * ldr});
      float* pb = b.data<float>();
      pb[2] = nan;  // column 2 of C: NaN in every row before the epilogue
      std::vector<float> packed(packed_size(m, k));
      pack_rows(a.data<float>(), m, k, k, packed.data());
      for (Clamp clamp : {Clamp::kNone, Clamp::kRelu, Clamp::kClip}) {
        for (int with = 0; with < 4; ++with) {
          GemmPost post;
          if (with & 1) post.bias = bias.data<float>();
          if (with & 2) post.res = res.data<float>(), post.ldr = ldr;
          post.clamp = clamp;
          post.lo = -0.25f, post.hi = 0.5f;
          std::vector<float> got(static_cast<size_t>(m * ldc), 7.f);
          packed_gemm_post(packed.data(), m, k, pb, ldb, n, got.data(), ldc, post);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              SCOPED_TRACE(str_cat("m ", m, " n ", n, " clamp ", static_cast<int>(clamp), " bias ", with & 1,
                                   " residual ", with >> 1, " (", i, ", ", j, ")"));
              const float out = got[static_cast<size_t>(i * ldc + j)];
              if (j >= n) {
                ASSERT_EQ(out, 7.f);
                continue;
              }
              float v = 0;
              for (int64_t p = 0; p < k; ++p) v = std::fma(a.data<float>()[i * k + p], pb[p * ldb + j], v);
              if (post.bias != nullptr) v = v + post.bias[i];
              if (post.res != nullptr) v = v + post.res[i * ldr + j];
              if (clamp == Clamp::kRelu) v = v > 0.f ? v : 0.f;
              if (clamp == Clamp::kClip) v = v < post.lo ? post.lo : (v > post.hi ? post.hi : v);
              if (std::isnan(v)) ASSERT_TRUE(std::isnan(out));
              else ASSERT_EQ(out, v);
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

// A MatMul whose B is a constant packs it into column panels once
// (gemm_rows_packed); the outputs must be the bits of the same MatMul
// with B as an input, read in place, in every tiling: 1 rTask, row and
// column splits whose tiles start inside a panel, and the default. Widths
// around a panel (24 columns with AVX2, 48 with AVX-512), reductions up
// to the row kernel's longest, a batched A over a 2-D B, and a B read by
// sgemm (k past the row kernel's), which is left as it is.
TEST_F(Nn, MatMulConstantBPackedGivesTheSameBits) {
  struct Case { Shape a; int64_t k, n; };
  for (const Case& cs : {Case{Shape{64, 128}, 128, 512}, Case{Shape{64, 512}, 512, 128}, Case{Shape{9, 70}, 70, 49},
                         Case{Shape{3, 16, 33}, 33, 100}, Case{Shape{8, 7}, 7, 1}, Case{Shape{16, 600}, 600, 40}}) {
    const KernelParams tilings[] = {KernelParams{1}, KernelParams{3}, KernelParams{7}, KernelParams{16}, KernelParams{}};
    for (const KernelParams& kp : tilings) {
      SCOPED_TRACE(str_cat(cs.a.to_string(), " by ", cs.k, " x ", cs.n, ", tasks ", kp.tasks));
      Graph g;
      Value* a = g.add_input("a", DType::kFloat32, cs.a);
      Tensor bt = rng.floats(Shape{cs.k, cs.n});
      Value* bc = g.add_constant("b", bt);
      Value* bi = g.add_input("bi", DType::kFloat32, Shape{cs.k, cs.n});
      Shape out = cs.a;
      out.dims.back() = cs.n;
      Node* packed = g.add_node("MatMul", "packed", {a, bc}, 1);
      Node* plain = g.add_node("MatMul", "plain", {a, bi}, 1);
      for (Node* n : {packed, plain}) {
        n->outputs[0]->dtype = DType::kFloat32;
        n->outputs[0]->shape = out;
      }
      const RKernel* kern = cpu_kernel_find("MatMul");
      ASSERT_NE(kern, nullptr);
      auto op_packed = kern->make(*packed, kp);
      auto op_plain = kern->make(*plain, kp);
      ASSERT_TRUE(op_packed.ok()) << op_packed.status().to_string();
      ASSERT_TRUE(op_plain.ok()) << op_plain.status().to_string();
      ASSERT_EQ((*op_packed)->tasks(), (*op_plain)->tasks());
      const bool rows = matmul_uses_rows(cs.k, cs.a.dims[cs.a.rank() - 2], cs.n);
      EXPECT_EQ((*op_packed)->path(), rows ? "gemm_rows, B packed" : "sgemm");
      Tensor in = rng.floats(cs.a);
      std::vector<float> got(static_cast<size_t>(out.numel()), 7.f), want(got);
      for (int64_t t = 0; t < (*op_packed)->tasks(); ++t) {
        std::vector<float> scratch((*op_packed)->scratch_bytes() / sizeof(float) + 1);
        const void* ins_packed[] = {in.raw(), bc->constant->raw()};
        const void* ins_plain[] = {in.raw(), bt.raw()};
        void* outs_packed[] = {got.data()};
        void* outs_plain[] = {want.data()};
        (*op_packed)->run(t, TaskArgs{ins_packed, outs_packed, scratch.data()});
        (*op_plain)->run(t, TaskArgs{ins_plain, outs_plain, scratch.data()});
      }
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
      // And against the double-precision product.
      Tensor ref = matmul_ref(in, bt);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref.data<float>()[i], 1e-4) << "element " << i;
    }
  }
}

// transpose, the attention's K^T copy: register blocks (16 x 16 with
// AVX-512, 8 x 8 with AVX2) and the scalar edges, with row strides wider
// than the matrices.
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

}  // namespace
}  // namespace tessera::testing
