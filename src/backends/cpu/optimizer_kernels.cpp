// Implements: the CPU optimizer kernels — one fused pass over the parameter
// arena per step, torch.optim.SGD (dampening 0) and torch.optim.Adam / AdamW
// (amsgrad off); the Adam pass is a vector loop (src/backends/cpu/vector_clones.hpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"

namespace dptrain {
namespace {

// torch.optim.Adam / AdamW (amsgrad off) over one arena.
DPT_VECTOR_CLONES
void adam_loop(float* __restrict w, const float* __restrict g, float* __restrict m,
               float* __restrict v, std::size_t n, float lr, float b1, float b2, float eps,
               float inv_bc1, float inv_bc2, float l2, float shrink) {
  for (std::size_t i = 0; i < n; ++i) {
    const float wi = w[i] * shrink;
    const float gi = g[i] + l2 * w[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - lr * (mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps);
  }
}

// Four partial sums, combined in a fixed order, so the loop vectorizes
// without -ffast-math and every clone gives the same bits.
DPT_VECTOR_CLONES
double squares_loop(const float* __restrict g, std::size_t n) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (std::size_t k = 0; k < 4; ++k) {
      const double x = g[i + k];
      s[k] += x * x;
    }
  for (; i < n; ++i) {
    const double x = g[i];
    s[0] += x * x;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

class CpuOptimizerKernels final : public OptimizerKernels {
 public:
  // torch.optim.SGD with dampening 0.
  void sgd_step(float* w, std::uint16_t* w16, const float* g, float* velocity, std::size_t n,
                const SgdParams& p) override {
    const float lr = p.lr, mu = p.momentum, wd = p.weight_decay;
    if (mu > 0.0f) {
      for (std::size_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * w[i];
        const float v = mu * velocity[i] + gi;
        velocity[i] = v;
        w[i] -= lr * (p.nesterov ? gi + mu * v : v);
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    }
    round_into(w16, w, n);
  }

  // torch.optim.Adam / AdamW (amsgrad off).
  void adam_step(float* w, std::uint16_t* w16, const float* g, float* m, float* v,
                 std::size_t n, const AdamParams& p) override {
    const float b1 = p.beta1, b2 = p.beta2, eps = p.eps;
    const double t = static_cast<double>(std::max<std::int64_t>(1, p.step));
    // Bias corrections in double: 1 - 0.999^t loses most of its digits in
    // float for small t.
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
    const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
    const float l2 = p.decoupled ? 0.0f : p.weight_decay;
    const float shrink = p.decoupled ? 1.0f - p.lr * p.weight_decay : 1.0f;
    adam_loop(w, g, m, v, n, p.lr, b1, b2, eps, inv_bc1, inv_bc2, l2, shrink);
    round_into(w16, w, n);
  }

  double sum_squares(const float* g, std::size_t n) override { return squares_loop(g, n); }

  void scale(float* x, float a, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) x[i] *= a;
  }

 private:
  // The CPU's GEMMs round nothing, so no caller asks for w16 here; it is
  // written after the update, with the same bits as CUDA's in-pass rounding.
  static void round_into(std::uint16_t* w16, const float* w, std::size_t n) {
    if (!w16) return;
    for (std::size_t i = 0; i < n; ++i) w16[i] = bf16_bits(w[i]);
  }
};

}  // namespace

template <>
std::unique_ptr<OptimizerKernels> make_cpu_kernels<OptimizerKernels>() {
  return std::make_unique<CpuOptimizerKernels>();
}

}  // namespace dptrain
