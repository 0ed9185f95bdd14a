// Implements: the launchers of the fused attention kernels
// (fused_attention.cu, the forward; fused_attention_backward.cu, the
// gradients; internal to src/backends/cuda/); FusedAttentionKernels
// (dptrain/backends/kernels/fused_attention_kernels.hpp) says what each
// computes. Each launches on l.stream and returns at once.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain::cuda {

// How the kernels multiply: fp32 operands with fp32 fused multiply-adds
// (--precision fp32), or on the tensor cores with fp32 accumulation, the
// operands rounded to TF32 (--precision tf32) or to bf16 (--precision
// bf16) as they are staged.
enum class AttentionOperands { kFp32, kTf32, kBf16 };

// The largest head dimension the kernels take with these operands on the
// current device: 128 where their tiles fit its shared memory
// (fused_attention_tiles.hpp), as on every GPU since sm_80.
int fused_attention_max_head_dim(AttentionOperands operands);

// o16 / dqkv16 (may be null): the output's / dqkv's bf16 copy, written with
// it; o / dqkv may be null where the copy is given (written alone then).
// qkv16, where not null (bf16 operands only), is read in place of qkv,
// which may then be null.
void fused_attention_forward(const Launch& l, AttentionOperands operands, const float* qkv,
                             const std::uint16_t* qkv16, const HeadShape& s, float scale,
                             bool causal, float* o, float* lse, std::uint16_t* o16);
// rowdot: scratch of N·H·T floats, Σ do ∘ o per row, from o where it is
// not null, else from its bf16 rounding o16. d_o16, where not null
// (bf16 operands only), is read in place of d_o, which may then be null.
void fused_attention_backward(const Launch& l, AttentionOperands operands, const float* qkv,
                              const std::uint16_t* qkv16, const float* o,
                              const std::uint16_t* o16, const float* lse, const float* d_o,
                              const std::uint16_t* d_o16, const HeadShape& s, float scale,
                              bool causal, float* rowdot, float* dqkv, std::uint16_t* dqkv16);

}  // namespace dptrain::cuda
