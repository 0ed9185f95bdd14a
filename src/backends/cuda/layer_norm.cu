// Implements: layer norm on the GPU, behind the CUDA SequenceKernels table
// (sequence_kernels.hpp defines what each computes;
// src/backends/cpu/sequence_kernels.cpp is the reference).
//  - Forward and input gradient: one warp per row (warp_rows.hpp), the
//    statistics summed in double, so the same inputs give the same bits;
//    a bf16 copy of the output written beside it where asked.
//  - The weight and bias gradients: per column, fixed chunks of rows each
//    summed in order by one thread, then the chunks in order (one chunk, and
//    so the CPU's bits, up to kParamRows rows) by the column block's last
//    chunk block to finish, in the same launch.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/warp_rows.hpp"

namespace dptrain::cuda {
namespace {

using std::size_t;
using namespace warp_rows;

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, size_t rows,
                                  int dim, float eps, float* y, float* mean, float* rstd,
                                  __nv_bfloat16* y16) {
  const size_t r = warp_row();
  if (r >= rows) return;
  const float* xr = x + r * dim;
  double sum = 0.0;
  for (int c = lane(); c < dim; c += kWarp) sum = __dadd_rn(sum, xr[c]);
  const double mu = __ddiv_rn(warp_sum(sum), dim);
  double sq = 0.0;
  for (int c = lane(); c < dim; c += kWarp) {
    const double d = __dsub_rn(xr[c], mu);
    sq = __dadd_rn(sq, __dmul_rn(d, d));
  }
  const double var = __ddiv_rn(warp_sum(sq), dim);
  const float m = static_cast<float>(mu);
  const float s = static_cast<float>(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, eps))));
  float* yr = y ? y + r * dim : nullptr;  // null: the copy alone
  __nv_bfloat16* yr16 = y16 ? y16 + r * dim : nullptr;
  for (int c = lane(); c < dim; c += kWarp) {
    const float v = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(xr[c], m), s), w[c]), b[c]);
    if (yr) yr[c] = v;
    if (yr16) yr16[c] = __float2bfloat16_rn(v);
  }
  if (lane() == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

// dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂)), ĝ = dy · weight; plus add
// (a block's shortcut gradient: sum_kernel's fp32 sum) where not null, and
// d16, where not null, the result rounded.
__global__ void layer_norm_grad_kernel(const float* x, const float* dy, const float* w,
                                       const float* mean, const float* rstd, size_t rows, int dim,
                                       float* dx, const float* add, __nv_bfloat16* d16) {
  const size_t r = warp_row();
  if (r >= rows) return;
  const float* xr = x + r * dim;
  const float* g = dy + r * dim;
  const float m = mean[r], s = rstd[r];
  double sum_g = 0.0, sum_gx = 0.0;
  for (int c = lane(); c < dim; c += kWarp) {
    const double gh = __dmul_rn(g[c], w[c]);
    sum_g = __dadd_rn(sum_g, gh);
    sum_gx = __dadd_rn(sum_gx, __dmul_rn(gh, __fmul_rn(__fsub_rn(xr[c], m), s)));
  }
  const float mean_g = static_cast<float>(__ddiv_rn(warp_sum(sum_g), dim));
  const float mean_gx = static_cast<float>(__ddiv_rn(warp_sum(sum_gx), dim));
  float* d = dx + r * dim;
  for (int c = lane(); c < dim; c += kWarp) {
    const float xh = __fmul_rn(__fsub_rn(xr[c], m), s);
    float v = __fmul_rn(s, __fsub_rn(__fsub_rn(__fmul_rn(g[c], w[c]), mean_g), __fmul_rn(xh, mean_gx)));
    if (add) v = __fadd_rn(v, add[r * dim + c]);
    d[c] = v;
    if (d16) d16[r * dim + c] = __float2bfloat16_rn(v);
  }
}

// Chunk blockIdx.y of `chunk` rows, column c: partial sums of dy · x̂ and dy
// into part_w and part_b. The last chunk block of column block blockIdx.x
// to finish (counted in arrivals[blockIdx.x], which it sets back to 0) adds
// its columns' chunks in chunk order into dw and db.
__global__ void layer_norm_param_grad_kernel(const float* x, const float* dy, const float* mean,
                                             const float* rstd, int rows, int dim, int chunk,
                                             float* part_w, float* part_b, unsigned* arrivals,
                                             float* dw, float* db) {
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (c < dim) {
    const int r0 = static_cast<int>(blockIdx.y) * chunk;
    const int r1 = rows - r0 < chunk ? rows : r0 + chunk;
    float sw = 0.0f, sb = 0.0f;
    for (int r = r0; r < r1; ++r) {
      const size_t i = static_cast<size_t>(r) * dim + c;
      sw = __fadd_rn(sw, __fmul_rn(dy[i], __fmul_rn(__fsub_rn(x[i], mean[r]), rstd[r])));
      sb = __fadd_rn(sb, dy[i]);
    }
    part_w[static_cast<size_t>(blockIdx.y) * dim + c] = sw;
    part_b[static_cast<size_t>(blockIdx.y) * dim + c] = sb;
  }
  __threadfence();  // each thread's partials before the count
  __syncthreads();
  __shared__ int last;
  if (threadIdx.x == 0) last = atomicAdd(arrivals + blockIdx.x, 1u) + 1 == gridDim.y;
  __syncthreads();
  if (!last) return;
  if (threadIdx.x == 0) arrivals[blockIdx.x] = 0;
  if (c >= dim) return;
  const volatile float *pw = part_w, *pb = part_b;  // past L1
  float sw = pw[c], sb = pb[c];
  for (unsigned k = 1; k < gridDim.y; ++k) {
    sw = __fadd_rn(sw, pw[static_cast<size_t>(k) * dim + c]);
    sb = __fadd_rn(sb, pb[static_cast<size_t>(k) * dim + c]);
  }
  dw[c] = sw;
  db[c] = sb;
}

}  // namespace

void layer_norm(const Launch& l, const float* x, const float* w, const float* b, int rows, int dim,
                float eps, float* y, float* mean, float* rstd, std::uint16_t* y16) {
  if (rows <= 0) return;
  layer_norm_kernel<<<row_blocks(rows), kRowWarps * kWarp, 0, l.stream>>>(
      x, w, b, rows, dim, eps, y, mean, rstd, reinterpret_cast<__nv_bfloat16*>(y16));
  DPT_CUDA_CHECK(cudaGetLastError());
}

void layer_norm_grad(const Launch& l, const float* x, const float* dy, const float* w,
                     const float* mean, const float* rstd, int rows, int dim, float* dx,
                     const float* add, std::uint16_t* dx16) {
  if (rows <= 0) return;
  layer_norm_grad_kernel<<<row_blocks(rows), kRowWarps * kWarp, 0, l.stream>>>(
      x, dy, w, mean, rstd, rows, dim, dx, add, reinterpret_cast<__nv_bfloat16*>(dx16));
  DPT_CUDA_CHECK(cudaGetLastError());
}

LayerNormChunks layer_norm_chunks(int rows) {
  constexpr int kMaxChunks = 65535;  // grid.y
  LayerNormChunks c;
  c.rows = std::max(kParamRows, (rows + kMaxChunks - 1) / kMaxChunks);
  c.count = std::max(1, (rows + c.rows - 1) / c.rows);
  return c;
}

void layer_norm_param_grad(const Launch& l, const float* x, const float* dy, const float* mean,
                           const float* rstd, int rows, int dim, float* partials,
                           unsigned* arrivals, float* dw, float* db) {
  if (dim <= 0) return;
  const LayerNormChunks chunks = layer_norm_chunks(rows);
  float* part_w = partials;
  float* part_b = partials + static_cast<size_t>(chunks.count) * static_cast<size_t>(dim);
  layer_norm_param_grad_kernel<<<dim3(layer_norm_column_blocks(dim), chunks.count), kThreads, 0,
                                 l.stream>>>(x, dy, mean, rstd, rows, dim, chunks.rows, part_w,
                                             part_b, arrivals, dw, db);
  DPT_CUDA_CHECK(cudaGetLastError());
}

unsigned layer_norm_column_blocks(int dim) {
  return static_cast<unsigned>((std::max(dim, 0) + kThreads - 1) / kThreads);
}

}  // namespace dptrain::cuda
