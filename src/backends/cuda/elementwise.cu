// Implements: the elementwise CUDA kernels — fill, GEMM's beta scaling, bf16
// conversion, bias add and bias gradient, activations forward/backward, and
// the NaN/Inf count. Math follows src/backends/cpu/activation_kernels.cpp (precise
// erff/tanhf/expf: no fast-math, so the CPU reference stays a tight bound).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2/pi), GELU tanh form
constexpr float kGeluKappa = 0.044715f;

// Bias gradient tile: 32 columns (one warp, coalesced rows) x 16 row lanes.
constexpr int kBiasCols = 32;
constexpr int kBiasRows = 16;

__device__ inline std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

__global__ void fill_kernel(float* x, float value, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) x[i] = value;
}

__global__ void sum_kernel(const float* a, const float* b, float* y, std::size_t n,
                           __nv_bfloat16* y16) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = a[i] + b[i];
    y[i] = v;
    if (y16) y16[i] = __float2bfloat16_rn(v);
  }
}

__global__ void scale_matrix_kernel(float* c, int m, int n, int ldc, float beta) {
  const std::size_t total = static_cast<std::size_t>(m) * n;
  for (std::size_t i = first_index(); i < total; i += grid_stride()) {
    float* p = c + (i / n) * static_cast<std::size_t>(ldc) + i % n;
    *p = beta == 0.0f ? 0.0f : *p * beta;
  }
}

// bf16 conversion: 8 values a thread where source and destination are
// 16-byte aligned (two 16-byte loads, one 16-byte store), else one.
struct alignas(16) Floats4 {
  float v[4];
};
struct alignas(16) Bf16x8 {
  __nv_bfloat16 v[8];
};
struct Bf16Segment {
  const float* x;
  __nv_bfloat16* y;
  std::size_t n;
  bool packed;        // 8 values a unit
  std::size_t units;  // n, or ceil(n / 8) when packed
};

Bf16Segment bf16_segment(const float* x, void* y, std::size_t n) {
  const bool packed = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  return {x, static_cast<__nv_bfloat16*>(y), n, packed, packed ? (n + 7) / 8 : n};
}

__device__ inline void convert_unit(const Bf16Segment& s, std::size_t u) {
  if (!s.packed) {
    s.y[u] = __float2bfloat16_rn(s.x[u]);
    return;
  }
  const std::size_t i = u * 8;
  if (i + 8 > s.n) {
    for (std::size_t j = i; j < s.n; ++j) s.y[j] = __float2bfloat16_rn(s.x[j]);
    return;
  }
  const Floats4 lo = *reinterpret_cast<const Floats4*>(s.x + i);
  const Floats4 hi = *reinterpret_cast<const Floats4*>(s.x + i + 4);
  Bf16x8 out;
  for (int k = 0; k < 4; ++k) {
    out.v[k] = __float2bfloat16_rn(lo.v[k]);
    out.v[k + 4] = __float2bfloat16_rn(hi.v[k]);
  }
  *reinterpret_cast<Bf16x8*>(s.y + i) = out;
}

// Both segments in one launch (a GEMM's two operands).
__global__ void to_bf16_kernel(Bf16Segment a, Bf16Segment b) {
  const std::size_t total = a.units + b.units;
  for (std::size_t u = first_index(); u < total; u += grid_stride()) {
    if (u < a.units) convert_unit(a, u);
    else convert_unit(b, u - a.units);
  }
}

__global__ void from_bf16_kernel(const __nv_bfloat16* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = __bfloat162float(x[i]);
}

__global__ void add_bias_kernel(float* y, const float* bias, const float* add, std::size_t total,
                                int cols) {
  for (std::size_t i = first_index(); i < total; i += grid_stride()) {
    const float v = y[i] + bias[i % cols];
    y[i] = add ? v + add[i] : v;
  }
}

// Each thread sums a fixed subset of rows of one column, then row lane 0 adds
// the 16 partials in order: the result does not depend on scheduling.
__device__ inline float value_of(float v) { return v; }
__device__ inline float value_of(__nv_bfloat16 v) { return __bfloat162float(v); }

// T: float, or __nv_bfloat16 (the values of dy's rounding).
template <typename T>
__global__ void bias_grad_kernel(const T* dy, float* db, int rows, int cols) {
  __shared__ float part[kBiasRows][kBiasCols + 1];
  const int c = blockIdx.x * kBiasCols + threadIdx.x;
  float s = 0.0f;
  if (c < cols)
    for (int r = threadIdx.y; r < rows; r += kBiasRows)
      s += value_of(dy[static_cast<std::size_t>(r) * cols + c]);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
    for (int j = 0; j < kBiasRows; ++j) t += part[j][threadIdx.x];
    db[c] = t;
  }
}

template <Activation F>
__global__ void activation_forward_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    if constexpr (F == Activation::kRelu) y[i] = v > 0.0f ? v : 0.0f;
    if constexpr (F == Activation::kTanh) y[i] = tanhf(v);
    if constexpr (F == Activation::kGelu) y[i] = 0.5f * v * (1.0f + erff(v * kInvSqrt2));
    if constexpr (F == Activation::kSigmoid) y[i] = 1.0f / (1.0f + expf(-v));
    if constexpr (F == Activation::kGeluTanh)
      y[i] = 0.5f * v * (1.0f + tanhf(kGeluBeta * (v + kGeluKappa * v * v * v)));
  }
}

template <Activation F>
__global__ void activation_backward_kernel(const float* x, const float* y, const float* dy,
                                           float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    if constexpr (F == Activation::kRelu) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
    if constexpr (F == Activation::kTanh) dx[i] = (1.0f - y[i] * y[i]) * dy[i];
    if constexpr (F == Activation::kGelu) {
      const float v = x[i];
      const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
      dx[i] = (cdf + v * pdf) * dy[i];
    }
    if constexpr (F == Activation::kSigmoid) dx[i] = y[i] * (1.0f - y[i]) * dy[i];
    if constexpr (F == Activation::kGeluTanh) {
      // torch 1.13's GeluBackward (tanh), term by term as the CPU backend.
      const float v = x[i], v_sq = v * v;
      const float t = tanhf(kGeluBeta * (v + kGeluKappa * v_sq * v));
      const float left = 0.5f * v, right = 1.0f + t;
      const float right_derivative = left * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * v_sq);
      dx[i] = (0.5f * right + right_derivative) * dy[i];
    }
  }
}

// Integer counts: the atomics make the total exact whatever the order.
__global__ void count_nonfinite_kernel(const float* x, std::size_t n, unsigned long long* out) {
  unsigned long long count = 0;
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    count += (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u ? 1 : 0;
  for (int o = 16; o > 0; o >>= 1) count += __shfl_down_sync(0xffffffffu, count, o);
  __shared__ unsigned long long warp_counts[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_counts[warp] = count;
  __syncthreads();
  if (warp == 0) {
    count = lane < static_cast<int>(blockDim.x / 32) ? warp_counts[lane] : 0;
    for (int o = 16; o > 0; o >>= 1) count += __shfl_down_sync(0xffffffffu, count, o);
    if (lane == 0 && count) atomicAdd(out, count);
  }
}

}  // namespace

void fill(const Launch& l, float* x, float value, std::size_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(x, value, n);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void sum(const Launch& l, const float* a, const float* b, float* y, std::size_t n,
         std::uint16_t* y16) {
  if (n == 0) return;
  sum_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(a, b, y, n,
                                                        reinterpret_cast<__nv_bfloat16*>(y16));
  DPT_CUDA_CHECK(cudaGetLastError());
}

void scale_matrix(const Launch& l, float* c, int m, int n, int ldc, float beta) {
  if (m <= 0 || n <= 0) return;
  const std::size_t total = static_cast<std::size_t>(m) * n;
  scale_matrix_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(c, m, n, ldc, beta);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void to_bf16(const Launch& l, const float* x, void* y, std::size_t n) {
  to_bf16_pair(l, x, y, n, x, y, 0);
}

void to_bf16_pair(const Launch& l, const float* xa, void* ya, std::size_t na, const float* xb,
                  void* yb, std::size_t nb) {
  const Bf16Segment a = bf16_segment(xa, ya, na), b = bf16_segment(xb, yb, nb);
  if (a.units + b.units == 0) return;
  to_bf16_kernel<<<grid_for(a.units + b.units, l), kThreads, 0, l.stream>>>(a, b);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void from_bf16(const Launch& l, const void* x, float* y, std::size_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(
      static_cast<const __nv_bfloat16*>(x), y, n);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void add_bias(const Launch& l, float* y, const float* bias, int rows, int cols, const float* add) {
  if (rows <= 0 || cols <= 0) return;
  const std::size_t total = static_cast<std::size_t>(rows) * cols;
  add_bias_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(y, bias, add, total, cols);
  DPT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void bias_grad_of(const Launch& l, const T* dy, float* db, int rows, int cols) {
  if (cols <= 0) return;
  const unsigned blocks = static_cast<unsigned>((cols + kBiasCols - 1) / kBiasCols);
  bias_grad_kernel<T><<<blocks, dim3(kBiasCols, kBiasRows), 0, l.stream>>>(
      dy, db, rows < 0 ? 0 : rows, cols);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void bias_grad(const Launch& l, const float* dy, float* db, int rows, int cols) {
  bias_grad_of(l, dy, db, rows, cols);
}
void bias_grad_bf16(const Launch& l, const std::uint16_t* dy, float* db, int rows, int cols) {
  bias_grad_of(l, reinterpret_cast<const __nv_bfloat16*>(dy), db, rows, cols);
}

void activation_forward(const Launch& l, Activation f, const float* x, float* y, std::size_t n) {
  if (n == 0) return;
  const unsigned g = grid_for(n, l);
  switch (f) {
    case Activation::kRelu:
      activation_forward_kernel<Activation::kRelu><<<g, kThreads, 0, l.stream>>>(x, y, n);
      break;
    case Activation::kTanh:
      activation_forward_kernel<Activation::kTanh><<<g, kThreads, 0, l.stream>>>(x, y, n);
      break;
    case Activation::kGelu:
      activation_forward_kernel<Activation::kGelu><<<g, kThreads, 0, l.stream>>>(x, y, n);
      break;
    case Activation::kSigmoid:
      activation_forward_kernel<Activation::kSigmoid><<<g, kThreads, 0, l.stream>>>(x, y, n);
      break;
    case Activation::kGeluTanh:
      activation_forward_kernel<Activation::kGeluTanh><<<g, kThreads, 0, l.stream>>>(x, y, n);
      break;
  }
  DPT_CUDA_CHECK(cudaGetLastError());
}

void activation_backward(const Launch& l, Activation f, const float* x, const float* y,
                         const float* dy, float* dx, std::size_t n) {
  if (n == 0) return;
  const unsigned g = grid_for(n, l);
  switch (f) {
    case Activation::kRelu:
      activation_backward_kernel<Activation::kRelu><<<g, kThreads, 0, l.stream>>>(x, y, dy, dx, n);
      break;
    case Activation::kTanh:
      activation_backward_kernel<Activation::kTanh><<<g, kThreads, 0, l.stream>>>(x, y, dy, dx, n);
      break;
    case Activation::kGelu:
      activation_backward_kernel<Activation::kGelu><<<g, kThreads, 0, l.stream>>>(x, y, dy, dx, n);
      break;
    case Activation::kSigmoid:
      activation_backward_kernel<Activation::kSigmoid>
          <<<g, kThreads, 0, l.stream>>>(x, y, dy, dx, n);
      break;
    case Activation::kGeluTanh:
      activation_backward_kernel<Activation::kGeluTanh>
          <<<g, kThreads, 0, l.stream>>>(x, y, dy, dx, n);
      break;
  }
  DPT_CUDA_CHECK(cudaGetLastError());
}

void count_nonfinite(const Launch& l, const float* x, std::size_t n, unsigned long long* counter) {
  DPT_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof *counter, l.stream));
  if (n == 0) return;
  count_nonfinite_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(x, n, counter);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
