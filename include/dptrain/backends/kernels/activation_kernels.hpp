// Implements: the activation kernel family of a Backend (docs/design.md section 1):
// elementwise forward and backward of relu, tanh, gelu (erf and tanh forms)
// and sigmoid. One call
// per layer over a whole activation tensor, never per element.
#pragma once

#include <cstddef>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// kGeluTanh: GELU's tanh approximation, 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
// (GPT-2; torch.nn.GELU(approximate='tanh')).
enum class Activation { kRelu, kTanh, kGelu, kSigmoid, kGeluTanh };

// Pointers are device pointers of the backend that owns this table.
class ActivationKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "activation";

  // y = f(x), elementwise over n values. gelu is the exact erf form
  // (torch.nn.GELU's default), not the tanh approximation.
  virtual void forward(Activation f, const float* x, float* y, std::size_t n) = 0;
  // dx = f'(x) * dy; x is the input and y the output of the forward pass
  // (tanh and sigmoid take the derivative from y, relu and gelu from x).
  // gelu:tanh's backward is torch 1.13's GeluBackward formula, term by term.
  virtual void backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                        std::size_t n) = 0;
};

}  // namespace dptrain
