// Implements: what the fused attention kernels (fused_attention.cu, the
// forward; fused_attention_backward.cu, the gradients) share: how a block
// is organized and how its shared memory is laid out (device code and
// constexpr layouts: included by those .cu files only).
//
// A block is W warps (4, 2 or 1: the most whose tiles fit 48 KiB of shared
// memory, or one where even one warp's take more: fp32 and TF32 at head
// dimension 128, whose gradient kernels take about 56 KiB, which a kernel
// must opt in to, as dynamic shared memory; every GPU since sm_80 allows
// at least 99 KiB). It owns 16·W rows (query rows in the forward and dQ
// kernels, key rows in the dK/dV kernel), and warp w owns rows 16w .. 16w +
// 15 of them, in the manner of FlashAttention-2: the rows of a score tile,
// its softmax and the sums over the tiles that a warp owns are its own, so
// the warps meet only where the block stages a step of the other side's
// rows (32 keys, or 32 queries for dK/dV), two block barriers a step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/head_rows.hpp"
#include "backends/cuda/warp_strip.hpp"

namespace dptrain::cuda::attention {

using std::size_t;
using bf16 = __nv_bfloat16;

constexpr size_t kSharedBytes = 48 * 1024;  // what a kernel takes without opting in
constexpr int kStripRows = 16;               // a warp's rows: one wmma tile high
constexpr int kStep = 32;                    // the other side's rows staged a step
constexpr int kMaxHeadDim = 128;             // the largest padded head dimension

// The row stride of a staged tile or strip of E: its width plus a pad that
// moves consecutive rows to other shared-memory banks. wmma's operands
// (bf16, Tf32) take 16 bytes, which keeps its pointers and strides legal:
// 8 bf16 or 4 Tf32; fp32 one float.
template <typename E>
constexpr int pad() { return std::is_same_v<E, float> ? 1 : 16 / static_cast<int>(sizeof(E)); }
constexpr size_t round32(size_t bytes) { return (bytes + 31) / 32 * 32; }

// Region sizes in bytes, each rounded to 32 so that every region starts
// 256-bit aligned.
template <typename E, int HDP>
struct Sizes {
  static constexpr int kLd = HDP + pad<E>();         // a staged row of q, k, v or do
  static constexpr int kStripLd = kStep + pad<E>();  // a warp's p or ds strip
  static constexpr size_t rows(int n) { return round32(size_t(n) * kLd * sizeof(E)); }
  static constexpr size_t strips(int w) {
    return round32(size_t(w) * kStripRows * kStripLd * sizeof(E));
  }
  static constexpr size_t floats(size_t n) { return round32(n * sizeof(float)); }
  // One 16 × 16 fp32 tile per warp for scores and one for dP (gradients).
  static constexpr size_t scratch(int w) { return floats(size_t(w) * 2 * kTileElements); }
};

// Forward, W warps: q (16W rows), then the stepped part: k and v (a step
// each), each warp's fp32 scores and E probabilities (16 × kStep), and
// over them the output (16W × HDP fp32) once the keys are done; then
// alpha (each row's rescaling), the row sums and a tile of row numbers.
template <typename E, int HDP>
struct ForwardLayout {
  using S = Sizes<E, HDP>;
  static constexpr size_t keys(int w) {
    return 2 * S::rows(kStep) + S::floats(size_t(w) * kStripRows * kStep) + S::strips(w);
  }
  static constexpr size_t out(int w) { return S::floats(size_t(w) * kStripRows * HDP); }
  static constexpr size_t stepped(int w) { return keys(w) > out(w) ? keys(w) : out(w); }
  static constexpr size_t bytes(int w) {
    return S::rows(w * kStripRows) + stepped(w) + 2 * S::floats(size_t(w) * kStripRows) +
           S::floats(kTileElements);
  }
};

// dK and dV, W warps owning 16W keys: k and v (16W rows), then q and do (a
// step each), the scratch tiles, each warp's pᵀ and dsᵀ strips (16 keys ×
// kStep queries), the step's lse and row dots; dK and then dV (16W × HDP
// fp32) over q.. once the queries are done.
template <typename E, int HDP>
struct KeyGradLayout {
  using S = Sizes<E, HDP>;
  static constexpr size_t queries(int w) {
    return 2 * S::rows(kStep) + S::scratch(w) + 2 * S::strips(w);
  }
  static constexpr size_t out(int w) { return S::floats(size_t(w) * kStripRows * HDP); }
  static constexpr size_t stepped(int w) { return queries(w) > out(w) ? queries(w) : out(w); }
  static constexpr size_t bytes(int w) {
    return 2 * S::rows(w * kStripRows) + stepped(w) + 2 * S::floats(kStep);
  }
};

// dQ, W warps owning 16W query rows: q and do (16W rows), then k and v (a
// step each), the scratch tiles, each warp's ds strip (16 × kStep); dQ
// (16W × HDP fp32) over k.. once the keys are done; the rows' lse and row
// dots.
template <typename E, int HDP>
struct QueryGradLayout {
  using S = Sizes<E, HDP>;
  static constexpr size_t keys(int w) { return 2 * S::rows(kStep) + S::scratch(w) + S::strips(w); }
  static constexpr size_t out(int w) { return S::floats(size_t(w) * kStripRows * HDP); }
  static constexpr size_t stepped(int w) { return keys(w) > out(w) ? keys(w) : out(w); }
  static constexpr size_t bytes(int w) {
    return 2 * S::rows(w * kStripRows) + stepped(w) + 2 * S::floats(size_t(w) * kStripRows);
  }
};

// The most warps (4, 2, 1) whose layout fits 48 KiB; 1 where none does.
template <typename Layout>
constexpr int warps_for() {
  return Layout::bytes(4) <= kSharedBytes ? 4 : Layout::bytes(2) <= kSharedBytes ? 2 : 1;
}

// A kernel's block under a layout: W warps owning R rows, the row strides
// of its staged tiles (LD) and strips (PLD), the shared memory it takes,
// and the part of it that each step reuses (stepped, then the outputs).
template <typename Layout>
struct Block {
  static constexpr int W = warps_for<Layout>(), R = W * kStripRows;
  static constexpr int LD = Layout::S::kLd, PLD = Layout::S::kStripLd;
  static constexpr size_t kBytes = Layout::bytes(W), kStepped = Layout::stepped(W);
};

// The most shared memory one of the three kernels takes with operands E
// at padded head dimension HDP.
template <typename E, int HDP>
constexpr size_t kernels_shared_bytes() {
  return std::max({Block<ForwardLayout<E, HDP>>::kBytes, Block<KeyGradLayout<E, HDP>>::kBytes,
                   Block<QueryGradLayout<E, HDP>>::kBytes});
}

// A block's shared memory, of B::kBytes: a static array up to 48 KiB, else
// the launch's dynamic shared memory. Each kernel declares both (in its
// .cu file, which the host emulation translates) and takes one:
//   alignas(32) __shared__ unsigned char tiles[static_bytes(B::kBytes)];
//   extern __shared__ __align__(32) unsigned char dynamic_tiles[];
// Static where it fits, because ptxas then knows the size: with dynamic
// memory it gives the bf16 dQ kernel at head dim 64 the same 96 registers,
// and spills.
constexpr size_t static_bytes(size_t bytes) { return bytes <= kSharedBytes ? bytes : 1; }
constexpr size_t dynamic_bytes(size_t bytes) { return bytes <= kSharedBytes ? 0 : bytes; }

// Lets Kernel's launches take Bytes of shared memory: over 48 KiB a kernel
// must opt in, which is done at its first launch, once a process (one
// device a process; the fp32 and TF32 kernels at head dim 128 need it).
template <auto Kernel, size_t Bytes>
void allow_dynamic() {
  if constexpr (Bytes > kSharedBytes) {
    static const bool allowed = [] {
      DPT_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(Bytes)));
      return true;
    }();
    (void)allowed;
  }
}

// Hands out consecutive regions of a block's shared memory.
class Carve {
 public:
  __device__ explicit Carve(unsigned char* base) : at_(base) {}
  template <typename T>
  __device__ T* take(size_t bytes) {
    T* p = reinterpret_cast<T*>(at_);
    at_ += bytes;
    return p;
  }

 private:
  unsigned char* at_;
};

static_assert(kStripRows == 16, "a warp's rows are one WarpStrip, one wmma tile high");

// c[16 × N] (row-major, ldc) = a[16 × K] · b (b[K × N], or column-major:
// the rows of bᵀ), one warp.
template <typename E, bool BCol, int N, int K>
__device__ void strip_product(float* c, int ldc, const E* a, int lda, const E* b, int ldb) {
  WarpStrip<E, N> t;
  t.zero();
  t.template mma<BCol, K>(a, lda, b, ldb);
  t.store(c, ldc);
}

__device__ inline bool attends(int row, int key, int tokens, bool causal) {
  return row < tokens && key < tokens && (!causal || key <= row);
}

// The tile of rows a block owns. Under a causal mask the last tiles have
// the most keys to visit: they are handed out first, so that the blocks
// still running at the end of the grid are the short ones (blocks start
// in the order of blockIdx, x fastest).
__device__ inline int owned_tile(bool causal) {
  return static_cast<int>(causal ? gridDim.y - 1 - blockIdx.y : blockIdx.y);
}

// One block per head and 16·W rows.
inline dim3 strips_grid(const HeadShape& s, int warps) {
  const int rows = warps * kStripRows;
  return dim3(static_cast<unsigned>(s.batch * s.heads),
              static_cast<unsigned>((s.tokens + rows - 1) / rows));
}

// The padded head dimension for head_dim (0: none), and a call of body
// with it as a compile-time constant.
inline int padded_head_dim(int head_dim) {
  for (int p : {16, 32, 64, kMaxHeadDim})
    if (head_dim <= p) return p;
  return 0;
}
template <typename Body>
void with_padding(int head_dim, Body body) {
  switch (padded_head_dim(head_dim)) {
    case 16: return body(std::integral_constant<int, 16>{});
    case 32: return body(std::integral_constant<int, 32>{});
    case 64: return body(std::integral_constant<int, 64>{});
    case 128: return body(std::integral_constant<int, 128>{});
    default: return;
  }
}

}  // namespace dptrain::cuda::attention
