// What the lowered recurrent rKernels' files share (rnn_cell.cc,
// rnn_proj.cc).
#pragma once

#include <memory>

#include "ir/graph.h"
#include "kernels/cpu/kernel.h"

namespace tessera {

// The layout attributes of a lowered recurrent op (panel_units, and
// block_rows where `blocked`) name this backend's, or an error says which.
Status check_rnn_layout(const Node& n, bool blocked);

Result<std::unique_ptr<ROp>> make_rnn_cell(const Node& n, const KernelParams& p);

}  // namespace tessera
