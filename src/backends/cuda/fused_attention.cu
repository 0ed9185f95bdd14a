// Implements: fused multi-head attention on the GPU (`--attention fused`,
// behind the FusedAttentionKernels table of fused_attention_kernels.cpp), in
// the manner of FlashAttention-2: nothing of size T × T is stored.
//  - Forward: a block owns one head's tile of query rows; it walks the key
//    tiles in order (those wholly above the diagonal skipped when causal),
//    S = Q Kᵀ into shared memory, an online softmax in fp32 (row maximum and
//    sum, the output rescaled when the maximum grows), O += P V. It writes
//    O / sum in the output projection's layout and the row's log-sum-exp.
//  - Backward: the tiles are recomputed from Q, K, V and the log-sum-exp.
//    One block owns a key tile and accumulates its dK and dV over the query
//    tiles in order; a second kernel owns a query tile and accumulates dQ
//    over the key tiles in order. No atomics: the same bits every run.
//  - O, dQ, dK and dV also leave rounded to bf16 where asked (the
//    projections' GEMM operands under --precision bf16); under it Q, K and
//    V may come as qkv's bf16 rounding alone (the same operands).
//  - Tiles are staged 16 bytes a load where the rows are aligned. Under a
//    causal mask the query tiles with the most keys are handed out first.
//  - Products: 16 × 16 tiles from operands in shared memory (warp_tiles.hpp).
//    Under --precision bf16 the operands are rounded to bf16 as they are
//    staged and multiplied on the tensor cores (wmma, fp32 accumulation);
//    under fp32 and tf32 each lane sums its outputs with fp32 fused
//    multiply-adds in a fixed order. The sums that run over the tiles (the
//    output, dK, dV, dQ) stay in the warps' registers from tile to tile.
// The head dimension is padded with zeros to 16, 32, 64 or 128 in shared
// memory; tiles are 32 rows where they fit the 48 KiB of static shared
// memory, else 16.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/fused_attention.hpp"
#include "backends/cuda/head_rows.hpp"
#include "backends/cuda/warp_tiles.hpp"

namespace dptrain::cuda {
namespace {

using std::size_t;
using bf16 = __nv_bfloat16;

constexpr int kWarp = kWarpLanes;
constexpr int kWarps = 4;
constexpr int kBlockThreads = kWarps * kWarp;
constexpr size_t kSharedBytes = 48 * 1024;
constexpr int kRowWarps = 8;  // rows per block of the row-dot kernel
// The largest padded head dimensions whose tiles fit in shared memory.
constexpr int kBf16HeadDim = 128, kFloatHeadDim = 64;

// The row stride of a staged q, k, v or do tile: HDP plus a pad that moves
// consecutive rows to other shared-memory banks (a 16-byte step keeps
// wmma's pointers and strides legal; fp32 lanes read k and v down a
// column, one bank each with a stride of HDP + 1).
template <typename E>
constexpr int tile_pad() { return sizeof(E) == 2 ? 8 : 1; }

// Shared memory of each kernel for tiles of t rows, and the tile it uses.
template <typename E, int HDP>
constexpr size_t forward_bytes(size_t t) {
  return 3 * t * (HDP + tile_pad<E>()) * sizeof(E) + t * t * (sizeof(float) + sizeof(E)) + t * HDP * 4 + 12 * t +
         kTileElements * 4;
}
template <typename E, int HDP>
constexpr size_t key_grad_bytes(size_t t) {
  return 4 * t * (HDP + tile_pad<E>()) * sizeof(E) + 2 * t * t * (sizeof(float) + sizeof(E)) + t * HDP * 4 + 8 * t;
}
template <typename E, int HDP>
constexpr size_t query_grad_bytes(size_t t) {
  return 4 * t * (HDP + tile_pad<E>()) * sizeof(E) + t * t * (2 * sizeof(float) + sizeof(E)) + t * HDP * 4 + 8 * t;
}
constexpr int tile_for(size_t bytes_at_32) { return bytes_at_32 <= kSharedBytes ? 32 : 16; }

__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline int warp_id() { return warp_index(); }
__device__ inline int lane() { return lane_index(); }

// The part of a TILE-row product a warp holds (warp_tiles.hpp).
template <typename E, int M, int N>
using Tiles = WarpTiles<E, M, N, kWarps>;

// The tile of rows a block owns. Under a causal mask the last tiles have
// the most keys to visit: they are handed out first, so that the blocks
// still running at the end of the grid are the short ones (blocks start
// in the order of blockIdx, x fastest). The key-gradient kernel's first
// key tiles are already its longest.
__device__ inline int owned_tile(bool causal) {
  return static_cast<int>(causal ? gridDim.y - 1 - blockIdx.y : blockIdx.y);
}

// c[M × N] (row-major, ldc) = a[M × K] · b[K × N] through the warps' tiles.
// The caller synchronizes the block before and after.
template <typename E, bool ACol, bool BCol, int M, int N, int K>
__device__ void product(float* c, int ldc, const E* a, int lda, const E* b, int ldb) {
  Tiles<E, M, N> t;
  t.zero();
  t.template mma<ACol, BCol, K>(a, lda, b, ldb);
  t.store(c, ldc);
}

// A 16 × 16 tile whose row r holds r, for WarpTiles::load_row_map.
__device__ void fill_row_numbers(float* tile) {
  for (int i = threadIdx.x; i < kTileElements; i += blockDim.x) tile[i] = static_cast<float>(i / 16);
}

__device__ inline bool attends(int row, int key, int tokens, bool causal) {
  return row < tokens && key < tokens && (!causal || key <= row);
}

// One key tile of the online softmax: rows of s (scores of key tile k0) to
// bf16/fp32 probabilities p against the running maximum; alpha[r] the
// factor of the output's row r (exp of the old maximum less the new); the
// running sums updated. Warp w owns rows w, w + kWarps, ...; lane j column j.
template <typename E, int TILE>
__device__ void online_softmax(const float* s, E* p, float* alpha, float* row_max, float* row_sum,
                               int q0, int k0, int tokens, float scale, bool causal) {
  for (int r = warp_id(); r < TILE; r += kWarps) {
    const int key = k0 + lane();
    const bool valid = lane() < TILE && k0 + lane() < tokens && (!causal || key <= q0 + r);
    const float z = valid ? s[r * TILE + lane()] * scale : -INFINITY;
    const float old_max = row_max[r], old_sum = row_sum[r];
    const float new_max = fmaxf(old_max, warp_max(z));  // finite: each tile has a key <= row
    const E pe = to_elem<E>(valid ? expf(z - new_max) : 0.0f);
    if (lane() < TILE) p[r * TILE + lane()] = pe;
    const float tile_sum = warp_sum(to_float(pe));
    const float factor = expf(old_max - new_max);
    if (lane() == 0) {
      alpha[r] = factor;
      row_max[r] = new_max;
      row_sum[r] = old_sum * factor + tile_sum;
    }
  }
}

template <typename E, int HDP, typename Q>
__global__ void __launch_bounds__(kBlockThreads)
    fused_forward_kernel(const Q* qkv, HeadShape s, float scale, bool causal, float* out,
                         float* lse, bf16* out16) {
  constexpr int TILE = tile_for(forward_bytes<E, HDP>(32));
  static_assert(forward_bytes<E, HDP>(TILE) <= kSharedBytes, "tiles exceed shared memory");
  constexpr int LD = HDP + tile_pad<E>();
  alignas(32) __shared__ E q[TILE * LD];
  alignas(32) __shared__ E k[TILE * LD];
  alignas(32) __shared__ E v[TILE * LD];
  alignas(32) __shared__ E p[TILE * TILE];
  alignas(32) __shared__ float sc[TILE * TILE];
  alignas(32) __shared__ float o[TILE * HDP];
  __shared__ float row_max[TILE], row_sum[TILE], alpha[TILE];
  alignas(32) __shared__ float row_numbers[kTileElements];
  const size_t bh = blockIdx.x;
  const int q0 = owned_tile(causal) * TILE, t = s.tokens;
  const auto rows = [&](int part) {
    return HeadRows<Q>{qkv + head_offset(s, bh, part), head_ld(s, part), t, s.head_dim};
  };
  stage_rows<E, TILE, HDP, LD>(q, rows(0), q0);
  fill_row_numbers(row_numbers);
  for (int r = threadIdx.x; r < TILE; r += blockDim.x) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }
  __syncthreads();
  Tiles<E, TILE, HDP> acc;  // the output's running sum, in registers
  acc.zero();
  acc.load_row_map(row_numbers);
  const int key_end = causal && q0 + TILE < t ? q0 + TILE : t;
  for (int k0 = 0; k0 < key_end; k0 += TILE) {
    __syncthreads();  // the last tile's readers of k, v and p are done
    stage_rows<E, TILE, HDP, LD>(k, rows(1), k0);
    stage_rows<E, TILE, HDP, LD>(v, rows(2), k0);
    __syncthreads();
    product<E, false, true, TILE, TILE, HDP>(sc, TILE, q, LD, k, LD);
    __syncthreads();
    online_softmax<E, TILE>(sc, p, alpha, row_max, row_sum, q0, k0, t, scale, causal);
    __syncthreads();
    acc.scale_rows(alpha);
    acc.template mma<false, false, TILE>(p, TILE, v, LD);
  }
  acc.store(o, HDP);
  __syncthreads();
  for (int i = threadIdx.x; i < TILE * HDP; i += blockDim.x) o[i] = o[i] / row_sum[i / HDP];
  __syncthreads();
  write_rows<TILE, HDP>(head_at(out, s, bh, -1), head_ld(s, -1), t, s.head_dim, o, q0,
                        head_at(out16, s, bh, -1));
  for (int r = threadIdx.x; r < TILE; r += blockDim.x)
    if (q0 + r < t) lse[bh * t + q0 + r] = row_max[r] + logf(row_sum[r]);
}

// rowdot[r] = Σ_c do[r, c] · o[r, c] over one head's row: one warp a row,
// in double over a fixed lane stride and butterfly. do and o are fp32, or
// their bf16 roundings (D, O = __nv_bfloat16), as cuDNN reads them.
template <typename D, typename O>
__global__ void row_dot_kernel(const D* d_o, const O* o, HeadShape s, size_t rows,
                               float* rowdot) {
  const size_t r = static_cast<size_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (r >= rows) return;
  const size_t bh = r / s.tokens, t = r % s.tokens;
  const size_t at = head_offset(s, bh, -1) + t * head_ld(s, -1);
  double sum = 0.0;
  for (int c = lane(); c < s.head_dim; c += kWarp)
    sum = __dadd_rn(sum, __dmul_rn(to_float(d_o[at + c]), to_float(o[at + c])));
  for (int off = kWarp / 2; off > 0; off >>= 1)
    sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
  if (lane() == 0) rowdot[r] = static_cast<float>(sum);
}

// p = exp(scale · s − lse) where the row attends the key, else 0, and
// ds = scale · p · (dp − rowdot), both rounded to E, over a TILE × TILE
// tile of query rows q0.. and keys k0...
template <typename E, int TILE>
__device__ void softmax_grad_tile(const float* sc, const float* dp, const float* lse,
                                  const float* rowdot, int q0, int k0, int tokens, float scale,
                                  bool causal, E* p, E* ds) {
  for (int i = threadIdx.x; i < TILE * TILE; i += blockDim.x) {
    const int r = i / TILE, c = i % TILE;
    const float pr = attends(q0 + r, k0 + c, tokens, causal) ? expf(sc[i] * scale - lse[r]) : 0.0f;
    if (p) p[i] = to_elem<E>(pr);
    ds[i] = to_elem<E>(scale * pr * (dp[i] - rowdot[r]));
  }
}

// dK and dV of one key tile: over the query tiles in order (from the
// diagonal when causal), dV += Pᵀ dO and dK += dSᵀ Q.
template <typename E, int HDP, typename Q, typename D>
__global__ void __launch_bounds__(kBlockThreads)
    fused_key_grad_kernel(const Q* qkv, const D* d_o, const float* lse,
                          const float* rowdot, HeadShape s, float scale, bool causal,
                          float* dqkv, bf16* dqkv16) {
  constexpr int TILE = tile_for(key_grad_bytes<E, HDP>(32));
  static_assert(key_grad_bytes<E, HDP>(TILE) <= kSharedBytes, "tiles exceed shared memory");
  constexpr int LD = HDP + tile_pad<E>();
  alignas(32) __shared__ E k[TILE * LD];
  alignas(32) __shared__ E v[TILE * LD];
  alignas(32) __shared__ E q[TILE * LD];
  alignas(32) __shared__ E dout[TILE * LD];
  alignas(32) __shared__ float sc[TILE * TILE];
  alignas(32) __shared__ float dp[TILE * TILE];
  alignas(32) __shared__ E p[TILE * TILE];
  alignas(32) __shared__ E ds[TILE * TILE];
  alignas(32) __shared__ float dkv[TILE * HDP];  // dK, then dV, on their way out
  __shared__ float lse_r[TILE], dot_r[TILE];
  const size_t bh = blockIdx.x;
  const int k0 = static_cast<int>(blockIdx.y) * TILE, t = s.tokens;
  const auto rows = [&](const auto* base, int part) {
    return HeadRows<std::remove_cv_t<std::remove_pointer_t<decltype(base)>>>{
        base + head_offset(s, bh, part), head_ld(s, part), t, s.head_dim};
  };
  stage_rows<E, TILE, HDP, LD>(k, rows(qkv, 1), k0);
  stage_rows<E, TILE, HDP, LD>(v, rows(qkv, 2), k0);
  Tiles<E, TILE, HDP> dk, dv;  // in registers over the query tiles
  dk.zero();
  dv.zero();
  for (int q0 = causal ? k0 : 0; q0 < t; q0 += TILE) {
    __syncthreads();
    stage_rows<E, TILE, HDP, LD>(q, rows(qkv, 0), q0);
    stage_rows<E, TILE, HDP, LD>(dout, rows(d_o, -1), q0);
    stage_vector<TILE>(lse_r, lse + bh * t, q0, t);
    stage_vector<TILE>(dot_r, rowdot + bh * t, q0, t);
    __syncthreads();
    product<E, false, true, TILE, TILE, HDP>(sc, TILE, q, LD, k, LD);
    product<E, false, true, TILE, TILE, HDP>(dp, TILE, dout, LD, v, LD);
    __syncthreads();
    softmax_grad_tile<E, TILE>(sc, dp, lse_r, dot_r, q0, k0, t, scale, causal, p, ds);
    __syncthreads();
    dv.template mma<true, false, TILE>(p, TILE, dout, LD);
    dk.template mma<true, false, TILE>(ds, TILE, q, LD);
  }
  dk.store(dkv, HDP);
  __syncthreads();
  write_rows<TILE, HDP>(head_at(dqkv, s, bh, 1), head_ld(s, 1), t, s.head_dim, dkv, k0,
                        head_at(dqkv16, s, bh, 1));
  __syncthreads();
  dv.store(dkv, HDP);
  __syncthreads();
  write_rows<TILE, HDP>(head_at(dqkv, s, bh, 2), head_ld(s, 2), t, s.head_dim, dkv, k0,
                        head_at(dqkv16, s, bh, 2));
}

// dQ of one query tile: over the key tiles in order, dQ += dS K.
template <typename E, int HDP, typename Q, typename D>
__global__ void __launch_bounds__(kBlockThreads)
    fused_query_grad_kernel(const Q* qkv, const D* d_o, const float* lse,
                            const float* rowdot, HeadShape s, float scale, bool causal,
                            float* dqkv, bf16* dqkv16) {
  constexpr int TILE = tile_for(query_grad_bytes<E, HDP>(32));
  static_assert(query_grad_bytes<E, HDP>(TILE) <= kSharedBytes, "tiles exceed shared memory");
  constexpr int LD = HDP + tile_pad<E>();
  alignas(32) __shared__ E q[TILE * LD];
  alignas(32) __shared__ E dout[TILE * LD];
  alignas(32) __shared__ E k[TILE * LD];
  alignas(32) __shared__ E v[TILE * LD];
  alignas(32) __shared__ float sc[TILE * TILE];
  alignas(32) __shared__ float dp[TILE * TILE];
  alignas(32) __shared__ E ds[TILE * TILE];
  alignas(32) __shared__ float dq[TILE * HDP];
  __shared__ float lse_r[TILE], dot_r[TILE];
  const size_t bh = blockIdx.x;
  const int q0 = owned_tile(causal) * TILE, t = s.tokens;
  const auto rows = [&](const auto* base, int part) {
    return HeadRows<std::remove_cv_t<std::remove_pointer_t<decltype(base)>>>{
        base + head_offset(s, bh, part), head_ld(s, part), t, s.head_dim};
  };
  stage_rows<E, TILE, HDP, LD>(q, rows(qkv, 0), q0);
  stage_rows<E, TILE, HDP, LD>(dout, rows(d_o, -1), q0);
  stage_vector<TILE>(lse_r, lse + bh * t, q0, t);
  stage_vector<TILE>(dot_r, rowdot + bh * t, q0, t);
  Tiles<E, TILE, HDP> acc;  // dQ, in registers over the key tiles
  acc.zero();
  const int key_end = causal && q0 + TILE < t ? q0 + TILE : t;
  for (int k0 = 0; k0 < key_end; k0 += TILE) {
    __syncthreads();
    stage_rows<E, TILE, HDP, LD>(k, rows(qkv, 1), k0);
    stage_rows<E, TILE, HDP, LD>(v, rows(qkv, 2), k0);
    __syncthreads();
    product<E, false, true, TILE, TILE, HDP>(sc, TILE, q, LD, k, LD);
    product<E, false, true, TILE, TILE, HDP>(dp, TILE, dout, LD, v, LD);
    __syncthreads();
    softmax_grad_tile<E, TILE>(sc, dp, lse_r, dot_r, q0, k0, t, scale, causal,
                               static_cast<E*>(nullptr), ds);
    __syncthreads();
    acc.template mma<false, false, TILE>(ds, TILE, k, LD);
  }
  acc.store(dq, HDP);
  __syncthreads();
  write_rows<TILE, HDP>(head_at(dqkv, s, bh, 0), head_ld(s, 0), t, s.head_dim, dq, q0,
                        head_at(dqkv16, s, bh, 0));
}

// One block per head and tile of rows.
dim3 tiles_grid(const HeadShape& s, size_t bytes_at_32) {
  const int tile = tile_for(bytes_at_32);
  return dim3(static_cast<unsigned>(s.batch * s.heads),
              static_cast<unsigned>((s.tokens + tile - 1) / tile));
}

template <typename E, int HDP, typename Q>
void forward_as(const Launch& l, const Q* qkv, const HeadShape& s, float scale, bool causal,
                float* o, float* lse, bf16* o16) {
  fused_forward_kernel<E, HDP, Q><<<tiles_grid(s, forward_bytes<E, HDP>(32)),
                                    kBlockThreads, 0, l.stream>>>(qkv, s, scale, causal, o, lse,
                                                                  o16);
  DPT_CUDA_CHECK(cudaGetLastError());
}

template <typename E, int HDP, typename Q, typename D>
void backward_as(const Launch& l, const Q* qkv, const float* lse, const D* d_o,
                 const float* rowdot, const HeadShape& s, float scale, bool causal,
                 float* dqkv, bf16* dqkv16) {
  fused_key_grad_kernel<E, HDP, Q, D><<<tiles_grid(s, key_grad_bytes<E, HDP>(32)),
                                        kBlockThreads, 0, l.stream>>>(
      qkv, d_o, lse, rowdot, s, scale, causal, dqkv, dqkv16);
  DPT_CUDA_CHECK(cudaGetLastError());
  fused_query_grad_kernel<E, HDP, Q, D><<<tiles_grid(s, query_grad_bytes<E, HDP>(32)),
                                          kBlockThreads, 0, l.stream>>>(
      qkv, d_o, lse, rowdot, s, scale, causal, dqkv, dqkv16);
  DPT_CUDA_CHECK(cudaGetLastError());
}

// The padded head dimension for head_dim (0: none).
int padded_head_dim(int head_dim, bool bf16_operands) {
  for (int p : {16, 32, 64, 128})
    if (head_dim <= p && p <= fused_attention_max_head_dim(bf16_operands)) return p;
  return 0;
}

template <typename Body>
void with_padding(int head_dim, bool bf16_operands, Body body) {
  switch (padded_head_dim(head_dim, bf16_operands)) {
    case 16: return body(std::integral_constant<int, 16>{});
    case 32: return body(std::integral_constant<int, 32>{});
    case 64: return body(std::integral_constant<int, 64>{});
    case 128: return body(std::integral_constant<int, 128>{});
    default: return;
  }
}

}  // namespace

int fused_attention_max_head_dim(bool bf16_operands) {
  return bf16_operands ? kBf16HeadDim : kFloatHeadDim;
}

void fused_attention_forward(const Launch& l, bool bf16_operands, const float* qkv,
                             const std::uint16_t* qkv16, const HeadShape& s, float scale,
                             bool causal, float* o, float* lse, std::uint16_t* o16) {
  if (s.batch * s.heads == 0 || s.tokens == 0) return;
  auto* copy = reinterpret_cast<bf16*>(o16);
  const auto* q16 = reinterpret_cast<const bf16*>(qkv16);
  with_padding(s.head_dim, bf16_operands, [&](auto hdp) {
    constexpr int HDP = decltype(hdp)::value;
    if (bf16_operands && q16) forward_as<bf16, HDP>(l, q16, s, scale, causal, o, lse, copy);
    else if (bf16_operands) forward_as<bf16, HDP>(l, qkv, s, scale, causal, o, lse, copy);
    else if constexpr (HDP <= kFloatHeadDim)
      forward_as<float, HDP>(l, qkv, s, scale, causal, o, lse, copy);
  });
}

void fused_attention_backward(const Launch& l, bool bf16_operands, const float* qkv,
                              const std::uint16_t* qkv16, const float* o,
                              const std::uint16_t* o16, const float* lse, const float* d_o,
                              const std::uint16_t* d_o16, const HeadShape& s, float scale,
                              bool causal, float* rowdot, float* dqkv, std::uint16_t* dqkv16) {
  const size_t rows = size_t(s.batch) * s.heads * s.tokens;
  if (!rows) return;
  const auto* q16 = reinterpret_cast<const bf16*>(qkv16);
  const auto* do16 = bf16_operands ? reinterpret_cast<const bf16*>(d_o16) : nullptr;
  const unsigned blocks = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
  const auto row_dot = [&](const auto* dout) {
    using D = std::remove_cv_t<std::remove_pointer_t<decltype(dout)>>;
    if (o)
      row_dot_kernel<D, float><<<blocks, kRowWarps * kWarp, 0, l.stream>>>(dout, o, s, rows,
                                                                           rowdot);
    else
      row_dot_kernel<D, bf16><<<blocks, kRowWarps * kWarp, 0, l.stream>>>(
          dout, reinterpret_cast<const bf16*>(o16), s, rows, rowdot);
    DPT_CUDA_CHECK(cudaGetLastError());
  };
  if (do16) row_dot(do16);
  else row_dot(d_o);
  with_padding(s.head_dim, bf16_operands, [&](auto hdp) {
    constexpr int HDP = decltype(hdp)::value;
    auto* copy = reinterpret_cast<bf16*>(dqkv16);
    const auto run = [&](const auto* in, const auto* dout) {
      backward_as<bf16, HDP>(l, in, lse, dout, rowdot, s, scale, causal, dqkv, copy);
    };
    if (bf16_operands && q16 && do16) run(q16, do16);
    else if (bf16_operands && q16) run(q16, d_o);
    else if (bf16_operands && do16) run(qkv, do16);
    else if (bf16_operands) run(qkv, d_o);
    else if constexpr (HDP <= kFloatHeadDim)
      backward_as<float, HDP>(l, qkv, lse, d_o, rowdot, s, scale, causal, dqkv, copy);
  });
}

}  // namespace dptrain::cuda
