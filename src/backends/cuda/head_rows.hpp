// Implements: one attention head's rows between a strided tensor in device
// memory and a tile in shared memory, for the fused attention kernels
// (device code: included by .cu files only). A head's rows are read from
// an input projection's output [N, T, 3, H, hd] (q, k or v) or from a
// [N, T, H, hd] tensor (= [N, T, D]) where they lie, through strides: no
// head shuffles.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <type_traits>

#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain::cuda {

template <typename E>
__device__ inline E to_elem(float x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return x;
}
template <typename E>
__device__ inline float to_float(E x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __bfloat162float(x);
  else return x;
}

// One head's rows in a strided tensor of T (float, or __nv_bfloat16: a bf16
// qkv): row t of the head starts at base + t · ld, and its first `width`
// values are the head's.
template <typename T = float>
struct HeadRows {
  const T* base;
  std::size_t ld;
  int tokens, width;
};

// The head of block bh (= n · H + h) in part `part` of qkv [N, T, 3, H, hd],
// or in a [N, T, H, hd] tensor (part < 0).
__device__ inline std::size_t head_offset(const HeadShape& s, std::size_t bh, int part) {
  const std::size_t n = bh / s.heads, h = bh % s.heads, d = std::size_t(s.heads) * s.head_dim;
  const std::size_t row = part < 0 ? d : 3 * d;
  return n * s.tokens * row + (part < 0 ? 0 : part * d) + h * s.head_dim;
}
__device__ inline std::size_t head_ld(const HeadShape& s, int part) {
  return (part < 0 ? 1 : 3) * std::size_t(s.heads) * s.head_dim;
}
// The same head in a bf16 copy laid out as its fp32 tensor (null: no copy).
__device__ inline __nv_bfloat16* head_copy(__nv_bfloat16* copy, const HeadShape& s,
                                           std::size_t bh, int part) {
  return copy ? copy + head_offset(s, bh, part) : nullptr;
}

// dst[ROWS × HDP], rows LD apart = rows t0 .. t0 + ROWS of the head, zero
// past its end and past its width, rounded to E (the LD - HDP values after
// each row are never read).
template <typename E, int ROWS, int HDP, int LD, typename T>
__device__ void stage_rows(E* dst, const HeadRows<T>& src, int t0) {
  for (int i = threadIdx.x; i < ROWS * HDP; i += blockDim.x) {
    const int r = i / HDP, c = i % HDP, t = t0 + r;
    const float x =
        t < src.tokens && c < src.width ? to_float(src.base[std::size_t(t) * src.ld + c]) : 0.0f;
    dst[r * LD + c] = to_elem<E>(x);
  }
}
// dst[ROWS] = src[t0 .. t0 + ROWS], zero past `tokens`.
template <int ROWS>
__device__ void stage_vector(float* dst, const float* src, int t0, int tokens) {
  for (int r = threadIdx.x; r < ROWS; r += blockDim.x) dst[r] = t0 + r < tokens ? src[t0 + r] : 0.0f;
}
// The head's rows t0 .. t0 + ROWS (those before its end) = src[ROWS × HDP]'s
// first `width` columns; and, where base16 is not null, their bf16
// rounding at the same places of base16's tensor.
template <int ROWS, int HDP>
__device__ void write_rows(float* base, std::size_t ld, int tokens, int width, const float* src,
                           int t0, __nv_bfloat16* base16 = nullptr) {
  for (int i = threadIdx.x; i < ROWS * HDP; i += blockDim.x) {
    const int r = i / HDP, c = i % HDP, t = t0 + r;
    if (t >= tokens || c >= width) continue;
    base[std::size_t(t) * ld + c] = src[i];
    if (base16) base16[std::size_t(t) * ld + c] = __float2bfloat16_rn(src[i]);
  }
}

}  // namespace dptrain::cuda
