// Implements: dropout on the GPU, the kernels behind the CUDA DropoutKernels
// table. Each element repeats the counter-based draw of dropout_kernels.hpp
// (constexpr integer arithmetic, called from device code), so the mask is
// bitwise the CPU backend's for the same (step_key, first_row, threshold),
// and the product x · scale is one IEEE multiply on both. The key and first
// row are read from device memory when the forward runs (set_draw stores
// them), so that a recorded forward draws each step's mask.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"

namespace dptrain::cuda {
namespace {

__device__ inline std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// Grid-stride over [rows, width]; (row, element) advance with the index
// instead of a division per value.
__global__ void __launch_bounds__(kThreads)
    dropout_forward_kernel(const float* x, float* y, std::uint8_t* keep, std::size_t total,
                           std::uint64_t width, const std::uint64_t* draw, std::uint64_t threshold,
                           float scale) {
  std::size_t i = first_index();
  if (i >= total) return;
  const std::uint64_t step_key = draw[0], first_row = draw[1];
  const std::size_t stride = grid_stride();
  const std::uint64_t step_rows = stride / width, step_elems = stride % width;
  std::uint64_t r = i / width, e = i % width;
  for (; i < total; i += stride) {
    const std::uint64_t key = dropout_draw::row_key(step_key, first_row + r);
    const bool kept = !dropout_draw::dropped(key, e, threshold);
    keep[i] = kept ? 1 : 0;
    y[i] = kept ? x[i] * scale : 0.0f;
    r += step_rows;
    e += step_elems;
    if (e >= width) {
      e -= width;
      ++r;
    }
  }
}

// One thread: the draw's two words, in stream order.
__global__ void dropout_set_draw_kernel(std::uint64_t* draw, std::uint64_t step_key,
                                        std::uint64_t first_row) {
  draw[0] = step_key;
  draw[1] = first_row;
}

__global__ void __launch_bounds__(kThreads)
    dropout_backward_kernel(const float* dy, const std::uint8_t* keep, float* dx, std::size_t n,
                            float scale) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    dx[i] = keep[i] ? dy[i] * scale : 0.0f;
}

}  // namespace

void dropout_set_draw(const Launch& l, std::uint64_t* draw, std::uint64_t step_key,
                      std::uint64_t first_row) {
  dropout_set_draw_kernel<<<1, 1, 0, l.stream>>>(draw, step_key, first_row);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void dropout_forward(const Launch& l, const float* x, float* y, std::uint8_t* keep, int rows,
                     int width, const std::uint64_t* draw, std::uint64_t threshold, float scale) {
  if (rows <= 0 || width <= 0) return;
  const std::size_t total = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
  dropout_forward_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(
      x, y, keep, total, static_cast<std::uint64_t>(width), draw, threshold, scale);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void dropout_backward(const Launch& l, const float* dy, const std::uint8_t* keep, float* dx,
                      std::size_t n, float scale) {
  if (n == 0) return;
  dropout_backward_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(dy, keep, dx, n, scale);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
