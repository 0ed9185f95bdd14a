// Implements: the CUDA activation kernel table — forward and backward of
// each activation as one launch on the compute stream (elementwise.cu).
#include <cstddef>
#include <memory>

#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudaActivationKernels final : public ActivationKernels {
 public:
  explicit CudaActivationKernels(const Launch& l) : launch_(l) {}

  void forward(Activation f, const float* x, float* y, std::size_t n) override {
    activation_forward(launch_, f, x, y, n);
  }
  void backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                std::size_t n) override {
    activation_backward(launch_, f, x, y, dy, dx, n);
  }

 private:
  Launch launch_;
};

}  // namespace

template <>
std::unique_ptr<ActivationKernels> make_kernels<ActivationKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaActivationKernels>(l);
}

}  // namespace dptrain::cuda
