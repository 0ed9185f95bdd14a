// Implements: products of 16 × 16 tiles held by the warps of a block, for
// the tiled kernels of src/backends/cuda/ (device code: included by .cu
// files only). WarpTiles<E, M, N, Warps> is the part of a product c[M × N]
// that one warp owns — tiles w, w + Warps, ... where Warps warps share it
// (w the warp's index modulo Warps; Warps = 1: all of a product the warp
// computes alone) — kept in registers across calls: zeroed, accumulated from operands in
// shared memory (acc += a · b), scaled by row, stored.
//  - E = __nv_bfloat16: wmma fragments on the tensor cores (sm_80 and
//    later), fp32 accumulation. Which lane holds which element is not
//    specified, so the rows of the elements are learnt once per warp by
//    loading a tile of row numbers into a fragment of the same type
//    (load_row_map), which puts each row number where that row's elements
//    go.
//  - E = float: each lane holds elements lane, lane + 32, ... of each tile
//    (row = element / 16) and sums its products with fused multiply-adds
//    in increasing k.
// Every sum runs in a fixed order: the same operands give the same bits.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>

namespace dptrain::cuda {

constexpr int kWarpLanes = 32;
constexpr int kTileElements = 256;  // a 16 × 16 tile

__device__ inline int warp_index() { return static_cast<int>(threadIdx.x / kWarpLanes); }
__device__ inline int lane_index() { return static_cast<int>(threadIdx.x % kWarpLanes); }

template <bool Col, typename T>
__device__ inline float element_at(const T* m, int ld, int r, int c) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(Col ? m[c * ld + r] : m[r * ld + c]);
  else
    return Col ? m[c * ld + r] : m[r * ld + c];
}

// The tiles of a product c[M × N] one warp owns, and where each starts.
template <int M, int N, int Warps>
struct OwnedTiles {
  static constexpr int kTiles = (M / 16) * (N / 16);
  static constexpr int kCount = (kTiles + Warps - 1) / Warps;
  static_assert(M % 16 == 0 && N % 16 == 0, "tiles of 16 x 16");
  // The o-th tile of this warp, or -1 past the last.
  __device__ static int tile(int o) {
    const int t = warp_index() % Warps + o * Warps;
    return t < kTiles ? t : -1;
  }
  __device__ static int row0(int t) { return t / (N / 16) * 16; }
  __device__ static int col0(int t) { return t % (N / 16) * 16; }
};

template <typename E, int M, int N, int Warps>
class WarpTiles;

template <int M, int N, int Warps>
class WarpTiles<float, M, N, Warps> {
  using Own = OwnedTiles<M, N, Warps>;
  static constexpr int kPerLane = kTileElements / kWarpLanes;

 public:
  __device__ void zero() {
    for (auto& tile : v_)
      for (float& x : tile) x = 0.0f;
  }
  __device__ void load_row_map(const float*) {}  // rows follow from the lane
  // acc += a[M × K] · b[K × N], each row- or column-major in shared memory.
  template <bool ACol, bool BCol, int K>
  __device__ void mma(const float* a, int lda, const float* b, int ldb) {
    for (int o = 0; o < Own::kCount; ++o) {
      const int t = Own::tile(o);
      if (t < 0) break;
      for (int e = 0; e < kPerLane; ++e) {
        const int i = Own::row0(t) + row_of(e), j = Own::col0(t) + col_of(e);
        float sum = v_[o][e];
        for (int k = 0; k < K; ++k) sum = fmaf(element_at<ACol>(a, lda, i, k), element_at<BCol>(b, ldb, k, j), sum);
        v_[o][e] = sum;
      }
    }
  }
  // Row i of the product times factor[i].
  __device__ void scale_rows(const float* factor) {
    for (int o = 0; o < Own::kCount; ++o) {
      const int t = Own::tile(o);
      if (t < 0) break;
      for (int e = 0; e < kPerLane; ++e) v_[o][e] *= factor[Own::row0(t) + row_of(e)];
    }
  }
  __device__ void store(float* c, int ldc) const {
    for (int o = 0; o < Own::kCount; ++o) {
      const int t = Own::tile(o);
      if (t < 0) break;
      for (int e = 0; e < kPerLane; ++e)
        c[(Own::row0(t) + row_of(e)) * ldc + Own::col0(t) + col_of(e)] = v_[o][e];
    }
  }

 private:
  __device__ static int row_of(int e) { return (lane_index() + kWarpLanes * e) / 16; }
  __device__ static int col_of(int e) { return (lane_index() + kWarpLanes * e) % 16; }
  float v_[Own::kCount][kPerLane];
};

template <int M, int N, int Warps>
class WarpTiles<__nv_bfloat16, M, N, Warps> {
  using Own = OwnedTiles<M, N, Warps>;
  using Accumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

 public:
  __device__ void zero() {
    for (Accumulator& f : f_) nvcuda::wmma::fill_fragment(f, 0.0f);
  }
  // row_numbers: a 16 × 16 float tile in shared memory whose row r holds r
  // (256-bit aligned); the warp's lanes all call this.
  __device__ void load_row_map(const float* row_numbers) {
    nvcuda::wmma::load_matrix_sync(rows_, row_numbers, 16, nvcuda::wmma::mem_row_major);
  }
  template <bool ACol, bool BCol, int K>
  __device__ void mma(const __nv_bfloat16* a, int lda, const __nv_bfloat16* b, int ldb) {
    namespace wmma = nvcuda::wmma;
    using LayoutA = std::conditional_t<ACol, wmma::col_major, wmma::row_major>;
    using LayoutB = std::conditional_t<BCol, wmma::col_major, wmma::row_major>;
    for (int o = 0; o < Own::kCount; ++o) {
      const int t = Own::tile(o);
      if (t < 0) break;
      const int i0 = Own::row0(t), j0 = Own::col0(t);
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> fb;
        wmma::load_matrix_sync(fa, ACol ? a + k0 * lda + i0 : a + i0 * lda + k0, lda);
        wmma::load_matrix_sync(fb, BCol ? b + j0 * ldb + k0 : b + k0 * ldb + j0, ldb);
        wmma::mma_sync(f_[o], fa, fb, f_[o]);
      }
    }
  }
  // Needs load_row_map first.
  __device__ void scale_rows(const float* factor) {
    for (int o = 0; o < Own::kCount; ++o) {
      const int t = Own::tile(o);
      if (t < 0) break;
      for (int e = 0; e < f_[o].num_elements; ++e)
        f_[o].x[e] *= factor[Own::row0(t) + static_cast<int>(rows_.x[e])];
    }
  }
  __device__ void store(float* c, int ldc) const {
    for (int o = 0; o < Own::kCount; ++o) {
      const int t = Own::tile(o);
      if (t < 0) break;
      nvcuda::wmma::store_matrix_sync(c + Own::row0(t) * ldc + Own::col0(t), f_[o], ldc,
                                      nvcuda::wmma::mem_row_major);
    }
  }

 private:
  Accumulator f_[Own::kCount];
  Accumulator rows_;
};

}  // namespace dptrain::cuda
