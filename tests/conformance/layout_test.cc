// Conformance of layout and data-movement ops against naive references.
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernel.h"
#include "tests/conformance/harness.h"

namespace tessera::testing {
namespace {

class Layout : public ::testing::Test {
 protected:
  Rng rng{static_cast<uint64_t>(::testing::UnitTest::GetInstance()->random_seed()) * 31 + 3};
};

Tensor i64(std::vector<int64_t> v) { return Tensor::from_int64s(v, Shape{static_cast<int64_t>(v.size())}); }

TEST_F(Layout, ReshapesAreCopies) {
  Tensor x = rng.floats(Shape{2, 3, 4});
  expect_matches({"Reshape", {{x}, {i64({4, -1}), true}}}, {x.reshaped(Shape{4, 6})});
  expect_matches({"Reshape", {{x}, {i64({0, 12}), true}}}, {x.reshaped(Shape{2, 12})});
  expect_matches({"Flatten", {{x}}, {{"axis", attr_i(2)}}}, {x.reshaped(Shape{6, 4})});
  expect_matches({"Flatten", {{x}}, {{"axis", attr_i(0)}}}, {x.reshaped(Shape{1, 24})});
  Tensor y = rng.floats(Shape{1, 3, 1, 4});
  expect_matches({"Squeeze", {{y}}}, {y.reshaped(Shape{3, 4})});
  expect_matches({"Squeeze", {{y}, {i64({-2}), true}}}, {y.reshaped(Shape{1, 3, 4})});
  expect_matches({"Unsqueeze", {{x}, {i64({0, -1}), true}}}, {x.reshaped(Shape{1, 2, 3, 4, 1})});
  Tensor s = rng.ints(Shape{5}, 0, 9);
  expect_matches({"Unsqueeze", {{s}, {i64({1}), true}}}, {s.reshaped(Shape{5, 1})});
}

Tensor transpose_ref(const Tensor& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> od;
  for (int64_t p : perm) od.push_back(x.shape()[static_cast<int>(p)]);
  Tensor y(x.dtype(), Shape(od));
  size_t es = dtype_size(x.dtype());
  for (int64_t i = 0; i < y.numel(); ++i) {
    auto oi = unravel(i, y.shape());
    std::vector<int64_t> ii(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) ii[perm[d]] = oi[d];
    int64_t off = 0;
    for (int d = 0; d < x.rank(); ++d) off = off * x.shape()[d] + ii[d];
    std::memcpy(static_cast<char*>(y.raw()) + i * es, static_cast<const char*>(x.raw()) + off * es, es);
  }
  return y;
}

TEST_F(Layout, TransposeAnyPermutation) {
  Tensor x = rng.floats(Shape{2, 3, 4, 5});
  for (auto perm : std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {3, 2, 1, 0}, {0, 2, 1, 3}, {1, 0, 3, 2}, {0, 3, 1, 2}})
    expect_matches({"Transpose", {{x}}, {{"perm", attr_ints(perm)}}}, {transpose_ref(x, perm)});
  expect_matches({"Transpose", {{x}}}, {transpose_ref(x, {3, 2, 1, 0})});
  Tensor b = rng.bools(Shape{7, 9});
  expect_matches({"Transpose", {{b}}}, {transpose_ref(b, {1, 0})});
  Tensor big = rng.floats(Shape{64, 129});
  expect_matches({"Transpose", {{big}}}, {transpose_ref(big, {1, 0})});
}

// TesseraConcat copies only the parts not marked in place and leaves the
// bytes of the others alone (their producers wrote them there), however
// its copy is cut into rTasks.
TEST_F(Layout, InPlaceConcatCopiesOnlyTheOtherParts) {
  Graph g;
  std::vector<Tensor> parts = {rng.floats(Shape{1, 5, 3}), rng.floats(Shape{1, 4, 3}), rng.floats(Shape{1, 0, 3}),
                               rng.floats(Shape{1, 7, 3})};
  const std::vector<int64_t> in_place = {0, 1, 0, 0};
  std::vector<Value*> ins;
  for (size_t i = 0; i < parts.size(); ++i)
    ins.push_back(g.add_input("x" + std::to_string(i), DType::kFloat32, parts[i].shape()));
  Node* n = g.add_node("TesseraConcat", "cat", ins, 1);
  n->attrs["axis"] = attr_i(1);
  n->attrs["in_place"] = attr_ints(in_place);
  n->outputs[0]->dtype = DType::kFloat32;
  n->outputs[0]->shape = Shape{1, 16, 3};
  const RKernel* k = cpu_kernel_find("TesseraConcat");
  ASSERT_NE(k, nullptr);
  for (int64_t tasks : {0, 1, 2, 3, 5, 64}) {
    auto op = k->make(*n, KernelParams{tasks});
    ASSERT_TRUE(op.ok()) << op.status().to_string();
    std::vector<float> out(48, 7.0f);
    std::vector<const void*> in;
    for (const Tensor& t : parts) in.push_back(t.raw());
    void* outs[] = {out.data()};
    TaskArgs args{in.data(), outs, nullptr};
    for (int64_t t = 0; t < (*op)->tasks(); ++t) (*op)->run(t, args);
    size_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i)
      for (int64_t e = 0; e < parts[i].numel(); ++e, ++at)
        ASSERT_EQ(out[at], in_place[i] ? 7.0f : parts[i].data<float>()[e])
            << "tasks " << tasks << ", part " << i << ", element " << e;
  }
  // In-place parts need one outer row: a batch of 2 is refused.
  n->outputs[0]->shape = Shape{2, 16, 3};
  for (Value* v : ins) v->shape.dims[0] = 2;
  EXPECT_FALSE(k->make(*n, KernelParams{0}).ok());
}

TEST_F(Layout, ConcatAndSplit) {
  Tensor a = rng.floats(Shape{2, 3, 4}), b = rng.floats(Shape{2, 1, 4}), c = rng.floats(Shape{2, 0, 4});
  Tensor cat(DType::kFloat32, Shape{2, 4, 4});
  for (int64_t n = 0; n < 2; ++n) {
    std::memcpy(cat.data<float>() + n * 16, a.data<float>() + n * 12, 48);
    std::memcpy(cat.data<float>() + n * 16 + 12, b.data<float>() + n * 4, 16);
  }
  expect_matches({"Concat", {{a}, {c}, {b}}, {{"axis", attr_i(1)}}}, {cat});
  expect_matches({"Concat", {{a}, {b, true}}, {{"axis", attr_i(-2)}}}, {cat});
  OpCase split{"Split", {{cat}, {i64({3, 1}), true}}, {{"axis", attr_i(1)}}, 2};
  expect_matches(split, {a, b});
  Tensor e = rng.floats(Shape{7, 2});
  OpCase even{"Split", {{e}}, {}, 3};  // 3, 3, 1
  Tensor p0(DType::kFloat32, Shape{3, 2}), p1(DType::kFloat32, Shape{3, 2}), p2(DType::kFloat32, Shape{1, 2});
  std::memcpy(p0.raw(), e.data<float>(), 24);
  std::memcpy(p1.raw(), e.data<float>() + 6, 24);
  std::memcpy(p2.raw(), e.data<float>() + 12, 8);
  expect_matches(even, {p0, p1, p2});
  OpCase attr{"Split", {{e}}, {{"split", attr_ints({2, 5})}}, 2};
  attr.opset = 11;
  Tensor q0(DType::kFloat32, Shape{2, 2}), q1(DType::kFloat32, Shape{5, 2});
  std::memcpy(q0.raw(), e.data<float>(), 16);
  std::memcpy(q1.raw(), e.data<float>() + 4, 40);
  expect_matches(attr, {q0, q1});
}

TEST_F(Layout, SliceStepsNegativeAndClamped) {
  Tensor x = rng.floats(Shape{6, 7, 5});
  struct Case { std::vector<int64_t> starts, ends, axes, steps; };
  for (const Case& c : {Case{{1}, {4}, {0}, {1}}, Case{{-1, 0}, {-100, 7}, {1, 2}, {-2, 3}},
                        Case{{0, 2}, {INT64_MAX, 3}, {0, 1}, {2, 1}}, Case{{5}, {2}, {0}, {1}},
                        Case{{3, 4}, {-1, 1}, {-1, 1}, {1, -1}}}) {
    // Reference by direct index arithmetic.
    std::vector<int64_t> start(3, 0), step(3, 1), len = x.shape();
    for (size_t i = 0; i < c.starts.size(); ++i) {
      int64_t ax = c.axes[i] < 0 ? c.axes[i] + 3 : c.axes[i], dim = x.shape()[static_cast<int>(ax)];
      int64_t s = c.starts[i], e = c.ends[i], st = c.steps[i];
      if (s < 0) s += dim;
      if (e < 0) e += dim;
      if (st > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
        len[ax] = e > s ? (e - s + st - 1) / st : 0;
      } else {
        s = std::clamp<int64_t>(s, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
        len[ax] = s > e ? (s - e - st - 1) / -st : 0;
      }
      start[ax] = s;
      step[ax] = st;
    }
    Tensor y(DType::kFloat32, Shape(len));
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto idx = unravel(i, y.shape());
      int64_t off = 0;
      for (int d = 0; d < 3; ++d) off = off * x.shape()[d] + start[d] + idx[d] * step[d];
      y.data<float>()[i] = x.data<float>()[off];
    }
    expect_matches({"Slice", {{x}, {i64(c.starts), true}, {i64(c.ends), true}, {i64(c.axes), true}, {i64(c.steps), true}}},
                   {y});
  }
}

TEST_F(Layout, GatherAnyAxisNegativeIndices) {
  Tensor x = rng.floats(Shape{4, 5, 3});
  Tensor idx = Tensor::from_int64s({0, -1, 2, 2, 1, -4}, Shape{2, 3});
  for (int axis : {0, 1, -1}) {
    int ax = axis < 0 ? axis + 3 : axis;
    if (ax == 2) continue;  // -4 is out of range for an axis of 3 (constant indices are checked at bind time)
    std::vector<int64_t> od;
    for (int d = 0; d < ax; ++d) od.push_back(x.shape()[d]);
    od.push_back(2);
    od.push_back(3);
    for (int d = ax + 1; d < 3; ++d) od.push_back(x.shape()[d]);
    Tensor y(DType::kFloat32, Shape(od));
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto oi = unravel(i, y.shape());
      std::vector<int64_t> xi;
      for (int d = 0; d < ax; ++d) xi.push_back(oi[d]);
      int64_t j = idx.data<int64_t>()[oi[ax] * 3 + oi[ax + 1]];
      xi.push_back(j < 0 ? j + x.shape()[ax] : j);
      for (int d = ax + 1; d < 3; ++d) xi.push_back(oi[d + 1]);
      y.data<float>()[i] = x.data<float>()[(xi[0] * 5 + xi[1]) * 3 + xi[2]];
    }
    expect_matches({"Gather", {{x}, {idx}}, {{"axis", attr_i(axis)}}}, {y});
  }
  // Scalar index drops the axis (embedding row).
  Tensor row = Tensor::from_int64s({3}, Shape{});
  Tensor y(DType::kFloat32, Shape{5, 3});
  std::memcpy(y.raw(), x.data<float>() + 45, 60);
  expect_matches({"Gather", {{x}, {row, true}}}, {y});
}

TEST_F(Layout, ScatterNdSlicesAndElements) {
  Tensor data = rng.floats(Shape{4, 3, 2});
  Tensor idx = Tensor::from_int64s({2, -1, 2}, Shape{3, 1});  // row 2 twice: the last update wins
  Tensor upd = rng.floats(Shape{3, 3, 2});
  Tensor ref = data.clone();
  std::memcpy(ref.data<float>() + 3 * 6, upd.data<float>() + 6, 24);
  std::memcpy(ref.data<float>() + 2 * 6, upd.data<float>() + 12, 24);
  expect_matches({"ScatterND", {{data}, {idx, true}, {upd}}}, {ref});
  Tensor idx2 = Tensor::from_int64s({0, 1, 1, 2, 3, 0}, Shape{2, 3});
  Tensor upd2 = rng.floats(Shape{2});
  Tensor data2 = rng.floats(Shape{2, 3, 4});
  Tensor ref2 = data2.clone();
  ref2.data<float>()[0 * 12 + 1 * 4 + 1] = upd2.data<float>()[0];
  ref2.data<float>()[1 * 12 + 2 * 4 + 3] = upd2.data<float>()[1];
  // idx2 rows are (0,1,1) and (2,3,0): the second is out of range for dim 0 of extent 2.
  Tensor idx3 = Tensor::from_int64s({0, 1, 1, 1, 2, 3}, Shape{2, 3});
  expect_matches({"ScatterND", {{data2}, {idx3}, {upd2}}}, {ref2});
}

TEST_F(Layout, ExpandAndTile) {
  Tensor x = rng.floats(Shape{3, 1});
  Tensor e(DType::kFloat32, Shape{2, 3, 4});
  for (int64_t i = 0; i < e.numel(); ++i) e.data<float>()[i] = x.data<float>()[(i / 4) % 3];
  expect_matches({"Expand", {{x}, {i64({2, 1, 4}), true}}}, {e});
  Tensor t = rng.floats(Shape{2, 3});
  Tensor tiled(DType::kFloat32, Shape{4, 9});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 9; ++j) tiled.data<float>()[i * 9 + j] = t.data<float>()[(i % 2) * 3 + j % 3];
  expect_matches({"Tile", {{t}, {i64({2, 3}), true}}}, {tiled});
}

TEST_F(Layout, PadModes) {
  Tensor x = rng.floats(Shape{2, 4, 5});
  std::vector<int64_t> pads = {0, 2, 1, 1, 3, 2};  // begins then ends
  for (std::string mode : {"constant", "reflect", "edge"}) {
    Shape os{2 + 0 + 1, 4 + 2 + 3, 5 + 1 + 2};
    Tensor y(DType::kFloat32, os);
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto oi = unravel(i, os);
      bool pad = false;
      int64_t off = 0;
      for (int d = 0; d < 3; ++d) {
        int64_t n = x.shape()[d], j = oi[d] - pads[d];
        if (j < 0 || j >= n) {
          if (mode == "constant") pad = true;
          else if (mode == "edge") j = j < 0 ? 0 : n - 1;
          else j = j < 0 ? -j : 2 * (n - 1) - j;
        }
        off = off * n + j;
      }
      y.data<float>()[i] = pad ? 0.75f : x.data<float>()[off];
    }
    OpCase c{"Pad", {{x}, {i64(pads), true}}, {{"mode", attr_s(mode)}}};
    if (mode == "constant") c.inputs.push_back({Tensor::from_floats({0.75f}, Shape{}), true});
    expect_matches(c, {y});
  }
}

TEST_F(Layout, TriluShapeConstantOfShapeRange) {
  Tensor x = rng.floats(Shape{2, 4, 5});
  for (int upper : {0, 1})
    for (int64_t k : {-1, 0, 2}) {
      Tensor y(DType::kFloat32, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) {
        int64_t r = (i / 5) % 4, c = i % 5;
        bool keep = upper ? c - r >= k : c - r <= k;
        y.data<float>()[i] = keep ? x.data<float>()[i] : 0.f;
      }
      expect_matches({"Trilu", {{x}, {Tensor::from_int64s({k}, Shape{}), true}}, {{"upper", attr_i(upper)}}}, {y});
    }
  expect_matches({"Shape", {{x}}}, {i64({2, 4, 5})});
  expect_matches({"Shape", {{x}}, {{"start", attr_i(1)}}}, {i64({4, 5})});
  Tensor v = Tensor::from_int64s({7}, Shape{1});
  Tensor filled(DType::kInt64, Shape{3, 2});
  for (int64_t i = 0; i < 6; ++i) filled.data<int64_t>()[i] = 7;
  expect_matches({"ConstantOfShape", {{i64({3, 2}), true}}, {{"value", attr_t(v)}}}, {filled});
  expect_matches({"Range", {{Tensor::from_int64s({10}, Shape{}), true}, {Tensor::from_int64s({2}, Shape{}), true},
                            {Tensor::from_int64s({-3}, Shape{}), true}}},
                 {i64({10, 7, 4})});
  expect_matches({"Range", {{Tensor::from_floats({0.5f}, Shape{}), true}, {Tensor::from_floats({2.f}, Shape{}), true},
                            {Tensor::from_floats({0.5f}, Shape{}), true}}},
                 {Tensor::from_floats({0.5f, 1.f, 1.5f}, Shape{3})});
  // A Range whose length depends on runtime data cannot have a static shape.
  auto dynamic = run_case({"Range", {{Tensor::from_floats({0.5f}, Shape{})}, {Tensor::from_floats({2.f}, Shape{}), true},
                                     {Tensor::from_floats({0.5f}, Shape{}), true}}},
                          Executor::kSequential, 0);
  ASSERT_FALSE(dynamic.ok());
  EXPECT_NE(dynamic.status().message().find("must be a constant"), std::string::npos) << dynamic.status().to_string();
}

TEST_F(Layout, ResizeNearestAndLinear) {
  // Rows of 18 outputs: one block of 16 columns (vectorized) and a tail.
  constexpr int64_t H = 3, W = 12, OW = 18;
  Tensor x = rng.floats(Shape{1, 2, H, W});
  Tensor scales = Tensor::from_floats({1, 1, 2, 1.5f}, Shape{4});
  Shape os{1, 2, 6, OW};
  for (std::string ctm : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}) {
    for (std::string mode : {"nearest", "linear"}) {
      if (mode == "nearest" && ctm == "align_corners") continue;
      Tensor y(DType::kFloat32, os);
      auto src = [&](int64_t o, int64_t in, int64_t out, double s) {
        if (ctm == "half_pixel") return (o + 0.5) / s - 0.5;
        if (ctm == "pytorch_half_pixel") return out > 1 ? (o + 0.5) / s - 0.5 : 0.0;
        if (ctm == "align_corners") return out == 1 ? 0.0 : double(o) * (in - 1) / (out - 1);
        return o / s;
      };
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto oi = unravel(i, os);
        double sy = src(oi[2], H, 6, 2.0), sx = src(oi[3], W, OW, 1.5);
        const float* plane = x.data<float>() + oi[1] * H * W;
        if (mode == "nearest") {
          auto rnd = [](double v, int64_t n) {
            double r = (v - std::floor(v) == 0.5) ? std::floor(v) : std::round(v);
            return std::clamp<int64_t>(static_cast<int64_t>(r), 0, n - 1);
          };
          y.data<float>()[i] = plane[rnd(sy, H) * W + rnd(sx, W)];
        } else {
          sy = std::clamp(sy, 0.0, double(H - 1));
          sx = std::clamp(sx, 0.0, double(W - 1));
          int64_t y0 = static_cast<int64_t>(sy), x0 = static_cast<int64_t>(sx);
          int64_t y1 = std::min<int64_t>(y0 + 1, H - 1), x1 = std::min<int64_t>(x0 + 1, W - 1);
          double wy = sy - y0, wx = sx - x0;
          y.data<float>()[i] = static_cast<float>((1 - wy) * ((1 - wx) * plane[y0 * W + x0] + wx * plane[y0 * W + x1]) +
                                                  wy * ((1 - wx) * plane[y1 * W + x0] + wx * plane[y1 * W + x1]));
        }
      }
      SCOPED_TRACE(mode + " " + ctm);
      expect_matches({"Resize", {{x}, {Tensor()}, {scales, true}},
                      {{"mode", attr_s(mode)}, {"coordinate_transformation_mode", attr_s(ctm)}}},
                     {y});
    }
  }
  // sizes instead of scales.
  Tensor sizes = i64({1, 2, 6, 2 * W});
  Tensor y(DType::kFloat32, Shape{1, 2, 6, 2 * W});
  for (int64_t i = 0; i < y.numel(); ++i) {
    auto oi = unravel(i, y.shape());
    y.data<float>()[i] = x.data<float>()[oi[1] * H * W + (oi[2] / 2) * W + oi[3] / 2];
  }
  expect_matches({"Resize", {{x}, {Tensor()}, {Tensor()}, {sizes, true}},
                  {{"mode", attr_s("nearest")}, {"coordinate_transformation_mode", attr_s("asymmetric")},
                   {"nearest_mode", attr_s("floor")}}},
                 {y});
}

}  // namespace
}  // namespace tessera::testing
