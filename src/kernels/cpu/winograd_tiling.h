// What the two Winograd rKernels share (winograd.cc: F(2x2, 3x3),
// winograd4.cc: F(4x4, 3x3)): how a conv is cut into rTasks and chunks,
// and the transformed weights U = G g G^T, packed per point.
//
// An rTask is a block of tile rows of one or more images, and a block of
// output channels where the transformed weights are large (of groups, for
// a grouped conv: each group is its own point GEMMs). It works through its
// rows in chunks whose V and M fit kChunkBytes, so the GEMMs read them
// from cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/packed_gemm.h"

namespace tessera {

struct WinogradTiling {
  static constexpr size_t kChunkBytes = size_t{512} << 10;  // V and M of one chunk
  static constexpr double kFlopsPerTask = 1 << 23;           // direct-conv FLOPs, as conv.cc
  // Tiles per chunk, at least: the GEMMs' N, a multiple of the packed
  // kernel's column tile (24 with AVX2, 48 with AVX-512).
  static constexpr int64_t kMinChunkTiles = 48;
  // Output channels are split in units of kCoUnit (the packed weights' row
  // blocks), at least kMinCoUnits per rTask.
  static constexpr int64_t kCoUnit = kPackRows;
  static constexpr int64_t kMinCoUnits = 4;
  // Transformed weights up to this size are split by tile rows, larger
  // ones by output channels, kDefaultChannelBlocks by default.
  static constexpr int64_t kWeightsInL2 = int64_t{1} << 20;
  static constexpr int64_t kDefaultChannelBlocks = 2;
  static constexpr int64_t kMinTasks = 2;  // default rTasks of a grouped conv, at least

  // `tile`: outputs per tile side; `points`: transform points per tile.
  // With `whole_chunks`, a default rTask is at least one chunk of
  // kMinChunkTiles (F(4x4): on 56 x 56 with 64 channels, one tile row of
  // 14 tiles per rTask made its 36 GEMMs skinny, 12 % slower on one thread
  // than chunks of 56).
  WinogradTiling(const Conv2d& c, int64_t tile, int64_t points, bool whole_chunks, const KernelParams& p);

  int64_t tasks() const { return rb * ob; }
  int64_t chunk_tiles() const { return chunk_rows * tw; }

  // chunk(n, ty0, ty1, group, co0, co1) for every chunk of rTask `task`:
  // tile rows [ty0, ty1) of image n, output channels [co0, co1) of the
  // group.
  template <class Chunk>
  void for_each_chunk(int64_t task, Chunk&& chunk) const {
    int64_t r0, r1, u0, u1;
    task_range(batch * th, rb, task / ob, &r0, &r1);
    task_range(units, ob, task % ob, &u0, &u1);
    const bool grouped = group > 1;
    const int64_t g0 = grouped ? u0 : 0, g1 = grouped ? u1 : 1;
    const int64_t co0 = grouped ? 0 : u0 * kCoUnit, co1 = grouped ? cout_g : std::min(cout_g, u1 * kCoUnit);
    for (int64_t r = r0; r < r1;) {
      const int64_t n = r / th, ty0 = r % th;
      const int64_t k = std::min({chunk_rows, th - ty0, r1 - r});
      for (int64_t g = g0; g < g1; ++g) chunk(n, ty0, ty0 + k, g, co0, co1);
      r += k;
    }
  }

  int64_t batch = 1, group = 1;
  int64_t cin_g = 1, cout_g = 1;  // channels per group
  int64_t units = 1;              // what ob splits: groups, or blocks of kCoUnit channels
  int64_t th = 1, tw = 1;         // tile rows and columns
  int64_t chunk_rows = 1;         // tile rows transformed and multiplied at once
  int64_t rb = 1, ob = 1;         // rTasks: blocks of tile rows x blocks of output channels
};

// U[g][t][co][ci] = (G g G^T)[t] for G (side x 3, row-major), computed in
// double and rounded once, per group and point t = i * side + l packed by
// rows for packed_gemm: `side * side` blocks of packed_size(cout_g, cin_g)
// floats per group.
std::vector<float> winograd_weights(const Conv2d& c, const float* w, const double* g_matrix, int side);
// The form winograd_weights makes for `side`, as kernels/prepared.h keys it.
std::string winograd_weights_key(const Conv2d& c, int side);

// Where winograd_weights put (group, point, co, ci).
inline size_t winograd_u_index(const Conv2d& c, int64_t points, int64_t gr, int64_t t, int64_t co, int64_t ci) {
  const int64_t cin_g = c.cin / c.group, cout_g = c.cout / c.group;
  return (gr * points + t) * packed_size(cout_g, cin_g) +
         static_cast<size_t>((co / kPackRows * cin_g + ci) * kPackRows + co % kPackRows);
}

}  // namespace tessera
