// Implements: the CUDA optimizer kernel table — SGD and Adam/AdamW as one
// launch each over the whole arena on the compute stream (optimizer.cu),
// with Adam's step scalars computed on the host as the CPU backend does.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/kernel_tables.hpp"

namespace dptrain::cuda {
namespace {

class CudaOptimizerKernels final : public OptimizerKernels {
 public:
  explicit CudaOptimizerKernels(const Launch& l) : launch_(l) {}

  void sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                const SgdParams& p) override {
    cuda::sgd_step(launch_, w, g, velocity, n, p.lr, p.momentum, p.weight_decay, p.nesterov);
  }

  void adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                 const AdamParams& p) override {
    // Bias corrections in double, exactly as the CPU backend computes them.
    const double t = static_cast<double>(std::max<std::int64_t>(1, p.step));
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), t)));
    const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), t)));
    const float l2 = p.decoupled ? 0.0f : p.weight_decay;
    const float shrink = p.decoupled ? 1.0f - p.lr * p.weight_decay : 1.0f;
    cuda::adam_step(launch_, w, g, m, v, n, p.lr, p.beta1, p.beta2, p.eps, l2, shrink, inv_bc1,
                    inv_bc2);
  }

 private:
  Launch launch_;
};

}  // namespace

std::unique_ptr<OptimizerKernels> make_optimizer_kernels(const Launch& l) {
  return std::make_unique<CudaOptimizerKernels>(l);
}

}  // namespace dptrain::cuda
