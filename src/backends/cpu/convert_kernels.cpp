// Implements: the CPU conversion kernels (convert_kernels.hpp): one pass,
// element by element, the bits those of CUDA's conversions.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"

namespace dptrain {
namespace {

DPT_VECTOR_CLONES
void floats_to_bf16(const float* __restrict x, std::uint16_t* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = bf16_bits(x[i]);
}

DPT_VECTOR_CLONES
void bf16_to_floats(const std::uint16_t* __restrict x, float* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = bf16_value(x[i]);
}

class CpuConvertKernels final : public ConvertKernels {
 public:
  void to_bf16(const float* x, std::uint16_t* y, std::size_t n) override { floats_to_bf16(x, y, n); }
  void from_bf16(const std::uint16_t* x, float* y, std::size_t n) override {
    bf16_to_floats(x, y, n);
  }
};

}  // namespace

template <>
std::unique_ptr<ConvertKernels> make_cpu_kernels<ConvertKernels>() {
  return std::make_unique<CpuConvertKernels>();
}

}  // namespace dptrain
