// Implements: the normalization kernel family of a Backend (docs/design.md
// section 1): batch normalization split at the two points where `bn` over
// the global batch sums across replicas — the per-channel sums of the
// forward pass and the two per-channel gradient sums of the backward pass —
// so that the layer can hand those sums to a ReplicaSum in between. Every
// reduction is accumulated in double and in a fixed order, so the same
// inputs give the same bits whatever the thread count.
#pragma once

#include <cstdint>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// A batch-norm input seen as [rows, channels, spatial]: per channel over
// [N, C, H, W] or [N, C, D, H, W] (spatial = H·W or D·H·W), per feature on
// flat [N, F] (channels = F, spatial = 1).
struct NormShape {
  int rows = 0;
  int channels = 0;
  int spatial = 1;
};

// Per-channel arrays have `channels` floats; pointers are device pointers
// of the backend that owns this table.
class NormKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "norm";

  // sums[c] = Σ (x - shift[c]), sums[C + c] = Σ (x - shift[c])² over the
  // rows and spatial positions of channel c (overwritten; rows == 0 gives
  // zeros). The shift, a value every replica agrees on (the running mean),
  // keeps the squares from cancelling when the mean is large.
  virtual void batch_sums(const float* x, const NormShape& s, const float* shift,
                          float* sums) = 0;
  // From sums over `count` values per channel (count >= 1, the whole batch):
  // the batch mean and 1 / sqrt(biased variance + eps), which normalize and
  // the backward pass read, and the torch.nn.BatchNorm update
  //   running_mean = (1 - momentum) running_mean + momentum mean
  //   running_var  = (1 - momentum) running_var + momentum var · count / (count - 1)
  // (the factor is 1 when count == 1, where torch refuses to train). shift
  // may be running_mean: each channel reads it before updating it.
  virtual void batch_stats(const float* sums, const float* shift, int channels, double count,
                           float eps, float momentum, float* mean, float* invstd,
                           float* running_mean, float* running_var) = 0;
  // batch_sums, then batch_stats over `count` >= 1 values from those sums:
  // for a layer with nothing between the two (no sum over replicas), which
  // a backend may run as one pass. The same bits as the two calls.
  virtual void batch_sums_and_stats(const float* x, const NormShape& s, const float* shift,
                                    double count, float eps, float momentum, float* sums,
                                    float* mean, float* invstd, float* running_mean,
                                    float* running_var) {
    batch_sums(x, s, shift, sums);
    batch_stats(sums, shift, s.channels, count, eps, momentum, mean, invstd, running_mean,
                running_var);
  }
  // invstd[c] = 1 / sqrt(var[c] + eps): evaluation with the running variance.
  virtual void inverse_std(const float* var, int channels, float eps, float* invstd) = 0;
  // y = (x - mean[c]) · invstd[c] · weight[c] + bias[c]; with `relu`, its
  // relu (v > 0 ? v : 0, as the relu layer computes it): a bn and the relu
  // after it in one pass (Layer::absorbs_next).
  virtual void normalize(const float* x, const NormShape& s, const float* mean,
                         const float* invstd, const float* weight, const float* bias, bool relu,
                         float* y) = 0;

  // The two sums the input gradient needs, laid out like the gradients of
  // the layer's weight and bias (which they are, for this shard):
  //   sums[c] = Σ dy · x̂,  sums[C + c] = Σ dy,  x̂ = (x - mean[c]) · invstd[c].
  // Where `gate` is not null it holds normalize's output with relu, and dz
  // is the gradient w.r.t. it: dy = gate > 0 ? dz : 0 (relu's backward, as
  // the relu layer computes it from its input, whose sign gate shares).
  // Else dy = dz.
  virtual void grad_sums(const float* x, const float* gate, const float* dz, const NormShape& s,
                         const float* mean, const float* invstd, float* sums) = 0;
  // dx = weight · invstd · (dy - Σdy / count - x̂ · Σdy·x̂ / count), with the
  // sums of grad_sums over the `count` values per channel of the batch, and
  // dy from gate and dz as there.
  virtual void input_grad(const float* x, const float* gate, const float* dz, const NormShape& s,
                          const float* mean, const float* invstd, const float* weight,
                          const float* sums, double count, float* dx) = 0;
};

}  // namespace dptrain
