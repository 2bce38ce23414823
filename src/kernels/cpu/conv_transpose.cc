// ConvTranspose: an rTask is one (image, group, output-channel block); it
// multiplies W^T by the input into scratch ([oc_block * kh * kw, in
// pixels]) and scatter-adds the columns into its own output channels
// (col2im), so tasks never write the same element.
#include <algorithm>
#include <vector>

#include "ir/ops/op_registry.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/gemm.h"

namespace tessera {
namespace {


class ConvTransposeOp : public ROp {
 public:
  ConvTransposeOp(const Conv2d& c, bool has_bias, const KernelParams& p) : c_(c), has_bias_(has_bias) {
    cin_g_ = c.cin / c.group;
    cout_g_ = c.cout / c.group;
    in_px_ = c.ih * c.iw;
    int64_t outer = c.batch * c.group;
    double flops = 2.0 * c.batch * c.cin * in_px_ * cout_g_ * c.kh * c.kw;
    int64_t target = p.tasks > 0 ? p.tasks
                                 : std::clamp<int64_t>(static_cast<int64_t>(flops / kConvFlopsPerTask), 1, kMaxDefaultTasks);
    int64_t per = outer >= target ? 1 : (target + outer - 1) / outer;
    ob_ = std::clamp<int64_t>(per, 1, cout_g_);
    tasks_ = outer * ob_;
    int64_t max_oc = (cout_g_ + ob_ - 1) / ob_;
    scratch_bytes_ = static_cast<size_t>(max_oc * c.kh * c.kw * in_px_) * sizeof(float);
  }

  void run(int64_t task, const TaskArgs& args) const override {
    const float* x = static_cast<const float*>(args.in[0]);
    const float* w = static_cast<const float*>(args.in[1]);  // [cin, cout/g, kh, kw]
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    int64_t outer = task / ob_;
    int64_t n = outer / c_.group, g = outer % c_.group;
    int64_t o0, o1;
    task_range(cout_g_, ob_, task % ob_, &o0, &o1);
    if (o1 <= o0) return;
    const int64_t kk = c_.kh * c_.kw;
    const int64_t rows = (o1 - o0) * kk;
    float* col = static_cast<float*>(args.scratch);
    // col[(o, ky, kx), pixel] = sum_ci W[ci, o, ky, kx] * X[ci, pixel]:
    // A = W_g^T restricted to rows of this block: W_g is [cin_g, cout_g*kk],
    // so its block is columns [o0*kk, o1*kk) with leading dim cout_g*kk.
    const float* wg = w + g * cin_g_ * cout_g_ * kk + o0 * kk;
    const float* xg = x + (n * c_.cin + g * cin_g_) * in_px_;
    sgemm(true, false, rows, in_px_, cin_g_, 1.f, wg, cout_g_ * kk, xg, in_px_, 0.f, col, in_px_);
    const int64_t out_px = c_.oh * c_.ow;
    for (int64_t o = o0; o < o1; ++o) {
      float* yc = y + (n * c_.cout + g * cout_g_ + o) * out_px;
      const float b = bias ? bias[g * cout_g_ + o] : 0.f;
      for (int64_t i = 0; i < out_px; ++i) yc[i] = b;
      for (int64_t ky = 0; ky < c_.kh; ++ky) {
        for (int64_t kx = 0; kx < c_.kw; ++kx) {
          const float* src = col + ((o - o0) * kk + ky * c_.kw + kx) * in_px_;
          for (int64_t iy = 0; iy < c_.ih; ++iy) {
            int64_t oy = iy * c_.sh - c_.ph + ky * c_.dh;
            if (oy < 0 || oy >= c_.oh) continue;
            for (int64_t ix = 0; ix < c_.iw; ++ix) {
              int64_t ox = ix * c_.sw - c_.pw + kx * c_.dw;
              if (ox < 0 || ox >= c_.ow) continue;
              yc[oy * c_.ow + ox] += src[iy * c_.iw + ix];
            }
          }
        }
      }
    }
  }

 private:
  Conv2d c_;
  bool has_bias_;
  int64_t cin_g_, cout_g_, in_px_, ob_ = 1;
};

Result<std::unique_ptr<ROp>> make_conv_transpose(const Node& n, const KernelParams& p) {
  const Shape& x = n.inputs[0]->shape;
  const Shape& w = n.inputs[1]->shape;
  std::vector<int64_t> kernel(w.dims.begin() + 2, w.dims.end());
  TESSERA_ASSIGN_OR_RETURN(WindowGeometry g, conv_transpose_geometry(n, x, kernel));
  int64_t group = n.attr_int("group", 1);
  auto c = conv2d_from(g, x, w[1] * group, group);
  if (!c.ok()) return c.status().with_context(n.label());
  return std::unique_ptr<ROp>(new ConvTransposeOp(*c, n.input(2) != nullptr, p));
}

const RKernel kKernels[] = {
    {"ConvTranspose", "conv_transpose.gemm_col2im", "tiles of (image, group, output-channel block)",
     make_conv_transpose},
};

}  // namespace

std::span<const RKernel> conv_transpose_kernels() { return kKernels; }

}  // namespace tessera
