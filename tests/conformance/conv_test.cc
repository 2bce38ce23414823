// Conformance of Conv (groups, depthwise, strides, dilations, pads, 1-D) and
// ConvTranspose against naive references, and the depthwise and grouped
// kernels' rTask tilings.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/dw_strip.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel.h"
#include "kernels/prepared.h"
#include "tests/conformance/harness.h"

namespace tessera::testing {
namespace {

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
      {1, 300, 7, 7, 40, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},     // pointwise, K > 256: 48 + 1 pixels (sgemm, or packed on a small plane)
      // Pointwise with 1 to 4 pixels past a multiple of 48 (AVX-512: taken
      // along in the last full block's pass) and 5 (a pass of their own);
      // output channels not a multiple of 8.
      {1, 16, 5, 10, 16, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},     // 48 + 2
      {1, 16, 3, 17, 9, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},      // 48 + 3
      {1, 24, 4, 13, 12, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},     // 48 + 4
      {2, 40, 10, 10, 20, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},    // 96 + 4, batch 2
      {1, 8, 1, 53, 8, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},       // 48 + 5
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
    const Tensor ref = conv_ref(x, w, &b, s, oh, ow, pt, pl);
    expect_matches(with_bias, {ref}, 1e-5);
    expect_matches(no_bias, {conv_ref(x, w, nullptr, s, oh, ow, pt, pl)}, 1e-5);
    // Every other rKernel that fits the conv computes it too; im2col +
    // sgemm fits every one, and comes last.
    Graph probe;
    Node* node = probe.add_node("Conv", "probe",
                                {probe.add_input("x", DType::kFloat32, x.shape()), probe.add_constant("w", w),
                                 probe.add_constant("b", b)},
                                1);
    node->attrs = attrs;
    const std::vector<const RKernel*> fits = kernels_for(cpu_kernels(), *node);
    ASSERT_FALSE(fits.empty());
    EXPECT_EQ(fits.back()->name, "conv.im2col_gemm");
    if (winograd) {
      EXPECT_EQ(fits.front()->name, "conv.winograd");
    }
    if (cg == 1 && s.m == s.group) {
      EXPECT_EQ(fits.front()->name, "conv.depthwise");
    }
    for (size_t k = 1; k < fits.size(); ++k) {
      OpCase alt = with_bias;
      alt.kernel = std::string(fits[k]->name);
      alt.exact_tiling = alt.kernel != "conv.im2col_gemm" && (alt.kernel != "conv.pointwise" || (simd && cg <= 256));
      SCOPED_TRACE(alt.kernel);
      expect_matches(alt, {ref}, 1e-5);
    }
  }
}

// An rKernel given a node it does not fit refuses it by name (an
// Executable naming one, say), and the compiler does not start from it.
TEST_F(Nn, ConvRKernelsRefuseNodesTheyDoNotFit) {
  Graph g;
  Value* x = g.add_input("x", DType::kFloat32, Shape{1, 16, 8, 8});
  Node* dense = g.add_node("Conv", "dense", {x, g.add_constant("w", rng.floats(Shape{16, 16, 3, 3}))}, 1);
  dense->attrs = {{"pads", attr_ints({1, 1, 1, 1})}};
  const RKernel* dw = nullptr;
  for (const RKernel& k : cpu_kernels())
    if (k.name == "conv.depthwise") dw = &k;
  ASSERT_NE(dw, nullptr);
  EXPECT_FALSE(dw->fits(*dense));
  auto refused = dw->make(*dense, KernelParams{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'dense'"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("conv.depthwise"), std::string::npos);
  EXPECT_EQ(kernel_for(cpu_kernels(), *dense)->name, "conv.winograd");
  OpCase forced{"Conv", {{rng.floats(Shape{1, 16, 8, 8})}, {rng.floats(Shape{16, 16, 3, 3}), true}},
                {{"pads", attr_ints({1, 1, 1, 1})}}};
  forced.kernel = "conv.depthwise";
  auto out = run_case(forced, Executor::kSequential, 0);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("no rKernel"), std::string::npos) << out.status().to_string();
}

// DwStrip stores a row's partial last strip whole, its extra lanes on
// the next rows; it must never write outside the rTask's rows [r0, r1),
// which another rTask may own (rows narrower than a vector included: a
// store then spans several rows). Every split of a plane's rows gives the
// bits of the whole plane, and the floats around the split stay as they
// were. The whole plane has the bits of FMAs in (ky, kx) order from the
// bias ((kx, ky) at stride 1), rows wide enough for runs of plain strips
// between the masked ones and planes of several tiles included.
TEST_F(Nn, DepthwiseStripsWriteOnlyTheirRows) {
#if defined(TESSERA_DW_STRIP)
  struct Geo {
    int64_t h, w, k, s;
  };
  for (const Geo& g : {Geo{9, 2, 3, 2}, Geo{9, 5, 3, 2}, Geo{7, 3, 3, 1}, Geo{12, 15, 3, 2}, Geo{10, 19, 3, 1},
                       Geo{11, 21, 5, 2}, Geo{9, 6, 5, 1}, Geo{8, 45, 3, 1}, Geo{9, 43, 5, 1}, Geo{9, 83, 3, 2},
                       Geo{7, 70, 5, 2}, Geo{19, 33, 5, 1}, Geo{25, 33, 3, 1}}) {
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
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox) {
        float want = 0.5f;
        const bool by_columns = g.s == 1;
        for (int64_t a = 0; a < g.k; ++a)
          for (int64_t e = 0; e < g.k; ++e) {
            const int64_t ky = by_columns ? e : a, kx = by_columns ? a : e;
            const int64_t iy = oy * g.s - c.ph + ky, ix = ox * g.s - c.pw + kx;
            if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
              want = std::fma(w.data<float>()[ky * g.k + kx], x.data<float>()[iy * g.w + ix], want);
            else
              want = std::fma(w.data<float>()[ky * g.k + kx], 0.f, want);
          }
        const float got = whole[static_cast<size_t>(oy * c.ow + ox)];
        ASSERT_EQ(std::memcmp(&got, &want, sizeof want), 0) << "output (" << oy << ", " << ox << "): " << got
                                                            << " against " << want;
      }
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

// The padded rows the grouped and depthwise kernels copy their input
// into: every width, both edges (pads wider than a vector included), and
// no write past the slack the buffer leaves. The source holds only
// [lo, hi), so a read outside it is a sanitizer error.
TEST_F(Nn, RowPadderPadsEveryEdge) {
  constexpr float kSentinel = -7.f;
  int checked = 0;
  for (int64_t wp = 1; wp <= 41; ++wp)
    for (int64_t lo = 0; lo <= std::min<int64_t>(wp, 19); ++lo)
      for (int64_t hi = lo; hi <= wp; ++hi) {
        std::vector<float> src(static_cast<size_t>(std::max<int64_t>(hi - lo, 1)));
        for (size_t i = 0; i < src.size(); ++i) src[i] = 1.f + static_cast<float>(i);
        const RowPadder padder(wp, lo, hi);
        std::vector<float> dst(static_cast<size_t>(wp + kPadRowSlack + 4), kSentinel);
        padder.row(dst.data(), src.data() - lo);
        for (int64_t k = 0; k < wp; ++k) {
          const float want = k >= lo && k < hi ? 1.f + static_cast<float>(k - lo) : 0.f;
          ASSERT_EQ(dst[static_cast<size_t>(k)], want) << "wp " << wp << " lo " << lo << " hi " << hi << " at " << k;
        }
        for (size_t k = static_cast<size_t>(wp + kPadRowSlack); k < dst.size(); ++k)
          ASSERT_EQ(dst[k], kSentinel) << "wp " << wp << " lo " << lo << " hi " << hi << ": wrote past the slack";
        std::fill(dst.begin(), dst.end(), kSentinel);
        padder.zeros(dst.data());
        for (int64_t k = 0; k < wp; ++k) ASSERT_EQ(dst[static_cast<size_t>(k)], 0.f) << "wp " << wp << " at " << k;
        for (size_t k = static_cast<size_t>(wp + kPadRowSlack); k < dst.size(); ++k) ASSERT_EQ(dst[k], kSentinel);
        ++checked;
      }
  EXPECT_GT(checked, 5000);
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
  // The rKernel that runs it on this build (the first Conv rKernel that
  // fits the node).
  const RKernel* k = kernel_for(cpu_kernels(), *n);
  ASSERT_NE(k, nullptr);
  SCOPED_TRACE(k->name);
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

// A biased Conv with square windows and pads of half the window, and
// its output from every rTask of `tasks`, run one after another.
struct TiledConv {
  Graph g;
  Node* n = nullptr;
  Tensor in, w, b;
  int64_t out_elems = 0;

  TiledConv(Rng& rng, int64_t cin, int64_t cout, int64_t group, int64_t k, int64_t stride, int64_t hw) {
    const int64_t pad = k / 2, ohw = (hw + 2 * pad - k) / stride + 1;
    in = rng.floats(Shape{1, cin, hw, hw});
    w = rng.floats(Shape{cout, cin / group, k, k});
    b = rng.floats(Shape{cout});
    Value* x = g.add_input("x", DType::kFloat32, Shape{1, cin, hw, hw});
    n = g.add_node("Conv", "conv", {x, g.add_constant("w", w), g.add_constant("b", b)}, 1);
    n->attrs["group"] = attr_i(group);
    n->attrs["pads"] = attr_ints({pad, pad, pad, pad});
    n->attrs["strides"] = attr_ints({stride, stride});
    n->outputs[0]->dtype = DType::kFloat32;
    n->outputs[0]->shape = Shape{1, cout, ohw, ohw};
    out_elems = cout * ohw * ohw;
  }
  // The rKernel that runs it on this build.
  const RKernel* kernel() const { return kernel_for(cpu_kernels(), *n); }
  Result<std::vector<float>> run(int64_t tasks) const {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ROp> op, kernel()->make(*n, KernelParams{tasks}));
    std::vector<float> out(static_cast<size_t>(out_elems), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> scratch(op->scratch_bytes() / sizeof(float) + 1);
    const void* ins[] = {in.raw(), w.raw(), b.raw()};
    void* outs[] = {out.data()};
    for (int64_t t = 0; t < op->tasks(); ++t) op->run(t, TaskArgs{ins, outs, scratch.data()});
    return out;
  }
};

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, r = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    d += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    r += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(d / r);
}

// Depthwise convs (3x3 and 5x5, stride 1 and 2) and a 3-channel stem give
// the same bits in every tiling: whole planes per rTask or rows of a
// plane, on maps narrower than a vector (which may run flat) and wider.
TEST_F(Nn, DepthwiseAndStemSameBitsInEveryTiling) {
  struct Form {
    int64_t cin, cout, group, k, stride, hw;
  };
  std::vector<Form> forms;
  for (int64_t k : {3, 5})
    for (int64_t stride : {1, 2})
      for (int64_t hw : {5, 7, 14, 29}) forms.push_back({32, 32, 32, k, stride, hw});
  for (int64_t stride : {1, 2}) forms.push_back({3, 32, 1, 3, stride, 32});
  for (const Form& f : forms) {
    const TiledConv conv(rng, f.cin, f.cout, f.group, f.k, f.stride, f.hw);
    ASSERT_NE(conv.kernel(), nullptr);
    SCOPED_TRACE("cin " + std::to_string(f.cin) + ", " + std::to_string(f.k) + "x" + std::to_string(f.k) +
                 " stride " + std::to_string(f.stride) + " on " + std::to_string(f.hw) + ", " +
                 std::string(conv.kernel()->name));
    Result<std::vector<float>> first = conv.run(1);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    for (int64_t tasks : {3, 4, 32, 64, 96}) {
      Result<std::vector<float>> out = conv.run(tasks);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(std::memcmp(out->data(), first->data(), out->size() * sizeof(float)), 0) << tasks << " rTasks";
    }
  }
}

// Dense convs at column stride 2 gather their columns (im2col) a whole
// vector at a time, past the end of a row's run into what is gathered
// next and, at the end, into the scratch's slack: every tiling matches the
// reference, with the scratch exactly as large as the rKernel asks (the
// asan build checks that nothing is written beyond it).
TEST_F(Nn, StridedIm2colMatchesReferenceInEveryTiling) {
  struct Form {
    int64_t cin, cout, k, hw;
  };
  for (const Form& f : std::vector<Form>{{24, 16, 3, 13}, {16, 24, 3, 29}, {8, 16, 3, 56}, {32, 8, 1, 14}, {12, 8, 1, 27}}) {
    const TiledConv conv(rng, f.cin, f.cout, 1, f.k, 2, f.hw);
    ASSERT_NE(conv.kernel(), nullptr);
    const int64_t pad = f.k / 2, ohw = (f.hw + 2 * pad - f.k) / 2 + 1;
    SCOPED_TRACE(std::to_string(f.k) + "x" + std::to_string(f.k) + " on " + std::to_string(f.hw) + ", cin " +
                 std::to_string(f.cin) + ", " + std::string(conv.kernel()->name));
    const ConvSpec spec{1, f.cin, f.hw, f.hw, f.cout, f.k, f.k, 1, {2, 2}, {1, 1}, {pad, pad, pad, pad}};
    const Tensor want = conv_ref(conv.in, conv.w, &conv.b, spec, ohw, ohw, pad, pad);
    const std::vector<float> ref(want.data<float>(), want.data<float>() + want.numel());
    for (int64_t tasks : {1, 3, 7}) {
      Result<std::vector<float>> out = conv.run(tasks);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_LT(rel_l2(*out, ref), 1e-5) << tasks << " rTasks";
    }
  }
}

// Winograd F(4x4, 3x3), an rKernel the variant search picks by measure:
// partial tiles at the right and bottom edges (outputs not a multiple of
// 4), asymmetric and zero pads, batch 2, a group, tiles of rows and of
// output channels (weights over 1 MB transformed), whole-vector gathers
// running past a tile row; every tiling against the fp64 sum, with the
// scratch exactly as large as the rKernel asks (the asan build checks that
// nothing is written beyond it). The bound is the rounding F(4x4) adds
// (rel-L2 about 1e-6 here, against 1e-7 to 5e-7 for F(2x2)).
TEST_F(Nn, Winograd4x4MatchesReferenceInEveryTiling) {
  const std::vector<ConvSpec> specs = {
      {1, 8, 9, 11, 8, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {2, 16, 13, 22, 12, 3, 3, 1, {1, 1}, {1, 1}, {0, 2, 1, 0}},
      {1, 24, 30, 37, 16, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {1, 16, 6, 6, 8, 3, 3, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      {1, 136, 8, 8, 136, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {1, 64, 20, 20, 64, 3, 3, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}},
  };
  const RKernel* k = nullptr;
  for (const RKernel& r : cpu_kernels())
    if (r.name == "conv.winograd4") k = &r;
  ASSERT_NE(k, nullptr);
  for (const ConvSpec& s : specs) {
    const int64_t oh = s.h + s.pads[0] + s.pads[2] - 2, ow = s.w + s.pads[1] + s.pads[3] - 2;
    SCOPED_TRACE(std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" +
                 std::to_string(s.w) + " -> " + std::to_string(s.m) + ", group " + std::to_string(s.group));
    Graph g;
    Tensor x = rng.floats(Shape{s.n, s.c, s.h, s.w}), w = rng.floats(Shape{s.m, s.c / s.group, 3, 3}),
           b = rng.floats(Shape{s.m});
    Value* xv = g.add_input("x", DType::kFloat32, x.shape());
    Node* n = g.add_node("Conv", "conv", {xv, g.add_constant("w", w), g.add_constant("b", b)}, 1);
    n->attrs["group"] = attr_i(s.group);
    n->attrs["pads"] = attr_ints(s.pads);
    n->outputs[0]->dtype = DType::kFloat32;
    n->outputs[0]->shape = Shape{s.n, s.m, oh, ow};
    ASSERT_TRUE(k->fits(*n));
    const Tensor want = conv_ref(x, w, &b, s, oh, ow, s.pads[0], s.pads[1]);
    const std::vector<float> ref(want.data<float>(), want.data<float>() + want.numel());
    // The tilings share one transform of the weights, as in a compile.
    PreparedScope scope;
    for (int64_t tasks : {0, 1, 2, 3, 5}) {  // 0: the rKernel's own grain
      auto op = k->make(*n, KernelParams{tasks});
      ASSERT_TRUE(op.ok()) << op.status().to_string();
      EXPECT_EQ((*op)->path(), "winograd F(4,3)");
      std::vector<float> out(ref.size(), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> scratch((*op)->scratch_bytes() / sizeof(float));
      const void* ins[] = {x.raw(), w.raw(), b.raw()};
      void* outs[] = {out.data()};
      for (int64_t t = 0; t < (*op)->tasks(); ++t) (*op)->run(t, TaskArgs{ins, outs, scratch.data()});
      EXPECT_LT(rel_l2(out, ref), 1e-5) << tasks << " rTasks";
    }
    EXPECT_EQ(scope.made(), 1u);
    EXPECT_EQ(scope.reused(), 4u);
  }
  // Fewer than 4 outputs a side: F(2x2) only.
  Graph g;
  Value* xv = g.add_input("x", DType::kFloat32, Shape{1, 8, 3, 3});
  Node* n = g.add_node("Conv", "conv", {xv, g.add_constant("w", rng.floats(Shape{8, 8, 3, 3}))}, 1);
  n->attrs["pads"] = attr_ints({1, 1, 1, 1});
  n->outputs[0]->dtype = DType::kFloat32;
  n->outputs[0]->shape = Shape{1, 8, 3, 3};
  EXPECT_FALSE(k->fits(*n));
}

// What a Winograd rKernel transforms from the weights is made once per
// form in a PreparedScope (kernels/prepared.h) and shared by every tiling:
// F(2,3) and F(4,3) are two forms, other weights of the same shape
// another, and outside a scope each make transforms its own.
TEST_F(Nn, WinogradTilingsShareTransformedWeightsInAScope) {
  Graph g;
  Value* xv = g.add_input("x", DType::kFloat32, Shape{1, 16, 12, 12});
  auto conv = [&](const char* name) {
    Node* n = g.add_node("Conv", name, {xv, g.add_constant(std::string(name) + ".w", rng.floats(Shape{16, 16, 3, 3}))}, 1);
    n->attrs["pads"] = attr_ints({1, 1, 1, 1});
    n->outputs[0]->dtype = DType::kFloat32;
    n->outputs[0]->shape = Shape{1, 16, 12, 12};
    return n;
  };
  Node* a = conv("a");
  Node* b = conv("b");
  const RKernel* f2 = nullptr;
  const RKernel* f4 = nullptr;
  for (const RKernel& r : cpu_kernels()) {
    if (r.name == "conv.winograd") f2 = &r;
    if (r.name == "conv.winograd4") f4 = &r;
  }
  ASSERT_NE(f2, nullptr);
  ASSERT_NE(f4, nullptr);
  auto weights_of = [](const Result<std::unique_ptr<ROp>>& op) {
    EXPECT_TRUE(op.ok()) << op.status().to_string();
    EXPECT_EQ((*op)->resident().size(), 1u);
    return (*op)->resident().at(0).data();
  };
  {
    PreparedScope scope;
    auto a2_1 = f2->make(*a, KernelParams{1}), a2_3 = f2->make(*a, KernelParams{3});
    auto a4_1 = f4->make(*a, KernelParams{1}), a4_2 = f4->make(*a, KernelParams{2});
    auto b2_1 = f2->make(*b, KernelParams{1});
    EXPECT_EQ(weights_of(a2_1), weights_of(a2_3));
    EXPECT_EQ(weights_of(a4_1), weights_of(a4_2));
    EXPECT_NE(weights_of(a2_1), weights_of(a4_1));
    EXPECT_NE(weights_of(a2_1), weights_of(b2_1));
    {
      PreparedScope nested;  // the outer scope stays current
      EXPECT_EQ(PreparedScope::current(), &scope);
      EXPECT_EQ(weights_of(f2->make(*b, KernelParams{2})), weights_of(b2_1));
    }
    EXPECT_EQ(scope.made(), 3u);
    EXPECT_EQ(scope.reused(), 3u);
  }
  EXPECT_EQ(PreparedScope::current(), nullptr);
  auto one = f2->make(*a, KernelParams{1}), two = f2->make(*a, KernelParams{1});
  EXPECT_NE(weights_of(one), weights_of(two));
}

// A 1x1 conv's tilings: the packed GEMM (reductions up to 256) gives the
// same bits in every tiling; beyond, oneDNN's sgemm agrees to rounding
// (with AVX2 kernels it sums a column in an order that follows the call's
// shape, so a tiling changes the last bits).
TEST_F(Nn, PointwiseTilingsAgree) {
  for (int64_t hw : {7, 13, 28})
    for (int64_t cin : {64, 300}) {
      const TiledConv conv(rng, cin, 48, 1, 1, 1, hw);
      ASSERT_NE(conv.kernel(), nullptr);
      SCOPED_TRACE(std::to_string(hw) + "x" + std::to_string(hw) + ", cin " + std::to_string(cin));
      Result<std::vector<float>> first = conv.run(1);
      ASSERT_TRUE(first.ok()) << first.status().to_string();
      for (int64_t tasks : {2, 3, 4, 6, 7, 16}) {
        Result<std::vector<float>> out = conv.run(tasks);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        if (cin <= 256)
          EXPECT_EQ(std::memcmp(out->data(), first->data(), out->size() * sizeof(float)), 0) << tasks << " rTasks";
        else
          EXPECT_LE(rel_l2(*out, *first), 1e-6) << tasks << " rTasks";
      }
    }
}

// The im2col rKernel, given a 1x1 conv at stride 1 without padding (a
// variant the compiler may pick for one), runs it as one sgemm on the
// input: no scratch for an im2col copy, path "1x1 sgemm", the pointwise
// rKernel's bits where that one runs sgemm too (a long reduction, where
// the weights are not packed), and the
// reference's values in every tiling, grouped or not. A 1x1 at stride 2
// still gathers.
TEST_F(Nn, Im2colOnPointwiseConvsSkipsTheCopy) {
  const RKernel* im2col = nullptr;
  const RKernel* pointwise = nullptr;
  for (const RKernel& k : cpu_kernels()) {
    if (k.name == "conv.im2col_gemm") im2col = &k;
    if (k.name == "conv.pointwise") pointwise = &k;
  }
  ASSERT_NE(im2col, nullptr);
  ASSERT_NE(pointwise, nullptr);
  struct Case { int64_t cin, cout, group, hw; };
  for (const Case& cs : {Case{32, 16, 1, 28}, Case{300, 48, 1, 7}, Case{64, 32, 4, 13}}) {
    SCOPED_TRACE(str_cat(cs.cin, " -> ", cs.cout, ", group ", cs.group, ", ", cs.hw, "x", cs.hw));
    const TiledConv conv(rng, cs.cin, cs.cout, cs.group, 1, 1, cs.hw);
    auto probe = im2col->make(*conv.n, KernelParams{});
    ASSERT_TRUE(probe.ok()) << probe.status().to_string();
    EXPECT_EQ((*probe)->path(), "1x1 sgemm");
    EXPECT_EQ((*probe)->scratch_bytes(), 0u);
    const Tensor ref = conv_ref(conv.in, conv.w, &conv.b,
                                ConvSpec{1, cs.cin, cs.hw, cs.hw, cs.cout, 1, 1, cs.group, {1, 1}, {1, 1}, {0, 0, 0, 0}},
                                cs.hw, cs.hw, 0, 0);
    for (int64_t tasks : {1, 3, 8}) {
      auto op = im2col->make(*conv.n, KernelParams{tasks});
      ASSERT_TRUE(op.ok()) << op.status().to_string();
      std::vector<float> out(static_cast<size_t>(conv.out_elems), std::numeric_limits<float>::quiet_NaN());
      const void* ins[] = {conv.in.raw(), conv.w.raw(), conv.b.raw()};
      void* outs[] = {out.data()};
      for (int64_t t = 0; t < (*op)->tasks(); ++t) (*op)->run(t, TaskArgs{ins, outs, nullptr});
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], ref.data<float>()[i], 1e-4) << tasks << " rTasks, element " << i;
      auto pw = pointwise->make(*conv.n, KernelParams{tasks});
      ASSERT_TRUE(pw.ok()) << pw.status().to_string();
      if ((*pw)->path() == "1x1 sgemm") {  // the pointwise rKernel unpacked: the same sgemm calls
        std::vector<float> want(out.size(), 0.f);
        void* pw_outs[] = {want.data()};
        for (int64_t t = 0; t < (*pw)->tasks(); ++t) (*pw)->run(t, TaskArgs{ins, pw_outs, nullptr});
        EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0) << tasks << " rTasks";
      }
    }
  }
  const TiledConv strided(rng, 32, 16, 1, 1, 2, 14);
  auto gathered = im2col->make(*strided.n, KernelParams{});
  ASSERT_TRUE(gathered.ok()) << gathered.status().to_string();
  EXPECT_EQ((*gathered)->path(), "im2col + sgemm");
  EXPECT_GT((*gathered)->scratch_bytes(), 0u);
}

// A 1x1 conv marked out_planes (the compiler's mark_out_planes: its
// readers cut by planes) cuts its rTasks into blocks of whole output
// planes, in order: each writes one contiguous part of the output, the
// part depthwise convs, pools and elementwise ops after it give to the
// same vEU (rTask t of T runs on vEU t*U/T). Where there are too few
// planes for the rTasks asked (blocks of at least 16), and unmarked, it
// cuts pixel blocks first (a piece of every plane) unless its output
// channels outnumber its pixels.
TEST_F(Nn, PointwiseRTasksWriteWholePlanesWhereMarked) {
  const RKernel* pointwise = nullptr;
  for (const RKernel& k : cpu_kernels())
    if (k.name == "conv.pointwise") pointwise = &k;
  ASSERT_NE(pointwise, nullptr);
  struct Case { int64_t cin, cout, hw, tasks; };
  for (bool marked : {true, false})
    for (const Case& cs : {Case{32, 32, 32, 2}, Case{160, 64, 14, 4}, Case{24, 96, 28, 3}, Case{96, 24, 28, 2},
                           Case{32, 32, 32, 3}, Case{64, 128, 8, 2}}) {
      SCOPED_TRACE(str_cat(cs.cin, " -> ", cs.cout, ", ", cs.hw, "x", cs.hw, ", ", cs.tasks, " rTasks",
                           marked ? ", marked" : ""));
      TiledConv conv(rng, cs.cin, cs.cout, 1, 1, 1, cs.hw);
      if (marked) conv.n->attrs["out_planes"] = attr_i(1);
      auto op = pointwise->make(*conv.n, KernelParams{cs.tasks});
      ASSERT_TRUE(op.ok()) << op.status().to_string();
      ASSERT_EQ((*op)->tasks(), cs.tasks);
      const int64_t plane = cs.hw * cs.hw;
      const bool whole_planes = cs.cout / 16 >= cs.tasks && (marked || cs.cout > plane);
      std::vector<float> scratch((*op)->scratch_bytes() / sizeof(float) + 1);
      const void* ins[] = {conv.in.raw(), conv.w.raw(), conv.b.raw()};
      int64_t next = 0;  // where rTask t's part must start
      for (int64_t t = 0; t < (*op)->tasks(); ++t) {
        std::vector<float> out(static_cast<size_t>(conv.out_elems), std::numeric_limits<float>::quiet_NaN());
        void* outs[] = {out.data()};
        (*op)->run(t, TaskArgs{ins, outs, scratch.data()});
        int64_t first = -1, last = -1, written = 0;
        for (int64_t i = 0; i < conv.out_elems; ++i)
          if (!std::isnan(out[static_cast<size_t>(i)])) {
            if (first < 0) first = i;
            last = i;
            ++written;
          }
        ASSERT_GE(first, 0) << "rTask " << t << " wrote nothing";
        if (whole_planes) {
          EXPECT_EQ(written, last - first + 1) << "rTask " << t << " wrote a part with holes";
          EXPECT_EQ(first, next) << "rTask " << t;
          EXPECT_EQ(first % plane, 0) << "rTask " << t << " starts inside a plane";
          EXPECT_EQ((last + 1) % plane, 0) << "rTask " << t << " ends inside a plane";
          next = last + 1;
        } else {  // pixel blocks: a piece of every plane
          EXPECT_LT(first, plane) << "rTask " << t;
          EXPECT_GE(last, (cs.cout - 1) * plane) << "rTask " << t;
          EXPECT_LT(written, last - first + 1) << "rTask " << t << " wrote whole planes";
        }
      }
      if (whole_planes) {
        EXPECT_EQ(next, conv.out_elems);
      }
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

}  // namespace
}  // namespace tessera::testing
