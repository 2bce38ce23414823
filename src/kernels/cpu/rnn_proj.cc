// The input projection of a lowered LSTM or GRU layer (TesseraRnnProj,
// compiler/lower_rnn.cc), and the table of the lowered rKernels.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/rnn_cell.h"
#include "kernels/cpu/rnn_lowered.h"

namespace tessera {
namespace {

// The input projection of a run of steps: [rows, I] x Wp + bias, where
// the rows are those of one X [seq, batch, I] or of several step inputs
// (each [.., batch, I], e.g. the previous layer's h_t) stacked in order,
// and Wp [panels, I, G * 16] is W packed in the cells' panel order
// (rnn_cell.h).
// rTasks are blocks of whole panels, cut as the cells cut them: task t
// writes every input that cell task t reads (with as many tasks), so a
// Plan that keeps task t of both on one vEU (the wavefront's does) leaves
// those inputs in that core's cache. W is read once however few the rows;
// with several inputs a task first gathers the rows.
//
// With Rp (the layer's packed R, the last input; attribute prefetch_r), a
// task also pulls its panels of R into its core's cache while it computes,
// so that the layer's first step does not wait on R from memory (cell
// task t reads R's panels of projection task t).
// With attribute blocked, Y is written in the blocked layout the cells read
// with xp_blocked (rows padded to a multiple of 8; the padding is not
// written).
class RnnProjOp : public ROp {
 public:
  RnnProjOp(int64_t parts, int64_t part_rows, int64_t in, int64_t cols, int64_t panel_cols, int64_t hidden,
            bool blocked, const KernelParams& p)
      : parts_(parts),
        part_rows_(part_rows),
        in_(in),
        cols_(cols),
        panel_cols_(panel_cols),
        hidden_(hidden),
        blocked_(blocked) {
    const int64_t rows = parts * part_rows, panels = cols / panel_cols;
    const int64_t panel_flops = 2 * rows * in * panel_cols;
    tasks_ = choose_tasks(panels, std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(panel_flops, 1)), p);
    if (parts > 1) scratch_bytes_ = static_cast<size_t>(rows * in) * sizeof(float);
  }

  // A constant Wp (not for the blocked layout) is packed once more, into
  // the GEMM's own column panels (pack_cols, packed_gemm.h): a task's
  // columns then run in whole blocks of 3 vectors, where the cells' panels
  // of G * 16 columns (64 for an LSTM) leave a narrower block in each.
  // The bits are those of the cells' panels (gemm_rows_packed). One task of
  // LSTM-TC's stacked projections (100 x 256 by 256 x 512), one Zen 3
  // core: 332 -> 268 us.
  void pack_w(const float* wp) {
    if (blocked_) return;
    std::vector<float> dense(static_cast<size_t>(in_ * cols_));
    for (int64_t c = 0; c < cols_; ++c) {
      const float* src = wp + (c / panel_cols_) * in_ * panel_cols_ + c % panel_cols_;
      for (int64_t i = 0; i < in_; ++i) dense[static_cast<size_t>(i * cols_ + c)] = src[i * panel_cols_];
    }
    packed_w_.assign(packed_cols_size(in_, cols_), 0.f);
    pack_cols(dense.data(), in_, cols_, cols_, packed_w_.data());
  }
  std::string_view path() const override { return packed_w_.empty() ? "cell panels" : "gemm panels"; }
  std::vector<std::span<const std::byte>> resident() const override { return {resident_bytes(packed_w_)}; }

  void run(int64_t task, const TaskArgs& args) const override {
    int64_t p0, p1;
    task_range(cols_ / panel_cols_, tasks_, task, &p0, &p1);
    if (p1 <= p0) return;
    const int64_t rows = parts_ * part_rows_;
    const float* w = static_cast<const float*>(args.in[0]);
    const float* b = static_cast<const float*>(args.in[1]);
    float* y = static_cast<float*>(args.out[0]);
    const float* a = static_cast<const float*>(args.in[2]);
    const char* r = hidden_ > 0 ? static_cast<const char*>(args.in[2 + parts_]) : nullptr;
    if (parts_ > 1) {
      float* gathered = static_cast<float*>(args.scratch);
      for (int64_t part = 0; part < parts_; ++part)
        std::memcpy(gathered + part * part_rows_ * in_, args.in[2 + part],
                    static_cast<size_t>(part_rows_ * in_) * sizeof(float));
      a = gathered;
    }
    // (A task of one or two cell panels keeps them: its columns would
    // start inside a GEMM panel and end in another, two narrow blocks.)
    if (!packed_w_.empty() && (p1 - p0) * panel_cols_ >= kPackedMinPanels * packed_cols_width()) {
      run_packed(p0, p1, rows, a, b, y, r);
      return;
    }
    // Panel by panel: each is one contiguous [I, width] block of Wp,
    // which streams in from memory at full speed where a block of
    // columns of a row-major [I, C] would touch a new page in every row.
    // With R, a panel's rows go in blocks of kPrefetchRows, each after a
    // share of R panel p's cache lines is requested: the requests overlap
    // the arithmetic instead of the first step's loads.
    const int64_t width = panel_cols_;
    const int64_t r_panel_bytes = hidden_ * width * static_cast<int64_t>(sizeof(float));
    // Blocked: one call per 8-row block, whose rows are contiguous.
    const int64_t row_step = blocked_ ? kRnnBlockRows : r != nullptr ? kPrefetchRows : rows;
    const int64_t panels = cols_ / width;
    const int64_t blocks = (rows + row_step - 1) / row_step;
    const int64_t lines_per_block = (r_panel_bytes / 64 + blocks - 1) / blocks;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p * width;
      const float* wpanel = w + p * in_ * width;
      for (int64_t r0 = 0, blk = 0; r0 < rows; r0 += row_step, ++blk) {
        if (r != nullptr) {
          const int64_t l0 = blk * lines_per_block, l1 = std::min(r_panel_bytes / 64, l0 + lines_per_block);
          for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(r + p * r_panel_bytes + l * 64, 0, 2);
        }
        const int64_t m = std::min(row_step, rows - r0);
        float* out = blocked_ ? y + rnn_blocked_offset(r0, p, panels, width) : y + r0 * cols_ + c;
        const int64_t ldy = blocked_ ? width : cols_;
        gemm_rows(m, width, in_, a + r0 * in_, in_, wpanel, width, out, ldy);
        for (int64_t row = 0; row < m; ++row)
          for (int64_t j = 0; j < width; ++j) out[row * ldy + j] += b[c + j];
      }
    }
  }

 private:
  // Columns [p0, p1) x panel width by packed_w_: chunks of kChunkBlocks
  // GEMM panels (their W stays in L2) outside, blocks of kPrefetchRows
  // rows (in L1) inside, each then given its bias; with R, its panels'
  // lines are requested in equal shares between the blocks.
  void run_packed(int64_t p0, int64_t p1, int64_t rows, const float* a, const float* b, float* y,
                  const char* r) const {
    constexpr int64_t kChunkBlocks = 4;
    const int64_t c0 = p0 * panel_cols_, c1 = p1 * panel_cols_;
    const int64_t chunk = kChunkBlocks * packed_cols_width();
    const int64_t steps =
        std::max<int64_t>(1, (c1 - c0 + chunk - 1) / chunk * ((rows + kPrefetchRows - 1) / kPrefetchRows));
    const char* r_first = r != nullptr ? r + p0 * hidden_ * panel_cols_ * static_cast<int64_t>(sizeof(float)) : nullptr;
    const int64_t r_lines = (p1 - p0) * hidden_ * panel_cols_ * static_cast<int64_t>(sizeof(float)) / 64;
    const int64_t lines_per_step = (r_lines + steps - 1) / steps;
    int64_t step = 0;
    for (int64_t j0 = c0; j0 < c1; j0 += chunk) {
      const int64_t j1 = std::min(c1, j0 + chunk);
      for (int64_t r0 = 0; r0 < rows; r0 += kPrefetchRows, ++step) {
        if (r_first != nullptr) {
          const int64_t l0 = step * lines_per_step, l1 = std::min(r_lines, l0 + lines_per_step);
          for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(r_first + l * 64, 0, 2);
        }
        const int64_t m = std::min(kPrefetchRows, rows - r0);
        float* out = y + r0 * cols_;
        gemm_rows_packed(m, j0, j1, in_, a + r0 * in_, in_, packed_w_.data(), out + j0, cols_);
        for (int64_t row = 0; row < m; ++row)
          for (int64_t j = j0; j < j1; ++j) out[row * cols_ + j] += b[j];
      }
    }
  }

  static constexpr int64_t kPrefetchRows = 16;
  // GEMM panels a task's columns must span to run on packed_w_.
  static constexpr int64_t kPackedMinPanels = 4;
  std::vector<float> packed_w_;  // Wp packed by pack_cols as [in, cols], or empty
  int64_t parts_, part_rows_, in_, cols_, panel_cols_;
  int64_t hidden_;  // R's k (its rows per panel) when R is to be prefetched, else 0
  bool blocked_;
};

Result<std::unique_ptr<ROp>> make_rnn_proj(const Node& n, const KernelParams& p) {
  TESSERA_RETURN_IF_ERROR(check_rnn_layout(n, n.attr_int("blocked", 0) != 0));
  // Shapes were checked by infer_rnn_proj.
  const Shape& wp = n.inputs[0]->shape;
  const bool prefetch = n.attr_int("prefetch_r", 0) != 0;
  const int64_t in = wp[1], parts = static_cast<int64_t>(n.inputs.size()) - 2 - (prefetch ? 1 : 0);
  const int64_t hidden = prefetch ? n.inputs.back()->shape[1] : 0;
  auto op = std::make_unique<RnnProjOp>(parts, n.inputs[2]->shape.numel() / in, in, wp[0] * wp[2],
                                        n.attr_int("gates", 1) * kRnnPanelUnits, hidden,
                                        n.attr_int("blocked", 0) != 0, p);
  if (n.inputs[0]->is_constant()) op->pack_w(n.inputs[0]->constant->data<float>());
  return std::unique_ptr<ROp>(std::move(op));
}

const RKernel kLoweredKernels[] = {
    {"TesseraLstmCell", "rnn_cell.panels", "one LSTM time step; rTasks are panels of hidden units", make_rnn_cell},
    {"TesseraGruCell", "rnn_cell.panels", "one GRU time step; rTasks are panels of hidden units", make_rnn_cell},
    {"TesseraRnnProj", "rnn_proj.rows", "input projection of a run of steps, one GEMM tiled by columns", make_rnn_proj},
};

}  // namespace

std::span<const RKernel> rnn_lowered_kernels() { return kLoweredKernels; }

}  // namespace tessera
