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
//  - Row statistics (layer norm, the attention softmax and its gradient): one
//    warp per row, sums in double over a fixed lane stride and a fixed
//    butterfly, so the same inputs give the same bits; the elementwise
//    arithmetic after the statistics is written with explicitly rounded
//    operations in the CPU's order, which the compiler never fuses.
//  - Layer norm's parameter gradients: per column, fixed chunks of rows each
//    summed in order by one thread, then the chunks in order (one chunk, and
//    so the CPU's bits, up to kParamRows rows).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {
namespace {

using std::size_t;

constexpr int kWarp = 32;
constexpr int kRowWarps = 8;  // rows per block of the warp-per-row kernels
constexpr int kIdTile = 256;  // ids staged per round of the embedding gradient
constexpr int kVocabLanes = 8;  // vocabulary ranges per block (blockDim.y)

__device__ inline size_t first_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline size_t grid_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

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
__device__ inline size_t warp_row() {
  return static_cast<size_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
}
__device__ inline int lane() { return static_cast<int>(threadIdx.x % kWarp); }

unsigned row_blocks(size_t rows) { return static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps); }

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

// --- layer norm ---

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

// Chunk blockIdx.y of `chunk` rows, column c: partial sums of dy · x̂ and dy.
__global__ void layer_norm_param_partials_kernel(const float* x, const float* dy,
                                                 const float* mean, const float* rstd, int rows,
                                                 int dim, int chunk, float* part_w, float* part_b) {
  const int c = static_cast<int>(first_index());
  if (c >= dim) return;
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

__global__ void add_chunks_kernel(const float* part_w, const float* part_b, int chunks, int dim,
                                  float* dw, float* db) {
  const int c = static_cast<int>(first_index());
  if (c >= dim) return;
  float sw = part_w[c], sb = part_b[c];
  for (int k = 1; k < chunks; ++k) {
    sw = __fadd_rn(sw, part_w[static_cast<size_t>(k) * dim + c]);
    sb = __fadd_rn(sb, part_b[static_cast<size_t>(k) * dim + c]);
  }
  dw[c] = sw;
  db[c] = sb;
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
                           const float* rstd, int rows, int dim, float* partials, float* dw,
                           float* db) {
  if (dim <= 0) return;
  const LayerNormChunks chunks = layer_norm_chunks(rows);
  float* part_w = partials;
  float* part_b = partials + count(chunks.count, dim);
  const unsigned col_blocks = static_cast<unsigned>((dim + kThreads - 1) / kThreads);
  layer_norm_param_partials_kernel<<<dim3(col_blocks, chunks.count), kThreads, 0, l.stream>>>(
      x, dy, mean, rstd, rows, dim, chunks.rows, part_w, part_b);
  DPT_CUDA_CHECK(cudaGetLastError());
  add_chunks_kernel<<<col_blocks, kThreads, 0, l.stream>>>(part_w, part_b, chunks.count, dim, dw,
                                                           db);
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
