// Implements: the CPU activation kernels — relu as vector loops
// (src/backends/cpu/vector_clones.hpp), tanh, gelu (exact erf form and tanh form) and sigmoid as
// plain loops over the std:: functions, which the CUDA kernels are tested
// against.
#include <cmath>
#include <cstddef>
#include <memory>
#include <numbers>

#include "backends/cpu/kernel_tables.hpp"
#include "backends/cpu/vector_clones.hpp"

namespace dptrain {
namespace {

constexpr float kInvSqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
constexpr float kInvSqrt2Pi =
    static_cast<float>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);

DPT_VECTOR_CLONES
void relu_forward(const float* __restrict x, float* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

DPT_VECTOR_CLONES
void relu_backward(const float* __restrict x, const float* __restrict dy, float* __restrict dx,
                   std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// GELU's tanh form and its derivative, as torch 1.13 computes them
// (aten/src/ATen/native/cpu/Activation.cpp, GeluKernel and GeluBackward).
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluKappa = 0.044715f;

float gelu_tanh(float x) {
  const float inner = kGeluBeta * (x + kGeluKappa * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

float gelu_tanh_grad(float x) {
  const float x_sq = x * x;
  const float inner = kGeluBeta * (x + kGeluKappa * x_sq * x);
  const float t = std::tanh(inner);
  const float left = 0.5f * x, right = 1.0f + t;
  const float left_derivative = 0.5f * right;
  const float right_derivative = left * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq);
  return left_derivative + right_derivative;
}

class CpuActivationKernels final : public ActivationKernels {
 public:
  void forward(Activation f, const float* x, float* y, std::size_t n) override {
    switch (f) {
      case Activation::kRelu:
        relu_forward(x, y, n);
        break;
      case Activation::kTanh:
        for (std::size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
        break;
      case Activation::kGelu:
        // Exact erf form: torch.nn.GELU() default, not the tanh approximation.
        for (std::size_t i = 0; i < n; ++i)
          y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
        break;
      case Activation::kSigmoid:
        for (std::size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
        break;
      case Activation::kGeluTanh:
        for (std::size_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]);
        break;
    }
  }

  void backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                std::size_t n) override {
    switch (f) {
      case Activation::kRelu:
        relu_backward(x, dy, dx, n);
        break;
      case Activation::kTanh:
        for (std::size_t i = 0; i < n; ++i) dx[i] = (1.0f - y[i] * y[i]) * dy[i];
        break;
      case Activation::kGelu:
        for (std::size_t i = 0; i < n; ++i) {
          const float cdf = 0.5f * (1.0f + std::erf(x[i] * kInvSqrt2));
          const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
          dx[i] = (cdf + x[i] * pdf) * dy[i];
        }
        break;
      case Activation::kSigmoid:
        for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] * (1.0f - y[i]) * dy[i];
        break;
      case Activation::kGeluTanh:
        for (std::size_t i = 0; i < n; ++i) dx[i] = gelu_tanh_grad(x[i]) * dy[i];
        break;
    }
  }
};

}  // namespace

std::unique_ptr<ActivationKernels> make_cpu_activation_kernels() {
  return std::make_unique<CpuActivationKernels>();
}

}  // namespace dptrain
