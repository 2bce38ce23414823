// Conv and ConvTranspose, 1-D and 2-D (1-D runs as 2-D with height 1).
//
// The im2col, pointwise and depthwise ways of computing a Conv (ConvOp);
// the rKernels that choose among all the ways are in conv_kernels.cc.
//
// Conv tiling: an rTask is one (image, group, output-channel block, pixel
// block). The general path gathers its pixel block's input patches into
// scratch (im2col, [C/g * kh * kw, pixels]) and multiplies by the group's
// weights with one sgemm; a 1x1, stride-1, unpadded conv multiplies the
// input directly; a depthwise conv (one input channel per group) runs a
// direct loop per channel; a 3x3 stride-1 conv with at least 8 channels
// per group and constant weights runs Winograd F(2x2, 3x3) (winograd.cc;
// grouped ones with AVX2 only from 32 channels per group and 400 pixels);
// a dense conv with 1 to 4 input channels (a CNN stem) and constant
// weights runs direct (direct_conv.cc), and so does a grouped conv with
// 2 to 64 channels per group that Winograd does not take
// (grouped_conv.cc). The SIMD depthwise kernel, DwDirect, is in
// dw_direct.h.
//
#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/dw_direct.h"
#include "kernels/cpu/dw_strip.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed_gemm.h"

namespace tessera {
namespace {

// Default grain: an rTask is at least kConvFlopsPerTask (conv2d.h), in
// pixel blocks of at least kMinPixelBlock (the GEMM's N), and a conv big
// enough is still cut into kMinTasks rTasks so every vEU gets some.
constexpr double kDepthwiseFlopsPerTask = 1 << 18;
constexpr int64_t kDwBlock = 16;  // depthwise outputs accumulated together
constexpr int kDwGroup = 4;       // blocks in flight
typedef float DwVec __attribute__((vector_size(kDwBlock * sizeof(float))));
// Depthwise convs whose output rows are narrower than this (7x7 and 14x14
// maps of late layers) and that DwDirect does not take vectorize across
// channels instead of along rows: 16 channels interleaved, one vector per
// pixel. Their padded planes must fit in kDwChannelsMaxPixels.
constexpr int64_t kDwNarrow = 16;
constexpr int64_t kDwChannelsMaxPixels = 4096;
constexpr int64_t kMinPixelBlock = 32;
// im2col columns gathered at once (then multiplied): the L2 share that
// stays hot next to the weights and the output tile.
constexpr size_t kColBytes = size_t{384} << 10;
// Floats past the columns that im2col_s2's whole-vector stores may write.
constexpr int64_t kColSlack = 16;
constexpr int64_t kMinTasks = 2;
constexpr int64_t kMaxSmallBlock = 64;
// 1x1 convs with constant weights and at most kPackedGemmMaxK input
// channels per group multiply with packed_gemm and their epilogue in
// registers; longer reductions keep sgemm (packed_gemm.h). On one thread, packed_gemm
// against sgemm with a pass for bias and Clip: K = 16: 49 / 62 us
// (96 x 3136 outputs); K = 32: 6.0 / 8.5 us (32 x 512); K = 160: 23.6 /
// 29.3 us (32 x 512); K = 96 equal (32 / 34 us, 24 x 1568). Builds
// whose packed_gemm is portable loops keep sgemm.
//
// Where packed_gemm takes a few columns past a multiple of 48 along in
// one pass over the weights (AVX-512 with VL: packed_gemm.cc), small
// planes use it at any K: there the weights outweigh the plane, and
// sgemm's second look at them costs more than its better blocking of B
// saves. On one thread, 400 x 400 by 49 pixels took 158 us against 172
// with sgemm (178 against 247 with the weights streamed from L3); at 196
// pixels 700 against 738; at 784, 3170 against 2790: large planes keep
// sgemm.
#if defined(TESSERA_SIMD)
#if defined(__AVX512F__) && defined(__AVX512VL__)
constexpr int64_t kPackedPointwiseSmallPlane = 256;
#else
constexpr int64_t kPackedPointwiseSmallPlane = 0;
#endif
#endif

class ConvOp : public ROp {
 public:
  enum class Path { kIm2col, kPointwise, kDepthwise, kDepthwiseChannels };

  // `path`: kIm2col (any conv), kPointwise (conv_is_pointwise) or
  // kDepthwise (conv_is_depthwise; it may run by channels instead).
  // `weights`: the constant weights, or null when they are an input.
  // `out_planes`: a 1x1's rTasks take blocks of whole output planes (see
  // below).
  ConvOp(const Conv2d& c, Path path, bool has_bias, const Epilogue& epi, const float* weights, const KernelParams& p,
         bool out_planes)
      : c_(c), has_bias_(has_bias), epi_(epi) {
    cin_g_ = c.cin / c.group;
    cout_g_ = c.cout / c.group;
    pixels_ = c.oh * c.ow;
    kdim_ = cin_g_ * c.kh * c.kw;
    path_ = path;
    // A 1x1 conv at stride 1 without padding needs no im2col: its input
    // already is the GEMM's B. The im2col rKernel runs it as one sgemm on
    // the input (the pointwise path, weights left unpacked) instead of
    // copying every plane first.
    if (path_ == Path::kIm2col && c.kh == 1 && c.kw == 1 && c.sh == 1 && c.sw == 1 && c.ph == 0 && c.pw == 0 &&
        c.ih == c.oh && c.iw == c.ow) {
      path_ = Path::kPointwise;
      weights = nullptr;  // sgemm, not packed_gemm
    }
    double flops = 2.0 * c.batch * c.cout * pixels_ * kdim_;
    int64_t outer = c.batch * c.group;
    int64_t target = p.tasks > 0 ? p.tasks
                                 : std::clamp<int64_t>(static_cast<int64_t>(flops / kConvFlopsPerTask), 1, kMaxDefaultTasks);
    int64_t per = std::max<int64_t>(1, (target + outer - 1) / outer);
    if (outer >= target) per = 1;
    if (path_ == Path::kDepthwise) {
      // Streams its input at a few FLOPs per byte: a finer grain than the
      // GEMM paths. Channels are blocked (cb_ blocks of whole planes) until
      // there are more rTasks wanted than planes; then row blocks.
      if (p.tasks <= 0)
        target = std::clamp<int64_t>(static_cast<int64_t>(flops / kDepthwiseFlopsPerTask), 1, kMaxDefaultTasks);
      hp_ = (c.oh - 1) * c.sh + (c.kh - 1) * c.dh + 1;
      const int64_t wq = (c.ow - 1) * c.sw + (c.kw - 1) * c.dw + 1;
      // With AVX-512, DwDirect takes the strides it has (measured faster
      // than by channels on 7x7 and 14x14 maps too: 3x3 on 14x14, 576
      // channels, 45 against 120 us); narrow planes at stride 1 run flat
      // when rTasks are whole planes.
#if defined(TESSERA_SIMD)
      const bool direct = DwDirect::rows_ok(c);
      const bool flat = c.ow < kDwNarrow && DwDirect::flat_ok(c) && target <= outer;
#else
      const bool direct = false;
#endif
      if (!direct && c.ow < kDwNarrow && hp_ * wq <= kDwChannelsMaxPixels) {
        // rTasks are blocks of 16-channel groups (per image), whole planes.
        path_ = Path::kDepthwiseChannels;
        wp_ = wq;
        groups_per_image_ = (c.group + kDwBlock - 1) / kDwBlock;
        cb_ = std::clamp<int64_t>(target, 1, c.batch * groups_per_image_);
        tasks_ = cb_;
        scratch_bytes_ = static_cast<size_t>((hp_ * wp_ + c.kh * c.kw) * kDwBlock) * sizeof(float);
        return;
      }
      cb_ = std::min(outer, target);
      ob_ = 1;
      pb_ = target > outer ? std::clamp<int64_t>((target + outer - 1) / outer, 1, c.oh) : 1;  // row blocks
      tasks_ = cb_ * pb_;
      // A zero-padded copy of the input rows a task reads: the tap loops
      // then run over whole output rows with no bounds.
      // Rows: hp_ above; columns: enough for output rows rounded up to
      // whole vector blocks.
      const int64_t ow_pad = (c.ow + kDwBlock - 1) / kDwBlock * kDwBlock;
      wp_ = (ow_pad - 1) * c.sw + (c.kw - 1) * c.dw + 1;
      scratch_bytes_ = static_cast<size_t>((hp_ + 1) * wp_ + 1 + kPadRowSlack) * sizeof(float);
#if defined(TESSERA_DW_STRIP)
      // With AVX2, 3x3 and 5x5 windows at stride 1 or 2 run in strips,
      // but for rows of less than one vector, which run flat (MobileNetV2's
      // 7x7 layers: flat 16.7 us per rTask, strips 19.6) when rTasks are
      // whole planes. Where strips add the taps in another order than
      // DwDirect (DwStrip::by_columns), rows of less than a vector stay on
      // DwDirect in every tiling, so that every tiling has the same bits.
      if ((c.ow >= DwStrip::kLanes || (!flat && !DwStrip::by_columns(c))) && strip_.init(c)) {
        use_strip_ = true;
        epi_fused_ = strip_.fuse(epi_);
        scratch_bytes_ = static_cast<size_t>(strip_.scratch_floats()) * sizeof(float);
        return;
      }
#endif
#if defined(TESSERA_SIMD)
      if (direct_.init(c, flat)) {  // no padded copy: scratch is one zero row
        use_direct_ = true;
        epi_fused_ = direct_.fuse(epi_);
        scratch_bytes_ = static_cast<size_t>(c.iw) * sizeof(float);
        return;
      }
#endif
      return;
    } else {
      // im2col: pixel blocks (of at least 8 pixels) first, each rTask
      // computing all of its group's output channels, so im2col happens
      // once per pixel. Output channels are split (in blocks of at least
      // 16, each redoing its pixel block's im2col) only when pixels run
      // out.
      const int64_t want = p.tasks > 0 ? p.tasks : kMinTasks;
      const int64_t max_pb = std::max<int64_t>(1, pixels_ / kMinPixelBlock);
      const int64_t max_ob = std::max<int64_t>(1, cout_g_ / 16);
      if (path_ == Path::kPointwise && (cout_g_ > pixels_ || (out_planes && max_ob >= want))) {
        // A 1x1 has no im2col to share. Output-channel blocks come first
        // where the weights outweigh the input (every pixel block would
        // read all of them, and a GEMM a few columns wide runs as whole
        // vectors plus a pass for the rest, reading them again), and
        // where the compiler marked the conv out_planes (mark_out_planes:
        // no reader cuts pixels) and there are planes enough for the
        // rTasks asked: each rTask then writes whole planes, the part its
        // readers give the same vEU. Pixel blocks write a
        // piece of every plane, so each reader on another core would
        // fetch half its data from there, and the next write to those
        // bytes invalidate the reader's copies. Alone the two tilings
        // cost the same; NASNet-like's 2-vEU runs on two cores took 9 %
        // less time.
        ob_ = std::clamp<int64_t>(per, 1, max_ob);
        pb_ = ob_ >= want ? 1 : std::clamp<int64_t>(want / ob_, 1, max_pb);
      } else {
        pb_ = std::clamp<int64_t>(per, 1, max_pb);
        ob_ = pb_ >= want ? 1 : std::clamp<int64_t>(want / pb_, 1, max_ob);
      }
    }
    tasks_ = outer * ob_ * pb_;
#if defined(TESSERA_SIMD)
    if (path_ == Path::kPointwise && weights != nullptr &&
        (kdim_ <= kPackedGemmMaxK || pixels_ <= kPackedPointwiseSmallPlane))
      pack_pointwise(weights);
#else
    (void)weights;
#endif
    if (path_ == Path::kIm2col) {
      // An rTask's pixel block is gathered and multiplied in chunks whose
      // columns fit kColBytes, so that the GEMM reads them from cache.
      const int64_t max_px = (pixels_ + pb_ - 1) / pb_;
      chunk_px_ = std::clamp<int64_t>(static_cast<int64_t>(kColBytes / (kdim_ * sizeof(float))) / 16 * 16,
                                      kMinPixelBlock, std::max<int64_t>(max_px, 1));
      // A pixel block only a few vectors wide goes in one chunk (sgemm then
      // splits off its partial vector): ResNet-18's last 3x3 convs (49
      // pixels, K = 4608) ran 48 + 1 in 590 us, 32 + 17 in 700.
      if (max_px <= kMaxSmallBlock) chunk_px_ = max_px;
      scratch_bytes_ = static_cast<size_t>(kdim_ * chunk_px_ + kColSlack) * sizeof(float);
    }
  }

  // For the scheduler (kernel.h, Access): depthwise rTasks of whole planes
  // and dense rTasks of output-channel blocks write flat ranges (the
  // former reading the same planes, the latter all of the input); pixel
  // or row blocks touch a part of every plane. The residual is read as
  // the output is written.
  void describe_access() {
    const bool depthwise = path_ == Path::kDepthwise || path_ == Path::kDepthwiseChannels;
    const bool ranges = pb_ == 1;
    const Access x = depthwise && ranges ? Access::kRange : (ranges ? Access::kWhole : Access::kSpread);
    const Access y = ranges ? Access::kRange : Access::kSpread;
    set_access({x, Access::kWhole, Access::kWhole, y}, y);
  }

  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(packed_)}; }
  std::string_view path() const override {
    switch (path_) {
      case Path::kIm2col: return "im2col + sgemm";
      case Path::kPointwise: return packed_.empty() ? "1x1 sgemm" : "1x1 packed";
#if defined(TESSERA_SIMD)
      case Path::kDepthwise:
#if defined(TESSERA_DW_STRIP)
        if (use_strip_) return "depthwise strips";
#endif
        if (!use_direct_) return "depthwise padded";
        return direct_.flat() ? "depthwise flat" : "depthwise rows";
#else
      case Path::kDepthwise: return "depthwise padded";
#endif
      case Path::kDepthwiseChannels: return "depthwise by channels";
    }
    return {};
  }

  void run(int64_t task, const TaskArgs& args) const override {
    const float* x = static_cast<const float*>(args.in[0]);
    const float* w = static_cast<const float*>(args.in[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    if (path_ == Path::kDepthwiseChannels) {
      int64_t g0, g1;
      task_range(c_.batch * groups_per_image_, cb_, task, &g0, &g1);
      for (int64_t gi = g0; gi < g1; ++gi) {
        const int64_t n = gi / groups_per_image_, ch0 = gi % groups_per_image_ * kDwBlock;
        const int64_t m = std::min(kDwBlock, c_.group - ch0);
        depthwise_channels(x, w, bias, y, static_cast<float*>(args.scratch), n, ch0, m);
        if (!epi_.empty()) {
          const int64_t off = (n * c_.cout + ch0) * pixels_;
          epi_.apply(y + off, epi_.residual ? static_cast<const float*>(args.in[3]) + off : nullptr, m * pixels_);
        }
      }
      return;
    }
    if (path_ == Path::kDepthwise) {
      int64_t c0, c1, r0, r1;
      task_range(c_.batch * c_.group, cb_, task / pb_, &c0, &c1);
      task_range(c_.oh, pb_, task % pb_, &r0, &r1);
      float* scratch = static_cast<float*>(args.scratch);
#if defined(TESSERA_SIMD)
      if (use_direct_) std::fill(scratch, scratch + c_.iw, 0.f);
#endif
      for (int64_t o = c0; o < c1; ++o) {
        const int64_t n = o / c_.group, ch = o % c_.group;
        [[maybe_unused]] const float* xc = x + (n * c_.cin + ch) * c_.ih * c_.iw;
        [[maybe_unused]] const float bc = bias ? bias[ch] : 0.f;
#if defined(TESSERA_DW_STRIP)
        if (use_strip_) strip_.rows(xc, w + ch * c_.kh * c_.kw, bc, scratch, y + o * pixels_, r0, r1);
        else
#endif
#if defined(TESSERA_SIMD)
        if (use_direct_) direct_.rows(xc, w + ch * c_.kh * c_.kw, bc, scratch, y + o * pixels_, r0, r1);
        else
#endif
          depthwise(x, w, bias, y, scratch, n, ch, r0, r1);
        if (!epi_.empty() && !epi_fused_) {
          const int64_t off = o * pixels_ + r0 * c_.ow;  // planes are [n][c] = o in order
          epi_.apply(y + off, epi_.residual ? static_cast<const float*>(args.in[3]) + off : nullptr,
                     (r1 - r0) * c_.ow);
        }
      }
      return;
    }
    int64_t outer = task / (ob_ * pb_), rest = task % (ob_ * pb_);
    int64_t n = outer / c_.group, g = outer % c_.group;
    int64_t o0, o1, p0, p1;
    task_range(cout_g_, ob_, rest / pb_, &o0, &o1);
    task_range(pixels_, pb_, rest % pb_, &p0, &p1);
    if (o1 <= o0 || p1 <= p0) return;
    const float* xg = x + (n * c_.cin + g * cin_g_) * c_.ih * c_.iw;
    const float* wg = w + (g * cout_g_ + o0) * kdim_;
    float* yg = y + (n * c_.cout + g * cout_g_ + o0) * pixels_ + p0;
    const int64_t px = p1 - p0;
    if (!packed_.empty()) {
      // Bias, residual and a Relu or Clip in registers; any other
      // activation after, in a pass over the rows.
      const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) + (yg - y) : nullptr;
      GemmPost post;
      post.bias = bias != nullptr ? bias + g * cout_g_ + o0 : nullptr;
      post.res = res;
      post.ldr = pixels_;
      post.clamp = clamp_;
      post.lo = epi_.alpha;
      post.hi = epi_.beta;
      packed_gemm_post(packed_.data() + packed_offset(g, rest / pb_), o1 - o0, kdim_, xg + p0, pixels_, px, yg,
                       pixels_, post);
      if (epi_rest_.act != Epilogue::Act::kNone)
        for (int64_t o = o0; o < o1; ++o) epi_rest_.apply(yg + (o - o0) * pixels_, nullptr, px);
      return;
    }
    if (path_ == Path::kPointwise) {
      sgemm(false, false, o1 - o0, px, kdim_, 1.f, wg, kdim_, xg + p0, pixels_, 0.f, yg, pixels_);
    } else {
      float* col = static_cast<float*>(args.scratch);
      for (int64_t q0 = p0; q0 < p1; q0 += chunk_px_) {
        const int64_t q1 = std::min(p1, q0 + chunk_px_);
        gather(xg, col, q0, q1);
        sgemm(false, false, o1 - o0, q1 - q0, kdim_, 1.f, wg, kdim_, col, q1 - q0, 0.f, yg + (q0 - p0), pixels_);
      }
    }
    if (bias != nullptr) {
      for (int64_t o = o0; o < o1; ++o) {
        float b = bias[g * cout_g_ + o];
        float* row = yg + (o - o0) * pixels_;
        for (int64_t i = 0; i < px; ++i) row[i] += b;
      }
    }
    if (!epi_.empty()) {
      const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
      for (int64_t o = o0; o < o1; ++o) {
        float* row = yg + (o - o0) * pixels_;
        epi_.apply(row, res ? res + (row - y) : nullptr, px);
      }
    }
  }

 private:
  // col = im2col of pixels [q0, q1) of the group at xg, by the fastest
  // gather the geometry allows.
  void gather(const float* xg, float* col, int64_t q0, int64_t q1) const {
#if defined(TESSERA_SIMD)
    if (c_.sh == 1 && c_.sw == 1 && c_.ow == c_.iw) im2col_flat(xg, col, q0, q1);
    else if (c_.sw == 2) im2col_s2(xg, col, q0, q1);
    else im2col(xg, col, q0, q1);
#else
    im2col(xg, col, q0, q1);
#endif
  }

  // Packs each (group, output-channel block)'s weights for packed_gemm and
  // splits the epilogue into what the GEMM applies in registers and the
  // activation left for a pass after it.
  void pack_pointwise(const float* w) {
    packed_block_ = packed_size((cout_g_ + ob_ - 1) / ob_, kdim_);
    packed_.assign(static_cast<size_t>(c_.group * ob_) * packed_block_, 0.f);
    for (int64_t g = 0; g < c_.group; ++g)
      for (int64_t b = 0; b < ob_; ++b) {
        int64_t o0, o1;
        task_range(cout_g_, ob_, b, &o0, &o1);
        if (o1 > o0) pack_rows(w + (g * cout_g_ + o0) * kdim_, o1 - o0, kdim_, kdim_, packed_.data() + packed_offset(g, b));
      }
    if (epi_.act == Epilogue::Act::kRelu) clamp_ = GemmPost::Clamp::kRelu;
    else if (epi_.act == Epilogue::Act::kClip) clamp_ = GemmPost::Clamp::kClip;
    else epi_rest_.act = epi_.act, epi_rest_.alpha = epi_.alpha, epi_rest_.beta = epi_.beta;
  }
  size_t packed_offset(int64_t g, int64_t block) const { return static_cast<size_t>(g * ob_ + block) * packed_block_; }

#if defined(__AVX512F__)
  // im2col for stride 1 with the output as wide as the input: output pixel
  // p reads input pixel p + shift(tap), so a block of 16 pixels (across
  // row ends) is one masked load per channel and tap, the mask (the lanes
  // whose tap lies inside the plane) shared by every channel. No call per
  // run of a row, which on 7x7 and 14x14 maps is most of the work.
  void im2col_flat(const float* xg, float* col, int64_t p0, int64_t p1) const {
    const int64_t px = p1 - p0, taps = c_.kh * c_.kw, plane = c_.ih * c_.iw, ow = c_.ow;
    alignas(64) int32_t oy[16], ox[16];
    for (int64_t b0 = p0; b0 < p1; b0 += 16) {
      const int64_t n = std::min<int64_t>(16, p1 - b0);
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t q = b0 + std::min(j, n - 1);
        oy[j] = static_cast<int32_t>(q / ow);
        ox[j] = static_cast<int32_t>(q % ow);
      }
      const __m512i voy = _mm512_load_si512(oy), vox = _mm512_load_si512(ox);
      const __mmask16 tail = static_cast<__mmask16>((1u << n) - 1);
      for (int64_t ky = 0; ky < c_.kh; ++ky) {
        const int64_t dy = ky * c_.dh - c_.ph;
        const __m512i iy = _mm512_add_epi32(voy, _mm512_set1_epi32(static_cast<int32_t>(dy)));
        const __mmask16 rows = _mm512_mask_cmpge_epi32_mask(tail, iy, _mm512_setzero_si512()) &
                               _mm512_cmplt_epi32_mask(iy, _mm512_set1_epi32(static_cast<int32_t>(c_.ih)));
        for (int64_t kx = 0; kx < c_.kw; ++kx) {
          const int64_t dx = kx * c_.dw - c_.pw;
          const __m512i ix = _mm512_add_epi32(vox, _mm512_set1_epi32(static_cast<int32_t>(dx)));
          const __mmask16 m = _mm512_mask_cmpge_epi32_mask(rows, ix, _mm512_setzero_si512()) &
                              _mm512_cmplt_epi32_mask(ix, _mm512_set1_epi32(static_cast<int32_t>(c_.iw)));
          const float* src = xg + b0 + dy * c_.iw + dx;
          float* dst = col + (ky * c_.kw + kx) * px + (b0 - p0);
          for (int64_t ci = 0; ci < cin_g_; ++ci)
            _mm512_mask_storeu_ps(dst + ci * taps * px, tail, _mm512_maskz_loadu_ps(m, src + ci * plane));
        }
      }
    }
  }

#elif defined(TESSERA_SIMD)
  // im2col_flat above with AVX2: 8 pixels a vector, masks as integer
  // lanes.
  void im2col_flat(const float* xg, float* col, int64_t p0, int64_t p1) const {
    using Vec = simd::Vec;
    const int64_t px = p1 - p0, taps = c_.kh * c_.kw, plane = c_.ih * c_.iw, ow = c_.ow;
    alignas(32) int32_t oy[8], ox[8];
    const __m256i zero = _mm256_setzero_si256(), ih = _mm256_set1_epi32(static_cast<int32_t>(c_.ih));
    const __m256i iw = _mm256_set1_epi32(static_cast<int32_t>(c_.iw));
    for (int64_t b0 = p0; b0 < p1; b0 += 8) {
      const int64_t n = std::min<int64_t>(8, p1 - b0);
      for (int64_t j = 0; j < 8; ++j) {
        const int64_t q = b0 + std::min(j, n - 1);
        oy[j] = static_cast<int32_t>(q / ow);
        ox[j] = static_cast<int32_t>(q % ow);
      }
      const __m256i voy = _mm256_load_si256(reinterpret_cast<const __m256i*>(oy));
      const __m256i vox = _mm256_load_si256(reinterpret_cast<const __m256i*>(ox));
      const Vec::Mask tail = Vec::first(n);
      const bool full = n == 8;
      for (int64_t ky = 0; ky < c_.kh; ++ky) {
        const int64_t dy = ky * c_.dh - c_.ph;
        const __m256i iy = _mm256_add_epi32(voy, _mm256_set1_epi32(static_cast<int32_t>(dy)));
        // 0 <= iy < ih: not (iy < 0), and ih > iy.
        const __m256i rows = _mm256_andnot_si256(_mm256_cmpgt_epi32(zero, iy), _mm256_cmpgt_epi32(ih, iy));
        for (int64_t kx = 0; kx < c_.kw; ++kx) {
          const int64_t dx = kx * c_.dw - c_.pw;
          const __m256i ix = _mm256_add_epi32(vox, _mm256_set1_epi32(static_cast<int32_t>(dx)));
          const __m256i m = _mm256_and_si256(
              rows, _mm256_andnot_si256(_mm256_cmpgt_epi32(zero, ix), _mm256_cmpgt_epi32(iw, ix)));
          const float* src = xg + b0 + dy * c_.iw + dx;
          float* dst = col + (ky * c_.kw + kx) * px + (b0 - p0);
          for (int64_t ci = 0; ci < cin_g_; ++ci) {
            const Vec::T v = Vec::load(src + ci * plane, m);
            if (full) Vec::store(dst + ci * taps * px, v);
            else Vec::store(dst + ci * taps * px, tail, v);
          }
        }
      }
    }
  }

#endif
#if defined(TESSERA_SIMD)
  // im2col for column stride 2: a vector of outputs of a row reads two
  // vectors of consecutive inputs (masked only where they cross the row's
  // ends) and keeps the even lanes. Stores are whole vectors: AVX2's masked
  // store is microcoded on AMD cores, and ResNet-18's 64 -> 128 3x3 conv
  // on 56 x 56 spent a third of its rTask in this gather with it.
  void im2col_s2(const float* xg, float* col, int64_t p0, int64_t p1) const {
    using Vec = simd::Vec;
    constexpr int64_t L = Vec::kLanes;
    const int64_t px = p1 - p0, ow = c_.ow, iw = c_.iw;
    for (int64_t ci = 0; ci < cin_g_; ++ci) {
      const float* xc = xg + ci * c_.ih * iw;
      for (int64_t ky = 0; ky < c_.kh; ++ky) {
        for (int64_t kx = 0; kx < c_.kw; ++kx) {
          float* dst = col + ((ci * c_.kh + ky) * c_.kw + kx) * px;
          const int64_t dx = kx * c_.dw - c_.pw;
          for (int64_t pos = p0; pos < p1;) {
            const int64_t oy = pos / ow, ox0 = pos % ow, run = std::min(ow - ox0, p1 - pos);
            const int64_t iy = oy * c_.sh - c_.ph + ky * c_.dh;
            float* d = dst + (pos - p0);
            if (iy < 0 || iy >= c_.ih) {
              std::fill(d, d + run, 0.f);
            } else {
              const float* row = xc + iy * iw;
              for (int64_t j = 0; j < run; j += L) {
                const int64_t a = 2 * (ox0 + j) + dx;  // input column of lane 0
                Vec::T lo, hi, odd;
                if (a >= 0 && a + 2 * L <= iw) {
                  lo = Vec::load(row + a);
                  hi = Vec::load(row + a + L);
                } else {
                  const uint32_t bits = lane_bits(-a, iw - a);
                  lo = Vec::load(row + a, Vec::from_bits(bits));
                  hi = Vec::load(row + a + L, Vec::from_bits(bits >> L));
                }
                Vec::T even;
                Vec::deinterleave(lo, hi, &even, &odd);
                // A whole vector even past the run: what it writes beyond
                // lies where later runs and rows store (col is filled in
                // address order), or in the scratch's slack.
                Vec::store(d + j, even);
              }
            }
            pos += run;
          }
        }
      }
    }
  }
#endif

  // col[r, j] for r over (channel, ky, kx) and j over pixels [p0, p1).
  // Works a run of output pixels (within one output row) at a time: the
  // input columns a run reads are a contiguous (stride 1) or strided span,
  // with zeros where the window hangs over the padding.
  void im2col(const float* xg, float* col, int64_t p0, int64_t p1) const {
    const int64_t px = p1 - p0;
    for (int64_t ci = 0; ci < cin_g_; ++ci) {
      const float* xc = xg + ci * c_.ih * c_.iw;
      for (int64_t ky = 0; ky < c_.kh; ++ky) {
        for (int64_t kx = 0; kx < c_.kw; ++kx) {
          float* dst = col + ((ci * c_.kh + ky) * c_.kw + kx) * px;
          const int64_t off = kx * c_.dw - c_.pw;  // ix = ox * sw + off
          // Output columns whose input column lies inside the row.
          const int64_t ox_lo = off >= 0 ? 0 : (-off + c_.sw - 1) / c_.sw;
          const int64_t lim = c_.iw - 1 - off;
          const int64_t ox_hi = lim < 0 ? 0 : std::min<int64_t>(c_.ow, lim / c_.sw + 1);
          int64_t pos = p0, j = 0;
          while (pos < p1) {
            const int64_t oy = pos / c_.ow, ox0 = pos % c_.ow;
            const int64_t run = std::min(c_.ow - ox0, p1 - pos);
            const int64_t iy = oy * c_.sh - c_.ph + ky * c_.dh;
            float* d = dst + j;
            if (iy < 0 || iy >= c_.ih || ox_hi <= ox_lo) {
              std::memset(d, 0, static_cast<size_t>(run) * sizeof(float));
            } else {
              const float* src = xc + iy * c_.iw;
              const int64_t a = std::clamp(ox_lo, ox0, ox0 + run), b = std::clamp(ox_hi, a, ox0 + run);
              if (a > ox0) std::memset(d, 0, static_cast<size_t>(a - ox0) * sizeof(float));
              if (c_.sw == 1) {
                std::memcpy(d + (a - ox0), src + a + off, static_cast<size_t>(b - a) * sizeof(float));
              } else {
                for (int64_t ox = a; ox < b; ++ox) d[ox - ox0] = src[ox * c_.sw + off];
              }
              if (ox0 + run > b) std::memset(d + (b - ox0), 0, static_cast<size_t>(ox0 + run - b) * sizeof(float));
            }
            pos += run;
            j += run;
          }
        }
      }
    }
  }

  // Output rows [r0, r1) of plane (n, c), where DwDirect does not apply
  // (no AVX-512, or a stride it lacks): the input rows they read are
  // copied into `pad` with their zero padding, then each tap (ky, kx) adds
  // w * input to a whole output row in one unit- or fixed-stride pass. The
  // taps are added in (ky, kx) order; a tap over the padding adds w * 0.
  void depthwise(const float* x, const float* w, const float* bias, float* y, float* pad, int64_t n, int64_t c,
                 int64_t r0, int64_t r1) const {
    const float* xc = x + (n * c_.cin + c) * c_.ih * c_.iw;
    const float* wc = w + c * c_.kh * c_.kw;
    float* yc = y + (n * c_.cout + c) * pixels_;
    const float b = bias ? bias[c] : 0.f;
    const int64_t y_lo = r0 * c_.sh, y_hi = (r1 - 1) * c_.sh + (c_.kh - 1) * c_.dh + 1;  // padded rows read
    const int64_t x_lo = std::min<int64_t>(c_.pw, wp_), x_hi = std::clamp<int64_t>(c_.pw + c_.iw, x_lo, wp_);
    const RowPadder padder(wp_, x_lo, x_hi);
    for (int64_t py = y_lo; py < y_hi; ++py) {
      float* dst = pad + py * wp_;
      const int64_t iy = py - c_.ph;
      if (iy < 0 || iy >= c_.ih) padder.zeros(dst);
      else padder.row(dst, xc + iy * c_.iw - c_.pw);
    }
    // Blocks of kDwBlock outputs, each accumulated in a vector register
    // over all taps, kDwGroup blocks at once to hide the add latency: one
    // load and one multiply-add per tap and block, no remainder loops.
    const int64_t ow = c_.ow;
    for (int64_t oy = r0; oy < r1; ++oy) {
      float* out = yc + oy * ow;
      const float* base = pad + oy * c_.sh * wp_;
      for (int64_t ox0 = 0; ox0 < ow; ox0 += kDwGroup * kDwBlock) {
        const int64_t left = std::min<int64_t>(ow - ox0, kDwGroup * kDwBlock);
        const int blocks = static_cast<int>((left + kDwBlock - 1) / kDwBlock);
        switch (blocks) {
          case 4: dw_blocks<4>(base, wc, b, ox0, left, out); break;
          case 3: dw_blocks<3>(base, wc, b, ox0, left, out); break;
          case 2: dw_blocks<2>(base, wc, b, ox0, left, out); break;
          default: dw_blocks<1>(base, wc, b, ox0, left, out); break;
        }
      }
    }
  }

  // Channels [ch0, ch0 + m) (m <= 16) of image n, whole planes: the
  // padded input goes to `pad` interleaved, [hp][wp][16], the weights to
  // [kh][kw][16]; then every output pixel is one vector of 16 channels
  // accumulated over the taps in (ky, kx) order, four pixels at a time to
  // hide the add latency. Lanes past m compute on zeros and are dropped.
  void depthwise_channels(const float* x, const float* w, const float* bias, float* y, float* pad, int64_t n,
                          int64_t ch0, int64_t m) const {
    constexpr int64_t L = kDwBlock;
    float* wt = pad + hp_ * wp_ * L;
    const int64_t taps = c_.kh * c_.kw;
    std::fill(pad, wt + taps * L, 0.f);
    for (int64_t j = 0; j < m; ++j) {
      const float* xc = x + (n * c_.cin + ch0 + j) * c_.ih * c_.iw;
      for (int64_t iy = std::max<int64_t>(0, -c_.ph); iy < c_.ih && iy + c_.ph < hp_; ++iy)
        for (int64_t ix = std::max<int64_t>(0, -c_.pw); ix < c_.iw && ix + c_.pw < wp_; ++ix)
          pad[((iy + c_.ph) * wp_ + ix + c_.pw) * L + j] = xc[iy * c_.iw + ix];
      for (int64_t t = 0; t < taps; ++t) wt[t * L + j] = w[(ch0 + j) * taps + t];
    }
    DwVec b;
    for (int64_t j = 0; j < L; ++j) b[j] = bias != nullptr && j < m ? bias[ch0 + j] : 0.f;
    float* yc = y + (n * c_.cout + ch0) * pixels_;
    const int64_t ow = c_.ow;
    for (int64_t oy = 0; oy < c_.oh; ++oy) {
      for (int64_t ox0 = 0; ox0 < ow; ox0 += 4) {
        const int np = static_cast<int>(std::min<int64_t>(4, ow - ox0));
        DwVec acc[4] = {b, b, b, b};
        for (int64_t ky = 0; ky < c_.kh; ++ky) {
          const float* row = pad + (oy * c_.sh + ky * c_.dh) * wp_ * L;
          for (int64_t kx = 0; kx < c_.kw; ++kx) {
            DwVec wv;
            std::memcpy(&wv, wt + (ky * c_.kw + kx) * L, sizeof wv);
            const float* px = row + (ox0 * c_.sw + kx * c_.dw) * L;
            for (int q = 0; q < 4; ++q) {
              if (q >= np) break;
              DwVec v;
              std::memcpy(&v, px + q * c_.sw * L, sizeof v);
              acc[q] += wv * v;
            }
          }
        }
        for (int q = 0; q < np; ++q)
          for (int64_t j = 0; j < m; ++j) yc[j * pixels_ + oy * ow + ox0 + q] = acc[q][j];
      }
    }
  }

  // The first min(count, kDwBlock) lanes of v to out.
  static void store_block(const DwVec& v, int64_t count, float* out) {
    if (count >= kDwBlock) {
      std::memcpy(out, &v, sizeof v);
    } else {
      for (int64_t j = 0; j < count; ++j) out[j] = v[j];
    }
  }

  // kNb blocks of kDwBlock outputs from column ox0 of one output row (of
  // which `count` are real), each accumulated in a vector register over
  // all taps; several blocks in flight hide the add latency.
  template <int kNb>
  void dw_blocks(const float* base, const float* wc, float b, int64_t ox0, int64_t count, float* out) const {
    DwVec acc[kNb];
#pragma GCC unroll 4
    for (int g = 0; g < kNb; ++g) acc[g] = DwVec{} + b;
    const int64_t sw = c_.sw;
    for (int64_t ky = 0; ky < c_.kh; ++ky) {
      const float* rowp = base + ky * c_.dh * wp_;
      for (int64_t kx = 0; kx < c_.kw; ++kx) {
        const float* sp = rowp + kx * c_.dw + ox0 * sw;
        const float wv = wc[ky * c_.kw + kx];
#pragma GCC unroll 4
        for (int g = 0; g < kNb; ++g) {
          DwVec v;
          if (sw == 1) std::memcpy(&v, sp + g * kDwBlock, sizeof v);
          else
            for (int64_t j = 0; j < kDwBlock; ++j) v[j] = sp[(g * kDwBlock + j) * sw];
          acc[g] += wv * v;
        }
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < kNb; ++g) store_block(acc[g], count - g * kDwBlock, out + ox0 + g * kDwBlock);
  }

  Conv2d c_;
  bool has_bias_;
  Epilogue epi_;
  Path path_;
  int64_t cin_g_, cout_g_, pixels_, kdim_;
  int64_t ob_ = 1, pb_ = 1;  // blocks of output channels and of pixels (rows for depthwise)
  int64_t chunk_px_ = 1;     // im2col: pixels gathered per GEMM
  int64_t cb_ = 1;           // depthwise: blocks of (image, channel) planes
  int64_t hp_ = 0, wp_ = 0;  // depthwise: the padded input plane
  int64_t groups_per_image_ = 1;  // depthwise by channels: 16-channel groups
#if defined(TESSERA_SIMD)
  DwDirect direct_;
  bool use_direct_ = false;
#if defined(TESSERA_DW_STRIP)
  DwStrip strip_;
  bool use_strip_ = false;
#endif
#endif
  bool epi_fused_ = false;  // the depthwise path applies the epilogue itself
  // Pointwise with packed weights (empty otherwise): one block of
  // packed_block_ floats per (group, output-channel block).
  std::vector<float> packed_;
  size_t packed_block_ = 0;
  GemmPost::Clamp clamp_ = GemmPost::Clamp::kNone;
  Epilogue epi_rest_;  // the activation packed_gemm_post does not apply
};

}  // namespace

std::unique_ptr<ROp> make_conv_op(const Conv2d& c, ConvPath path, bool has_bias, const Epilogue& epi, const float* w,
                                  const KernelParams& p, bool out_planes) {
  const ConvOp::Path q = path == ConvPath::kPointwise   ? ConvOp::Path::kPointwise
                         : path == ConvPath::kDepthwise ? ConvOp::Path::kDepthwise
                                                        : ConvOp::Path::kIm2col;
  auto op = std::make_unique<ConvOp>(c, q, has_bias, epi, w, p, out_planes);
  op->describe_access();
  return op;
}

Result<Conv2d> conv2d_from(const WindowGeometry& g, const Shape& x, int64_t cout, int64_t group) {
  if (g.spatial > 2) return unimplemented("3-D convolution is not supported");
  Conv2d c{};
  c.batch = x[0];
  c.cin = x[1];
  c.cout = cout;
  c.group = group;
  bool one = g.spatial == 1;
  c.ih = one ? 1 : g.in[0];
  c.iw = g.in[one ? 0 : 1];
  c.oh = one ? 1 : g.out[0];
  c.ow = g.out[one ? 0 : 1];
  c.kh = one ? 1 : g.kernel[0];
  c.kw = g.kernel[one ? 0 : 1];
  c.sh = one ? 1 : g.strides[0];
  c.sw = g.strides[one ? 0 : 1];
  c.dh = one ? 1 : g.dilations[0];
  c.dw = g.dilations[one ? 0 : 1];
  c.ph = one ? 0 : g.pads_begin[0];
  c.pw = g.pads_begin[one ? 0 : 1];
  return c;
}


}  // namespace tessera
