// Implements: the helpers of the warp-per-row kernels (layer_norm.cu, the
// attention softmax of sequence.cu): a block of kRowWarps warps owns as
// many rows, each warp sums its row over a fixed lane stride and then a
// fixed butterfly, so the same inputs give the same bits; the elementwise
// arithmetic after the statistics is written with explicitly rounded
// operations in the CPU's order, which the compiler never fuses. Device
// code: included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace dptrain::cuda::warp_rows {

constexpr int kWarp = 32;
constexpr int kRowWarps = 8;  // rows per block of the warp-per-row kernels

__device__ inline std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// The warp's total, the same butterfly (so the same bits) in every lane.
__device__ inline double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The row of this warp in a warp-per-row launch, and its lane.
__device__ inline std::size_t warp_row() {
  return static_cast<std::size_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
}
__device__ inline int lane() { return static_cast<int>(threadIdx.x % kWarp); }

inline unsigned row_blocks(std::size_t rows) {
  return static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
}

}  // namespace dptrain::cuda::warp_rows
