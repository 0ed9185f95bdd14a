// Implements: the SDPA operation graphs of sdpa_graphs.hpp.
//
// The choices, from the cuDNN developer guide's Graph API page, sections
// "Fused Flash Attention fprop" and "Fused Flash Attention bprop"
// (https://docs.nvidia.com/deeplearning/cudnn/developer/graph-api.html),
// the backend API reference of cudnn_graph.h
// (https://docs.nvidia.com/deeplearning/cudnn/api/cudnn-graph-library.html)
// and the graphs NVIDIA's cudnn-frontend builds through that API for SDPA
// (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, the
// composite forward and backward nodes, which cuDNN's engines are matched
// against):
//   - Q, K, V, O, dO, dQ, dK, dV bf16 in memory; every intermediate that is
//     not a matmul operand fp32 virtual; the matmuls' second operands in
//     bf16 (P before O = P V; Pᵀ and dS, dSᵀ in backward), so the softmax's
//     last pointwise op writes bf16 (its cast); every compute type FLOAT.
//   - The scale a by-value fp32 scalar [1,1,1,1], applied by a pointwise MUL
//     right after S = Q Kᵀ; the causal mask GEN_INDEX (axis 2 = row,
//     axis 3 = column, INT32), CMP_GE (row ≥ column, BOOLEAN), then
//     BINARY_SELECT(S, −∞ by value, keep) after the scale.
//   - Softmax with stats: MAX reduction to [N,H,T,1], SUB, EXP, ADD
//     reduction, LOG, ADD (max + log sum) to Stats fp32 in memory, DIV to P.
//   - Backward: Σ dO ∘ O per row (MUL, ADD reduction to a virtual row,
//     MUL by a by-value 1.0, the frontend's node for graphs without
//     dropout) into fp32 memory; P recomputed as EXP(scale·S masked −
//     Stats) in fp32; dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − Σ) · scale in
//     fp32, dK = dSᵀ Q, dQ = dS K straight into bf16 dQ. The transposes Pᵀ
//     and dSᵀ (bf16: the reshape casts) and K from Kᵀ (one K input, as the
//     frontend has it) are RESHAPE ops onto virtual tensors with swapped
//     strides. dQ without an fp32 dQ_accum in memory is the frontend's
//     deterministic backward (a dQ_accum is how the backend API is told
//     it may sum dQ with atomics); its engine takes a dP workspace of
//     N·H·T·T bf16 values, which the plan's workspace size says.
#include "backends/cuda/cudnn/sdpa_graphs.hpp"

#include <memory>
#include <utility>

namespace dptrain::cuda {
namespace {

// The shapes and views of one graph.
struct SdpaViews {
  explicit SdpaViews(const SdpaShape& s)
      : n(s.batch), h(s.heads), t(s.tokens), d(s.head_dim), model(h * d) {}
  std::int64_t n, h, t, d, model;

  Dims rows() const { return {n, h, t, d}; }      // Q, K, V, O as [N, H, T, hd]
  Dims cols() const { return {n, h, d, t}; }      // Kᵀ, Vᵀ
  Dims scores() const { return {n, h, t, t}; }
  Dims row_stat() const { return {n, h, t, 1}; }
  // One of Q, K, V inside [N, T, 3, H, hd], as rows and transposed.
  Dims qkv_rows() const { return {t * 3 * model, d, 3 * model, 1}; }
  Dims qkv_cols() const { return {t * 3 * model, d, 1, 3 * model}; }
  Dims heads_rows() const { return {t * model, d, model, 1}; }  // O, dO in [N, T, H, hd]
  Dims stats_strides() const { return {h * t, t, 1, 1}; }       // lse [N·H, T]
  Dims scores_transposed() const { return {h * t * t, t * t, 1, t}; }
};

using Tensor = cudnnBackendDescriptor_t;

// scale · S, and the causal mask on it when asked.
Tensor scaled_masked_scores(GraphBuilder& g, const SdpaViews& v, Tensor s, bool causal) {
  Tensor scaled = g.virtual_tensor(v.scores(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, g.scalar_by_value(kSdpaScale, CUDNN_DATA_FLOAT),
              scaled);
  if (!causal) return scaled;
  Tensor row = g.virtual_tensor(v.scores(), CUDNN_DATA_INT32);
  Tensor col = g.virtual_tensor(v.scores(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scaled, nullptr, row, nullptr, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scaled, nullptr, col, nullptr, 3);
  Tensor keep = g.virtual_tensor(v.scores(), CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, keep);
  Tensor masked = g.virtual_tensor(v.scores(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scaled,
              g.scalar_by_value(kSdpaMaskValue, CUDNN_DATA_FLOAT), masked, keep);
  return masked;
}

// Kᵀ [N, H, hd, T], a view of K in qkv (the one K input of a graph).
Tensor keys_transposed(GraphBuilder& g, const SdpaViews& v) {
  return g.io_tensor(kSdpaK, v.cols(), v.qkv_cols(), CUDNN_DATA_BFLOAT16);
}

// S = scale · Q Kᵀ (masked), from the bf16 views.
Tensor forward_scores(GraphBuilder& g, const SdpaViews& v, Tensor q, Tensor kt, bool causal) {
  Tensor s = g.virtual_tensor(v.scores(), CUDNN_DATA_FLOAT);
  g.matmul(q, kt, s);
  return scaled_masked_scores(g, v, s, causal);
}

// P (bf16) = softmax(s); Stats = max + log Σ exp(s − max) into memory.
Tensor softmax_with_stats(GraphBuilder& g, const SdpaViews& v, Tensor s) {
  const auto fp32 = CUDNN_DATA_FLOAT;
  Tensor max = g.virtual_tensor(v.row_stat(), fp32);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, max);
  Tensor shifted = g.virtual_tensor(v.scores(), fp32);
  g.pointwise(CUDNN_POINTWISE_SUB, fp32, s, max, shifted);
  Tensor e = g.virtual_tensor(v.scores(), fp32);
  g.pointwise(CUDNN_POINTWISE_EXP, fp32, shifted, nullptr, e);
  Tensor sum = g.virtual_tensor(v.row_stat(), fp32);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  Tensor log_sum = g.virtual_tensor(v.row_stat(), fp32);
  g.pointwise(CUDNN_POINTWISE_LOG, fp32, sum, nullptr, log_sum);
  Tensor stats = g.io_tensor(kSdpaStats, v.row_stat(), v.stats_strides(), fp32);
  g.pointwise(CUDNN_POINTWISE_ADD, fp32, max, log_sum, stats);
  Tensor p = g.virtual_tensor(v.scores(), CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, fp32, e, sum, p);
  return p;
}

// P (fp32) = exp(s − Stats), recomputed in backward from the forward's Stats.
Tensor probabilities_from_stats(GraphBuilder& g, const SdpaViews& v, Tensor s) {
  Tensor stats = g.io_tensor(kSdpaStats, v.row_stat(), v.stats_strides(), CUDNN_DATA_FLOAT);
  Tensor shifted = g.virtual_tensor(v.scores(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, stats, shifted);
  Tensor p = g.virtual_tensor(v.scores(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, shifted, nullptr, p);
  return p;
}

// xᵀ over the last two dimensions, bf16 (x may be fp32: the reshape casts,
// as the frontend's reshape_p and reshape_dS do), onto swapped strides.
Tensor transposed(GraphBuilder& g, const SdpaViews& v, Tensor x) {
  Tensor y = g.virtual_tensor(v.scores(), v.scores_transposed(), CUDNN_DATA_BFLOAT16);
  g.reshape(x, y);
  return y;
}

// Σ dO ∘ O per row, into fp32 memory (the rowdot of FusedAttentionKernels):
// the sum to a virtual row, then times a by-value 1.0 into memory.
Tensor row_dot(GraphBuilder& g, const SdpaViews& v, Tensor d_o, Tensor o) {
  const auto fp32 = CUDNN_DATA_FLOAT;
  Tensor product = g.virtual_tensor(v.rows(), fp32);
  g.pointwise(CUDNN_POINTWISE_MUL, fp32, d_o, o, product);
  Tensor sum = g.virtual_tensor(v.row_stat(), fp32);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, product, sum);
  Tensor dot = g.io_tensor(kSdpaRowDot, v.row_stat(), packed_strides(v.row_stat()), fp32);
  g.pointwise(CUDNN_POINTWISE_MUL, fp32, sum, g.scalar_by_value(kSdpaOne, fp32), dot);
  return dot;
}

// dS (fp32) = P ∘ (dO Vᵀ − Σ dO ∘ O) · scale.
Tensor score_gradient(GraphBuilder& g, const SdpaViews& v, Tensor d_o, Tensor p, Tensor dot) {
  const auto fp32 = CUDNN_DATA_FLOAT;
  Tensor vt = g.io_tensor(kSdpaV, v.cols(), v.qkv_cols(), CUDNN_DATA_BFLOAT16);
  Tensor dp = g.virtual_tensor(v.scores(), fp32);
  g.matmul(d_o, vt, dp);
  Tensor centered = g.virtual_tensor(v.scores(), fp32);
  g.pointwise(CUDNN_POINTWISE_SUB, fp32, dp, dot, centered);
  Tensor weighted = g.virtual_tensor(v.scores(), fp32);
  g.pointwise(CUDNN_POINTWISE_MUL, fp32, centered, p, weighted);
  Tensor ds = g.virtual_tensor(v.scores(), fp32);
  g.pointwise(CUDNN_POINTWISE_MUL, fp32, weighted, g.scalar_by_value(kSdpaScale, fp32), ds);
  return ds;
}

}  // namespace

OperationGraph sdpa_forward_graph(cudnnHandle_t handle, const SdpaShape& shape) {
  const SdpaViews v(shape);
  auto g = std::make_unique<GraphBuilder>();
  Tensor q = g->io_tensor(kSdpaQ, v.rows(), v.qkv_rows(), CUDNN_DATA_BFLOAT16);
  Tensor kt = keys_transposed(*g, v);
  Tensor p = softmax_with_stats(*g, v, forward_scores(*g, v, q, kt, shape.causal));
  Tensor values = g->io_tensor(kSdpaV, v.rows(), v.qkv_rows(), CUDNN_DATA_BFLOAT16);
  Tensor o = g->io_tensor(kSdpaO, v.rows(), v.heads_rows(), CUDNN_DATA_BFLOAT16);
  g->matmul(p, values, o);
  BackendDescriptor graph = g->finalize(handle);
  return {std::move(g), std::move(graph)};
}

OperationGraph sdpa_backward_graph(cudnnHandle_t handle, const SdpaShape& shape) {
  const SdpaViews v(shape);
  const auto bf16 = CUDNN_DATA_BFLOAT16;
  auto g = std::make_unique<GraphBuilder>();
  Tensor q = g->io_tensor(kSdpaQ, v.rows(), v.qkv_rows(), bf16);
  Tensor o = g->io_tensor(kSdpaO, v.rows(), v.heads_rows(), bf16);
  Tensor d_o = g->io_tensor(kSdpaDO, v.rows(), v.heads_rows(), bf16);
  Tensor dot = row_dot(*g, v, d_o, o);
  Tensor kt = keys_transposed(*g, v);
  Tensor p = probabilities_from_stats(*g, v, forward_scores(*g, v, q, kt, shape.causal));
  Tensor dv = g->io_tensor(kSdpaDV, v.rows(), v.qkv_rows(), bf16);
  g->matmul(transposed(*g, v, p), d_o, dv);
  Tensor ds = score_gradient(*g, v, d_o, p, dot);
  Tensor dk = g->io_tensor(kSdpaDK, v.rows(), v.qkv_rows(), bf16);
  g->matmul(transposed(*g, v, ds), q, dk);
  Tensor k_rows = g->virtual_tensor(v.rows(), v.qkv_rows(), bf16);  // K, from Kᵀ
  g->reshape(kt, k_rows);
  Tensor dq = g->io_tensor(kSdpaDQ, v.rows(), v.qkv_rows(), bf16);
  g->matmul(ds, k_rows, dq);
  BackendDescriptor graph = g->finalize(handle);
  return {std::move(g), std::move(graph)};
}

}  // namespace dptrain::cuda
