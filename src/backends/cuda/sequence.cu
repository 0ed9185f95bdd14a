// Implements: the kernels of sequence models on the GPU, behind the CUDA
// SequenceKernels table (sequence_kernels.hpp defines what each computes;
// src/backends/cpu/sequence_kernels.cpp is the reference).
//  - Copies and index shuffles (embedding rows, positions, heads, images as
//    sequences): one thread per output value, bitwise the CPU's.
//  - Sums over rows (embedding and position gradients, the mean over
//    positions): each output value has one owner thread that adds its rows in
//    increasing order, as the CPU does, so the bits are the CPU's, every run.
//    The embedding gradient has no atomics: a thread owns one column of a
//    range of vocabulary rows and walks the whole shard's ids in order,
//    adding the rows whose id falls in its range (the ids are staged through
//    shared memory, a tile at a time; a warp, whose lanes share a range,
//    tests 32 ids at once and visits only those that fall in it).
//  - Row statistics (the attention softmax and its gradient): one warp per
//    row (warp_rows.hpp), as layer_norm.cu's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/warp_rows.hpp"

namespace dptrain::cuda {
namespace {

using std::size_t;
using namespace warp_rows;

constexpr int kIdTile = 256;  // ids staged per round of the embedding gradient
constexpr int kVocabLanes = 8;  // vocabulary ranges per block (blockDim.y)

// --- embeddings and positions ---

__global__ void embed_kernel(const std::int32_t* ids, const float* table, size_t total, int dim,
                             float* y) {
  for (size_t i = first_index(); i < total; i += grid_stride()) {
    const size_t r = i / dim, c = i % dim;
    y[i] = table[static_cast<size_t>(ids[r]) * dim + c];
  }
}

// Thread (column c, range q) owns dtable[v, c] for v in [q·per, (q+1)·per):
// it adds dy[r, c] for every row r with such an id, in increasing r. A
// warp's lanes are 32 columns of one range: they test 32 staged ids at a
// time, one each, and walk the ids that fall in the range in order.
__global__ void embed_grad_kernel(const std::int32_t* ids, const float* dy, int rows, int dim,
                                  int per, float* dtable) {
  __shared__ std::int32_t tile[kIdTile];
  const int c = static_cast<int>(blockIdx.x * kWarp) + lane();
  const int v0 = static_cast<int>(blockIdx.y * kVocabLanes + threadIdx.y) * per;
  const int flat = static_cast<int>(threadIdx.y * kWarp + threadIdx.x);
  for (int base = 0; base < rows; base += kIdTile) {
    const int n = rows - base < kIdTile ? rows - base : kIdTile;
    __syncthreads();  // the previous tile is read by everyone
    for (int i = flat; i < n; i += kWarp * kVocabLanes) tile[i] = ids[base + i];
    __syncthreads();
    for (int i0 = 0; i0 < n; i0 += kWarp) {
      const int at = i0 + lane();
      const int mine = at < n ? tile[at] - v0 : -1;  // the id's place in the range
      unsigned hits = __ballot_sync(0xffffffffu, mine >= 0 && mine < per);
      while (hits != 0u) {
        const int i = i0 + __ffs(hits) - 1;
        hits &= hits - 1u;
        if (c >= dim) continue;
        float& d = dtable[static_cast<size_t>(tile[i]) * dim + c];
        d = __fadd_rn(d, dy[static_cast<size_t>(base + i) * dim + c]);
      }
    }
  }
}

__global__ void add_positions_kernel(const float* x, const float* pos, size_t total, size_t per,
                                     float* y) {
  for (size_t i = first_index(); i < total; i += grid_stride()) y[i] = __fadd_rn(x[i], pos[i % per]);
}

__global__ void position_grad_kernel(const float* dy, int batch, size_t per, float* dpos) {
  for (size_t j = first_index(); j < per; j += grid_stride()) {
    float s = 0.0f;
    for (int n = 0; n < batch; ++n) s = __fadd_rn(s, dy[static_cast<size_t>(n) * per + j]);
    dpos[j] = s;
  }
}

// --- heads ---

// Index i of a head-major [N, H, T, hd] tensor -> its offset in a packed
// [N, T, parts, H, hd] one (parts = 3 for qkv, 1 for merged heads), part 0.
__device__ inline size_t packed_offset(size_t i, const HeadShape& s, int parts) {
  const size_t hd = s.head_dim, t_count = s.tokens, h_count = s.heads;
  const size_t e = i % hd, t = i / hd % t_count, h = i / (hd * t_count) % h_count;
  const size_t n = i / (hd * t_count * h_count);
  return (n * t_count + t) * parts * h_count * hd + h * hd + e;
}

__global__ void qkv_kernel(float* qkv, HeadShape s, float* q, float* k, float* v, size_t total,
                           bool split) {
  const size_t d = static_cast<size_t>(s.heads) * s.head_dim;
  for (size_t i = first_index(); i < total; i += grid_stride()) {
    const size_t p = packed_offset(i, s, 3);
    if (split) {
      q[i] = qkv[p];
      k[i] = qkv[p + d];
      v[i] = qkv[p + 2 * d];
    } else {
      qkv[p] = q[i];
      qkv[p + d] = k[i];
      qkv[p + 2 * d] = v[i];
    }
  }
}

__global__ void heads_kernel(float* merged, HeadShape s, float* heads, size_t total, bool split) {
  for (size_t i = first_index(); i < total; i += grid_stride()) {
    const size_t p = packed_offset(i, s, 1);
    if (split) heads[i] = merged[p];
    else merged[p] = heads[i];
  }
}

// --- attention softmax ---

// Row r of [N·H·T, T]: query position r % T sees keys 0..r % T when causal.
// The masked part is never read; it is written as exact zeros.
__global__ void attention_softmax_kernel(const float* scores, size_t rows, int t, float scale,
                                         bool causal, float* p) {
  const size_t r = warp_row();
  if (r >= rows) return;
  const float* z = scores + r * t;
  float* out = p + r * t;
  const int valid = causal ? static_cast<int>(r % t) + 1 : t;
  float zmax = -INFINITY;
  for (int j = lane(); j < valid; j += kWarp) zmax = fmaxf(zmax, __fmul_rn(z[j], scale));
  zmax = warp_max(zmax);
  double sum = 0.0;
  for (int j = lane(); j < valid; j += kWarp) {
    const float e = expf(__fsub_rn(__fmul_rn(z[j], scale), zmax));
    out[j] = e;
    sum = __dadd_rn(sum, e);
  }
  const float inv = static_cast<float>(__ddiv_rn(1.0, warp_sum(sum)));
  for (int j = lane(); j < valid; j += kWarp) out[j] = __fmul_rn(out[j], inv);
  for (int j = valid + lane(); j < t; j += kWarp) out[j] = 0.0f;
}

__global__ void attention_softmax_grad_kernel(const float* p, const float* dp, size_t rows, int t,
                                              float scale, float* ds) {
  const size_t r = warp_row();
  if (r >= rows) return;
  const float* pr = p + r * t;
  const float* g = dp + r * t;
  double dot = 0.0;
  for (int j = lane(); j < t; j += kWarp) dot = __dadd_rn(dot, __dmul_rn(pr[j], g[j]));
  const float d = static_cast<float>(warp_sum(dot));
  float* out = ds + r * t;
  for (int j = lane(); j < t; j += kWarp) out[j] = __fmul_rn(__fmul_rn(scale, pr[j]), __fsub_rn(g[j], d));
}

// --- images as sequences, the mean over positions ---

// y[n] = x[n]ᵀ for `batch` row-major [a, b] matrices; i runs over y.
__global__ void transpose_kernel(const float* x, size_t a, size_t b, size_t total, float* y) {
  for (size_t i = first_index(); i < total; i += grid_stride()) {
    const size_t n = i / (a * b), j = i / a % b, k = i % a;  // y[n, j, k] = x[n, k, j]
    y[i] = x[n * a * b + k * b + j];
  }
}

__global__ void mean_positions_kernel(const float* x, int tokens, int dim, size_t total, float* y) {
  for (size_t i = first_index(); i < total; i += grid_stride()) {
    const size_t n = i / dim, c = i % dim;
    double s = 0.0;
    for (int t = 0; t < tokens; ++t) s = __dadd_rn(s, x[(n * tokens + t) * dim + c]);
    y[i] = static_cast<float>(__ddiv_rn(s, tokens));
  }
}

__global__ void mean_positions_grad_kernel(const float* dy, int tokens, int dim, size_t total,
                                           float inv, float* dx) {
  for (size_t i = first_index(); i < total; i += grid_stride()) {
    const size_t c = i % dim, n = i / (static_cast<size_t>(tokens) * dim);
    dx[i] = __fmul_rn(dy[n * dim + c], inv);
  }
}

size_t count(int a, int b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }
size_t heads_total(const HeadShape& s) {
  return count(s.batch, s.heads) * count(s.tokens, s.head_dim);
}

}  // namespace

void embed(const Launch& l, const std::int32_t* ids, const float* table, int rows, int dim,
           float* y) {
  const size_t total = count(rows, dim);
  if (!total) return;
  embed_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(ids, table, total, dim, y);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void embed_grad(const Launch& l, const std::int32_t* ids, const float* dy, int rows, int vocab,
                int dim, float* dtable) {
  fill(l, dtable, 0.0f, count(vocab, dim));
  if (rows <= 0 || dim <= 0) return;
  // About kTargetThreads owners: each range of `per` vocabulary rows has one
  // thread per column.
  constexpr int kTargetThreads = 1 << 17;
  const int ranges = std::max(1, std::min(vocab, kTargetThreads / dim));
  const int per = (vocab + ranges - 1) / ranges;
  const int used = (vocab + per - 1) / per;
  const dim3 grid((dim + kWarp - 1) / kWarp, (used + kVocabLanes - 1) / kVocabLanes);
  embed_grad_kernel<<<grid, dim3(kWarp, kVocabLanes), 0, l.stream>>>(ids, dy, rows, dim, per,
                                                                       dtable);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void add_positions(const Launch& l, const float* x, const float* pos, int batch, int tokens,
                   int dim, float* y) {
  const size_t per = count(tokens, dim), total = per * static_cast<size_t>(batch);
  if (!total) return;
  add_positions_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(x, pos, total, per, y);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void position_grad(const Launch& l, const float* dy, int batch, int tokens, int dim, float* dpos) {
  const size_t per = count(tokens, dim);
  if (!per) return;
  position_grad_kernel<<<grid_for(per, l), kThreads, 0, l.stream>>>(dy, batch, per, dpos);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void move_qkv(const Launch& l, float* qkv, const HeadShape& s, float* q, float* k, float* v,
              bool split) {
  const size_t total = heads_total(s);
  if (!total) return;
  qkv_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(qkv, s, q, k, v, total, split);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void move_heads(const Launch& l, float* merged, const HeadShape& s, float* heads, bool split) {
  const size_t total = heads_total(s);
  if (!total) return;
  heads_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(merged, s, heads, total, split);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void attention_softmax(const Launch& l, const float* scores, const HeadShape& s, float scale,
                       bool causal, float* p) {
  const size_t rows = count(s.batch, s.heads) * static_cast<size_t>(s.tokens);
  if (!rows) return;
  attention_softmax_kernel<<<row_blocks(rows), kRowWarps * kWarp, 0, l.stream>>>(
      scores, rows, s.tokens, scale, causal, p);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void attention_softmax_grad(const Launch& l, const float* p, const float* dp, const HeadShape& s,
                            float scale, float* ds) {
  const size_t rows = count(s.batch, s.heads) * static_cast<size_t>(s.tokens);
  if (!rows) return;
  attention_softmax_grad_kernel<<<row_blocks(rows), kRowWarps * kWarp, 0, l.stream>>>(
      p, dp, rows, s.tokens, scale, ds);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void transpose(const Launch& l, const float* x, int batch, int a, int b, float* y) {
  const size_t total = count(batch, a) * static_cast<size_t>(b);
  if (!total) return;
  transpose_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(x, a, b, total, y);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void mean_positions(const Launch& l, const float* x, int batch, int tokens, int dim, float* y) {
  const size_t total = count(batch, dim);
  if (!total) return;
  mean_positions_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(x, tokens, dim, total, y);
  DPT_CUDA_CHECK(cudaGetLastError());
}

void mean_positions_grad(const Launch& l, const float* dy, int batch, int tokens, int dim,
                         float* dx) {
  const size_t total = count(batch, tokens) * static_cast<size_t>(dim);
  if (!total) return;
  const float inv = 1.0f / static_cast<float>(tokens);
  mean_positions_grad_kernel<<<grid_for(total, l), kThreads, 0, l.stream>>>(dy, tokens, dim, total,
                                                                            inv, dx);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
