// Implements: the fused optimizer kernels — SGD (momentum, Nesterov, L2) and
// Adam/AdamW — one launch over the whole parameter arena, with the update
// formulas of src/backends/cpu/optimizer_kernels.cpp (torch.optim semantics),
// each writing the updated weights' bf16 rounding too where asked (w16).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {
namespace {

// The updated weight w at i, and its rounding where w16 is not null.
__device__ void store_weight(float* w, __nv_bfloat16* w16, std::size_t i, float value) {
  w[i] = value;
  if (w16) w16[i] = __float2bfloat16_rn(value);
}

__global__ void sgd_kernel(float* w, __nv_bfloat16* w16, const float* g, float* velocity,
                           std::size_t n, float lr, float mu, float wd, bool nesterov) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float wi = w[i];
    const float gi = g[i] + wd * wi;
    if (mu > 0.0f) {
      const float v = mu * velocity[i] + gi;
      velocity[i] = v;
      store_weight(w, w16, i, wi - lr * (nesterov ? gi + mu * v : v));
    } else {
      store_weight(w, w16, i, wi - lr * gi);
    }
  }
}

__global__ void adam_kernel(float* w, __nv_bfloat16* w16, const float* g, float* m, float* v,
                            std::size_t n, float lr, float b1, float b2, float eps, float l2,
                            float shrink, float inv_bc1, float inv_bc2) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float w0 = w[i];
    const float gi = g[i] + l2 * w0;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    store_weight(w, w16, i, w0 * shrink - lr * (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps));
  }
}

// A block's sum of its threads' values, in a fixed order; thread 0 has it.
__device__ double block_sum(double s) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  __shared__ double warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  s = 0.0;
  if (warp == 0) {
    s = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  }
  return s;
}

__global__ void squares_kernel(const float* x, std::size_t n, double* partials) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  double s = 0.0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double v = x[i];
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void partials_kernel(const double* partials, unsigned count, double* out) {
  double s = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

void sum_squares(const Launch& l, const float* x, std::size_t n, double* partials, double* out) {
  const unsigned blocks = grid_for(n, l);
  squares_kernel<<<blocks, kThreads, 0, l.stream>>>(x, n, partials);
  DPT_CUDA_CHECK(cudaGetLastError());
  partials_kernel<<<1, kThreads, 0, l.stream>>>(partials, blocks, out);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void sgd_step(const Launch& l, float* w, void* w16, const float* g, float* velocity,
              std::size_t n, float lr, float momentum, float weight_decay, bool nesterov) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(
      w, static_cast<__nv_bfloat16*>(w16), g, velocity, n, lr, momentum, weight_decay, nesterov);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void adam_step(const Launch& l, float* w, void* w16, const float* g, float* m, float* v,
               std::size_t n, float lr, float beta1, float beta2, float eps, float l2,
               float shrink, float inv_bc1, float inv_bc2) {
  if (n == 0) return;
  adam_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(w, static_cast<__nv_bfloat16*>(w16), g,
                                                         m, v, n, lr, beta1, beta2, eps, l2,
                                                         shrink, inv_bc1, inv_bc2);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
