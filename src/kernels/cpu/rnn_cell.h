// The layout of a recurrent layer's weights for the lowered per-step
// rOperators (TesseraLstmCell, TesseraGruCell; src/compiler/lower_rnn.cc).
//
// A step's recurrent product h_prev R^T ([batch, H] x [H, G*H], G = 4 LSTM
// gates i, o, f, c or 3 GRU gates z, r, h) is cut into panels of
// kRnnPanelUnits hidden units. Panel p holds, for every k < H, the row
//   [gate 0 of units 16p..16p+15 | gate 1 of them | ... | gate G-1]
// of G * 16 floats: an rTask (a range of panels) streams its panels once
// (front to back on even steps, back to front on odd ones, so that the
// panels read last are read first while still in cache), keeping G * 16
// sums in registers, and ends with all the gates of its units, so the cell
// update needs nothing from other rTasks.
// Units past H (the last panel of an H that is not a multiple of 16) are
// zero. Shape [panels, H, G * 16].
//
// The projection of the layer's inputs (TesseraRnnProj) uses the same
// order for its output columns, below.
#pragma once

#include <cstdint>

#include "ir/ops/op_registry.h"
#include "ir/tensor.h"

namespace tessera {

// Hidden units per panel of the packed recurrence weights (the cells'
// panel_units attribute: the CPU rKernels take this one only).
inline constexpr int64_t kRnnPanelUnits = 16;
// The blocked layout of a carried projection: pieces of kRnnBlockRows rows
// (the block_rows attribute); it needs hidden sizes that are a multiple of
// kRnnCarryHidden (kCarrySlices panels, ir/ops/op_registry.h).
inline constexpr int64_t kRnnBlockRows = 8;
inline constexpr int64_t kRnnCarryHidden = kCarrySlices * kRnnPanelUnits;

inline int64_t rnn_panels(int64_t hidden) { return (hidden + kRnnPanelUnits - 1) / kRnnPanelUnits; }

// Packs one direction's R ([G*H, H] row-major, ONNX gate order).
Tensor pack_rnn_recurrence(const float* r, int64_t gates, int64_t hidden);

// The input projection in the same panel order: its columns are
// [panel p][gate g][unit j] (G * 16 per panel, units past H zero), so a
// cell's rTask reads its panels' inputs as one contiguous run per panel,
// and a projection rTask that covers the same panels writes all of them.
inline int64_t rnn_projection_cols(int64_t gates, int64_t hidden) {
  return rnn_panels(hidden) * gates * kRnnPanelUnits;
}

// W ([G*H, I] row-major, ONNX gate order) as [panels, I, G * 16]:
// transposed, so that output columns are the vector dimension, and cut
// into panels as R is, so that each panel's weights are one contiguous
// block (a projection rTask streams them from memory in order).
Tensor pack_rnn_projection(const float* w, int64_t gates, int64_t hidden, int64_t input);

// A per-gate vector ([G*H], e.g. the folded biases) in the same column
// order, [rnn_projection_cols].
Tensor pack_rnn_gate_vector(const float* v, int64_t gates, int64_t hidden);

// A stacked LSTM layer's projection carried by the steps of the layer
// below (attributes next_slice, xp_blocked, blocked) lies in a blocked
// layout: pieces [panels / 8, 8 rows, G * 16], piece (row / 8) * 8 + p % 8
// holding rows 8 (row / 8) .. + 7 of panels p % 8, 8 + p % 8, .... It
// needs batch 1 and a hidden size that is a multiple of kRnnCarryHidden
// (whole pieces, and groups of 4 panels each carrying a 32-column tile;
// both constants in ir/ops/op_registry.h).
// Float offset of (row, panel p) in that layout, `width` = G * 16.
inline int64_t rnn_blocked_offset(int64_t row, int64_t p, int64_t panels, int64_t width) {
  return ((row / kRnnBlockRows * 8 + p % 8) * (panels / 8) + p / 8) * kRnnBlockRows * width +
         row % kRnnBlockRows * width;
}

}  // namespace tessera
