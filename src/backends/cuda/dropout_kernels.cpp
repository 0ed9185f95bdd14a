// Implements: the CUDA dropout kernel table — the draw's two words, forward
// (the mask drawn on the device, bitwise the CPU's) and backward as one
// launch each on the compute stream (dropout.cu).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudaDropoutKernels final : public DropoutKernels {
 public:
  explicit CudaDropoutKernels(const Launch& l) : launch_(l) {}

  void set_draw(std::uint64_t* draw, std::uint64_t step_key, std::uint64_t first_row) override {
    dropout_set_draw(launch_, draw, step_key, first_row);
  }
  void forward(const float* x, float* y, std::uint8_t* keep, int rows, int width,
               const std::uint64_t* draw, std::uint64_t threshold, float scale) override {
    dropout_forward(launch_, x, y, keep, rows, width, draw, threshold, scale);
  }
  void backward(const float* dy, const std::uint8_t* keep, float* dx, std::size_t n,
                float scale) override {
    dropout_backward(launch_, dy, keep, dx, n, scale);
  }

 private:
  Launch launch_;
};

}  // namespace

template <>
std::unique_ptr<DropoutKernels> make_kernels<DropoutKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaDropoutKernels>(l);
}

}  // namespace dptrain::cuda
