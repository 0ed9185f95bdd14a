// Implements: the loss kernel family of a Backend (docs/design.md section 1):
// softmax cross-entropy with class labels and mean squared error, each
// giving the loss gradient and accumulating the loss statistics on the device.
#pragma once

#include <cstdint>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// Row-major [rows, cols] tensors in the device memory of the owning backend;
// stats points at two floats there. The gradient output may be null
// (evaluation needs only the stats).
class LossKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "loss";

  // Softmax cross-entropy over rows of logits[rows, cols] with class labels.
  // dlogits = grad_scale * (softmax - onehot). stats[0] += sum of per-sample
  // losses, stats[1] += number of rows whose argmax (the first maximum)
  // equals the label. Numerically stable (max subtracted). Labels are
  // already range-checked. dlogits may be null (evaluation) or logits
  // itself (the gradient written over the logits, Model::output_grad).
  // dlogits_bf16, where not null (and dlogits is not), also receives the
  // gradient rounded to bf16 (bf16_bits of each dlogits value), written in
  // the same pass: the last dense layer's GEMMs read it under --precision
  // bf16 (Model::output_grad_bf16) instead of rounding dlogits again.
  virtual void softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                            float grad_scale, float* dlogits, std::uint16_t* dlogits_bf16,
                            float* stats) = 0;
  void softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                    float grad_scale, float* dlogits, float* stats) {
    softmax_xent(logits, labels, rows, cols, grad_scale, dlogits, nullptr, stats);
  }
  // The fused classifier over bf16 logits (the head's output under
  // --precision bf16 on a backend that rounds GEMM operands,
  // Model::output_bf16): softmax_xent on the logits' values, the row math
  // and the sums in the same precision and order as there; the gradient,
  // where dlogits16 is not null, written only as bf16 (its rounding), in
  // place when dlogits16 is logits16. No fp32 [rows, cols] buffer exists.
  virtual void softmax_xent_bf16(const std::uint16_t* logits16, const std::int32_t* labels,
                                 int rows, int cols, float grad_scale, std::uint16_t* dlogits16,
                                 float* stats) = 0;
  // Mean squared error; per-sample loss = mean over cols of (pred - target)^2.
  // dpred = grad_scale * 2 * (pred - target) / cols. stats[0] += loss sum;
  // stats[1] is left unchanged. dpred may be null or pred itself;
  // dpred_bf16 as dlogits_bf16 above.
  virtual void mse(const float* pred, const float* target, int rows, int cols, float grad_scale,
                   float* dpred, std::uint16_t* dpred_bf16, float* stats) = 0;
  void mse(const float* pred, const float* target, int rows, int cols, float grad_scale,
           float* dpred, float* stats) {
    mse(pred, target, rows, cols, grad_scale, dpred, nullptr, stats);
  }
};

}  // namespace dptrain
