// Implements: the CUDA conversion kernels (convert_kernels.hpp), one launch
// each on the compute stream (elementwise.cu).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudaConvertKernels final : public ConvertKernels {
 public:
  explicit CudaConvertKernels(const Launch& l) : launch_(l) {}

  void to_bf16(const float* x, std::uint16_t* y, std::size_t n) override {
    cuda::to_bf16(launch_, x, y, n);
  }
  void from_bf16(const std::uint16_t* x, float* y, std::size_t n) override {
    cuda::from_bf16(launch_, x, y, n);
  }

 private:
  Launch launch_;
};

}  // namespace

template <>
std::unique_ptr<ConvertKernels> make_kernels<ConvertKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaConvertKernels>(l);
}

}  // namespace dptrain::cuda
