// Implements: the backward pass of fused multi-head attention on the GPU
// (fused_attention.cu has the forward and says how it tiles): the score
// tiles are recomputed from Q, K, V and the forward's log-sum-exp, in the
// manner of FlashAttention-2, with nothing of size T × T stored and no
// atomics, so the same bits every run.
//  - A first kernel sums each row's Σ dO ∘ O.
//  - dK and dV: a block owns one head's 16·W keys, each warp 16 of them; the
//    block stages the query rows and their dO in order, 32 a step (from
//    the diagonal when causal), and each warp recomputes its keys' Sᵀ and
//    dPᵀ, 16 × 16 at a time, makes Pᵀ and dSᵀ from them and accumulates
//    dV += Pᵀ dO and dK += dSᵀ Q in its registers, in that order.
//  - dQ: a block owns 16·W query rows, each warp 16; the block stages the
//    keys and values in order, 32 a step, and each warp accumulates
//    dQ += dS K for its rows, in that order.
//  - dQ, dK and dV leave in the input projection's layout (dqkv), and
//    rounded to bf16 where asked (its GEMMs' operand under --precision
//    bf16); under it Q, K, V and dO may come as their bf16 roundings alone
//    (the same operands).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/fused_attention.hpp"
#include "backends/cuda/fused_attention_tiles.hpp"

namespace dptrain::cuda {
namespace {

using namespace attention;

constexpr int kRowWarps = 8;  // rows per block of the row-dot kernel

// rowdot[r] = Σ_c do[r, c] · o[r, c] over one head's row: one warp a row,
// in double over a fixed lane stride and butterfly. do and o are fp32, or
// their bf16 roundings (D, O = __nv_bfloat16), as cuDNN reads them.
template <typename D, typename O>
__global__ void row_dot_kernel(const D* d_o, const O* o, HeadShape s, size_t rows,
                               float* rowdot) {
  const size_t r = static_cast<size_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarpLanes;
  if (r >= rows) return;
  const size_t bh = r / s.tokens, t = r % s.tokens;
  const size_t at = head_offset(s, bh, -1) + t * head_ld(s, -1);
  double sum = 0.0;
  for (int c = lane_index(); c < s.head_dim; c += kWarpLanes)
    sum = __dadd_rn(sum, __dmul_rn(to_float(d_o[at + c]), to_float(o[at + c])));
  for (int off = kWarpLanes / 2; off > 0; off >>= 1)
    sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
  if (lane_index() == 0) rowdot[r] = static_cast<float>(sum);
}

// Over a 16 × 16 tile of scores s and of dP (element i: row i / 16, column
// i % 16, each lane its elements lane, lane + 32, ...): p = exp(scale · s −
// lse) where the query attends the key, else 0, and ds = scale · p · (dp −
// rowdot), both rounded to E into rows PLD apart (p where asked). KeyRows:
// the rows are keys key0.. and the columns queries query0.. (Sᵀ), else the
// rows are queries and the columns keys; lse and dot are the queries'.
template <bool KeyRows, typename E, int PLD>
__device__ void softmax_grad_tile(const float* s, const float* dp, const float* lse,
                                  const float* dot, int query0, int key0, int tokens,
                                  float scale, bool causal, E* p, E* ds) {
  for (int i = lane_index(); i < kTileElements; i += kWarpLanes) {
    const int r = i / 16, c = i % 16, qi = KeyRows ? c : r, ki = KeyRows ? r : c;
    const float pr =
        attends(query0 + qi, key0 + ki, tokens, causal) ? expf(s[i] * scale - lse[qi]) : 0.0f;
    if (p) p[r * PLD + c] = to_elem<E>(pr);
    ds[r * PLD + c] = to_elem<E>(scale * pr * (dp[i] - dot[qi]));
  }
}

// dK and dV of 16·W keys: over the query steps in order (from the
// diagonal when causal), each warp dV += Pᵀ dO and dK += dSᵀ Q for its keys.
template <typename E, int HDP, typename Q, typename D>
__global__ void __launch_bounds__(4 * kWarpLanes)
    fused_key_grad_kernel(const Q* qkv, const D* d_o, const float* lse,
                          const float* rowdot, HeadShape s, float scale, bool causal,
                          float* dqkv, bf16* dqkv16) {
  using B = Block<KeyGradLayout<E, HDP>>;
  using Z = Sizes<E, HDP>;
  constexpr int W = B::W, R = B::R, LD = B::LD, PLD = B::PLD;
  alignas(32) __shared__ unsigned char tiles[static_bytes(B::kBytes)];
  extern __shared__ __align__(32) unsigned char dynamic_tiles[];
  Carve at(B::kBytes <= kSharedBytes ? tiles : dynamic_tiles);
  E* k = at.take<E>(Z::rows(R));
  E* v = at.take<E>(Z::rows(R));
  unsigned char* queries_region = at.take<unsigned char>(B::kStepped);
  float* lse_r = at.take<float>(Z::floats(kStep));
  float* dot_r = at.take<float>(Z::floats(kStep));
  Carve queries_at(queries_region);
  E* q = queries_at.take<E>(Z::rows(kStep));
  E* dout = queries_at.take<E>(Z::rows(kStep));
  float* scratch = queries_at.take<float>(Z::scratch(W));
  E* pt = queries_at.take<E>(Z::strips(W));
  E* dst = queries_at.take<E>(Z::strips(W));
  float* dkv = reinterpret_cast<float*>(queries_region);  // dK, then dV, on their way out

  const size_t bh = blockIdx.x;
  const int w = warp_index(), k0 = static_cast<int>(blockIdx.y) * R, t = s.tokens;
  const int kw = k0 + w * kStripRows;  // the warp's first key
  const auto rows = [&](const auto* base, int part) { return head_rows(base, s, bh, part); };
  stage_rows<E, R, HDP, LD>(k, rows(qkv, 1), k0);
  stage_rows<E, R, HDP, LD>(v, rows(qkv, 2), k0);
  WarpStrip<E, HDP> dk, dv;  // the warp's keys' sums, in registers over the steps
  dk.zero();
  dv.zero();
  const E* k_w = k + w * kStripRows * LD;
  const E* v_w = v + w * kStripRows * LD;
  float* st = scratch + w * 2 * kTileElements;
  float* dpt = st + kTileElements;
  E* pt_w = pt + w * kStripRows * PLD;
  E* dst_w = dst + w * kStripRows * PLD;
  for (int q0 = causal ? k0 : 0; q0 < t; q0 += kStep) {
    __syncthreads();  // the last step's readers of q and do are done
    stage_rows<E, kStep, HDP, LD>(q, rows(qkv, 0), q0);
    stage_rows<E, kStep, HDP, LD>(dout, rows(d_o, -1), q0);
    stage_vector<kStep>(lse_r, lse + bh * t, q0, t);
    stage_vector<kStep>(dot_r, rowdot + bh * t, q0, t);
    __syncthreads();
    // The whole warp: none of its keys exists, or no query of the step
    // attends them.
    if (kw >= t || (causal && q0 + kStep <= kw)) continue;
    for (int j = 0; j < kStep; j += 16) {
      strip_product<E, true, 16, HDP>(st, 16, k_w, LD, q + j * LD, LD);      // Sᵀ
      strip_product<E, true, 16, HDP>(dpt, 16, v_w, LD, dout + j * LD, LD);  // dPᵀ
      __syncwarp();
      softmax_grad_tile<true, E, PLD>(st, dpt, lse_r + j, dot_r + j, q0 + j, kw, t, scale,
                                      causal, pt_w + j, dst_w + j);
      __syncwarp();
    }
    dv.template mma<false, kStep>(pt_w, PLD, dout, LD);
    dk.template mma<false, kStep>(dst_w, PLD, q, LD);
  }
  __syncthreads();  // every warp is done with q, do and its strips
  dk.store(dkv + w * kStripRows * HDP, HDP);
  __syncthreads();
  write_rows<R, HDP>(head_at(dqkv, s, bh, 1), head_ld(s, 1), t, s.head_dim, dkv, k0,
                     head_at(dqkv16, s, bh, 1));
  __syncthreads();
  dv.store(dkv + w * kStripRows * HDP, HDP);
  __syncthreads();
  write_rows<R, HDP>(head_at(dqkv, s, bh, 2), head_ld(s, 2), t, s.head_dim, dkv, k0,
                     head_at(dqkv16, s, bh, 2));
}

// dQ of 16·W query rows: over the key steps in order, each warp dQ += dS K
// for its rows.
template <typename E, int HDP, typename Q, typename D>
__global__ void __launch_bounds__(4 * kWarpLanes)
    fused_query_grad_kernel(const Q* qkv, const D* d_o, const float* lse,
                            const float* rowdot, HeadShape s, float scale, bool causal,
                            float* dqkv, bf16* dqkv16) {
  using B = Block<QueryGradLayout<E, HDP>>;
  using Z = Sizes<E, HDP>;
  constexpr int W = B::W, R = B::R, LD = B::LD, PLD = B::PLD;
  alignas(32) __shared__ unsigned char tiles[static_bytes(B::kBytes)];
  extern __shared__ __align__(32) unsigned char dynamic_tiles[];
  Carve at(B::kBytes <= kSharedBytes ? tiles : dynamic_tiles);
  E* q = at.take<E>(Z::rows(R));
  E* dout = at.take<E>(Z::rows(R));
  unsigned char* keys_region = at.take<unsigned char>(B::kStepped);
  float* lse_r = at.take<float>(Z::floats(R));
  float* dot_r = at.take<float>(Z::floats(R));
  Carve keys_at(keys_region);
  E* k = keys_at.take<E>(Z::rows(kStep));
  E* v = keys_at.take<E>(Z::rows(kStep));
  float* scratch = keys_at.take<float>(Z::scratch(W));
  E* ds = keys_at.take<E>(Z::strips(W));
  float* dq = reinterpret_cast<float*>(keys_region);  // after the last step

  const size_t bh = blockIdx.x;
  const int w = warp_index(), q0 = owned_tile(causal) * R, t = s.tokens;
  const int r0 = q0 + w * kStripRows;  // the warp's first row
  const auto rows = [&](const auto* base, int part) { return head_rows(base, s, bh, part); };
  stage_rows<E, R, HDP, LD>(q, rows(qkv, 0), q0);
  stage_rows<E, R, HDP, LD>(dout, rows(d_o, -1), q0);
  stage_vector<R>(lse_r, lse + bh * t, q0, t);
  stage_vector<R>(dot_r, rowdot + bh * t, q0, t);
  WarpStrip<E, HDP> acc;  // the warp's rows of dQ, in registers over the steps
  acc.zero();
  const int key_end = causal && q0 + R < t ? q0 + R : t;
  const int warp_end = r0 >= t ? 0 : causal && r0 + kStripRows < t ? r0 + kStripRows : t;
  const E* q_w = q + w * kStripRows * LD;
  const E* do_w = dout + w * kStripRows * LD;
  float* sc = scratch + w * 2 * kTileElements;
  float* dp = sc + kTileElements;
  E* ds_w = ds + w * kStripRows * PLD;
  for (int k0 = 0; k0 < key_end; k0 += kStep) {
    __syncthreads();  // the last step's readers of k and v are done
    stage_rows<E, kStep, HDP, LD>(k, rows(qkv, 1), k0);
    stage_rows<E, kStep, HDP, LD>(v, rows(qkv, 2), k0);
    __syncthreads();
    if (k0 >= warp_end) continue;  // the whole warp: its rows attend no key here
    for (int j = 0; j < kStep; j += 16) {
      strip_product<E, true, 16, HDP>(sc, 16, q_w, LD, k + j * LD, LD);   // S
      strip_product<E, true, 16, HDP>(dp, 16, do_w, LD, v + j * LD, LD);  // dP
      __syncwarp();
      softmax_grad_tile<false, E, PLD>(sc, dp, lse_r + w * kStripRows, dot_r + w * kStripRows,
                                       r0, k0 + j, t, scale, causal, static_cast<E*>(nullptr),
                                       ds_w + j);
      __syncwarp();
    }
    acc.template mma<false, kStep>(ds_w, PLD, k, LD);
  }
  __syncthreads();  // every warp is done with k, v and its strips: dq goes over them
  acc.store(dq + w * kStripRows * HDP, HDP);
  __syncthreads();
  write_rows<R, HDP>(head_at(dqkv, s, bh, 0), head_ld(s, 0), t, s.head_dim, dq, q0,
                     head_at(dqkv16, s, bh, 0));
}

template <typename E, int HDP, typename Q, typename D>
void backward_as(const Launch& l, const Q* qkv, const float* lse, const D* d_o,
                 const float* rowdot, const HeadShape& s, float scale, bool causal,
                 float* dqkv, bf16* dqkv16) {
  using BK = Block<KeyGradLayout<E, HDP>>;
  allow_dynamic<fused_key_grad_kernel<E, HDP, Q, D>, BK::kBytes>();
  fused_key_grad_kernel<E, HDP, Q, D>
      <<<strips_grid(s, BK::W), BK::W * kWarpLanes, dynamic_bytes(BK::kBytes), l.stream>>>(
          qkv, d_o, lse, rowdot, s, scale, causal, dqkv, dqkv16);
  DPT_CUDA_CHECK(cudaGetLastError());
  using BQ = Block<QueryGradLayout<E, HDP>>;
  allow_dynamic<fused_query_grad_kernel<E, HDP, Q, D>, BQ::kBytes>();
  fused_query_grad_kernel<E, HDP, Q, D>
      <<<strips_grid(s, BQ::W), BQ::W * kWarpLanes, dynamic_bytes(BQ::kBytes), l.stream>>>(
          qkv, d_o, lse, rowdot, s, scale, causal, dqkv, dqkv16);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fused_attention_backward(const Launch& l, AttentionOperands operands, const float* qkv,
                              const std::uint16_t* qkv16, const float* o,
                              const std::uint16_t* o16, const float* lse, const float* d_o,
                              const std::uint16_t* d_o16, const HeadShape& s, float scale,
                              bool causal, float* rowdot, float* dqkv, std::uint16_t* dqkv16) {
  const size_t rows = size_t(s.batch) * s.heads * s.tokens;
  if (!rows) return;
  const bool bf16_operands = operands == AttentionOperands::kBf16;
  const auto* q16 = reinterpret_cast<const bf16*>(qkv16);
  const auto* do16 = bf16_operands ? reinterpret_cast<const bf16*>(d_o16) : nullptr;
  const unsigned blocks = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
  const auto row_dot = [&](const auto* dout) {
    using D = std::remove_cv_t<std::remove_pointer_t<decltype(dout)>>;
    if (o)
      row_dot_kernel<D, float><<<blocks, kRowWarps * kWarpLanes, 0, l.stream>>>(
          dout, o, s, rows, rowdot);
    else
      row_dot_kernel<D, bf16><<<blocks, kRowWarps * kWarpLanes, 0, l.stream>>>(
          dout, reinterpret_cast<const bf16*>(o16), s, rows, rowdot);
    DPT_CUDA_CHECK(cudaGetLastError());
  };
  if (do16) row_dot(do16);
  else row_dot(d_o);
  with_padding(s.head_dim, [&](auto hdp) {
    constexpr int HDP = decltype(hdp)::value;
    auto* copy = reinterpret_cast<bf16*>(dqkv16);
    const auto run = [&](const auto* in, const auto* dout) {
      backward_as<bf16, HDP>(l, in, lse, dout, rowdot, s, scale, causal, dqkv, copy);
    };
    if (bf16_operands && q16 && do16) run(q16, do16);
    else if (bf16_operands && q16) run(q16, d_o);
    else if (bf16_operands && do16) run(qkv, do16);
    else if (bf16_operands) run(qkv, d_o);
    else if (operands == AttentionOperands::kTf32)
      backward_as<Tf32, HDP>(l, qkv, lse, d_o, rowdot, s, scale, causal, dqkv, copy);
    else
      backward_as<float, HDP>(l, qkv, lse, d_o, rowdot, s, scale, causal, dqkv, copy);
  });
}

}  // namespace dptrain::cuda
