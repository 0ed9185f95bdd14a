// Implements: the products a warp computes alone, for the tiled kernels of
// src/backends/cuda/ (device code: included by .cu files only).
// WarpStrip<E, N> is a product c[16 × N] (N a multiple of 16) held as
// N / 16 tiles of 16 × 16 in the warp's registers across calls: zeroed,
// accumulated from operands in shared memory (c += a · b, a 16 × K and
// row-major, b K × N row- or column-major), scaled by row, stored.
//  - E = __nv_bfloat16 or Tf32 (tile_elements.hpp): wmma fragments on the
//    tensor cores (sm_80 and later; 16 × 16 × 16 in bf16, 16 × 16 × 8 in
//    tf32), fp32 accumulation; each step along K loads a's fragment once
//    for all the tiles. Which lane holds which element is not specified,
//    so the rows of the elements are learnt once per warp by loading a
//    tile of row numbers into a fragment of the same type (load_row_map),
//    which puts each row number where that row's elements go.
//  - E = float: each lane holds elements lane, lane + 32, ... of each tile
//    (row = element / 16), in registers, and sums its products with fused
//    multiply-adds in increasing k.
// Every sum runs in a fixed order: the same operands give the same bits.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>

#include "backends/cuda/tile_elements.hpp"

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

template <typename E, int N>
class WarpStrip;

template <int N>
class WarpStrip<float, N> {
  static_assert(N % 16 == 0, "tiles of 16 x 16");
  static constexpr int kTiles = N / 16;
  static constexpr int kPerLane = kTileElements / kWarpLanes;

 public:
  __device__ void zero() {
#pragma unroll
    for (auto& tile : v_)
#pragma unroll
      for (float& x : tile) x = 0.0f;
  }
  __device__ void load_row_map(const float*) {}  // rows follow from the lane
  // c += a[16 × K] · b[K × N], a row-major, b row- or column-major. Each
  // step of k takes the lane's kPerLane values of a's column k (its rows
  // lane / 16 + 2e) and kTiles of b's row k (columns t · 16 + lane % 16)
  // and makes their kPerLane × kTiles products: every element's sum runs
  // over k in increasing order, all in registers.
  template <bool BCol, int K>
  __device__ void mma(const float* a, int lda, const float* b, int ldb) {
    const int lane = lane_index();
    const float* a_rows = a + (lane / 16) * lda;
#pragma unroll 2
    for (int k = 0; k < K; ++k) {
      float bk[kTiles];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) bk[t] = element_at<BCol>(b, ldb, k, t * 16 + lane % 16);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const float ak = a_rows[2 * e * lda + k];
#pragma unroll
        for (int t = 0; t < kTiles; ++t) v_[t][e] = fmaf(ak, bk[t], v_[t][e]);
      }
    }
  }
  // Row i of the product times factor[i].
  __device__ void scale_rows(const float* factor) {
#pragma unroll
    for (auto& tile : v_)
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) tile[e] *= factor[row_of(e)];
  }
  __device__ void store(float* c, int ldc) const {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) c[row_of(e) * ldc + t * 16 + col_of(e)] = v_[t][e];
  }

 private:
  // Element e of a tile: lane + 32 e in row-major order.
  __device__ static int row_of(int e) { return (lane_index() + kWarpLanes * e) / 16; }
  __device__ static int col_of(int e) { return (lane_index() + kWarpLanes * e) % 16; }
  float v_[kTiles][kPerLane];
};

// How a tensor-core element type E meets wmma: the type its fragments are
// declared with, the type they load from memory, and the depth of one
// mma_sync (16 × 16 × kDepth).
template <typename E>
struct TensorCoreOperand;
template <>
struct TensorCoreOperand<__nv_bfloat16> {
  using Fragment = __nv_bfloat16;
  using Stored = __nv_bfloat16;
  static constexpr int kDepth = 16;
};
template <>
struct TensorCoreOperand<Tf32> {
  using Fragment = nvcuda::wmma::precision::tf32;
  using Stored = float;  // values rounded to TF32 already (tile_elements.hpp)
  static constexpr int kDepth = 8;
};

// The product on the tensor cores, for E = __nv_bfloat16 or Tf32.
template <typename E, int N>
class TensorCoreStrip {
  static_assert(N % 16 == 0, "tiles of 16 x 16");
  static constexpr int kTiles = N / 16;
  using Op = TensorCoreOperand<E>;
  static constexpr int kDepth = Op::kDepth;
  using Accumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, kDepth, float>;

 public:
  __device__ void zero() {
    for (Accumulator& f : f_) nvcuda::wmma::fill_fragment(f, 0.0f);
  }
  // row_numbers: a 16 × 16 float tile in shared memory whose row r holds r
  // (256-bit aligned); the warp's lanes all call this.
  __device__ void load_row_map(const float* row_numbers) {
    nvcuda::wmma::load_matrix_sync(rows_, row_numbers, 16, nvcuda::wmma::mem_row_major);
  }
  template <bool BCol, int K>
  __device__ void mma(const E* a, int lda, const E* b, int ldb) {
    namespace wmma = nvcuda::wmma;
    static_assert(K % kDepth == 0, "whole steps of the product's depth");
    using LayoutB = std::conditional_t<BCol, wmma::col_major, wmma::row_major>;
    using F = typename Op::Fragment;
    const auto* as = reinterpret_cast<const typename Op::Stored*>(a);
    const auto* bs = reinterpret_cast<const typename Op::Stored*>(b);
    for (int k0 = 0; k0 < K; k0 += kDepth) {
      wmma::fragment<wmma::matrix_a, 16, 16, kDepth, F, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, as + k0, lda);
      for (int t = 0; t < kTiles; ++t) {
        wmma::fragment<wmma::matrix_b, 16, 16, kDepth, F, LayoutB> fb;
        wmma::load_matrix_sync(fb, BCol ? bs + t * 16 * ldb + k0 : bs + k0 * ldb + t * 16, ldb);
        wmma::mma_sync(f_[t], fa, fb, f_[t]);
      }
    }
  }
  // Needs load_row_map first.
  __device__ void scale_rows(const float* factor) {
    for (Accumulator& f : f_)
      for (int e = 0; e < f.num_elements; ++e) f.x[e] *= factor[static_cast<int>(rows_.x[e])];
  }
  __device__ void store(float* c, int ldc) const {
    for (int t = 0; t < kTiles; ++t)
      nvcuda::wmma::store_matrix_sync(c + t * 16, f_[t], ldc, nvcuda::wmma::mem_row_major);
  }

 private:
  Accumulator f_[kTiles];
  Accumulator rows_;
};

template <int N>
class WarpStrip<__nv_bfloat16, N> : public TensorCoreStrip<__nv_bfloat16, N> {};
template <int N>
class WarpStrip<Tf32, N> : public TensorCoreStrip<Tf32, N> {};

}  // namespace dptrain::cuda
