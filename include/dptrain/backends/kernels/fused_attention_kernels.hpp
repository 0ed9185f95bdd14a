// Implements: the fused attention kernel family (docs/design.md section 2,
// `--attention fused`): causal or full multi-head attention computed in
// tiles with an online softmax, so that nothing of size T × T exists. A
// backend has this family only where `--attention` allows it (CUDA, with
// `auto` or `fused`); the attention layer uses it when present and the head
// dimension is one it supports, else the materialized path of
// SequenceKernels and Backend::gemm_batched (`math`, the reference).
//
// Layouts: qkv is the input projection's output [N, T, 3, H, hd]; q, k and v
// are read from it through strides and their gradients written into dqkv in
// the same layout; the output o is [N, T, H, hd] (= [N, T, D]), the layout
// the output projection reads, and its gradient do likewise. No head
// shuffles. Every sum runs in a fixed order without atomics, so the same
// inputs give the same bits, run after run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernel_family.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain {

class FusedAttentionKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "fused attention";
  static constexpr const char* kMissing =
      "fused attention kernels (--attention fused runs on --device cuda)";

  // Whether the kernels run heads of head_dim features in this backend's
  // precision; the empty string if so, else why not.
  virtual std::string unsupported(int head_dim) const = 0;
  // Whether `--attention fused` asked for this family by name (then an
  // unsupported head dimension is a usage error), rather than `auto`.
  virtual bool requested() const = 0;
  // Which kernels ran the heads so far, for reports: "fused" (the own
  // kernels); cuDNN's table (`--attention cudnn`) says "cudnn", or
  // "fused-fallback" where cuDNN refused every shape it was given.
  virtual std::string implementation() const { return "fused"; }
  // Whether the kernels take qkv as its bf16 rounding alone (qkv.data
  // null: bf16 operands, under --precision bf16), which the attention layer
  // then keeps in place of the fp32 values.
  virtual bool reads_qkv_bf16() const = 0;

  // o = softmax(scale · q kᵀ + mask) v per head, mask −∞ above the diagonal
  // when causal; lse [N·H, T] = the log-sum-exp of each scaled, masked score
  // row, kept for the backward pass. qkv: its fp32 values, or where
  // reads_qkv_bf16() its bf16 rounding alone (qkv.bf16, bf16_bits of each
  // value; the bf16 operands are those bits either way). o_bf16, where not
  // null, also receives o rounded to bf16 (bf16_bits of each value), made
  // in the same pass: the output projection's GEMM operand under
  // --precision bf16. Where reads_qkv_bf16(), o may be null and o_bf16 is
  // then written alone.
  virtual void forward(GemmOperand qkv, const HeadShape& s, float scale, bool causal, float* o,
                       float* lse, std::uint16_t* o_bf16) = 0;
  // dqkv (overwritten) from qkv, the forward's o and lse, and do. The
  // tiles are recomputed from q, k, v and lse. `rowdot` is device scratch
  // of N·H·T floats (Σ do ∘ o per row). o_bf16, where not null, is the
  // forward's rounding of o (a table that reads o in bf16 reads it there);
  // dqkv_bf16, where not null, receives dqkv rounded to bf16, as forward's
  // o_bf16 receives o. Where reads_qkv_bf16(), o may be null (o_bf16 is
  // then o, and Σ do ∘ o is summed from it), do may come as its bf16
  // rounding alone (d_o.bf16, as qkv) and dqkv may be null (dqkv_bf16 is
  // then written alone).
  virtual void backward(GemmOperand qkv, const float* o, const float* lse, GemmOperand d_o,
                        const HeadShape& s, float scale, bool causal, float* rowdot, float* dqkv,
                        const std::uint16_t* o_bf16, std::uint16_t* dqkv_bf16) = 0;

  // The same without bf16 copies.
  void forward(GemmOperand qkv, const HeadShape& s, float scale, bool causal, float* o,
               float* lse) {
    forward(qkv, s, scale, causal, o, lse, nullptr);
  }
  void backward(GemmOperand qkv, const float* o, const float* lse, GemmOperand d_o,
                const HeadShape& s, float scale, bool causal, float* rowdot, float* dqkv) {
    backward(qkv, o, lse, d_o, s, scale, causal, rowdot, dqkv, nullptr, nullptr);
  }
};

}  // namespace dptrain
