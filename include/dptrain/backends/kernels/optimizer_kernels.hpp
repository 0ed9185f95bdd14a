// Implements: the optimizer kernel family of a Backend (docs/design.md section 1):
// one fused update over a whole parameter arena (or a range of it) per step,
// with the semantics of torch.optim.SGD (dampening 0) and torch.optim.Adam /
// AdamW (amsgrad off), and the gradient norm and scaling of clipping.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

struct SgdParams {
  float lr = 0.01f;
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // L2: g += wd * w
};

struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;  // false: Adam (L2 into g); true: AdamW (w -= lr*wd*w)
  std::int64_t step = 1;   // 1-based step count, for bias correction
};

// Arenas of n floats in the device memory of the owning backend.
class OptimizerKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "optimizer";

  // w16, where not null: n bf16 values, into which the pass also writes
  // the updated w rounded to bf16 (ConvertKernels::to_bf16's bits), so that
  // the bf16 copy of the weights GEMMs read needs no pass of its own.
  // velocity is read and written only when p.momentum > 0.
  virtual void sgd_step(float* w, std::uint16_t* w16, const float* g, float* velocity,
                        std::size_t n, const SgdParams& p) = 0;
  // m and v: first and second moment arenas.
  virtual void adam_step(float* w, std::uint16_t* w16, const float* g, float* m, float* v,
                         std::size_t n, const AdamParams& p) = 0;

  // The sum of g[i]^2 over the arena, accumulated in double in an order
  // fixed for the backend and n (the same bits every run): the squared L2
  // norm that --clip-grad-norm clips by. Read back to the host.
  virtual double sum_squares(const float* g, std::size_t n) = 0;
  // x[i] *= a (clipping scales the gradient in place, as torch does).
  virtual void scale(float* x, float a, std::size_t n) = 0;
};

}  // namespace dptrain
