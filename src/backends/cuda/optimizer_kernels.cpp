// Implements: the CUDA optimizer kernel table — SGD and Adam/AdamW as one
// launch each over the whole arena on the compute stream (optimizer.cu),
// with Adam's step scalars computed on the host as the CPU backend does.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernel_factory.hpp"
#include "backends/cuda/kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudaOptimizerKernels final : public OptimizerKernels {
 public:
  explicit CudaOptimizerKernels(const Launch& l)
      : launch_(l),
        partials_(static_cast<std::size_t>(l.max_blocks + 1) * sizeof(double)),
        host_sum_(sizeof(double)) {}

  void sgd_step(float* w, std::uint16_t* w16, const float* g, float* velocity, std::size_t n,
                const SgdParams& p) override {
    cuda::sgd_step(launch_, w, w16, g, velocity, n, p.lr, p.momentum, p.weight_decay,
                   p.nesterov);
  }

  void adam_step(float* w, std::uint16_t* w16, const float* g, float* m, float* v,
                 std::size_t n, const AdamParams& p) override {
    // Bias corrections in double, exactly as the CPU backend computes them.
    const double t = static_cast<double>(std::max<std::int64_t>(1, p.step));
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), t)));
    const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), t)));
    const float l2 = p.decoupled ? 0.0f : p.weight_decay;
    const float shrink = p.decoupled ? 1.0f - p.lr * p.weight_decay : 1.0f;
    cuda::adam_step(launch_, w, w16, g, m, v, n, p.lr, p.beta1, p.beta2, p.eps, l2, shrink,
                    inv_bc1, inv_bc2);
  }

  double sum_squares(const float* g, std::size_t n) override {
    auto* partials = static_cast<double*>(partials_.get());
    auto* host = static_cast<double*>(host_sum_.get());
    cuda::sum_squares(launch_, g, n, partials, partials + launch_.max_blocks);
    DPT_CUDA_CHECK(cudaMemcpyAsync(host, partials + launch_.max_blocks, sizeof *host,
                                   cudaMemcpyDeviceToHost, launch_.stream));
    DPT_CUDA_CHECK(cudaStreamSynchronize(launch_.stream));
    return *host;
  }

  void scale(float* x, float a, std::size_t n) override {
    // One row of n values: the GEMM epilogue's scaling kernel, in chunks
    // that fit its int extents.
    constexpr std::size_t kChunk = std::size_t{1} << 30;
    for (std::size_t done = 0; done < n; done += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, n - done));
      cuda::scale_matrix(launch_, x + done, 1, count, count, a);
    }
  }

 private:
  Launch launch_;
  DeviceMemory partials_;  // max_blocks partial sums, then the total
  PinnedMemory host_sum_;
};

}  // namespace

template <>
std::unique_ptr<OptimizerKernels> make_kernels<OptimizerKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaOptimizerKernels>(l);
}

}  // namespace dptrain::cuda
