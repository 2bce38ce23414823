// Per-op shape/dtype inference and FLOP estimates (op_registry.cc's table).
// Internal to the IR layer.
#pragma once

#include "ir/graph.h"
#include "tessera/status.h"

namespace tessera {

// Sets output i to dtype/shape and marks it known.
void set_output(Node& n, size_t i, DType dtype, Shape shape);

// infer_math.cc
Status infer_same(Node& n);
Status infer_same_bool(Node& n);
Status infer_cast(Node& n);
Status infer_dropout(Node& n);
Status infer_broadcast(Node& n);
Status infer_broadcast_bool(Node& n);
Status infer_where(Node& n);
Status infer_matmul(Node& n);
Status infer_gemm(Node& n);
Status infer_fused_conv(Node& n);
Status infer_fused_pool(Node& n);
Status infer_inverted_residual(Node& n);
Status infer_attention(Node& n);
double flops_attention(const Node& n);
Status infer_fused_gemm(Node& n);
Status infer_fused_matmul(Node& n);
Status infer_fused_elementwise(Node& n);
double flops_fused_elementwise(const Node& n);
Status infer_einsum(Node& n);
Status infer_reduce(Node& n);
Status infer_argmax(Node& n);
Status infer_batch_norm(Node& n);
Status infer_layer_norm(Node& n);

// infer_nn.cc
Status infer_conv(Node& n);
// A fused node's residual (input 3) matches its output; its activation is
// one the epilogue knows.
Status check_fused_epilogue(Node& n);
// infer_blocked.cc: the channel-blocked layout's ops.
Status infer_to_blocked(Node& n);
Status infer_from_blocked(Node& n);
Status infer_blocked_conv(Node& n);
Status infer_conv_transpose(Node& n);
Status infer_pool(Node& n);
Status infer_global_pool(Node& n);
Status infer_lstm(Node& n);
Status infer_gru(Node& n);
Status infer_rnn_cell(Node& n);
Status infer_rnn_proj(Node& n);

// infer_layout.cc
Status infer_concat(Node& n);
Status infer_constant_of_shape(Node& n);
Status infer_expand(Node& n);
Status infer_flatten(Node& n);
Status infer_gather(Node& n);
Status infer_pad(Node& n);
Status infer_range(Node& n);
Status infer_reshape(Node& n);
Status infer_resize(Node& n);
Status infer_scatter_nd(Node& n);
Status infer_shape_op(Node& n);
Status infer_slice(Node& n);
Status infer_split(Node& n);
Status infer_squeeze(Node& n);
Status infer_tile(Node& n);
Status infer_transpose(Node& n);
Status infer_unsqueeze(Node& n);

// FLOP estimates.
double flops_zero(const Node& n);
double flops_out_numel(const Node& n);
double flops_in_numel(const Node& n);
double flops_matmul(const Node& n);
double flops_gemm(const Node& n);
double flops_einsum(const Node& n);
double flops_conv(const Node& n);
double flops_inverted_residual(const Node& n);
double flops_conv_transpose(const Node& n);
double flops_pool(const Node& n);
double flops_rnn(const Node& n);
double flops_rnn_cell(const Node& n);
double flops_rnn_proj(const Node& n);

// Einsum equation parsed into per-operand letter strings.
struct EinsumSpec {
  std::vector<std::string> operands;
  std::string output;
};
Result<EinsumSpec> parse_einsum(const std::string& equation, const std::vector<int>& ranks);

// Reduce axes (normalized, sorted, unique) of a Reduce* node for an input of
// `rank`; empty with noop = true means "no reduction".
Result<std::vector<int>> reduce_axes(const Node& n, int rank, bool* noop);

}  // namespace tessera
