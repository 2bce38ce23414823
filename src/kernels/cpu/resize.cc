// Resize, nearest and (multi-)linear, with the coordinate transformation
// modes PyTorch exports (half_pixel, pytorch_half_pixel, align_corners,
// asymmetric). Per-dim source indices and weights are tabulated at make
// time; dims that are not resized pass their index through, so a 2-D
// upsample of an NCHW tensor blends 4 corners, not 16. An rTask is a block of
// output rows.
#include <algorithm>
#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "kernels/cpu/kernel.h"

namespace tessera {
namespace {

constexpr int kMaxRank = 8;

struct DimMap {
  bool identity = true;
  std::vector<int64_t> i0, i1;  // source indices per output index
  std::vector<float> w;         // weight of i1 (linear), 0 for nearest
};

class ResizeOp : public ROp {
 public:
  ResizeOp(Shape in, Shape out, std::vector<DimMap> maps, const KernelParams& p)
      : in_(std::move(in)), out_(std::move(out)), maps_(std::move(maps)) {
    int64_t st = 1;
    in_st_.resize(in_.rank());
    for (int d = in_.rank() - 1; d >= 0; --d) {
      in_st_[d] = st;
      st *= in_.dims[d];
    }
    for (int d = 0; d < out_.rank(); ++d)
      if (!maps_[d].identity) interp_.push_back(d);
    cols_ = out_.rank() ? out_.dims.back() : 1;
    rows_ = cols_ ? out_.numel() / cols_ : 0;
    tasks_ = choose_tasks(rows_, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols_, 1)), p);
    const int r = out_.rank();
    if (r >= 2 && in_.dims[r - 1] <= INT32_MAX) {  // 32-bit column indices for vector gathers
      for (int64_t c = 0; c < (maps_[r - 1].identity ? 0 : cols_); ++c) {
        col0_.push_back(static_cast<int32_t>(maps_[r - 1].i0[c]));
        col1_.push_back(static_cast<int32_t>(maps_[r - 1].i1[c]));
      }
    }
  }

  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(rows_, tasks_, task, &b, &e);
    const float* x = static_cast<const float*>(args.in[0]);
    float* y = static_cast<float*>(args.out[0]);
    const int r = out_.rank();
    if (r >= 2 && interp_.size() == 2 && interp_[0] == r - 2 && interp_[1] == r - 1) {
      planar(x, y, b, e);
      return;
    }
    int64_t idx[kMaxRank];
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row;
      for (int d = r - 2; d >= 0; --d) {
        idx[d] = rem % out_.dims[d];
        rem /= out_.dims[d];
      }
      for (int64_t c = 0; c < cols_; ++c) {
        idx[r - 1] = c;
        y[row * cols_ + c] = sample(x, idx);
      }
    }
  }

 private:
  float sample(const float* x, const int64_t* idx) const {
    int64_t base = 0;
    for (int d = 0; d < out_.rank(); ++d)
      if (maps_[d].identity) base += idx[d] * in_st_[d];
    const int k = static_cast<int>(interp_.size());
    float acc = 0;
    for (int corner = 0; corner < (1 << k); ++corner) {
      float w = 1;
      int64_t off = base;
      for (int j = 0; j < k; ++j) {
        const DimMap& m = maps_[interp_[j]];
        int64_t o = idx[interp_[j]];
        bool hi = (corner >> j) & 1;
        w *= hi ? m.w[o] : 1.f - m.w[o];
        off += (hi ? m.i1[o] : m.i0[o]) * in_st_[interp_[j]];
      }
      if (w != 0) acc += w * x[off];
    }
    return acc;
  }

  // The common case, a resize of the last two dims (NCHW images): rows of
  // one plane share their two source rows and vertical weight, columns
  // their tabulated horizontal ones. The corners are summed in the order
  // sample() uses, skipping zero weights as it does.
  void planar(const float* x, float* y, int64_t b, int64_t e) const {
    const int r = out_.rank();
    const DimMap& my = maps_[r - 2];
    const DimMap& mx = maps_[r - 1];
    const int64_t oh = out_.dims[r - 2], ih = in_.dims[r - 2], iw = in_.dims[r - 1];
    for (int64_t row = b; row < e; ++row) {
      const int64_t plane = row / oh, oy = row % oh;
      const float* p = x + plane * ih * iw;
      const float* r0 = p + my.i0[oy] * iw;
      const float* r1 = p + my.i1[oy] * iw;
      const float wy = my.w[oy];
      float* out = y + row * cols_;
      int64_t c = 0;
#if defined(__AVX512F__)
      // 16 columns at a time, lane by lane the arithmetic below: a zero
      // weight's corner is skipped (masked out of its multiply-add).
      if (!col0_.empty()) {
        const __m512 vwy = _mm512_set1_ps(wy), one = _mm512_set1_ps(1.f), zero = _mm512_setzero_ps();
        const auto gather = [zero](__m512i idx, const float* base) {
          return _mm512_mask_i32gather_ps(zero, static_cast<__mmask16>(0xffff), idx, base, 4);
        };
        for (; c + 16 <= cols_; c += 16) {
          const __m512 wx = _mm512_loadu_ps(mx.w.data() + c);
          const __m512i c0 = _mm512_loadu_si512(col0_.data() + c), c1 = _mm512_loadu_si512(col1_.data() + c);
          const __m512 w00 = (one - vwy) * (one - wx), w10 = vwy * (one - wx), w01 = (one - vwy) * wx,
                       w11 = vwy * wx;
          __m512 acc = zero;
          acc = _mm512_mask3_fmadd_ps(w00, gather(c0, r0), acc, _mm512_cmpneq_ps_mask(w00, zero));
          acc = _mm512_mask3_fmadd_ps(w10, gather(c0, r1), acc, _mm512_cmpneq_ps_mask(w10, zero));
          acc = _mm512_mask3_fmadd_ps(w01, gather(c1, r0), acc, _mm512_cmpneq_ps_mask(w01, zero));
          acc = _mm512_mask3_fmadd_ps(w11, gather(c1, r1), acc, _mm512_cmpneq_ps_mask(w11, zero));
          _mm512_storeu_ps(out + c, acc);
        }
      }
#endif
      for (; c < cols_; ++c) {
        const float wx = mx.w[c];
        const int64_t c0 = mx.i0[c], c1 = mx.i1[c];
        const float w00 = (1.f - wy) * (1.f - wx), w10 = wy * (1.f - wx), w01 = (1.f - wy) * wx, w11 = wy * wx;
        float acc = 0;
        if (w00 != 0) acc += w00 * r0[c0];
        if (w10 != 0) acc += w10 * r1[c0];
        if (w01 != 0) acc += w01 * r0[c1];
        if (w11 != 0) acc += w11 * r1[c1];
        out[c] = acc;
      }
    }
  }

  Shape in_, out_;
  std::vector<DimMap> maps_;
  std::vector<int64_t> in_st_;
  std::vector<int> interp_;
  int64_t rows_, cols_;
  std::vector<int32_t> col0_, col1_;  // planar: the column maps' indices, for gathers
};

Result<std::unique_ptr<ROp>> make_resize(const Node& n, const KernelParams& p) {
  if (n.inputs[0]->dtype != DType::kFloat32) return unimplemented(str_cat(n.label(), ": Resize of non-float input"));
  TESSERA_ASSIGN_OR_RETURN(ResizeParams rp, resize_params(n));
  const Shape& in = n.inputs[0]->shape;
  if (in.rank() == 0 || in.rank() > kMaxRank) return unimplemented(str_cat(n.label(), ": Resize of rank ", in.rank()));
  std::string ctm = n.attr_string("coordinate_transformation_mode", "half_pixel");
  std::string nearest_mode = n.attr_string("nearest_mode", "round_prefer_floor");
  bool linear = n.attr_string("mode", "nearest") == "linear";
  if (ctm != "half_pixel" && ctm != "pytorch_half_pixel" && ctm != "align_corners" && ctm != "asymmetric")
    return unimplemented(str_cat(n.label(), ": coordinate_transformation_mode '", ctm, "' is not supported"));
  std::vector<DimMap> maps(in.rank());
  for (int d = 0; d < in.rank(); ++d) {
    int64_t len = in.dims[d], out = rp.out[d];
    float s = rp.scale[d];
    DimMap& m = maps[d];
    m.identity = len == out && s == 1.f;
    if (m.identity) continue;
    m.i0.resize(out);
    m.i1.resize(out);
    m.w.assign(out, 0.f);
    for (int64_t o = 0; o < out; ++o) {
      double xo;
      if (ctm == "half_pixel") xo = (o + 0.5) / s - 0.5;
      else if (ctm == "pytorch_half_pixel") xo = out > 1 ? (o + 0.5) / s - 0.5 : 0.0;
      else if (ctm == "align_corners") xo = out == 1 ? 0.0 : static_cast<double>(o) * (len - 1) / (out - 1);
      else xo = o / static_cast<double>(s);
      if (linear) {
        xo = std::clamp(xo, 0.0, static_cast<double>(len - 1));
        int64_t i0 = static_cast<int64_t>(std::floor(xo));
        m.i0[o] = i0;
        m.i1[o] = std::min(i0 + 1, len - 1);
        m.w[o] = static_cast<float>(xo - static_cast<double>(i0));
      } else {
        double r;
        if (nearest_mode == "floor") r = std::floor(xo);
        else if (nearest_mode == "ceil") r = std::ceil(xo);
        else if (nearest_mode == "round_prefer_ceil") r = std::floor(xo + 0.5);
        else r = (xo - std::floor(xo) == 0.5) ? std::floor(xo) : std::round(xo);  // round_prefer_floor
        int64_t i = std::clamp<int64_t>(static_cast<int64_t>(r), 0, len - 1);
        m.i0[o] = m.i1[o] = i;
      }
    }
  }
  return std::unique_ptr<ROp>(new ResizeOp(in, n.outputs[0]->shape, std::move(maps), p));
}

const RKernel kKernels[] = {
    {"Resize", "resize.rows", "nearest and linear; tabulated per-dim indices", make_resize},
};

}  // namespace

std::span<const RKernel> resize_kernels() { return kKernels; }

}  // namespace tessera
