// Implements: cuDNN's fused scaled-dot-product attention as backend-API
// operation graphs (internal to src/backends/cuda/cudnn/), forward and
// backward, causal or not, in the pattern of the cuDNN developer guide's
// "Fused Flash Attention" pages (the composite graph the cuDNN frontend
// builds for SDPA; cuDNN 9.19's single SDPA_FWD/BWD operations have no
// causal mask). Q, K, V and their gradients are bf16 views of one
// [N, T, 3, H, hd] buffer through strides; O and dO bf16 views of an
// [N, T, H, hd] buffer; Stats fp32 [N, H, T, 1] = the log-sum-exp of each
// scaled, masked score row (the lse of FusedAttentionKernels). The graph
// choices, each with its source, are in sdpa_graphs.cpp.
#pragma once

#include <cstdint>
#include <utility>

#include "backends/cuda/cudnn/backend_graph.hpp"

namespace dptrain::cuda {

struct SdpaShape {
  int batch, heads, tokens, head_dim;
  bool causal;
};

// The uids the graphs' memory tensors and by-value scalars are bound by.
enum SdpaUid : std::int64_t {
  kSdpaQ = 1,
  kSdpaK,         // K as Kᵀ [N, H, hd, T] (S = Q Kᵀ; backward reshapes it for dQ = dS K)
  kSdpaV,         // forward: V; backward: Vᵀ (dP = dO Vᵀ)
  kSdpaO,
  kSdpaStats,
  kSdpaScale,     // fp32 by value: 1/sqrt(hd)
  kSdpaMaskValue, // fp32 by value: −∞, the causal mask's score
  kSdpaDO,
  kSdpaDQ,
  kSdpaDK,
  kSdpaDV,
  kSdpaRowDot,    // fp32 [N, H, T, 1]: Σ dO ∘ O per row (backward's memory)
  kSdpaOne,       // fp32 by value: 1, the row dot's last factor
};

// The element offsets of Q, K and V in the [N, T, 3, H, hd] buffer.
inline std::int64_t sdpa_qkv_offset(const SdpaShape& s, int which) {
  return static_cast<std::int64_t>(which) * s.heads * s.head_dim;
}

// The finalized operation graphs; CudnnRefusal where cuDNN takes no such graph.
OperationGraph sdpa_forward_graph(cudnnHandle_t handle, const SdpaShape& s);
OperationGraph sdpa_backward_graph(cudnnHandle_t handle, const SdpaShape& s);
// Their plans (make_plan); the backward's of an engine without the
// NONDETERMINISTIC numerical note where one finalizes (the caller checks
// that two runs agree bit for bit either way).
inline ExecutionPlan sdpa_forward_plan(cudnnHandle_t handle, OperationGraph g) {
  return make_plan(handle, std::move(g), false);
}
inline ExecutionPlan sdpa_backward_plan(cudnnHandle_t handle, OperationGraph g) {
  return make_plan(handle, std::move(g), true);
}

}  // namespace dptrain::cuda
