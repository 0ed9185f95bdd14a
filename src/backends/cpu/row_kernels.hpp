// Implements: the CPU backend's row kernels (internal to src/backends/cpu/):
// layer norm and its gradients, the attention softmax and its gradient, and
// softmax cross-entropy, each over a range of rows (or, for the parameter
// gradients, of columns) so that the callers split rows over threads. Row
// statistics are sums in double over the fixed lanes of vector_math.hpp:
// the same bits for any thread count and instruction set.
#pragma once

#include <cstdint>

namespace dptrain::cpu_rows {

// Rows [r0, r1) of x [rows, dim]: y = (x − mean)·rstd·weight + bias, with
// the row's mean and rstd = 1/sqrt(var + eps) (biased variance) written out.
void layer_norm(const float* x, const float* weight, const float* bias, int r0, int r1, int dim,
                float eps, float* y, float* mean, float* rstd);

// Rows [r0, r1): dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = dy·weight,
// x̂ = (x − mean)·rstd.
void layer_norm_grad(const float* x, const float* dy, const float* weight, const float* mean,
                     const float* rstd, int r0, int r1, int dim, float* dx,
                     const float* add = nullptr, std::uint16_t* dx_bf16 = nullptr);

// Columns [c0, c1) of the parameter gradients, each summed over all rows in
// row order: dweight = Σ dy·x̂, dbias = Σ dy.
void layer_norm_param_grad(const float* x, const float* dy, const float* mean, const float* rstd,
                           int rows, int dim, int c0, int c1, float* dweight, float* dbias);

// Rows [r0, r1) of the [rows, t] scores: p = softmax(scale·z) over the keys
// the row's query sees (all t, or r % t + 1 when causal; the rest written
// 0 and never read). p may be scores.
void attention_softmax(const float* scores, int r0, int r1, int t, float scale, bool causal,
                       float* p);

// Rows [r0, r1): dscores = scale·p·(dp − Σ p·dp).
void attention_softmax_grad(const float* p, const float* dp, int r0, int r1, int t, float scale,
                            float* dscores);

// Rows [r0, r1) of logits [rows, cols], in row order: adds each row's
// log Σ e^z − z[label] to *loss_sum and counts the rows whose first maximum
// is the label; when dlogits is not null writes
// grad_scale·(softmax(z) − onehot(label)), which may overwrite the logits
// (dlogits == logits).
void softmax_xent(const float* logits, const std::int32_t* labels, int r0, int r1, int cols,
                  float grad_scale, float* dlogits, double* loss_sum, std::int64_t* correct);

}  // namespace dptrain::cpu_rows
