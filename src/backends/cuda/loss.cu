// Implements: softmax cross-entropy and MSE on the GPU with their loss (and
// correct count) summed on the device into the caller's stats. One warp per
// row; each block writes its partial sums, and a one-warp launch adds them in
// block order, so the sums are reproducible (no float atomics). Per-row math
// mirrors src/backends/cpu/loss_kernels.cpp, including double accumulation.
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {
namespace {

constexpr int kWarps = kThreads / 32;  // rows in flight per block
constexpr unsigned kFull = 0xffffffffu;

__device__ inline double warp_sum(double v) {
  // Butterfly: every lane ends with the same bits.
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Lane 0 of each warp holds (a, b); thread 0 writes the block's totals.
__device__ inline void write_block_partials(double a, double b, double* partials) {
  __shared__ double sa[kWarps], sb[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ta = 0.0, tb = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      ta += sa[w];
      tb += sb[w];
    }
    partials[2 * blockIdx.x] = ta;
    partials[2 * blockIdx.x + 1] = tb;
  }
}

__global__ void softmax_xent_kernel(const float* logits, const std::int32_t* labels, int rows,
                                    int cols, float grad_scale, float* dlogits,
                                    double* partials) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double loss = 0.0, correct = 0.0;
  for (int r = blockIdx.x * kWarps + warp; r < rows; r += gridDim.x * kWarps) {
    const float* z = logits + static_cast<std::size_t>(r) * cols;
    // First maximum, as the CPU's "if (z[c] > z[arg])" scan finds it: the
    // larger value wins, a tie goes to the smaller index.
    float best = 0.0f;
    int arg = -1;
    for (int c = lane; c < cols; c += 32)
      if (arg < 0 || z[c] > best) {
        best = z[c];
        arg = c;
      }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(kFull, best, o);
      const int oa = __shfl_xor_sync(kFull, arg, o);
      if (oa >= 0 && (arg < 0 || ob > best || (ob == best && oa < arg))) {
        best = ob;
        arg = oa;
      }
    }
    const float zmax = best;
    double part = 0.0;
    for (int c = lane; c < cols; c += 32) part += exp(static_cast<double>(z[c] - zmax));
    const double sum = warp_sum(part);
    const int label = labels[r];
    if (lane == 0) {
      loss += log(sum) - static_cast<double>(z[label] - zmax);
      correct += arg == label ? 1.0 : 0.0;
    }
    if (dlogits) {
      float* d = dlogits + static_cast<std::size_t>(r) * cols;
      const double inv_sum = 1.0 / sum;
      for (int c = lane; c < cols; c += 32) {
        float v = grad_scale * static_cast<float>(exp(static_cast<double>(z[c] - zmax)) * inv_sum);
        if (c == label) v -= grad_scale;
        d[c] = v;
      }
    }
  }
  write_block_partials(loss, correct, partials);
}

__global__ void mse_kernel(const float* pred, const float* target, int rows, int cols, float g,
                           float* dpred, double* partials) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double loss = 0.0;
  for (int r = blockIdx.x * kWarps + warp; r < rows; r += gridDim.x * kWarps) {
    const std::size_t base = static_cast<std::size_t>(r) * cols;
    double part = 0.0;
    for (int c = lane; c < cols; c += 32) {
      const float diff = pred[base + c] - target[base + c];
      part += static_cast<double>(diff) * diff;
      if (dpred) dpred[base + c] = g * diff;
    }
    const double row_sum = warp_sum(part);
    if (lane == 0) loss += row_sum / cols;
  }
  write_block_partials(loss, 0.0, partials);
}

// One warp: lane-strided sums in fixed order, then the butterfly.
__global__ void add_partials_kernel(const double* partials, int blocks, float* stats,
                                    bool with_count) {
  double a = 0.0, b = 0.0;
  for (int i = threadIdx.x; i < blocks; i += 32) {
    a += partials[2 * i];
    b += partials[2 * i + 1];
  }
  a = warp_sum(a);
  b = warp_sum(b);
  if (threadIdx.x == 0) {
    stats[0] += static_cast<float>(a);
    if (with_count) stats[1] += static_cast<float>(b);
  }
}

// The grid depends on rows alone, so the summation order does too.
unsigned loss_grid(int rows) {
  const int blocks = (rows + kWarps - 1) / kWarps;
  return static_cast<unsigned>(blocks < kMaxLossBlocks ? blocks : kMaxLossBlocks);
}

}  // namespace

void softmax_xent(const Launch& l, const float* logits, const std::int32_t* labels, int rows,
                  int cols, float grad_scale, float* dlogits, float* stats, double* partials) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned grid = loss_grid(rows);
  softmax_xent_kernel<<<grid, kThreads, 0, l.stream>>>(logits, labels, rows, cols, grad_scale,
                                                       dlogits, partials);
  DPT_CUDA_CHECK(cudaGetLastError());
  add_partials_kernel<<<1, 32, 0, l.stream>>>(partials, static_cast<int>(grid), stats, true);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void mse(const Launch& l, const float* pred, const float* target, int rows, int cols,
         float grad_scale, float* dpred, float* stats, double* partials) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned grid = loss_grid(rows);
  const float g = grad_scale * 2.0f / static_cast<float>(cols);
  mse_kernel<<<grid, kThreads, 0, l.stream>>>(pred, target, rows, cols, g, dpred, partials);
  DPT_CUDA_CHECK(cudaGetLastError());
  add_partials_kernel<<<1, 32, 0, l.stream>>>(partials, static_cast<int>(grid), stats, false);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
