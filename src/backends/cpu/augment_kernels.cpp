// Implements: the CPU augmentation kernels — each sample's draw
// (augment_kernels.hpp), then every plane rebuilt from a copy of itself:
// the shifted, mirrored read of source_pixel, zeros where the padding shows.
// Samples are independent draws, so threads split rows and change nothing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/kernel_factory.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"

namespace dptrain {
namespace {

// Below this many values a parallel region costs more than it saves.
constexpr std::size_t kParallelValues = 1 << 15;

// One sample, plane by plane; source holds one plane (height · width).
void augment_sample(float* sample, const AugmentGeometry& g, const AugmentDraw& d,
                    std::vector<float>& source) {
  const std::size_t plane = source.size();
  for (int p = 0; p < g.planes; ++p) {
    float* x = sample + static_cast<std::size_t>(p) * plane;
    std::copy(x, x + plane, source.begin());
    for (int y = 0; y < g.height; ++y)
      for (int xo = 0; xo < g.width; ++xo) {
        const std::ptrdiff_t from = augment_draw::source_pixel(y, xo, g.height, g.width, d);
        x[static_cast<std::size_t>(y) * g.width + xo] = from < 0 ? 0.0f : source[from];
      }
  }
}

class CpuAugmentKernels final : public AugmentKernels {
 public:
  void apply(float* x, int rows, const AugmentGeometry& g, std::uint64_t seed,
             std::uint64_t epoch, std::uint64_t first_row) override {
    const std::size_t plane = static_cast<std::size_t>(g.height) * g.width;
    const std::size_t per_sample = plane * g.planes;
#pragma omp parallel if (static_cast<std::size_t>(rows) * per_sample > kParallelValues)
    {
      std::vector<float> source(plane);
#pragma omp for schedule(static)
      for (int r = 0; r < rows; ++r) {
        const AugmentDraw d =
            augment_draw::draw(seed, epoch, first_row + r, g.crop_padding, g.flip);
        augment_sample(x + per_sample * r, g, d, source);
      }
    }
  }
};

}  // namespace

template <>
std::unique_ptr<AugmentKernels> make_cpu_kernels<AugmentKernels>() {
  return std::make_unique<CpuAugmentKernels>();
}

}  // namespace dptrain
