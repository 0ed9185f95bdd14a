// Implements: the CPU activation kernels — relu and gelu:tanh as vector loops
// (src/backends/cpu/vector_clones.hpp), tanh, gelu (the exact erf form) and
// sigmoid as plain loops over the std:: functions; the CUDA kernels are
// tested against them.
#include <cmath>
#include <cstddef>
#include <memory>
#include <numbers>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "backends/cpu/vector_math.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"

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

// GELU's tanh form, 0.5x(1 + tanh(u)) with u = sqrt(2/pi)(x + 0.044715x^3),
// computed as x·s with s = (1 + tanh(u))/2 = 1/(1 + e^(−2u)): exact to float
// rounding everywhere (also where 1 + tanh(u) cancels), and one exp per
// value that vectorizes (vector_math.hpp), where the library's scalar tanh
// took half of a GPT step. The derivative is torch 1.13's GeluBackward,
// 0.5(1 + t) + 0.5x(1 − t²)·sqrt(2/pi)(1 + 3·0.044715x²), with 1 + t = 2s
// and 1 − t² = 4s(1 − s).
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluKappa = 0.044715f;

// s = (1 + tanh(u)) / 2 for the GELU of x.
inline float gelu_tanh_half(float x) {
  const float u = kGeluBeta * (x + kGeluKappa * x * x * x);
  return 1.0f / (1.0f + cpu_vec::exp_approx(-2.0f * u));
}

DPT_VECTOR_CLONES
void gelu_tanh_forward(const float* __restrict x, float* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * gelu_tanh_half(x[i]);
}

// dy and dx may be one buffer (Backend::gemm_epilogue's kGeluTanhGrad
// writes the gradient over the product): element i is read before it is
// written, so they carry no __restrict.
DPT_VECTOR_CLONES
void gelu_tanh_backward(const float* __restrict x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i], s = gelu_tanh_half(v);
    const float slope = kGeluBeta * (1.0f + 3.0f * kGeluKappa * v * v);
    dx[i] = (s + 2.0f * v * s * (1.0f - s) * slope) * dy[i];
  }
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
        gelu_tanh_forward(x, y, n);
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
        gelu_tanh_backward(x, dy, dx, n);
        break;
    }
  }
};

}  // namespace

template <>
std::unique_ptr<ActivationKernels> make_cpu_kernels<ActivationKernels>() {
  return std::make_unique<CpuActivationKernels>();
}

}  // namespace dptrain
