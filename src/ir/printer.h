// Text views of a Graph: a one-node-per-line dump and the summary that
// `tessera inspect` prints (inputs, outputs, node count by op, parameters,
// FLOP estimate).
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"

namespace tessera {

struct GraphSummary {
  std::map<std::string, int> op_counts;
  int64_t parameters = 0;        // elements in constants
  int64_t parameter_bytes = 0;
  double flops = 0;              // per run; valid once shapes are bound
  int nodes = 0;
};

GraphSummary graph_summarize(const Graph& g);
// "  %out = Conv(%x, %w) {strides=[2,2]} : float32 1x64x112x112"
std::string graph_to_text(const Graph& g);
std::string value_to_text(const Value& v);

}  // namespace tessera
