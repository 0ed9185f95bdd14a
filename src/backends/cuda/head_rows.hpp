// Implements: one attention head's rows between a strided tensor in device
// memory and a tile in shared memory, for the fused attention kernels
// (device code: included by .cu files only). A head's rows are read from
// an input projection's output [N, T, 3, H, hd] (q, k or v) or from a
// [N, T, H, hd] tensor (= [N, T, D]) where they lie, through strides: no
// head shuffles.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/tile_elements.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain::cuda {

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
// The rows of block bh's head in part `part` of qkv (or, part < 0, in a
// [N, T, H, hd] tensor) at base.
template <typename T>
__device__ inline HeadRows<T> head_rows(const T* base, const HeadShape& s, std::size_t bh,
                                        int part) {
  return HeadRows<T>{base + head_offset(s, bh, part), head_ld(s, part), s.tokens, s.head_dim};
}
// The same head in a tensor of that layout (fp32, or a bf16 copy) where
// there is one (base null: none, and null is returned).
template <typename T>
__device__ inline T* head_at(T* base, const HeadShape& s, std::size_t bh, int part) {
  return base ? base + head_offset(s, bh, part) : nullptr;
}

__device__ inline bool aligned_to(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// dst[ROWS × HDP], rows LD apart = rows t0 .. t0 + ROWS of the head, zero
// past its end and past its width, rounded to E (the LD - HDP values after
// each row are never read). The rows are read in groups of 16 bytes (kVec
// consecutive values of a row), one load a group where they allow it (the
// base 16-byte aligned, ld and width multiples of kVec), else value by
// value; and stored in the tile one group a store where its rows allow.
template <typename E, int ROWS, int HDP, int LD, typename T>
__device__ void stage_rows(E* dst, const HeadRows<T>& src, int t0) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  static_assert(HDP % kVec == 0, "a row is whole groups");
  struct alignas(16) Group {
    T v[kVec];
  };
  // A group's values in the tile: one store where every row's groups are
  // aligned to its size (the tile is 16-byte aligned).
  struct alignas(sizeof(E) * kVec) Out {
    E v[kVec];
  };
  constexpr bool kOutPacked = LD * sizeof(E) % sizeof(Out) == 0;
  const bool packed = src.width % kVec == 0 && src.ld % kVec == 0 && aligned_to(src.base, 16);
  for (int i = threadIdx.x; i < ROWS * HDP / kVec; i += blockDim.x) {
    const int r = i / (HDP / kVec), c = i % (HDP / kVec) * kVec, t = t0 + r;
    Group g;
    if (t >= src.tokens || c >= src.width) {
      for (T& x : g.v) x = to_elem<T>(0.0f);
    } else if (packed) {
      g = *reinterpret_cast<const Group*>(src.base + std::size_t(t) * src.ld + c);
    } else {
      const T* p = src.base + std::size_t(t) * src.ld + c;
      for (int e = 0; e < kVec; ++e) g.v[e] = c + e < src.width ? p[e] : to_elem<T>(0.0f);
    }
    Out out;
    for (int e = 0; e < kVec; ++e) out.v[e] = to_elem<E>(to_float(g.v[e]));
    if constexpr (kOutPacked) *reinterpret_cast<Out*>(dst + r * LD + c) = out;
    else
      for (int e = 0; e < kVec; ++e) dst[r * LD + c + e] = out.v[e];
  }
}
// dst[ROWS] = src[t0 .. t0 + ROWS], zero past `tokens`.
template <int ROWS>
__device__ void stage_vector(float* dst, const float* src, int t0, int tokens) {
  for (int r = threadIdx.x; r < ROWS; r += blockDim.x) dst[r] = t0 + r < tokens ? src[t0 + r] : 0.0f;
}
// The head's rows t0 .. t0 + ROWS (those before its end) = src[ROWS × HDP]'s
// first `width` columns, where base is not null; and, where base16 is not
// null, their bf16 rounding at the same places of base16's tensor. Four
// values a store (16 bytes, and 8 of the copy) where the rows allow it,
// else one.
template <int ROWS, int HDP>
__device__ void write_rows(float* base, std::size_t ld, int tokens, int width, const float* src,
                           int t0, __nv_bfloat16* base16 = nullptr) {
  struct alignas(16) Floats4 {
    float v[4];
  };
  struct alignas(8) Bf16x4 {
    __nv_bfloat16 v[4];
  };
  const bool packed = width % 4 == 0 && ld % 4 == 0 && aligned_to(base, 16) &&
                      aligned_to(base16, 8);
  if (!packed) {
    for (int i = threadIdx.x; i < ROWS * HDP; i += blockDim.x) {
      const int r = i / HDP, c = i % HDP, t = t0 + r;
      if (t >= tokens || c >= width) continue;
      if (base) base[std::size_t(t) * ld + c] = src[i];
      if (base16) base16[std::size_t(t) * ld + c] = __float2bfloat16_rn(src[i]);
    }
    return;
  }
  for (int i = threadIdx.x; i < ROWS * HDP / 4; i += blockDim.x) {
    const int r = i / (HDP / 4), c = i % (HDP / 4) * 4, t = t0 + r;
    if (t >= tokens || c >= width) continue;
    const Floats4 x = *reinterpret_cast<const Floats4*>(src + r * HDP + c);
    const std::size_t at = std::size_t(t) * ld + c;
    if (base) *reinterpret_cast<Floats4*>(base + at) = x;
    if (!base16) continue;
    Bf16x4 y;
    for (int e = 0; e < 4; ++e) y.v[e] = __float2bfloat16_rn(x.v[e]);
    *reinterpret_cast<Bf16x4*>(base16 + at) = y;
  }
}

}  // namespace dptrain::cuda
