// Winograd F(4x4, 3x3) for 3x3 convs at stride 1, undilated, with at
// least 8 channels per group in and out and constant weights: the larger
// tile of Lavin and Gray's algorithm (winograd.cc has F(2x2, 3x3) and the
// derivation).
//
// A 4x4 block of outputs (a tile) comes from the 6x6 input patch d under
// it as A^T [U . (B^T d B)] A, with U = G g G^T transformed once, when the
// op is made. Each of the 36 transform points is a GEMM over the input
// channels,
//
//   M[t] (cout x tiles) = U[t] (cout x cin) * V[t] (cin x tiles),
//
// 36 multiplies per tile and channel pair where F(2x2, 3x3) spends 64 on
// the same 16 outputs and the direct sum 144: 1.78x fewer than F(2x2)'s,
// and as much less data through V and M. The price is accuracy: B^T's
// and A^T's entries reach 5 and 8, and U's carry 1/6 and 1/24, so the
// rounding error grows several-fold over F(2x2)'s (rel-L2 against fp64 of
// about 1e-6 on ResNet-18's shapes, against 2.6e-7 to 5e-7). It is one
// more rKernel (conv.winograd4): the profiler times it beside the others
// and the variant search keeps it only where it measured faster.
//
// The transforms run with the tiles as the vector dimension, as the GEMMs
// read them: a patch's columns are gathered from an input row at stride 4
// (loads masked at its ends, zero outside) and the output's put back the
// same way, and everything between is adds and multiplies over a chunk's
// tiles. rTasks and chunks are cut as winograd_tiling.h says, a default
// rTask at least one chunk.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/winograd_tiling.h"
#include "kernels/prepared.h"

namespace tessera {
namespace {

constexpr int64_t kTile = 4;                       // outputs per tile side
constexpr int64_t kSide = 6;                       // input patch side
constexpr int64_t kPoints = kSide * kSide;         // transform points
#if defined(TESSERA_SIMD)
constexpr int64_t kGatherSlack = simd::Vec::kLanes;  // tiles past a row that whole vectors may write
#else
constexpr int64_t kGatherSlack = 0;
#endif
// A few floats as one vector (GCC's vector extension): eight with AVX2 or
// AVX-512, four (SSE) in portable builds; loads and stores unaligned.
#if defined(TESSERA_SIMD)
constexpr int64_t kFv = 8;
#else
constexpr int64_t kFv = 4;
#endif
typedef float Fv __attribute__((vector_size(kFv * sizeof(float))));
inline Fv loadv(const float* p) {
  Fv v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, Fv v) { std::memcpy(p, &v, sizeof v); }

// B^T x, one column of six values: B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0;
// 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1].
template <class T>
inline void bt(T a, T b, T c, T d, T e, T f, T o[6]) {
  o[0] = 4.f * a - 5.f * c + e;
  o[1] = (d + e) - 4.f * (b + c);
  o[2] = (e - d) + 4.f * (b - c);
  o[3] = (e - c) + 2.f * (d - b);
  o[4] = (e - c) - 2.f * (d - b);
  o[5] = 4.f * b - 5.f * d + f;
}

// A^T m, one column of six values, plus bias: A^T = [1 1 1 1 1 0;
// 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
template <class T>
inline void at(T m0, T m1, T m2, T m3, T m4, T m5, T bias, T o[4]) {
  const T s12 = m1 + m2, d12 = m1 - m2, s34 = m3 + m4, d34 = m3 - m4;
  o[0] = m0 + s12 + s34 + bias;
  o[1] = d12 + 2.f * d34 + bias;
  o[2] = s12 + 4.f * s34 + bias;
  o[3] = d12 + 8.f * d34 + m5 + bias;
}

// out[k][i] = (B^T x[.][i])[k] for i < n: six rows in, six out.
inline void bt6(const float* const x[6], float* const out[6], int64_t n) {
  int64_t i = 0;
  for (; i + kFv <= n; i += kFv) {
    Fv o[6];
    bt(loadv(x[0] + i), loadv(x[1] + i), loadv(x[2] + i), loadv(x[3] + i), loadv(x[4] + i), loadv(x[5] + i), o);
    for (int k = 0; k < 6; ++k) storev(out[k] + i, o[k]);
  }
  for (; i < n; ++i) {
    float o[6];
    bt(x[0][i], x[1][i], x[2][i], x[3][i], x[4][i], x[5][i], o);
    for (int k = 0; k < 6; ++k) out[k][i] = o[k];
  }
}

// out[k][i] = (A^T m[.][i])[k] + bias for i < n: six rows in, four out.
inline void at6(const float* const m[6], float* const out[4], int64_t n, float bias) {
  int64_t i = 0;
  const Fv vb = Fv{} + bias;
  for (; i + kFv <= n; i += kFv) {
    Fv o[4];
    at(loadv(m[0] + i), loadv(m[1] + i), loadv(m[2] + i), loadv(m[3] + i), loadv(m[4] + i), loadv(m[5] + i), vb, o);
    for (int k = 0; k < 4; ++k) storev(out[k] + i, o[k]);
  }
  for (; i < n; ++i) {
    float o[4];
    at(m[0][i], m[1][i], m[2][i], m[3][i], m[4][i], m[5][i], bias, o);
    for (int k = 0; k < 4; ++k) out[k][i] = o[k];
  }
}

class Winograd4Op : public ROp {
 public:
  Winograd4Op(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi, const KernelParams& p)
      : c_(c), has_bias_(has_bias), epi_(epi), t_(c, kTile, kPoints, true, p) {
    wp_ = kTile * t_.tw + 2;
    tasks_ = t_.tasks();
    const int64_t nt = t_.chunk_tiles();
    scratch_bytes_ = static_cast<size_t>(kPoints * (t_.cin_g + t_.cout_g) * nt + buffer_floats(nt)) * sizeof(float);
    // G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6;
    // 1/24 -1/12 1/6; 0 0 1].
    static constexpr double kG[6][3] = {{0.25, 0, 0},
                                        {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                        {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                        {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                        {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                        {0, 0, 1}};
    u_ = prepared<float>(w, winograd_weights_key(c, kSide), [&] { return winograd_weights(c, w, &kG[0][0], kSide); });
  }

  std::string_view path() const override { return "winograd F(4,3)"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(*u_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    const float* x = static_cast<const float*>(args.in[0]);
    const float* bias = has_bias_ ? static_cast<const float*>(args.in[2]) : nullptr;
    const float* res = epi_.residual ? static_cast<const float*>(args.in[3]) : nullptr;
    float* y = static_cast<float*>(args.out[0]);
    float* scratch = static_cast<float*>(args.scratch);
    t_.for_each_chunk(task, [&](int64_t n, int64_t ty0, int64_t ty1, int64_t g, int64_t co0, int64_t co1) {
      chunk(x, bias, res, y, scratch, n, ty0, ty1, g, co0, co1);
    });
  }

 private:
  // The transforms' buffers, for a chunk of nt tiles: a padded input row
  // and the column-combined patch rows (36 of nt, each with slack); for
  // the output (reusing them), 24 rows of nt and an output row.
  int64_t buffer_floats(int64_t nt) const { return row_floats() + kPoints * (nt + kGatherSlack) + kTile * kGatherSlack; }
  // The padded input row (portable row_times_b).
  int64_t row_floats() const { return wp_; }

  size_t u_index(int64_t gr, int64_t t, int64_t co, int64_t ci) const {
    return winograd_u_index(c_, kPoints, gr, t, co, ci);
  }

  // Tile rows [ty0, ty1) of image n, group gr's output channels [co0, co1).
  void chunk(const float* x, const float* bias, const float* res, float* y, float* scratch, int64_t n, int64_t ty0,
             int64_t ty1, int64_t gr, int64_t co0, int64_t co1) const {
    const int64_t nt = (ty1 - ty0) * t_.tw, cin = t_.cin_g, cout = t_.cout_g;
    float* v = scratch;
    float* m = v + kPoints * cin * nt;
    float* buf = m + kPoints * cout * nt;
    for (int64_t ci = 0; ci < cin; ++ci)
      input_rows(x + (n * c_.cin + gr * cin + ci) * c_.ih * c_.iw, ty0, ty1, v + ci * nt, cin * nt, buf);
    for (int64_t t = 0; t < kPoints; ++t)
      packed_gemm(u_->data() + u_index(gr, t, co0, 0), co1 - co0, cin, v + t * cin * nt, nt, nt,
                  m + (t * cout + co0) * nt, nt);
    const int64_t oy0 = kTile * ty0, oy1 = std::min(kTile * ty1, c_.oh), ow = c_.ow;
    for (int64_t co = co0; co < co1; ++co) {
      const int64_t oc = gr * cout + co;
      const float b = bias != nullptr ? bias[oc] : 0.f;
      output_rows(m + co * nt, cout * nt, b, y + (n * c_.cout + oc) * c_.oh * ow, ty0, ty1, buf);
      if (!epi_.empty()) {
        const int64_t off = (n * c_.cout + oc) * c_.oh * ow + oy0 * ow;
        epi_.apply(y + off, res != nullptr ? res + off : nullptr, (oy1 - oy0) * ow);
      }
    }
  }

  // V = B^T d B for tile rows [ty0, ty1) of plane xc, all the chunk's
  // tiles at once: for each of a patch's 6 rows, every tile's 6 columns
  // are gathered from the input row (column j of tile tx is column
  // 4 tx + j - pw, zero outside the plane) and combined (d B); then the
  // rows are combined (B^T). Point (i, j) of the chunk's tile q goes to
  // v[(6 i + j) * ps + q].
  void input_rows(const float* xc, int64_t ty0, int64_t ty1, float* v, int64_t ps, float* buf) const {
    const int64_t tw = t_.tw, nt = (ty1 - ty0) * tw, es = nt + kGatherSlack;
    float* row = buf;
    float* e = row + row_floats();  // e[(r * 6 + j) * es + q]: patch row r, columns combined
    for (int64_t r = 0; r < kSide; ++r) {
      float* er = e + r * kSide * es;
      for (int64_t ty = ty0; ty < ty1; ++ty) {
        const int64_t iy = kTile * ty - c_.ph + r, q = (ty - ty0) * tw;
        if (iy < 0 || iy >= c_.ih) {
          for (int64_t j = 0; j < kSide; ++j) std::fill(er + j * es + q, er + j * es + q + tw, 0.f);
          continue;
        }
        row_times_b(xc + iy * c_.iw, er + q, es, row);
      }
    }
    for (int64_t j = 0; j < kSide; ++j) {
      const float* in[6];
      float* out[6];
      for (int64_t r = 0; r < kSide; ++r) in[r] = e + (r * kSide + j) * es;
      for (int64_t i = 0; i < kSide; ++i) out[i] = v + (i * kSide + j) * ps;
      bt6(in, out, nt);
    }
  }

  // e[j * es + tx] = (d B)[j] of tile tx's 6 columns of input row `src`
  // (column 4 tx + j - pw, zero outside the row), for tx < t_.tw. With SIMD,
  // a vector of tiles at a time: 4 vectors of the row (masked where they
  // cross its ends) split twice into even and odd lanes give columns 0 to
  // 3, and again from 4 columns on 4 and 5, combined in registers; the
  // last vector may store up to kGatherSlack - 1 tiles past t_.tw (into the
  // next tile row's place, written after, or the slack). Without, through
  // a padded copy in `row`.
  void row_times_b(const float* src, float* e, int64_t es, float* row) const {
#if defined(TESSERA_SIMD)
    (void)row;
    using Vec = simd::Vec;
    constexpr int64_t L = Vec::kLanes;
    const int64_t iw = c_.iw;
    for (int64_t tx = 0; tx < t_.tw; tx += L) {
      const int64_t a = kTile * tx - c_.pw;  // input column of the group's first patch column
      Vec::T x[8];
      if (a >= 0 && a + kTile + 4 * L <= iw) {
        for (int64_t k = 0; k < 4; ++k) {
          x[k] = Vec::load(src + a + k * L);
          x[4 + k] = Vec::load(src + a + kTile + k * L);
        }
      } else {
        for (int64_t k = 0; k < 8; ++k) {
          const int64_t b = a + (k / 4) * kTile + (k % 4) * L;
          x[k] = Vec::load(src + b, Vec::from_bits(lane_bits(-b, iw - b)));
        }
      }
      Vec::T e01, o01, e23, o23, c[6], unused, o[6];
      Vec::deinterleave(x[0], x[1], &e01, &o01);
      Vec::deinterleave(x[2], x[3], &e23, &o23);
      Vec::deinterleave(e01, e23, &c[0], &c[2]);
      Vec::deinterleave(o01, o23, &c[1], &c[3]);
      Vec::deinterleave(x[4], x[5], &e01, &o01);
      Vec::deinterleave(x[6], x[7], &e23, &o23);
      Vec::deinterleave(e01, e23, &c[4], &unused);
      Vec::deinterleave(o01, o23, &c[5], &unused);
      bt(c[0], c[1], c[2], c[3], c[4], c[5], o);
      for (int64_t j = 0; j < kSide; ++j) Vec::store(e + j * es + tx, o[j]);
    }
#else
    const int64_t q0 = std::clamp<int64_t>(c_.pw, 0, wp_);
    const int64_t q1 = std::clamp<int64_t>(c_.pw + c_.iw, q0, wp_);
    std::fill(row, row + q0, 0.f);
    std::memcpy(row + q0, src + (q0 - c_.pw), static_cast<size_t>(q1 - q0) * sizeof(float));
    std::fill(row + q1, row + wp_, 0.f);
    for (int64_t tx = 0; tx < t_.tw; ++tx) {
      const float* d = row + kTile * tx;
      float o[6];
      bt(d[0], d[1], d[2], d[3], d[4], d[5], o);
      for (int64_t j = 0; j < kSide; ++j) e[j * es + tx] = o[j];
    }
#endif
  }

  // Y = A^T M A + bias for tile rows [ty0, ty1) of one output plane yc
  // (point (i, j) of the chunk's tile q at m[(6 i + j) * ps + q]): rows
  // combined (A^T M), then, per output row, columns, each tile's 4
  // outputs put in their place in the row.
  void output_rows(const float* m, int64_t ps, float bias, float* yc, int64_t ty0, int64_t ty1, float* buf) const {
    const int64_t tw = t_.tw, ow = c_.ow, nt = (ty1 - ty0) * tw;
    float* s = buf;  // s[(k * 6 + j) * nt + q]: the tile's output row k, column point j
    float* line = s + 4 * kSide * nt;
    for (int64_t j = 0; j < kSide; ++j) {
      const float* in[6];
      for (int64_t i = 0; i < kSide; ++i) in[i] = m + (i * kSide + j) * ps;
      float* out[4] = {s + j * nt, s + (kSide + j) * nt, s + (2 * kSide + j) * nt, s + (3 * kSide + j) * nt};
      at6(in, out, nt, 0.f);
    }
    for (int64_t k = 0; k < kTile; ++k)
      for (int64_t ty = ty0; ty < ty1; ++ty) {
        const int64_t oy = kTile * ty + k;
        if (oy >= c_.oh) break;
        times_a_row(s + k * kSide * nt + (ty - ty0) * tw, nt, bias, line);
        std::memcpy(yc + oy * ow, line, static_cast<size_t>(ow) * sizeof(float));
      }
  }

  // line[4 tx + l] = (s A)[l] + bias of tile tx's 6 column points
  // s[j * ls + tx], for tx < t_.tw: with SIMD, a vector of tiles at a time,
  // combined in registers and interleaved twice (row_times_b's inverse),
  // whole vectors up to 4 (kGatherSlack - 1) floats past 4 t_.tw (loads
  // past the row read what lies there: its lanes are not kept).
  void times_a_row(const float* s, int64_t ls, float bias, float* line) const {
#if defined(TESSERA_SIMD)
    using Vec = simd::Vec;
    constexpr int64_t L = Vec::kLanes;
    const Vec::T vb = Vec::set1(bias);
    for (int64_t tx = 0; tx < t_.tw; tx += L) {
      Vec::T o[4], p0, p1, q0, q1, r[4];
      at(Vec::load(s + tx), Vec::load(s + ls + tx), Vec::load(s + 2 * ls + tx), Vec::load(s + 3 * ls + tx),
         Vec::load(s + 4 * ls + tx), Vec::load(s + 5 * ls + tx), vb, o);
      Vec::interleave(o[0], o[2], &p0, &p1);
      Vec::interleave(o[1], o[3], &q0, &q1);
      Vec::interleave(p0, q0, &r[0], &r[1]);
      Vec::interleave(p1, q1, &r[2], &r[3]);
      for (int64_t k = 0; k < 4; ++k) Vec::store(line + kTile * tx + k * L, r[k]);
    }
#else
    for (int64_t tx = 0; tx < t_.tw; ++tx) {
      float o[4];
      at(s[tx], s[ls + tx], s[2 * ls + tx], s[3 * ls + tx], s[4 * ls + tx], s[5 * ls + tx], bias, o);
      for (int64_t l = 0; l < kTile; ++l) line[kTile * tx + l] = o[l];
    }
#endif
  }

  Conv2d c_;
  bool has_bias_;
  Epilogue epi_;
  WinogradTiling t_;
  int64_t wp_ = 6;  // padded input row: 4 * tw + 2 columns
  std::shared_ptr<const std::vector<float>> u_;  // transformed weights, [36] x packed (cout x cin)
};

}  // namespace

bool winograd4_fits(const Conv2d& c) { return winograd_fits(c) && c.oh >= kTile && c.ow >= kTile; }

std::unique_ptr<ROp> make_winograd4(const Conv2d& c, const float* w, bool has_bias, const Epilogue& epi,
                                    const KernelParams& p) {
  return std::unique_ptr<ROp>(new Winograd4Op(c, w, has_bias, epi, p));
}

}  // namespace tessera
