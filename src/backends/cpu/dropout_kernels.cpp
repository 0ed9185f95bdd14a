// Implements: the CPU dropout kernels — the counter-based draw of
// dropout_kernels.hpp per element, rows split across threads (each element
// is its own draw, so the split changes nothing), and the backward as the
// saved mask times the scale.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"

namespace dptrain {
namespace {

constexpr std::size_t kParallelValues = 1 << 15;

DPT_VECTOR_CLONES
void masked_scale(const float* __restrict dy, const std::uint8_t* __restrict keep,
                  float* __restrict dx, std::size_t n, float scale) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = keep[i] ? dy[i] * scale : 0.0f;
}

class CpuDropoutKernels final : public DropoutKernels {
 public:
  void set_draw(std::uint64_t* draw, std::uint64_t step_key, std::uint64_t first_row) override {
    draw[0] = step_key;
    draw[1] = first_row;
  }

  void forward(const float* x, float* y, std::uint8_t* keep, int rows, int width,
               const std::uint64_t* draw, std::uint64_t threshold, float scale) override {
    const std::uint64_t step_key = draw[0], first_row = draw[1];
    const std::size_t w = static_cast<std::size_t>(width);
#pragma omp parallel for schedule(static) if (static_cast<std::size_t>(rows) * w > kParallelValues)
    for (int r = 0; r < rows; ++r) {
      const std::uint64_t key = dropout_draw::row_key(step_key, first_row + r);
      const std::size_t o = static_cast<std::size_t>(r) * w;
      for (std::size_t e = 0; e < w; ++e) {
        const bool kept = !dropout_draw::dropped(key, e, threshold);
        keep[o + e] = kept ? 1 : 0;
        y[o + e] = kept ? x[o + e] * scale : 0.0f;
      }
    }
  }

  void backward(const float* dy, const std::uint8_t* keep, float* dx, std::size_t n,
                float scale) override {
    masked_scale(dy, keep, dx, n, scale);
  }
};

}  // namespace

template <>
std::unique_ptr<DropoutKernels> make_cpu_kernels<DropoutKernels>() {
  return std::make_unique<CpuDropoutKernels>();
}

}  // namespace dptrain
