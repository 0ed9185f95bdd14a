// Implements: softmax cross-entropy and MSE on the GPU with their loss (and
// correct count) summed on the device into the caller's stats. Cross-entropy
// is the fused classifier: a block per row, one pass over the logits for the
// softmax's maximum and sum, one that writes the gradient (in place, if the
// caller passes the logits' own buffer) and, where asked, its bf16 copy for
// the last dense layer's GEMMs (__float2bfloat16_rn, the bits of
// ConvertKernels::to_bf16) in the same pass. Over bf16 logits (the head's
// output under bf16) the same kernel reads bf16 and writes the gradient as
// bf16 only, in place: 2 bytes a logit where there were 6; a row of a
// multiple of 8 is read and written 16 bytes a thread at a time. MSE: one
// warp per row. Each block writes its partial sums, and the grid's last
// block to finish (an integer count of arrivals) adds them in block order
// with one warp, so the sums are reproducible (no float atomics) and the
// loss is one launch. The row math follows
// src/backends/cpu/loss_kernels.cpp (the first maximum, the sums and the
// loss in double) but for the exponentials: CUDA's expf here.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {
namespace {

constexpr int kWarps = kThreads / 32;  // rows in flight per block
constexpr unsigned kFull = 0xffffffffu;

__device__ inline double warp_sum(double v) {
  // Butterfly: every lane ends with the same bits.
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Lane 0 of each warp holds (a, b); thread 0 writes the block's totals.
__device__ inline void write_block_partials(double a, double b, double* partials) {
  __shared__ double sa[kWarps], sb[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ta = 0.0, tb = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      ta += sa[w];
      tb += sb[w];
    }
    partials[2 * blockIdx.x] = ta;
    partials[2 * blockIdx.x + 1] = tb;
  }
}

// After thread 0 has written the block's partials: counts the block in
// *arrivals, and the grid's last block (which sets the count back to 0)
// adds every block's partials with its first warp, lane-strided in block
// order and then the butterfly, into stats. Every thread of the block
// calls it.
__device__ inline void add_partials_if_last(double* partials, unsigned* arrivals, float* stats,
                                            bool with_count) {
  __shared__ int last;
  if (threadIdx.x == 0) {
    __threadfence();  // the partials before the count, for whichever block is last
    last = atomicAdd(arrivals, 1u) + 1 == gridDim.x;
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  const volatile double* p = partials;  // past L1
  double a = 0.0, b = 0.0;
  for (unsigned i = threadIdx.x; i < gridDim.x; i += 32) {
    a += p[2 * i];
    b += p[2 * i + 1];
  }
  a = warp_sum(a);
  b = warp_sum(b);
  if (threadIdx.x == 0) {
    *arrivals = 0;
    stats[0] += static_cast<float>(a);
    if (with_count) stats[1] += static_cast<float>(b);
  }
}

// The softmax's running maximum m (the first column holding it, arg) and
// the sum s of exp(z - m) over the columns seen so far.
struct RowStats {
  float m;
  int arg;
  double s;
};

__device__ inline RowStats merge(RowStats a, RowStats b) {
  // The larger maximum wins, a tie goes to the smaller column (the CPU's
  // first maximum); each sum is rescaled to the winner's maximum.
  if (b.arg < 0) return a;
  if (a.arg < 0) return b;
  const bool b_wins = b.m > a.m || (b.m == a.m && b.arg < a.arg);
  const RowStats w = b_wins ? b : a, l = b_wins ? a : b;
  return {w.m, w.arg, w.s + l.s * exp(static_cast<double>(l.m - w.m))};
}

// The block's stats of one row, the same in every thread: a butterfly in
// each warp, then the warps' results in warp order (fixed: the same bits
// every run). shared holds one RowStats per warp.
__device__ RowStats block_stats(RowStats t, RowStats* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    RowStats other;
    other.m = __shfl_xor_sync(kFull, t.m, o);
    other.arg = __shfl_xor_sync(kFull, t.arg, o);
    other.s = __shfl_xor_sync(kFull, t.s, o);
    t = merge(t, other);
  }
  const int warps = blockDim.x >> 5;
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = t;
  __syncthreads();
  RowStats all = shared[0];
  for (int w = 1; w < warps; ++w) all = merge(all, shared[w]);
  __syncthreads();  // shared is free for the next row
  return all;
}

__device__ inline float load(const float* p) { return *p; }
__device__ inline float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// W consecutive values of a row, as one load and one store: W = 1 any
// type; W = 8 bf16 (16 bytes, aligned), for a vocabulary's logits.
struct alignas(16) Bf16x8 {
  __nv_bfloat16 e[8];
};
template <int W, typename T>
__device__ inline void load_group(const T* p, float* v) {
  if constexpr (W == 1) {
    v[0] = load(p);
  } else {
    const Bf16x8 g = *reinterpret_cast<const Bf16x8*>(p);
    for (int j = 0; j < W; ++j) v[j] = __bfloat162float(g.e[j]);
  }
}
template <int W, typename T>
__device__ inline void store_group(T* p, const float* v) {
  if constexpr (W == 1) {
    store(p, v[0]);
  } else {
    Bf16x8 g;
    for (int j = 0; j < W; ++j) g.e[j] = __float2bfloat16_rn(v[j]);
    *reinterpret_cast<Bf16x8*>(p) = g;
  }
}

// The fused classifier: a block per row (grid-stride over rows), one read
// of the row for its maximum and sum (online, each thread over its own
// columns), a second that writes the gradient, which may overwrite the
// logits in place (each element is read by the thread that writes it,
// and the label's logit is read before the block agrees on the stats).
// Logits and gradient are fp32 (In = Out = float; d16, where not null,
// then receives the gradient rounded to bf16) or bf16 (the head's output
// under bf16: values expanded to fp32 on load, the gradient rounded on
// store); the row math is fp32 either way. Each thread takes W columns
// at a time (W = 8: bf16 rows of a multiple of 8, one 16-byte load).
template <typename In, typename Out, int W>
__global__ void softmax_xent_kernel(const In* logits, const std::int32_t* labels, int rows,
                                    int cols, float grad_scale, Out* dlogits,
                                    __nv_bfloat16* d16, LossScratch scratch, float* stats) {
  __shared__ RowStats shared[32];
  double loss = 0.0, correct = 0.0;
  const int step = static_cast<int>(blockDim.x) * W;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const In* z = logits + static_cast<std::size_t>(r) * cols;
    RowStats t{0.0f, -1, 0.0};
    for (int c0 = static_cast<int>(threadIdx.x) * W; c0 < cols; c0 += step) {
      float v[W];
      load_group<W>(z + c0, v);
      for (int j = 0; j < W; ++j) {
        if (t.arg < 0 || v[j] > t.m) {
          t.s = t.arg < 0 ? 1.0 : t.s * exp(static_cast<double>(t.m - v[j])) + 1.0;
          t.m = v[j];
          t.arg = c0 + j;
        } else {
          t.s += static_cast<double>(expf(v[j] - t.m));
        }
      }
    }
    const int label = labels[r];
    const float z_label = threadIdx.x == 0 ? load(z + label) : 0.0f;
    const RowStats row = block_stats(t, shared);
    if (threadIdx.x == 0) {
      loss += log(row.s) - static_cast<double>(z_label - row.m);
      correct += row.arg == label ? 1.0 : 0.0;
    }
    if (!dlogits) continue;
    Out* d = dlogits + static_cast<std::size_t>(r) * cols;
    __nv_bfloat16* row16 = d16 ? d16 + static_cast<std::size_t>(r) * cols : nullptr;
    const float inv_sum = static_cast<float>(1.0 / row.s);
    for (int c0 = static_cast<int>(threadIdx.x) * W; c0 < cols; c0 += step) {
      float v[W];
      load_group<W>(z + c0, v);
      for (int j = 0; j < W; ++j) {
        v[j] = grad_scale * (expf(v[j] - row.m) * inv_sum);
        if (c0 + j == label) v[j] -= grad_scale;
        if (row16) row16[c0 + j] = __float2bfloat16_rn(v[j]);
      }
      store_group<W>(d + c0, v);
    }
  }
  if (threadIdx.x == 0) {
    scratch.partials[2 * blockIdx.x] = loss;
    scratch.partials[2 * blockIdx.x + 1] = correct;
  }
  add_partials_if_last(scratch.partials, scratch.arrivals, stats, true);
}

__global__ void mse_kernel(const float* pred, const float* target, int rows, int cols, float g,
                           float* dpred, __nv_bfloat16* d16, LossScratch scratch,
                           float* stats) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double loss = 0.0;
  for (int r = blockIdx.x * kWarps + warp; r < rows; r += gridDim.x * kWarps) {
    const std::size_t base = static_cast<std::size_t>(r) * cols;
    double part = 0.0;
    for (int c = lane; c < cols; c += 32) {
      const float diff = pred[base + c] - target[base + c];
      part += static_cast<double>(diff) * diff;
      if (dpred) dpred[base + c] = g * diff;
      if (dpred && d16) d16[base + c] = __float2bfloat16_rn(g * diff);
    }
    const double row_sum = warp_sum(part);
    if (lane == 0) loss += row_sum / cols;
  }
  write_block_partials(loss, 0.0, scratch.partials);
  add_partials_if_last(scratch.partials, scratch.arrivals, stats, false);
}

// The grid depends on rows alone, so the summation order does too.
unsigned loss_grid(int rows) {
  const int blocks = (rows + kWarps - 1) / kWarps;
  return static_cast<unsigned>(blocks < kMaxLossBlocks ? blocks : kMaxLossBlocks);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// A block per row, as wide as the row keeps busy (a warp for a few
// classes, 512 threads for a vocabulary); the grid depends on rows and the
// width on cols alone, so the summation order does too.
template <typename In, typename Out>
void launch_softmax_xent(const Launch& l, const In* logits, const std::int32_t* labels, int rows,
                         int cols, float grad_scale, Out* dlogits, __nv_bfloat16* d16,
                         float* stats, const LossScratch& scratch) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows < kMaxLossBlocks ? rows : kMaxLossBlocks);
  const unsigned threads = cols <= 1024 ? 32u : cols <= 8192 ? 128u : 512u;
  bool grouped = false;  // whole 16-byte groups: bf16 rows of a multiple of 8 values
  if constexpr (sizeof(In) == 2) {
    grouped = cols % 8 == 0 && aligned16(logits) && aligned16(dlogits);
    if (grouped)
      softmax_xent_kernel<In, Out, 8><<<grid, threads, 0, l.stream>>>(
          logits, labels, rows, cols, grad_scale, dlogits, d16, scratch, stats);
  }
  if (!grouped)
    softmax_xent_kernel<In, Out, 1><<<grid, threads, 0, l.stream>>>(
        logits, labels, rows, cols, grad_scale, dlogits, d16, scratch, stats);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void softmax_xent(const Launch& l, const float* logits, const std::int32_t* labels, int rows,
                  int cols, float grad_scale, float* dlogits, std::uint16_t* dlogits_bf16,
                  float* stats, const LossScratch& scratch) {
  auto* d16 = dlogits ? reinterpret_cast<__nv_bfloat16*>(dlogits_bf16) : nullptr;
  launch_softmax_xent(l, logits, labels, rows, cols, grad_scale, dlogits, d16, stats, scratch);
}

void softmax_xent_bf16(const Launch& l, const std::uint16_t* logits16,
                       const std::int32_t* labels, int rows, int cols, float grad_scale,
                       std::uint16_t* dlogits16, float* stats, const LossScratch& scratch) {
  launch_softmax_xent(l, reinterpret_cast<const __nv_bfloat16*>(logits16), labels, rows, cols,
                      grad_scale, reinterpret_cast<__nv_bfloat16*>(dlogits16), nullptr, stats,
                      scratch);
}

void mse(const Launch& l, const float* pred, const float* target, int rows, int cols,
         float grad_scale, float* dpred, std::uint16_t* dpred_bf16, float* stats,
         const LossScratch& scratch) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned grid = loss_grid(rows);
  const float g = grad_scale * 2.0f / static_cast<float>(cols);
  mse_kernel<<<grid, kThreads, 0, l.stream>>>(pred, target, rows, cols, g, dpred,
                                              reinterpret_cast<__nv_bfloat16*>(dpred_bf16),
                                              scratch, stats);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
