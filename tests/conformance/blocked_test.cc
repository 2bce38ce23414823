// The channel-blocked layout's rKernels (kernels/cpu/blocked.cc) against
// the NCHW ones: the layout conversions element by element, and the
// blocked 1x1 and depthwise convs bit for bit where the NCHW rKernel sums
// in the same order (the packed 1x1 and every depthwise path), to rounding
// where it calls sgemm, in every tiling, with every epilogue form.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/kernel.h"
#include "tests/conformance/harness.h"

namespace tessera::testing {
namespace {

constexpr int64_t kBlock = 8;

bool have_blocked() { return cpu_kernel_find("TesseraBlockedConv") != nullptr; }

// x [N, C, H, W] in the blocked layout [N, C/8, H, W, 8], element by element.
Tensor blocked_ref(const Tensor& x) {
  const Shape& s = x.shape();
  Tensor y(DType::kFloat32, Shape{s[0], s[1] / kBlock, s[2], s[3], kBlock});
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t i = 0; i < s[2] * s[3]; ++i)
        y.data<float>()[(((n * s[1] / kBlock + c / kBlock) * s[2] * s[3]) + i) * kBlock + c % kBlock] =
            x.data<float>()[(n * s[1] + c) * s[2] * s[3] + i];
  return y;
}

// Node n run by its rKernel `k` (the default where null) in `tasks` rTasks
// (0: its grain) on `ins`; every output element NaN first.
std::vector<float> run_node(const Node& n, int64_t tasks, std::vector<const void*> ins, const RKernel* k = nullptr) {
  if (k == nullptr) k = kernel_for(cpu_kernels(), n);
  EXPECT_NE(k, nullptr) << n.label();
  auto op = k->make(n, KernelParams{tasks});
  EXPECT_TRUE(op.ok()) << op.status().to_string();
  std::vector<float> out(static_cast<size_t>(n.outputs[0]->shape.numel()), std::numeric_limits<float>::quiet_NaN());
  // Scratch past what the op asked for holds a canary it must not touch.
  const size_t asked = (*op)->scratch_bytes() / sizeof(float);
  std::vector<float> scratch(asked + 64, -7.f);
  void* outs[] = {out.data()};
  for (int64_t t = 0; t < (*op)->tasks(); ++t) (*op)->run(t, TaskArgs{ins.data(), outs, scratch.data()});
  for (size_t i = asked; i < scratch.size(); ++i)
    EXPECT_EQ(scratch[i], -7.f) << k->name << " wrote past its scratch of " << asked << " floats";
  return out;
}

Node* add_typed(Graph& g, const std::string& op, const std::string& name, std::vector<Value*> in) {
  for (Value* v : in)
    if (v != nullptr) v->shape_known = true;
  Node* n = g.add_node(op, name, std::move(in), 1);
  return n;
}

// TesseraToBlocked puts every element where the layout says, and
// TesseraFromBlocked brings it back, in every tiling: planes whose pixels
// are not a multiple of 8 (the scalar tail), one channel block and several,
// two images.
TEST_F(Nn, BlockedLayoutRoundTrip) {
  if (!have_blocked()) GTEST_SKIP() << "no blocked rKernels in this build (they need AVX2 with FMA)";
  for (const Shape& s : {Shape{1, 8, 5, 5}, Shape{2, 16, 7, 9}, Shape{1, 24, 14, 14}, Shape{1, 32, 1, 3}}) {
    SCOPED_TRACE(s.to_string());
    Graph g;
    Value* x = g.add_input("x", DType::kFloat32, s);
    Node* to = add_typed(g, "TesseraToBlocked", "to", {x});
    to->attrs["block"] = attr_i(kBlock);
    ASSERT_TRUE(op_infer(*to).ok());
    Node* from = add_typed(g, "TesseraFromBlocked", "from", {to->outputs[0]});
    ASSERT_TRUE(op_infer(*from).ok());
    EXPECT_EQ(to->outputs[0]->shape, (Shape{s[0], s[1] / kBlock, s[2], s[3], kBlock}));
    EXPECT_EQ(from->outputs[0]->shape, s);
    const Tensor in = rng.floats(s);
    const Tensor want = blocked_ref(in);
    for (int64_t tasks : {1, 3, 0}) {
      std::vector<float> b = run_node(*to, tasks, {in.raw()});
      ASSERT_EQ(std::memcmp(b.data(), want.raw(), b.size() * sizeof(float)), 0) << tasks << " rTasks";
      std::vector<float> back = run_node(*from, tasks, {b.data()});
      ASSERT_EQ(std::memcmp(back.data(), in.raw(), back.size() * sizeof(float)), 0) << tasks << " rTasks";
    }
  }
}

struct ConvCase {
  int64_t n, c, m, hw, k, stride, pad;
  bool bias;
  std::string act;  // none, Relu, Clip, HardSwish
  bool residual;
  int64_t group = 0;  // 0: 1 for a 1x1, else depthwise
};

std::string describe(const ConvCase& cs) {
  return str_cat(cs.n, "x", cs.c, "x", cs.hw, "x", cs.hw, " -> ", cs.m, ", ", cs.k, "x", cs.k, " stride ", cs.stride,
                 " pad ", cs.pad, " group ", cs.group, cs.bias ? ", bias" : "", ", ", cs.act,
                 cs.residual ? " + residual" : "");
}

// The blocked conv against the NCHW rKernel the compiler would pick for the
// same node, in 1, 3, 7 rTasks and its grain: 1x1s with short and long
// reductions, on small and large planes, an odd number of output blocks
// (a block alone), two images, at stride 2; depthwise 3x3 and 5x5 at
// strides 1 and 2, padded or not, on planes narrower than a tile; grouped
// 3x3s; each with its bias or none, Relu, Clip (ReLU6) or HardSwish
// (applied after the stores), a residual. Bit for bit where the NCHW path
// sums in the same order (the packed 1x1 from 0, depthwise from the bias,
// the grouped direct kernel over the taps from 0); else to rounding. The
// AVX2 build's depthwise strips add a window's taps in (kx, ky) order at
// stride 1, the blocked conv in (ky, kx) order: there the NCHW path runs
// on the transposed planes and window (square, padded alike on every
// side), where its (kx, ky) order is the untransposed (ky, kx), and its
// output transposed back is held to the same bits.
TEST_F(Nn, BlockedConvMatchesNchw) {
  if (!have_blocked()) GTEST_SKIP() << "no blocked rKernels in this build (they need AVX2 with FMA)";
  const std::vector<ConvCase> cases = {
      {1, 16, 96, 28, 1, 1, 0, true, "Clip", false},     {1, 96, 24, 14, 1, 1, 0, true, "none", true},
      {2, 24, 40, 9, 1, 1, 0, false, "Relu", false},     {1, 320, 64, 7, 1, 1, 0, true, "HardSwish", true},
      {1, 32, 16, 11, 1, 1, 0, true, "Relu", true},      {1, 48, 48, 14, 3, 1, 1, true, "Clip", false},
      {1, 48, 48, 13, 3, 2, 1, true, "Clip", false},     {2, 16, 16, 7, 5, 1, 2, true, "none", true},
      {1, 24, 24, 9, 5, 2, 2, false, "HardSwish", false}, {1, 8, 8, 3, 3, 1, 1, true, "Relu", false},
      {1, 16, 16, 12, 5, 1, 2, true, "Relu", true},
      {1, 16, 16, 6, 3, 1, 0, true, "Relu", true},
      // Edge columns over up to 8 rows at a time: 8, 8 and 3 rows, the
      // 2 columns left after the 3x3 tiles, a 7x7 window's 6 edge columns.
      {1, 24, 24, 19, 3, 1, 1, true, "Clip", true},       {1, 16, 16, 12, 7, 1, 3, false, "none", false},
      // AVX-512's stride-1 tiles of pixel pairs: a 3x3 row of two 12-pixel
      // tiles and a pair, a 5x5 row of two 8-pixel tiles, a pair and an
      // edge column; the rows above and below the plane read as zeros.
      {1, 16, 16, 28, 3, 1, 1, true, "Relu", false},     {2, 24, 24, 23, 5, 1, 2, true, "Clip", true},
      // AVX-512's 1x1 tiles of 4 blocks: four and a pair, a long
      // reduction, a plane of whole 12-pixel tiles; on a small plane, rTasks
      // of units of 4 blocks or, where there are more rTasks than units, of
      // pairs (144: 18 blocks; 152: 19, a last one alone).
      {1, 200, 48, 6, 1, 1, 0, true, "Relu", true},      {1, 32, 144, 7, 1, 1, 0, true, "Relu", true},
      {1, 40, 152, 7, 1, 1, 0, true, "Clip", true},
      // 1x1s at stride 2 (RegNet's projections); grouped convs of 16 and 8
      // channels per group (two output blocks a tile, and one), strides 1
      // and 2, a residual.
      {1, 32, 64, 14, 1, 2, 0, true, "none", false},     {2, 16, 24, 9, 1, 2, 0, false, "Relu", false},
      {1, 64, 64, 14, 3, 1, 1, true, "Relu", false, 4},  {1, 32, 32, 13, 3, 2, 1, true, "Relu", false, 2},
      {1, 48, 48, 7, 3, 1, 1, true, "none", true, 6},    {2, 32, 64, 9, 3, 2, 1, false, "Clip", false, 2},
  };
  for (const ConvCase& cs : cases) {
    SCOPED_TRACE(describe(cs));
    const int64_t group = cs.group > 0 ? cs.group : cs.k > 1 ? cs.c : 1;
    const int64_t oh = (cs.hw + 2 * cs.pad - cs.k) / cs.stride + 1;
    const Tensor x = rng.floats(Shape{cs.n, cs.c, cs.hw, cs.hw});
    const Tensor w = rng.floats(Shape{cs.m, cs.c / group, cs.k, cs.k});
    const Tensor b = rng.floats(Shape{cs.m});
    // Sums of a few dozen products: a residual of their size keeps every
    // epilogue's arithmetic in play.
    const Tensor r = rng.floats(Shape{cs.n, cs.m, oh, oh}, -4.f, 4.f);
    const Tensor xb = blocked_ref(x), rb = blocked_ref(r);
    Graph g;
    Value* vx = g.add_input("x", DType::kFloat32, x.shape());
    Value* vxb = g.add_input("xb", DType::kFloat32, xb.shape());
    Value* vw = g.add_constant("w", w);
    Value* vb = cs.bias ? g.add_constant("b", b) : nullptr;
    Value* vr = cs.residual ? g.add_input("r", DType::kFloat32, r.shape()) : nullptr;
    Value* vrb = cs.residual ? g.add_input("rb", DType::kFloat32, rb.shape()) : nullptr;
    const bool fused = cs.act != "none" || cs.residual;
    std::vector<Value*> in_nchw = {vx, vw, vb}, in_blk = {vxb, vw, vb};
    if (cs.residual) in_nchw.push_back(vr), in_blk.push_back(vrb);
    Node* nchw = add_typed(g, fused ? "TesseraFusedConv" : "Conv", "nchw", in_nchw);
    Node* blk = add_typed(g, "TesseraBlockedConv", "blocked", in_blk);
    std::map<std::string, Attribute> attrs = {{"group", attr_i(group)},
                                              {"kernel_shape", attr_ints({cs.k, cs.k})},
                                              {"strides", attr_ints({cs.stride, cs.stride})},
                                              {"pads", attr_ints({cs.pad, cs.pad, cs.pad, cs.pad})}};
    if (cs.act != "none") attrs["activation"] = attr_s(cs.act);
    if (cs.act == "Clip") attrs["activation_alpha"] = attr_f(0.f), attrs["activation_beta"] = attr_f(6.f);
    nchw->attrs = blk->attrs = attrs;
    ASSERT_TRUE(op_infer(*nchw).ok());
    Status st = op_infer(*blk);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const RKernel* k = kernel_for(cpu_kernels(), *nchw);
    auto probe = k->make(*nchw, KernelParams{1});
    ASSERT_TRUE(probe.ok()) << probe.status().to_string();
    const std::string path((*probe)->path());
    const bool strips_by_columns = path == "depthwise strips" && cs.stride == 1;
    const bool exact = path == "1x1 packed" || path.rfind("depthwise", 0) == 0 || path == "grouped direct";
    // Planes of a [.., h, w] tensor with rows and columns swapped.
    auto transposed = [](const float* p, int64_t planes, int64_t h, int64_t wd) {
      std::vector<float> t(static_cast<size_t>(planes * h * wd));
      for (int64_t q = 0; q < planes; ++q)
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < wd; ++j) t[static_cast<size_t>((q * wd + j) * h + i)] = p[(q * h + i) * wd + j];
      return t;
    };
    std::vector<float> want;
    if (strips_by_columns) {
      const std::vector<float> xt = transposed(x.data<float>(), cs.n * cs.c, cs.hw, cs.hw),
                               wt = transposed(w.data<float>(), cs.m * (cs.c / group), cs.k, cs.k),
                               rt = transposed(r.data<float>(), cs.n * cs.m, oh, oh);
      const std::vector<float> yt =
          run_node(*nchw, 1, {xt.data(), wt.data(), cs.bias ? b.raw() : nullptr, cs.residual ? rt.data() : nullptr});
      want = transposed(yt.data(), cs.n * cs.m, oh, oh);
    } else {
      want = run_node(*nchw, 1, {x.raw(), w.raw(), cs.bias ? b.raw() : nullptr, cs.residual ? r.raw() : nullptr});
    }
    Tensor want_t(DType::kFloat32, nchw->outputs[0]->shape);
    std::memcpy(want_t.raw(), want.data(), want.size() * sizeof(float));
    const Tensor want_b = blocked_ref(want_t);
    // Every rKernel that takes the node: conv.blocked, and for the
    // depthwise convs conv.blocked_padded too, with the same bits.
    const std::vector<const RKernel*> ks = kernels_for(cpu_kernels(), *blk);
    ASSERT_EQ(ks.size(), group == cs.c && cs.m == cs.c && cs.k > 1 ? 2u : 1u);
    for (const RKernel* kb : ks)
      for (int64_t tasks : {1, 3, 7, 0}) {
        const std::vector<float> got = run_node(
            *blk, tasks, {xb.raw(), w.raw(), cs.bias ? b.raw() : nullptr, cs.residual ? rb.raw() : nullptr}, kb);
        ASSERT_EQ(got.size(), static_cast<size_t>(want_b.numel()));
        for (size_t i = 0; i < got.size(); ++i) {
          const float e = want_b.data<float>()[i];
          if (exact)
            ASSERT_EQ(got[i], e) << kb->name << " against NCHW path " << path << ", " << tasks << " rTasks, element "
                                 << i;
          else ASSERT_NEAR(got[i], e, 1e-4f * (1.f + std::fabs(e))) << "NCHW path " << path << ", element " << i;
        }
      }
  }
}

// What the blocked conv does not take is refused by shape inference, with
// the node named: a dense 3x3, a padded 1x1, a grouped weight that does
// not match the channels, groups of 4 channels, output channels that
// are not a multiple of the block, an input that is not blocked.
TEST_F(Nn, BlockedConvRefusesOtherConvs) {
  struct Bad {
    Shape x, w;
    std::map<std::string, Attribute> attrs;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {Shape{1, 2, 5, 5, 8}, Shape{16, 16, 3, 3}, {{"pads", attr_ints({1, 1, 1, 1})}}, "takes a 1x1, a depthwise conv"},
      {Shape{1, 2, 6, 6, 8}, Shape{16, 16, 1, 1}, {{"pads", attr_ints({1, 1, 1, 1})}}, "takes no padding"},
      {Shape{1, 3, 6, 6, 8}, Shape{24, 16, 3, 3}, {{"group", attr_i(3)}}, "groups of whole blocks"},
      {Shape{1, 2, 6, 6, 8}, Shape{16, 4, 3, 3}, {{"group", attr_i(4)}}, "groups of whole blocks"},
      {Shape{1, 2, 5, 5, 8}, Shape{12, 16, 1, 1}, {}, "does not divide the 12 output channels"},
      {Shape{1, 16, 5, 5}, Shape{16, 16, 1, 1}, {}, "is not [N, C/b, H, W, b]"},
  };
  for (const Bad& c : bad) {
    Graph g;
    Node* n = add_typed(g, "TesseraBlockedConv", "bad_conv",
                        {g.add_input("x", DType::kFloat32, c.x), g.add_constant("w", rng.floats(c.w))});
    n->attrs = c.attrs;
    Status st = op_infer(*n);
    ASSERT_FALSE(st.ok()) << c.says;
    EXPECT_NE(st.message().find("'bad_conv'"), std::string::npos) << st.to_string();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.to_string();
  }
}

}  // namespace
}  // namespace tessera::testing
