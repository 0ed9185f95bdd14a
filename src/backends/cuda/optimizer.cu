// Implements: the fused optimizer kernels — SGD (momentum, Nesterov, L2) and
// Adam/AdamW — one pass over the whole parameter arena, with the update
// formulas of src/backends/cpu/optimizer_kernels.cpp (torch.optim semantics),
// each writing the updated weights' bf16 rounding too where asked (w16).
// Adam, the widest (30 bytes a parameter with the copy), moves 16 bytes a
// load and store where its arrays are aligned (the tail value by value,
// in the same launch).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

struct AdamScalars {
  float lr, b1, b2, eps, l2, shrink, inv_bc1, inv_bc2;
};

// One Adam/AdamW update of a weight w0 with gradient g and moments m, v
// (updated in place); returns the new weight.
__device__ inline float adam_update(float w0, float g, float& m, float& v, const AdamScalars& a) {
  const float gi = g + a.l2 * w0;
  m = a.b1 * m + (1.0f - a.b1) * gi;
  v = a.b2 * v + (1.0f - a.b2) * gi * gi;
  return w0 * a.shrink - a.lr * (m * a.inv_bc1) / (sqrtf(v * a.inv_bc2) + a.eps);
}

struct alignas(16) Floats4 {
  float v[4];
};
struct alignas(8) Bf16x4 {
  __nv_bfloat16 v[4];
};

// With Vec4 (w, g, m and v on 16 bytes, w16 on 8): the first n / 4 units
// are four values each, the n % 4 after them one each; without, n units
// of one. Each value's arithmetic is the same either way.
template <bool Vec4>
__global__ void adam_kernel(float* w, __nv_bfloat16* w16, const float* g, float* m, float* v,
                            std::size_t n, AdamScalars a) {
  const std::size_t quads = Vec4 ? n / 4 : 0, units = n - 3 * quads;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t u = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       u < units; u += stride) {
    if (!Vec4 || u >= quads) {
      const std::size_t i = 4 * quads + (u - quads);
      store_weight(w, w16, i, adam_update(w[i], g[i], m[i], v[i], a));
      continue;
    }
    const std::size_t i = 4 * u;
    Floats4 wi = *reinterpret_cast<const Floats4*>(w + i);
    const Floats4 gi = *reinterpret_cast<const Floats4*>(g + i);
    Floats4 mi = *reinterpret_cast<const Floats4*>(m + i);
    Floats4 vi = *reinterpret_cast<const Floats4*>(v + i);
    Bf16x4 rounded;
    for (int k = 0; k < 4; ++k) {
      wi.v[k] = adam_update(wi.v[k], gi.v[k], mi.v[k], vi.v[k], a);
      rounded.v[k] = __float2bfloat16_rn(wi.v[k]);
    }
    *reinterpret_cast<Floats4*>(w + i) = wi;
    *reinterpret_cast<Floats4*>(m + i) = mi;
    *reinterpret_cast<Floats4*>(v + i) = vi;
    if (w16) *reinterpret_cast<Bf16x4*>(w16 + i) = rounded;
  }
}

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
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
  const AdamScalars a{lr, beta1, beta2, eps, l2, shrink, inv_bc1, inv_bc2};
  auto* w16b = static_cast<__nv_bfloat16*>(w16);
  // Four values a load where every array is aligned for them (the arenas
  // are; a segment of --weight-decay-params may not start on 4 values).
  const bool vec = aligned(w, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16) &&
                   (!w16b || aligned(w16b, 8));
  if (vec)
    adam_kernel<true><<<grid_for(n - 3 * (n / 4), l), kThreads, 0, l.stream>>>(w, w16b, g, m, v,
                                                                              n, a);
  else
    adam_kernel<false><<<grid_for(n, l), kThreads, 0, l.stream>>>(w, w16b, g, m, v, n, a);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
