// TesseraInvertedResidual: MobileNetV2's block (1x1 expand conv + Relu or
// Clip, depthwise conv + Relu or Clip, 1x1 project conv + optional
// residual and activation) as one rOperator, made by the fusion pass
// (compiler/fuse.cc). Unfused, the expanded tensor (6x the block's input
// channels, on the input's full map) is written by the expand conv, read
// and the depthwise output written by the next, and read by the project:
// on MobileNetV2's 112x112 and 56x56 stages that is 1.8-4.8 MB a tensor,
// past L2, while the convs around it are short reductions (K = 16 to 32)
// bound by those bytes.
//
// Here an rTask takes a range of output rows and works them in strips
// sized to stay in L2: the expand conv computes the input rows the
// strip's depthwise windows read (all expanded channels) into scratch,
// the depthwise conv reads them there and writes the strip's rows into
// scratch, and the project conv reads those and writes the output rows.
// Consecutive strips of one rTask share input rows (2 for a 3x3 at
// stride 1): they are moved to the front of the buffer, not computed
// again; only rTask boundaries compute them twice.
//
// The arithmetic per output is that of the unfused kernels' paths (packed
// GEMM for the 1x1 convs with a short reduction, sgemm for a long one;
// the AVX-512/AVX2 depthwise rows of dw_direct.h), so results match the
// unfused ops to rounding (bitwise where the unfused depthwise takes the
// same rows path).
//
// Off by default (CompileConfig::fuse_blocks, `--block-fusion`): on
// MobileNetV2's six blocks on maps of 28 rows or more, profiled alone, the
// fused op is more work than the three ops (block 2: 962 against 777 us),
// and whole runs did not gain beyond the host's noise
// (docs/notes/2026-11-24-kernels-fusion-plans.md, "Inverted residual blocks").
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/strings.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/dw_direct.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed_gemm.h"

namespace tessera {
namespace {

// Default grain: FLOPs per rTask, as the conv kernels'.
constexpr double kFlopsPerTask = 1 << 23;
// Default grain, at least: rTask boundaries compute the input rows both
// sides read twice (2 of every 8 for a 3x3 at stride 1).
constexpr int64_t kMinTaskRows = 8;
// A strip's expanded input rows and depthwise output rows take at most
// this much scratch (when one output row fits).
constexpr int64_t kStripBytes = 384 << 10;

// An activation the strips apply in registers (Relu or Clip) or none.
struct Clamp {
  Epilogue::Act act = Epilogue::Act::kNone;
  float lo = 0, hi = 0;
  GemmPost::Clamp post() const {
    return act == Epilogue::Act::kRelu ? GemmPost::Clamp::kRelu
           : act == Epilogue::Act::kClip ? GemmPost::Clamp::kClip
                                         : GemmPost::Clamp::kNone;
  }
  float operator()(float v) const {
    if (act == Epilogue::Act::kRelu) return v > 0 ? v : 0.f;
    if (act == Epilogue::Act::kClip) return v < lo ? lo : (v > hi ? hi : v);
    return v;
  }
};

class InvertedResidualOp : public ROp {
 public:
  // `d`: the depthwise conv's geometry (its input is the expanded tensor,
  // cin = cout = group = expanded channels); cin: the block's input
  // channels, cout: its output channels.
  InvertedResidualOp(const Conv2d& d, int64_t cin, int64_t cout, const float* w1, const float* w3, bool b1, bool b2,
                     bool b3, Clamp act1, Clamp act2, const Epilogue& epi3, const KernelParams& p)
      : d_(d), cin_(cin), cexp_(d.cin), cout_(cout), b1_(b1), b2_(b2), b3_(b3), act1_(act1), act2_(act2),
        epi3_(epi3) {
    const double flops = 2.0 * d.batch *
                         (static_cast<double>(cexp_) * cin * d.ih * d.iw +
                          static_cast<double>(cexp_) * d.kh * d.kw * d.oh * d.ow +
                          static_cast<double>(cout) * cexp_ * d.oh * d.ow);
    const int64_t rows = d.batch * d.oh;
    const int64_t grain = std::max<int64_t>(kMinTaskRows, static_cast<int64_t>(rows * kFlopsPerTask / flops));
    tasks_ = choose_tasks(rows, grain, p);
    // Strip height: the most output rows whose buffers fit kStripBytes.
    strip_ = 1;
    while (strip_ < d.oh && buffer_floats(strip_ + 1) * static_cast<int64_t>(sizeof(float)) <= kStripBytes) ++strip_;
    cap_ = input_rows(strip_);
    scratch_bytes_ = static_cast<size_t>(buffer_floats(strip_) + d.iw) * sizeof(float);
    pack1_.assign(packed_size(cexp_, cin_), 0.f);
    pack_rows(w1, cexp_, cin_, cin_, pack1_.data());
    if (cexp_ <= kPackedGemmMaxK) {
      pack3_.assign(packed_size(cout_, cexp_), 0.f);
      pack_rows(w3, cout_, cexp_, cexp_, pack3_.data());
    }
    clamp3_.act = epi3.act == Epilogue::Act::kRelu || epi3.act == Epilogue::Act::kClip ? epi3.act
                                                                                         : Epilogue::Act::kNone;
    clamp3_.lo = epi3.alpha, clamp3_.hi = epi3.beta;
    if (clamp3_.act == Epilogue::Act::kNone) rest3_.act = epi3.act, rest3_.alpha = epi3.alpha, rest3_.beta = epi3.beta;
#if defined(TESSERA_SIMD)
    direct_ = DwDirect::rows_ok(d) && dw_.init(d, false);
    if (direct_ && act2_.act != Epilogue::Act::kNone) {
      Epilogue e;
      e.act = act2_.act, e.alpha = act2_.lo, e.beta = act2_.hi;
      dw_fused_ = dw_.fuse(e);
    }
#endif
  }

  std::string_view path() const override { return direct_ ? "strips, depthwise rows" : "strips, depthwise loops"; }
  std::vector<std::span<const std::byte>> resident() const override {
    return {resident_bytes(pack1_), resident_bytes(pack3_)};
  }

  // Inputs: x, w1, b1, w2, b2, w3, b3, residual (biases and the residual
  // may be absent).
  void run(int64_t task, const TaskArgs& args) const override {
    const float* x = static_cast<const float*>(args.in[0]);
    const float* w2 = static_cast<const float*>(args.in[3]);
    const float* w3 = static_cast<const float*>(args.in[5]);
    const float* res = epi3_.residual ? static_cast<const float*>(args.in[7]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* e = static_cast<float*>(args.scratch);
    float* dbuf = e + cexp_ * cap_ * d_.iw;
    float* zero = dbuf + cexp_ * strip_ * d_.ow;
    std::fill(zero, zero + d_.iw, 0.f);
    int64_t q0, q1;
    task_range(d_.batch * d_.oh, tasks_, task, &q0, &q1);
    for (int64_t n = q0 / d_.oh; n * d_.oh < q1; ++n) {
      const int64_t r0 = std::max<int64_t>(q0 - n * d_.oh, 0), r1 = std::min(q1 - n * d_.oh, d_.oh);
      int64_t have0 = 0, have1 = 0;  // input rows in e
      for (int64_t s0 = r0; s0 < r1; s0 += strip_) {
        const int64_t s1 = std::min(r1, s0 + strip_);
        strip(args, x + n * cin_ * d_.ih * d_.iw, w2, w3, res ? res + n * cout_ * d_.oh * d_.ow : nullptr,
              y + n * cout_ * d_.oh * d_.ow, e, dbuf, zero, s0, s1, &have0, &have1);
      }
    }
  }

 private:
  // Input rows the depthwise windows of `rows` consecutive output rows span.
  int64_t input_rows(int64_t rows) const { return (rows - 1) * d_.sh + (d_.kh - 1) * d_.dh + 1; }
  int64_t buffer_floats(int64_t rows) const { return cexp_ * (input_rows(rows) * d_.iw + rows * d_.ow); }

  // Output rows [s0, s1) of one image.
  void strip(const TaskArgs& args, const float* x, const float* w2, const float* w3, const float* res, float* y,
             float* e, float* dbuf, const float* zero, int64_t s0, int64_t s1, int64_t* have0, int64_t* have1) const {
    const float* b1 = b1_ ? static_cast<const float*>(args.in[2]) : nullptr;
    const float* b2 = b2_ ? static_cast<const float*>(args.in[4]) : nullptr;
    const float* b3 = b3_ ? static_cast<const float*>(args.in[6]) : nullptr;
    const int64_t iw = d_.iw, lde = cap_ * iw, ldd = strip_ * d_.ow, plane_out = d_.oh * d_.ow;
    const int64_t iy0 = std::clamp<int64_t>(s0 * d_.sh - d_.ph, 0, d_.ih);
    const int64_t iy1 = std::clamp<int64_t>((s1 - 1) * d_.sh - d_.ph + (d_.kh - 1) * d_.dh + 1, iy0, d_.ih);
    // Expand: rows the last strip left are moved to the front; the rest
    // computed.
    int64_t from = iy0;
    if (*have0 <= iy0 && iy0 < *have1) {
      const int64_t keep = std::min(*have1, iy1) - iy0;
      if (iy0 > *have0)
        for (int64_t c = 0; c < cexp_; ++c)
          std::memmove(e + c * lde, e + c * lde + (iy0 - *have0) * iw, static_cast<size_t>(keep * iw) * sizeof(float));
      from = iy0 + keep;
    }
    if (iy1 > from) {
      GemmPost post;
      post.bias = b1;
      post.clamp = act1_.post();
      post.lo = act1_.lo, post.hi = act1_.hi;
      packed_gemm_post(pack1_.data(), cexp_, cin_, x + from * iw, d_.ih * iw, (iy1 - from) * iw,
                       e + (from - iy0) * iw, lde, post);
    }
    *have0 = iy0, *have1 = iy1;
    // Depthwise: e holds input rows [iy0, iy1) of each channel, so the
    // plane it stands for starts iy0 rows before; the windows of rows
    // [s0, s1) read no row outside those (or the zero row, past the map).
    for (int64_t c = 0; c < cexp_; ++c) {
      const float* plane = e + c * lde - iy0 * iw;
      const float* wc = w2 + c * d_.kh * d_.kw;
      const float bc = b2 != nullptr ? b2[c] : 0.f;
      float* out = dbuf + c * ldd - s0 * d_.ow;
#if defined(TESSERA_SIMD)
      if (direct_) {
        dw_.rows(plane, wc, bc, zero, out, s0, s1);
        if (!dw_fused_ && act2_.act != Epilogue::Act::kNone)
          for (int64_t i = s0 * d_.ow; i < s1 * d_.ow; ++i) out[i] = act2_(out[i]);
        continue;
      }
#endif
      depthwise_rows(plane, wc, bc, out, s0, s1);
    }
    // Project, with its bias, residual and activation.
    const int64_t px = (s1 - s0) * d_.ow;
    float* yo = y + s0 * d_.ow;
    const float* ro = res != nullptr ? res + s0 * d_.ow : nullptr;
    if (!pack3_.empty()) {
      GemmPost post;
      post.bias = b3;
      post.res = ro;
      post.ldr = plane_out;
      post.clamp = clamp3_.post();
      post.lo = clamp3_.lo, post.hi = clamp3_.hi;
      packed_gemm_post(pack3_.data(), cout_, cexp_, dbuf, ldd, px, yo, plane_out, post);
      if (rest3_.act != Epilogue::Act::kNone)
        for (int64_t o = 0; o < cout_; ++o) rest3_.apply(yo + o * plane_out, nullptr, px);
      return;
    }
    sgemm(false, false, cout_, px, cexp_, 1.f, w3, cexp_, dbuf, ldd, 0.f, yo, plane_out);
    for (int64_t o = 0; o < cout_; ++o) {
      float* row = yo + o * plane_out;
      if (b3 != nullptr)
        for (int64_t i = 0; i < px; ++i) row[i] += b3[o];
      epi3_.apply(row, ro != nullptr ? ro + o * plane_out : nullptr, px);
    }
  }

  // The depthwise rows without SIMD kernels: taps in (ky, kx) order.
  void depthwise_rows(const float* plane, const float* wc, float bc, float* out, int64_t s0, int64_t s1) const {
    for (int64_t oy = s0; oy < s1; ++oy)
      for (int64_t ox = 0; ox < d_.ow; ++ox) {
        float acc = 0;
        for (int64_t ky = 0; ky < d_.kh; ++ky) {
          const int64_t iy = oy * d_.sh - d_.ph + ky * d_.dh;
          if (iy < 0 || iy >= d_.ih) continue;
          for (int64_t kx = 0; kx < d_.kw; ++kx) {
            const int64_t ix = ox * d_.sw - d_.pw + kx * d_.dw;
            if (ix >= 0 && ix < d_.iw) acc += plane[iy * d_.iw + ix] * wc[ky * d_.kw + kx];
          }
        }
        out[oy * d_.ow + ox] = act2_(acc + bc);
      }
  }

  Conv2d d_;
  int64_t cin_, cexp_, cout_;
  bool b1_, b2_, b3_;
  Clamp act1_, act2_, clamp3_;
  Epilogue epi3_, rest3_;
  int64_t strip_ = 1, cap_ = 1;  // output rows per strip; input rows it spans
  std::vector<float> pack1_, pack3_;
  bool direct_ = false, dw_fused_ = false;
#if defined(TESSERA_SIMD)
  DwDirect dw_;
#endif
};

Result<Clamp> clamp_from(const Node& n, const std::string& prefix) {
  Clamp c;
  const std::string a = n.attr_string(prefix + "activation", "none");
  c.lo = n.attr_float(prefix + "activation_alpha", 0.f);
  c.hi = n.attr_float(prefix + "activation_beta", 0.f);
  if (a == "Relu") c.act = Epilogue::Act::kRelu;
  else if (a == "Clip") c.act = Epilogue::Act::kClip;
  else if (a != "none") return invalid_argument(str_cat(n.label(), ": ", prefix, "activation must be Relu or Clip"));
  return c;
}

Result<std::unique_ptr<ROp>> make_inverted_residual(const Node& n, const KernelParams& p) {
  // Shapes were checked by infer_inverted_residual.
  const Shape& x = n.inputs[0]->shape;
  const Shape& w2 = n.inputs[3]->shape;
  const int64_t cexp = w2[0];
  const Shape e{x[0], cexp, x[2], x[3]};
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(n, e, {w2[2], w2[3]}));
  auto d = conv2d_from(g, e, cexp, cexp);
  if (!d.ok()) return d.status().with_context(n.label());
  for (int i : {1, 5})
    if (!n.inputs[i]->is_constant() || n.inputs[i]->dtype != DType::kFloat32)
      return invalid_argument(str_cat(n.label(), ": input ", i, " (a 1x1 conv's weights) must be a constant"));
  TESSERA_ASSIGN_OR_RETURN(Clamp act1, clamp_from(n, "expand_"));
  TESSERA_ASSIGN_OR_RETURN(Clamp act2, clamp_from(n, "depthwise_"));
  Node view = n;  // the project conv's epilogue: Epilogue reads a fused node's attributes and input 3
  view.op_type = "TesseraFusedConv";
  view.inputs = {n.inputs[0], n.inputs[5], n.input(6), n.input(7)};
  TESSERA_ASSIGN_OR_RETURN(Epilogue epi3, Epilogue::from_node(view));
  return std::unique_ptr<ROp>(new InvertedResidualOp(
      *d, x[1], n.inputs[5]->shape[0], n.inputs[1]->constant->data<float>(), n.inputs[5]->constant->data<float>(),
      n.input(2) != nullptr, n.input(4) != nullptr, n.input(6) != nullptr, act1, act2, epi3, p));
}

const RKernel kKernels[] = {
    {"TesseraInvertedResidual", "conv.inverted_residual",
     "1x1 expand, depthwise and 1x1 project convs in strips of output rows held in cache", make_inverted_residual},
};

}  // namespace

std::span<const RKernel> inverted_residual_kernels() { return kKernels; }

}  // namespace tessera
