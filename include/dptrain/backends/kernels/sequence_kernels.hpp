// Implements: the sequence kernel family of a Backend (docs/design.md section 1
// and section 2's "Sequences"): what the layers of sequence models need
// besides GEMMs — token and position embeddings, layer normalization, the
// reshuffles between [N, T, 3, H, hd] projections and head-major [N·H, T, hd]
// blocks, the attention softmax (causal or not), images read as sequences,
// and the mean over positions. The batched products of attention are
// Backend::gemm_batched. Sequence tensors are [N, T, D], row-major.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// One attention layer's geometry: `batch` sequences of `tokens` positions,
// `heads` heads of `head_dim` features each (D = heads · head_dim).
struct HeadShape {
  int batch = 0;
  int tokens = 0;
  int heads = 0;
  int head_dim = 0;
};

// Pointers are device pointers of the backend that owns this table. Every
// reduction runs in a fixed order (same inputs, same bits, whatever the
// thread count).
class SequenceKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "sequence";
  // What Backend::kernels says of a backend without this family.
  static constexpr const char* kMissing =
      "kernels for sequence layers (embed, pos, ln, attn, seq); run them with --device cpu "
      "or cuda";

  // --- token embedding (torch.nn.Embedding) ---
  // y[r, :] = table[ids[r], :] for r < rows; ids are in range (the data
  // reader checked them against the vocabulary).
  virtual void embed(const std::int32_t* ids, const float* table, int rows, int dim,
                     float* y) = 0;
  // dtable[v, :] = Σ dy[r, :] over the rows r with ids[r] == v, in
  // increasing r (overwrites all `vocab` rows; unused ones get zeros).
  virtual void embed_grad(const std::int32_t* ids, const float* dy, int rows, int vocab, int dim,
                          float* dtable) = 0;

  // --- learned positions: y[n, t, :] = x[n, t, :] + pos[t, :] ---
  virtual void add_positions(const float* x, const float* pos, int batch, int tokens, int dim,
                             float* y) = 0;
  // dpos[t, :] = Σ_n dy[n, t, :], in increasing n (overwrites).
  virtual void position_grad(const float* dy, int batch, int tokens, int dim, float* dpos) = 0;

  // --- layer normalization over the last dimension (torch.nn.LayerNorm) ---
  // y = (x - μ) · rstd · weight + bias per row of `dim` values, μ the mean
  // and rstd = 1 / sqrt(biased variance + eps); mean and rstd ([rows]) are
  // kept for the backward pass. y_bf16, where not null, also receives y
  // rounded to bf16 (bf16_bits of each value), written in the same pass:
  // the next layer's GEMM operand under --precision bf16; y may then be
  // null (the copy alone).
  virtual void layer_norm(const float* x, const float* weight, const float* bias, int rows,
                          int dim, float eps, float* y, float* mean, float* rstd,
                          std::uint16_t* y_bf16) = 0;
  void layer_norm(const float* x, const float* weight, const float* bias, int rows, int dim,
                  float eps, float* y, float* mean, float* rstd) {
    layer_norm(x, weight, bias, rows, dim, eps, y, mean, rstd, nullptr);
  }
  // dx from dy and the saved statistics. add, where not null, is added to
  // each value in the same pass (dx = the gradient + add, the fp32 sum of
  // Backend::sum: a block's identity shortcut's gradient), and dx_bf16,
  // where not null, receives dx rounded to bf16 (bf16_bits), as Backend::sum
  // writes its y16. dx may not alias dy or add.
  virtual void layer_norm_grad(const float* x, const float* dy, const float* weight,
                               const float* mean, const float* rstd, int rows, int dim,
                               float* dx, const float* add, std::uint16_t* dx_bf16) = 0;
  void layer_norm_grad(const float* x, const float* dy, const float* weight, const float* mean,
                       const float* rstd, int rows, int dim, float* dx) {
    layer_norm_grad(x, dy, weight, mean, rstd, rows, dim, dx, nullptr, nullptr);
  }
  // dweight = Σ dy · x̂, dbias = Σ dy over the rows (overwritten), in a
  // fixed order (increasing on the CPU). `workspace`: device scratch of
  // layer_norm_workspace(rows, dim) floats or more, which the layer
  // allocates when it is built (none on the CPU: may be null there).
  virtual std::size_t layer_norm_workspace(int rows, int dim) const = 0;
  virtual void layer_norm_param_grad(const float* x, const float* dy, const float* mean,
                                     const float* rstd, int rows, int dim, float* dweight,
                                     float* dbias, float* workspace) = 0;

  // --- heads ---
  // qkv [N, T, 3, H, hd] (an input projection's output) -> q, k, v, each
  // [N, H, T, hd]. join_qkv is its inverse (gradients flow back through it).
  virtual void split_qkv(const float* qkv, const HeadShape& s, float* q, float* k, float* v) = 0;
  virtual void join_qkv(const float* q, const float* k, const float* v, const HeadShape& s,
                        float* qkv) = 0;
  // [N, H, T, hd] <-> [N, T, H, hd] (= [N, T, D]).
  virtual void merge_heads(const float* heads, const HeadShape& s, float* merged) = 0;
  virtual void split_heads(const float* merged, const HeadShape& s, float* heads) = 0;

  // --- attention softmax over scores [N·H, T, T] ---
  // p = softmax(scale · scores + mask) per row, from the row maximum; with
  // `causal`, mask = −∞ above the diagonal (those p are exactly 0).
  // In place allowed (p == scores).
  virtual void attention_softmax(const float* scores, const HeadShape& s, float scale,
                                 bool causal, float* p) = 0;
  // dscores = scale · p ∘ (dp − Σ_j dp·p), per row (in place allowed: dscores == dp).
  virtual void attention_softmax_grad(const float* p, const float* dp, const HeadShape& s,
                                      float scale, float* dscores) = 0;

  // --- images as sequences and the mean over positions ---
  // x [N, C, L] -> y [N, L, C] (seq, L = H·W); and back, for its gradient.
  virtual void channels_last(const float* x, int batch, int channels, int length, float* y) = 0;
  virtual void channels_first(const float* x, int batch, int channels, int length, float* y) = 0;
  // y[n, :] = mean over t of x[n, t, :]; the gradient spreads dy / T.
  virtual void mean_positions(const float* x, int batch, int tokens, int dim, float* y) = 0;
  virtual void mean_positions_grad(const float* dy, int batch, int tokens, int dim,
                                   float* dx) = 0;
};

}  // namespace dptrain
