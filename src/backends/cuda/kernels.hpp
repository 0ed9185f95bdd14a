// Implements: the launchers of the CUDA kernels (internal to src/backends/cuda/). Each
// launches on the given stream, checks the launch, and returns at once; the
// kernel tables (kernel_factory.hpp) and the CudaBackend map the Backend
// interface onto them.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain::cuda {

constexpr int kThreads = 256;
// Partial sums of the loss kernels: one slot pair per block, summed in block
// order by a second launch so the loss is the same bit for bit every run.
constexpr int kMaxLossBlocks = 1024;

struct Launch {
  cudaStream_t stream = nullptr;
  int max_blocks = 1;  // grid cap for grid-stride loops (a few waves of the GPU)
};

inline unsigned grid_for(std::size_t n, const Launch& l) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(blocks, l.max_blocks)));
}

// --- elementwise.cu ---
void fill(const Launch& l, float* x, float value, std::size_t n);
// y = a + b elementwise; y may be a or b.
// y16 (may be null): y's bf16 copy, written with it.
void sum(const Launch& l, const float* a, const float* b, float* y, std::size_t n,
         std::uint16_t* y16);
// C[m, n] (row stride ldc) = beta * C, and exactly 0 when beta == 0 (C unread).
void scale_matrix(const Launch& l, float* c, int m, int n, int ldc, float beta);
// y[i] = bf16(x[i]), round to nearest even; y is __nv_bfloat16[n].
void to_bf16(const Launch& l, const float* x, void* y, std::size_t n);
// y[i] = float(x[i]) (exact); x is __nv_bfloat16[n] (a bf16 convolution's
// result, --shard-params' bf16 gathers).
void from_bf16(const Launch& l, const void* x, float* y, std::size_t n);
// Both conversions in one launch (a GEMM's two operands); 8 values a
// thread where a source and its destination are 16-byte aligned.
void to_bf16_pair(const Launch& l, const float* xa, void* ya, std::size_t na, const float* xb,
                  void* yb, std::size_t nb);
// y += bias by column, then + add where not null (DenseKernels::add_bias_and).
void add_bias(const Launch& l, float* y, const float* bias, int rows, int cols,
              const float* add = nullptr);
// Deterministic column sums (fixed summation order).
void bias_grad(const Launch& l, const float* dy, float* db, int rows, int cols);
void bias_grad_bf16(const Launch& l, const std::uint16_t* dy, float* db, int rows, int cols);
void activation_forward(const Launch& l, Activation f, const float* x, float* y, std::size_t n);
void activation_backward(const Launch& l, Activation f, const float* x, const float* y,
                         const float* dy, float* dx, std::size_t n);
// Zeroes *counter, then adds the number of NaN/Inf among x[0, n) to it.
void count_nonfinite(const Launch& l, const float* x, std::size_t n,
                     unsigned long long* counter);

// --- loss.cu --- scratch: 2 * kMaxLossBlocks doubles of per-block partials,
// which the grid's last block adds up in the same launch, and the count of
// blocks arrived, zero before the first launch (each leaves it so).
// The gradient's bf16 copy (dlogits_bf16, dpred_bf16: may be null) is
// written by the pass that writes the gradient.
struct LossScratch {
  double* partials = nullptr;
  unsigned* arrivals = nullptr;
};
void softmax_xent(const Launch& l, const float* logits, const std::int32_t* labels, int rows,
                  int cols, float grad_scale, float* dlogits, std::uint16_t* dlogits_bf16,
                  float* stats, const LossScratch& scratch);
// The same over bf16 logits, the gradient written as bf16 (may be logits16).
void softmax_xent_bf16(const Launch& l, const std::uint16_t* logits16,
                       const std::int32_t* labels, int rows, int cols, float grad_scale,
                       std::uint16_t* dlogits16, float* stats, const LossScratch& scratch);
void mse(const Launch& l, const float* pred, const float* target, int rows, int cols,
         float grad_scale, float* dpred, std::uint16_t* dpred_bf16, float* stats,
         const LossScratch& scratch);

// --- optimizer.cu --- one launch each over the whole arena.
// The sum of x[i]^2 in double into *out: per-block partials (max_blocks of
// them), then one block adds those in a fixed order, so the bits never vary.
void sum_squares(const Launch& l, const float* x, std::size_t n, double* partials, double* out);
// w16 (bf16 values), where not null: the updated w rounded, in the same pass.
void sgd_step(const Launch& l, float* w, void* w16, const float* g, float* velocity,
              std::size_t n, float lr, float momentum, float weight_decay, bool nesterov);
// l2: weight decay folded into g (Adam); shrink: 1 - lr * wd (AdamW, else 1);
// inv_bc1/2: 1 / (1 - beta^t), computed in double on the host.
void adam_step(const Launch& l, float* w, void* w16, const float* g, float* m, float* v,
               std::size_t n, float lr, float beta1, float beta2, float eps, float l2,
               float shrink, float inv_bc1, float inv_bc2);

// --- norm.cu --- batch norm over [rows, channels, spatial] (norm_kernels.hpp
// says what each computes). The sums reduce each channel in a fixed order
// into norm_partials(s) doubles of device scratch, which the channel's last
// block adds up in the same launch; it counts the blocks in `arrivals`, one
// counter a channel, zero before the first launch (each leaves them so).
struct NormScratch {
  double* partials = nullptr;
  unsigned* arrivals = nullptr;
};
std::size_t norm_partials(const NormShape& s);
void norm_batch_sums(const Launch& l, const float* x, const NormShape& s, const float* shift,
                     float* sums, const NormScratch& scratch);
// norm_batch_sums, then norm_batch_stats from those sums, in one launch.
void norm_batch_sums_stats(const Launch& l, const float* x, const NormShape& s,
                           const float* shift, double count, float eps, float momentum,
                           float* sums, float* mean, float* invstd, float* running_mean,
                           float* running_var, const NormScratch& scratch);
void norm_batch_stats(const Launch& l, const float* sums, const float* shift, int channels,
                      double count, float eps, float momentum, float* mean, float* invstd,
                      float* running_mean, float* running_var);
void norm_inverse_std(const Launch& l, const float* var, int channels, float eps, float* invstd);
void norm_normalize(const Launch& l, const float* x, const NormShape& s, const float* mean,
                    const float* invstd, const float* weight, const float* bias, bool relu,
                    float* y);
void norm_grad_sums(const Launch& l, const float* x, const float* gate, const float* dz,
                    const NormShape& s, const float* mean, const float* invstd, float* sums,
                    const NormScratch& scratch);
void norm_input_grad(const Launch& l, const float* x, const float* gate, const float* dz,
                     const NormShape& s, const float* mean, const float* invstd,
                     const float* weight, const float* sums, double count, float* dx);

// --- dropout.cu --- the draw of dropout_kernels.hpp, element by element.
void dropout_set_draw(const Launch& l, std::uint64_t* draw, std::uint64_t step_key,
                      std::uint64_t first_row);
void dropout_forward(const Launch& l, const float* x, float* y, std::uint8_t* keep, int rows,
                     int width, const std::uint64_t* draw, std::uint64_t threshold, float scale);
void dropout_backward(const Launch& l, const float* dy, const std::uint8_t* keep, float* dx,
                      std::size_t n, float scale);

// --- augment.cu --- x[rows, planes, H, W] rebuilt from source, a device copy
// of it (in-place crops would read pixels already moved).
void augment(const Launch& l, const float* source, float* x, int rows, const AugmentGeometry& g,
             std::uint64_t seed, std::uint64_t epoch, std::uint64_t first_row);

// --- sequence.cu and layer_norm.cu --- what sequence_kernels.hpp defines,
// one launcher each (the split/join and merge/split pairs as one launcher
// with a direction).
void embed(const Launch& l, const std::int32_t* ids, const float* table, int rows, int dim,
           float* y);
void embed_grad(const Launch& l, const std::int32_t* ids, const float* dy, int rows, int vocab,
                int dim, float* dtable);
void add_positions(const Launch& l, const float* x, const float* pos, int batch, int tokens,
                   int dim, float* y);
void position_grad(const Launch& l, const float* dy, int batch, int tokens, int dim, float* dpos);
// y16 (may be null): y's bf16 copy, written with it.
void layer_norm(const Launch& l, const float* x, const float* w, const float* b, int rows, int dim,
                float eps, float* y, float* mean, float* rstd, std::uint16_t* y16);
// add, dx16 (may be null): added in the same pass, dx's bf16 copy.
void layer_norm_grad(const Launch& l, const float* x, const float* dy, const float* w,
                     const float* mean, const float* rstd, int rows, int dim, float* dx,
                     const float* add, std::uint16_t* dx16);
// Layer norm's parameter gradients sum each column over chunks of `rows`
// rows (at least kParamRows: one chunk, the CPU's order, up to that many),
// then over the `count` chunks: partials holds 2 · count · dim floats.
constexpr int kParamRows = 64;
struct LayerNormChunks {
  int rows = 0, count = 0;
};
LayerNormChunks layer_norm_chunks(int rows);
// arrivals: layer_norm_column_blocks(dim) counters, zero before the first
// launch (each leaves them so).
void layer_norm_param_grad(const Launch& l, const float* x, const float* dy, const float* mean,
                           const float* rstd, int rows, int dim, float* partials,
                           unsigned* arrivals, float* dw, float* db);
unsigned layer_norm_column_blocks(int dim);
// split: qkv [N, T, 3, H, hd] -> q, k, v [N, H, T, hd]; else the reverse.
void move_qkv(const Launch& l, float* qkv, const HeadShape& s, float* q, float* k, float* v,
              bool split);
// split: merged [N, T, H, hd] -> heads [N, H, T, hd]; else the reverse.
void move_heads(const Launch& l, float* merged, const HeadShape& s, float* heads, bool split);
void attention_softmax(const Launch& l, const float* scores, const HeadShape& s, float scale,
                       bool causal, float* p);
void attention_softmax_grad(const Launch& l, const float* p, const float* dp, const HeadShape& s,
                            float scale, float* ds);
// y[n] = x[n]^T for `batch` row-major [a, b] matrices.
void transpose(const Launch& l, const float* x, int batch, int a, int b, float* y);
void mean_positions(const Launch& l, const float* x, int batch, int tokens, int dim, float* y);
void mean_positions_grad(const Launch& l, const float* dy, int batch, int tokens, int dim,
                         float* dx);

}  // namespace dptrain::cuda
