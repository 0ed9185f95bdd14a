// Implements: --augment crop and flip on the GPU, the kernel behind the CUDA
// AugmentKernels table. A block takes whole H×W planes (grid-stride over
// rows · planes); every thread of it computes the plane's sample draw from
// (seed, epoch, global position) with the constexpr integer function of
// augment_kernels.hpp, the same one the CPU backend and Augmenter::draw
// call, then copies pixels by source_pixel. Pure copies and zeros: the
// result is bitwise the CPU backend's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {
namespace {

__global__ void __launch_bounds__(kThreads)
    augment_kernel(const float* source, float* x, std::size_t planes_total, AugmentGeometry g,
                   std::uint64_t seed, std::uint64_t epoch, std::uint64_t first_row) {
  const std::size_t plane = static_cast<std::size_t>(g.height) * static_cast<std::size_t>(g.width);
  const auto width = static_cast<std::size_t>(g.width);
  for (std::size_t q = blockIdx.x; q < planes_total; q += gridDim.x) {
    const std::uint64_t row = q / static_cast<std::size_t>(g.planes);
    const AugmentDraw d =
        augment_draw::draw(seed, epoch, first_row + row, g.crop_padding, g.flip);
    const float* from = source + q * plane;
    float* to = x + q * plane;
    for (std::size_t k = threadIdx.x; k < plane; k += blockDim.x) {
      const auto y = static_cast<int>(k / width), xo = static_cast<int>(k % width);
      const std::ptrdiff_t s = augment_draw::source_pixel(y, xo, g.height, g.width, d);
      to[k] = s < 0 ? 0.0f : from[s];
    }
  }
}

}  // namespace

void augment(const Launch& l, const float* source, float* x, int rows, const AugmentGeometry& g,
             std::uint64_t seed, std::uint64_t epoch, std::uint64_t first_row) {
  if (rows <= 0 || g.planes <= 0 || g.height <= 0 || g.width <= 0) return;
  const std::size_t planes = static_cast<std::size_t>(rows) * static_cast<std::size_t>(g.planes);
  const auto blocks = static_cast<unsigned>(
      std::min<std::size_t>(planes, static_cast<std::size_t>(std::max(1, l.max_blocks))));
  augment_kernel<<<blocks, kThreads, 0, l.stream>>>(source, x, planes, g, seed, epoch, first_row);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
