// Implements: batch norm on the GPU, the kernels behind the CUDA NormKernels
// table (norm_kernels.hpp defines what each computes; src/backends/cpu/norm_kernels.cpp
// is the reference). A [rows, channels, spatial] tensor is cut per channel
// into chunks of its rows·spatial values; a block of the (channel, chunk)
// grid visits its chunk. The sums accumulate in double, each thread over a
// fixed stride of its chunk, then a fixed shared-memory tree per block, and
// the channel's last block to finish adds the chunks' partials the same way
// in chunk order (which block is last decides who adds, never the order: an
// integer count of arrivals, no float atomics), and the chunk count is a
// function of the shape alone, so the same inputs give the same bits every
// run. Where no sum over replicas comes between them, that block also
// computes the batch statistics: the sums and the statistics of a bn's
// forward are one launch, its gradient sums another. The per-channel and
// elementwise arithmetic uses explicitly rounded operations (__dmul_rn,
// __fadd_rn, ...), which the compiler never fuses into FMAs, so given the
// same statistics the output is bitwise the CPU's (built with
// -ffp-contract=off). normalize may write the relu of its result, and the
// gradient kernels then take relu's gradient from that output (a bn and
// the relu after it in one pass each way: NormKernels).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {
namespace {

constexpr int kNormThreads = 256;             // a power of two: the tree halves it
constexpr std::uint64_t kChunkValues = 8192;  // at least 32 values a thread per chunk
constexpr std::uint64_t kMaxChunks = 1024;

enum class Sums { kShifted, kGrad };

__host__ __device__ inline std::uint64_t channel_values(const NormShape& s) {
  if (s.rows <= 0 || s.spatial <= 0) return 0;
  return static_cast<std::uint64_t>(s.rows) * static_cast<std::uint64_t>(s.spatial);
}

unsigned chunks_for(const NormShape& s) {
  const std::uint64_t chunks = (channel_values(s) + kChunkValues - 1) / kChunkValues;
  return static_cast<unsigned>(std::clamp<std::uint64_t>(chunks, 1, kMaxChunks));
}

dim3 channel_grid(const NormShape& s) {
  return dim3(static_cast<unsigned>(s.channels), chunks_for(s));
}

// Calls f(offset) for each value of channel c in this block's chunk
// (blockIdx.y of gridDim.y) that this thread visits, in increasing order.
// (row, position) advance by the block's stride without a division per value.
template <typename F>
__device__ inline void for_chunk_values(const NormShape& s, int c, F f) {
  const std::uint64_t values = channel_values(s);
  const std::uint64_t chunk = (values + gridDim.y - 1) / gridDim.y;
  const std::uint64_t first = blockIdx.y * chunk;
  const std::uint64_t end = first + chunk < values ? first + chunk : values;
  std::uint64_t j = first + threadIdx.x;
  if (j >= end) return;
  const std::uint64_t spatial = static_cast<std::uint64_t>(s.spatial);
  const std::uint64_t row_stride = static_cast<std::uint64_t>(s.channels) * spatial;
  const std::uint64_t base = static_cast<std::uint64_t>(c) * spatial;
  const std::uint64_t step_rows = kNormThreads / spatial, step_pos = kNormThreads % spatial;
  std::uint64_t n = j / spatial, i = j % spatial;
  for (; j < end; j += kNormThreads) {
    f(n * row_stride + base + i);
    n += step_rows;
    i += step_pos;
    if (i >= spatial) {
      i -= spatial;
      ++n;
    }
  }
}

// dy at o from the gradient dz and the gate (NormKernels::grad_sums): relu's
// backward where there is a gate.
__device__ inline float gated(const float* gate, const float* dz, std::uint64_t o) {
  return gate ? (gate[o] > 0.0f ? dz[o] : 0.0f) : dz[o];
}

// Every thread's (a, b) added in a fixed tree order; all threads of the
// block must call it, and all get the block's totals.
__device__ inline void block_sum(double& a, double& b) {
  __shared__ double sa[kNormThreads], sb[kNormThreads];
  const int t = threadIdx.x;
  sa[t] = a;
  sb[t] = b;
  __syncthreads();
  for (int half = kNormThreads / 2; half > 0; half >>= 1) {
    if (t < half) {
      sa[t] += sa[t + half];
      sb[t] += sb[t + half];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
}

// What batch_stats computes besides the sums (NormKernels::batch_stats);
// mean == nullptr: nothing (the sums alone).
struct StatsArgs {
  const float* shift = nullptr;
  double count = 0, eps = 0, momentum = 0, unbias = 1;
  float *mean = nullptr, *invstd = nullptr, *running_mean = nullptr, *running_var = nullptr;
};

// Channel c's mean and 1/std from its sums, and its running statistics'
// update (shift may be running_mean: it is read first).
__device__ inline void channel_stats(int c, const float* sums, int channels, const StatsArgs& a) {
  const double m1 = __ddiv_rn(static_cast<double>(sums[c]), a.count);  // mean - shift
  const double mu = __dadd_rn(static_cast<double>(a.shift[c]), m1);  // before running_mean changes
  const double m2 = __ddiv_rn(static_cast<double>(sums[channels + c]), a.count);
  const double var = fmax(0.0, __dsub_rn(m2, __dmul_rn(m1, m1)));
  const double keep = 1.0 - a.momentum;
  a.mean[c] = static_cast<float>(mu);
  a.invstd[c] = static_cast<float>(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, a.eps))));
  a.running_mean[c] = static_cast<float>(__dadd_rn(
      __dmul_rn(keep, static_cast<double>(a.running_mean[c])), __dmul_rn(a.momentum, mu)));
  a.running_var[c] = static_cast<float>(
      __dadd_rn(__dmul_rn(keep, static_cast<double>(a.running_var[c])),
                __dmul_rn(__dmul_rn(a.momentum, var), a.unbias)));
}

// Grid (channel, chunk). Each block sums its chunk into
// partials[2 (c · chunks + chunk) + {0, 1}]:
//   kShifted: Σ (x - center[c]), Σ (x - center[c])²
//   kGrad:    Σ dy · (x - center[c]), Σ dy, dy from gate and dz
// and counts itself in arrivals[c]. The channel's last block adds the
// partials in chunk order: sums[c] = Σ a (times invstd[c] for kGrad, as the
// CPU scales the total), sums[C + c] = Σ b; then, with stats.mean, the
// channel's statistics from those sums; and sets arrivals[c] back to 0 for
// the next launch.
template <Sums K>
__global__ void __launch_bounds__(kNormThreads)
    channel_sums_kernel(const float* x, const float* gate, const float* dz, NormShape s,
                        const float* center, double* partials, unsigned* arrivals,
                        const float* invstd, float* sums, StatsArgs stats) {
  const int c = blockIdx.x;
  const double k = center[c];
  double a = 0.0, b = 0.0;
  for_chunk_values(s, c, [&](std::uint64_t o) {
    const double d = static_cast<double>(x[o]) - k;
    if constexpr (K == Sums::kShifted) {
      a += d;
      b += d * d;
    } else {
      const double g = gated(gate, dz, o);
      a += g * d;
      b += g;
    }
  });
  block_sum(a, b);
  __shared__ int last;
  const std::size_t first = 2 * static_cast<std::size_t>(c) * gridDim.y;
  if (threadIdx.x == 0) {
    partials[first + 2 * blockIdx.y] = a;
    partials[first + 2 * blockIdx.y + 1] = b;
    __threadfence();  // the partials before the count, for whichever block is last
    last = atomicAdd(arrivals + c, 1u) + 1 == gridDim.y;
  }
  __syncthreads();
  if (!last) return;
  // Read past L1 (volatile): other blocks wrote them in this launch.
  const volatile double* p = partials + first;
  a = 0.0;
  b = 0.0;
  for (unsigned j = threadIdx.x; j < gridDim.y; j += kNormThreads) {
    a += p[2 * j];
    b += p[2 * j + 1];
  }
  block_sum(a, b);
  if (threadIdx.x == 0) {
    arrivals[c] = 0;
    if constexpr (K == Sums::kGrad) a = __dmul_rn(a, static_cast<double>(invstd[c]));
    sums[c] = static_cast<float>(a);
    sums[s.channels + c] = static_cast<float>(b);
    if (stats.mean) channel_stats(c, sums, s.channels, stats);
  }
}

__global__ void batch_stats_kernel(const float* sums, int channels, StatsArgs a) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t c = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       c < static_cast<std::size_t>(channels); c += stride)
    channel_stats(static_cast<int>(c), sums, channels, a);
}

__global__ void inverse_std_kernel(const float* var, int channels, double eps, float* invstd) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t c = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       c < static_cast<std::size_t>(channels); c += stride)
    invstd[c] = static_cast<float>(
        __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(static_cast<double>(var[c]), eps))));
}

__global__ void __launch_bounds__(kNormThreads)
    normalize_kernel(const float* x, NormShape s, const float* mean, const float* invstd,
                     const float* weight, const float* bias, bool relu, float* y) {
  const int c = blockIdx.x;
  const float m = mean[c], k = __fmul_rn(invstd[c], weight[c]), b = bias[c];
  for_chunk_values(s, c, [&](std::uint64_t o) {
    const float v = __fadd_rn(__fmul_rn(__fsub_rn(x[o], m), k), b);
    y[o] = !relu || v > 0.0f ? v : 0.0f;
  });
}

__global__ void __launch_bounds__(kNormThreads)
    input_grad_kernel(const float* x, const float* gate, const float* dz, NormShape s,
                      const float* mean, const float* invstd, const float* weight,
                      const float* sums, double count, float* dx) {
  const int c = blockIdx.x;
  const float m = mean[c], is = invstd[c], k = __fmul_rn(is, weight[c]);
  const auto mean_dyxhat = static_cast<float>(__ddiv_rn(static_cast<double>(sums[c]), count));
  const auto mean_dy =
      static_cast<float>(__ddiv_rn(static_cast<double>(sums[s.channels + c]), count));
  for_chunk_values(s, c, [&](std::uint64_t o) {
    const float xhat = __fmul_rn(__fsub_rn(x[o], m), is);
    dx[o] = __fmul_rn(
        k, __fsub_rn(__fsub_rn(gated(gate, dz, o), mean_dy), __fmul_rn(xhat, mean_dyxhat)));
  });
}

template <Sums K>
void channel_sums(const Launch& l, const float* x, const float* gate, const float* dz,
                  const NormShape& s, const float* center, const float* invstd, float* sums,
                  const NormScratch& scratch, const StatsArgs& stats = {}) {
  if (s.channels <= 0) return;
  channel_sums_kernel<K><<<channel_grid(s), kNormThreads, 0, l.stream>>>(
      x, gate, dz, s, center, scratch.partials, scratch.arrivals, invstd, sums, stats);
  DPT_CUDA_CHECK(cudaGetLastError());
}

StatsArgs stats_args(const float* shift, double count, float eps, float momentum, float* mean,
                     float* invstd, float* running_mean, float* running_var) {
  StatsArgs a;
  a.shift = shift;
  a.count = count;
  a.eps = static_cast<double>(eps);
  a.momentum = static_cast<double>(momentum);
  a.unbias = count > 1.0 ? count / (count - 1.0) : 1.0;  // as the CPU computes it
  a.mean = mean;
  a.invstd = invstd;
  a.running_mean = running_mean;
  a.running_var = running_var;
  return a;
}

}  // namespace

std::size_t norm_partials(const NormShape& s) {
  if (s.channels <= 0) return 0;
  return 2 * static_cast<std::size_t>(s.channels) * chunks_for(s);
}

void norm_batch_sums(const Launch& l, const float* x, const NormShape& s, const float* shift,
                     float* sums, const NormScratch& scratch) {
  channel_sums<Sums::kShifted>(l, x, nullptr, nullptr, s, shift, nullptr, sums, scratch);
}

void norm_batch_sums_stats(const Launch& l, const float* x, const NormShape& s,
                           const float* shift, double count, float eps, float momentum,
                           float* sums, float* mean, float* invstd, float* running_mean,
                           float* running_var, const NormScratch& scratch) {
  channel_sums<Sums::kShifted>(
      l, x, nullptr, nullptr, s, shift, nullptr, sums, scratch,
      stats_args(shift, count, eps, momentum, mean, invstd, running_mean, running_var));
}

void norm_grad_sums(const Launch& l, const float* x, const float* gate, const float* dz,
                    const NormShape& s, const float* mean, const float* invstd, float* sums,
                    const NormScratch& scratch) {
  channel_sums<Sums::kGrad>(l, x, gate, dz, s, mean, invstd, sums, scratch);
}

void norm_batch_stats(const Launch& l, const float* sums, const float* shift, int channels,
                      double count, float eps, float momentum, float* mean, float* invstd,
                      float* running_mean, float* running_var) {
  if (channels <= 0) return;
  batch_stats_kernel<<<grid_for(static_cast<std::size_t>(channels), l), kThreads, 0, l.stream>>>(
      sums, channels,
      stats_args(shift, count, eps, momentum, mean, invstd, running_mean, running_var));
  DPT_CUDA_CHECK(cudaGetLastError());
}

void norm_inverse_std(const Launch& l, const float* var, int channels, float eps, float* invstd) {
  if (channels <= 0) return;
  inverse_std_kernel<<<grid_for(static_cast<std::size_t>(channels), l), kThreads, 0, l.stream>>>(
      var, channels, static_cast<double>(eps), invstd);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void norm_normalize(const Launch& l, const float* x, const NormShape& s, const float* mean,
                    const float* invstd, const float* weight, const float* bias, bool relu,
                    float* y) {
  if (s.channels <= 0 || channel_values(s) == 0) return;
  normalize_kernel<<<channel_grid(s), kNormThreads, 0, l.stream>>>(x, s, mean, invstd, weight,
                                                                    bias, relu, y);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void norm_input_grad(const Launch& l, const float* x, const float* gate, const float* dz,
                     const NormShape& s, const float* mean, const float* invstd,
                     const float* weight, const float* sums, double count, float* dx) {
  if (s.channels <= 0 || channel_values(s) == 0) return;
  input_grad_kernel<<<channel_grid(s), kNormThreads, 0, l.stream>>>(
      x, gate, dz, s, mean, invstd, weight, sums, count, dx);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
