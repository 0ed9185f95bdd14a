// Implements: the forward pass of fused multi-head attention on the GPU
// (`--attention fused`, behind the FusedAttentionKernels table of
// fused_attention_kernels.cpp), in the manner of FlashAttention-2: nothing
// of size T × T is stored. A block owns one head's 16·W query rows
// (fused_attention_tiles.hpp), each warp 16 of them. The block stages the
// key and value tiles in order, 32 keys a step (those wholly above the
// diagonal skipped when causal); each warp computes its rows' scores
// S = Q Kᵀ, an online softmax in fp32 (running maximum and sum; the output
// rescaled where the maximum grows), O += P V, all in its own strips, and
// at the end writes O / sum in the output projection's layout and the
// rows' log-sum-exp. The gradients are fused_attention_backward.cu's.
//  - O also leaves rounded to bf16 where asked (the output projection's
//    GEMM operand under --precision bf16); under it Q, K and V may come as
//    qkv's bf16 rounding alone (the same operands).
//  - Tiles are staged 16 bytes a load where the rows are aligned. Under a
//    causal mask the query tiles with the most keys are handed out first.
//  - Products: 16 × 16 tiles from operands in shared memory (warp_strip.hpp).
//    Under --precision bf16 and tf32 the operands (the probabilities too)
//    are rounded to bf16 or TF32 as they are staged or written and
//    multiplied on the tensor cores (wmma, fp32 accumulation); under fp32
//    each lane sums its outputs with fp32 fused multiply-adds in a fixed
//    order. The output's sum over the key tiles
//    stays in the warp's registers. Every sum runs in a fixed order: the
//    same bits every run.
// The head dimension is padded with zeros to 16, 32, 64 or 128 in shared
// memory (a static array up to 48 KiB, dynamic shared memory beyond:
// fused_attention_tiles.hpp).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/fused_attention.hpp"
#include "backends/cuda/fused_attention_tiles.hpp"

namespace dptrain::cuda {
namespace {

using namespace attention;

// A 16 × 16 tile whose row r holds r, for WarpStrip::load_row_map.
__device__ void fill_row_numbers(float* tile) {
  for (int i = threadIdx.x; i < kTileElements; i += blockDim.x)
    tile[i] = static_cast<float>(i / 16);
}

// One step of keys (k0 .. k0 + kStep) of the online softmax over a warp's
// 16 rows (the first is row r0): the scores s[16 × kStep] become the
// probabilities p (E, rows PLD apart) against the running maximum, and
// alpha[r] the factor that rescales the output's row r (exp of the old
// maximum less the new). Lanes 2r and 2r + 1 own row r, 16 keys each, and
// hold its running maximum m and sum l. Each lane visits its keys rotated
// by r, so that the 32 lanes read 32 banks.
template <typename E, int PLD>
__device__ void strip_softmax(const float* s, E* p, float* alpha, float& m, float& l, int r0,
                              int k0, int tokens, float scale, bool causal) {
  const int r = lane_index() / 2, first = lane_index() % 2 * 16, row = r0 + r;
  float z[16];  // the scaled scores of the lane's keys, -inf where the row does not attend
  float most = -INFINITY;
  for (int j = 0; j < 16; ++j) {
    const int c = first + (j + r) % 16, key = k0 + c;
    z[j] = key < tokens && (!causal || key <= row) ? s[r * kStep + c] * scale : -INFINITY;
    most = fmaxf(most, z[j]);
  }
  // Finite: each step visited has a key at or below each row of the warp.
  const float new_m = fmaxf(m, fmaxf(most, __shfl_xor_sync(0xffffffffu, most, 1)));
  float sum = 0.0f;
  for (int j = 0; j < 16; ++j) {
    const E pe = to_elem<E>(expf(z[j] - new_m));  // 0 where masked
    p[r * PLD + first + (j + r) % 16] = pe;
    sum += to_float(pe);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // the pair's halves, the same bits on both
  const float factor = expf(m - new_m);
  l = l * factor + sum;
  m = new_m;
  if (first == 0) alpha[r] = factor;
}

template <typename E, int HDP, typename Q>
__global__ void __launch_bounds__(4 * kWarpLanes)
    fused_forward_kernel(const Q* qkv, HeadShape s, float scale, bool causal, float* out,
                         float* lse, bf16* out16) {
  using B = Block<ForwardLayout<E, HDP>>;
  using Z = Sizes<E, HDP>;
  constexpr int W = B::W, R = B::R, LD = B::LD, PLD = B::PLD;
  alignas(32) __shared__ unsigned char tiles[static_bytes(B::kBytes)];
  extern __shared__ __align__(32) unsigned char dynamic_tiles[];
  Carve at(B::kBytes <= kSharedBytes ? tiles : dynamic_tiles);
  E* q = at.take<E>(Z::rows(R));
  unsigned char* keys_region = at.take<unsigned char>(B::kStepped);
  float* row_alpha = at.take<float>(Z::floats(R));
  float* row_sum = at.take<float>(Z::floats(R));
  float* row_numbers = at.take<float>(Z::floats(kTileElements));
  Carve keys_at(keys_region);
  E* k = keys_at.take<E>(Z::rows(kStep));
  E* v = keys_at.take<E>(Z::rows(kStep));
  float* scores = keys_at.take<float>(Z::floats(size_t(W) * kStripRows * kStep));
  E* probs = keys_at.take<E>(Z::strips(W));
  float* o = reinterpret_cast<float*>(keys_region);  // after the last step

  const size_t bh = blockIdx.x;
  const int w = warp_index(), q0 = owned_tile(causal) * R, t = s.tokens;
  const int r0 = q0 + w * kStripRows;
  const auto rows = [&](int part) { return head_rows(qkv, s, bh, part); };
  stage_rows<E, R, HDP, LD>(q, rows(0), q0);
  fill_row_numbers(row_numbers);
  __syncthreads();
  WarpStrip<E, HDP> acc;  // the output's running sum of the warp's rows
  acc.zero();
  acc.load_row_map(row_numbers);
  float m = -INFINITY, l = 0.0f;
  // The block visits the keys of its last row; the warp those of its own.
  const int key_end = causal && q0 + R < t ? q0 + R : t;
  const int warp_end = r0 >= t ? 0 : causal && r0 + kStripRows < t ? r0 + kStripRows : t;
  const E* q_w = q + w * kStripRows * LD;
  float* s_w = scores + w * kStripRows * kStep;
  E* p_w = probs + w * kStripRows * PLD;
  float* alpha_w = row_alpha + w * kStripRows;
  for (int k0 = 0; k0 < key_end; k0 += kStep) {
    __syncthreads();  // the last step's readers of k, v are done
    stage_rows<E, kStep, HDP, LD>(k, rows(1), k0);
    stage_rows<E, kStep, HDP, LD>(v, rows(2), k0);
    __syncthreads();
    if (k0 >= warp_end) continue;  // the whole warp: its rows attend no key here
    strip_product<E, true, kStep, HDP>(s_w, kStep, q_w, LD, k, LD);
    __syncwarp();
    strip_softmax<E, PLD>(s_w, p_w, alpha_w, m, l, r0, k0, t, scale, causal);
    __syncwarp();
    acc.scale_rows(alpha_w);
    acc.template mma<false, kStep>(p_w, PLD, v, LD);
  }
  const int lane = lane_index();
  if (lane % 2 == 0) {
    row_sum[w * kStripRows + lane / 2] = l;
    if (r0 + lane / 2 < t) lse[bh * t + r0 + lane / 2] = m + logf(l);
  }
  __syncthreads();  // every warp is done with k, v and its strips: o goes over them
  acc.store(o + w * kStripRows * HDP, HDP);
  __syncthreads();
  for (int i = threadIdx.x; i < R * HDP; i += blockDim.x) o[i] = o[i] / row_sum[i / HDP];
  __syncthreads();
  write_rows<R, HDP>(head_at(out, s, bh, -1), head_ld(s, -1), t, s.head_dim, o, q0,
                     head_at(out16, s, bh, -1));
}

template <typename E, int HDP, typename Q>
void forward_as(const Launch& l, const Q* qkv, const HeadShape& s, float scale, bool causal,
                float* o, float* lse, bf16* o16) {
  using B = Block<ForwardLayout<E, HDP>>;
  allow_dynamic<fused_forward_kernel<E, HDP, Q>, B::kBytes>();
  fused_forward_kernel<E, HDP, Q>
      <<<strips_grid(s, B::W), B::W * kWarpLanes, dynamic_bytes(B::kBytes), l.stream>>>(
          qkv, s, scale, causal, o, lse, o16);
  DPT_CUDA_CHECK(cudaGetLastError());
}

template <typename E>
size_t shared_bytes_at(int head_dim) {
  size_t bytes = 0;
  with_padding(head_dim,
               [&](auto hdp) { bytes = kernels_shared_bytes<E, decltype(hdp)::value>(); });
  return bytes;
}

}  // namespace

int fused_attention_max_head_dim(AttentionOperands operands) {
  int device = 0, limit = 0;
  DPT_CUDA_CHECK(cudaGetDevice(&device));
  DPT_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  int most = 0;
  for (int hdp = 16; hdp <= kMaxHeadDim; hdp *= 2) {
    const size_t bytes = operands == AttentionOperands::kBf16   ? shared_bytes_at<bf16>(hdp)
                         : operands == AttentionOperands::kTf32 ? shared_bytes_at<Tf32>(hdp)
                                                                : shared_bytes_at<float>(hdp);
    if (bytes <= static_cast<size_t>(limit)) most = hdp;
  }
  return most;
}

void fused_attention_forward(const Launch& l, AttentionOperands operands, const float* qkv,
                             const std::uint16_t* qkv16, const HeadShape& s, float scale,
                             bool causal, float* o, float* lse, std::uint16_t* o16) {
  if (s.batch * s.heads == 0 || s.tokens == 0) return;
  auto* copy = reinterpret_cast<bf16*>(o16);
  const auto* q16 = reinterpret_cast<const bf16*>(qkv16);
  const bool bf16_operands = operands == AttentionOperands::kBf16;
  with_padding(s.head_dim, [&](auto hdp) {
    constexpr int HDP = decltype(hdp)::value;
    if (bf16_operands && q16) forward_as<bf16, HDP>(l, q16, s, scale, causal, o, lse, copy);
    else if (bf16_operands) forward_as<bf16, HDP>(l, qkv, s, scale, causal, o, lse, copy);
    else if (operands == AttentionOperands::kTf32)
      forward_as<Tf32, HDP>(l, qkv, s, scale, causal, o, lse, copy);
    else
      forward_as<float, HDP>(l, qkv, s, scale, causal, o, lse, copy);
  });
}

}  // namespace dptrain::cuda
