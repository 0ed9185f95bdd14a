// Implements: the CUDA dense kernel table — bias add and the deterministic
// bias gradient as one launch each on the compute stream (elementwise.cu).
#include <memory>

#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudaDenseKernels final : public DenseKernels {
 public:
  explicit CudaDenseKernels(const Launch& l) : launch_(l) {}

  void add_bias(float* y, const float* bias, int rows, int cols) override {
    cuda::add_bias(launch_, y, bias, rows, cols);
  }
  void add_bias_and(float* y, const float* bias, const float* add, int rows, int cols) override {
    cuda::add_bias(launch_, y, bias, rows, cols, add);
  }
  void bias_grad_bf16(const std::uint16_t* dy, float* db, int rows, int cols) override {
    cuda::bias_grad_bf16(launch_, dy, db, rows, cols);
  }
  void bias_grad(const float* dy, float* db, int rows, int cols) override {
    cuda::bias_grad(launch_, dy, db, rows, cols);
  }

 private:
  Launch launch_;
};

}  // namespace

template <>
std::unique_ptr<DenseKernels> make_kernels<DenseKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaDenseKernels>(l);
}

}  // namespace dptrain::cuda
