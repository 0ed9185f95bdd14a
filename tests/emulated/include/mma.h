// Implements: the warp matrix functions of CUDA's mma.h (nvcuda::wmma) for the
// host emulation, for the shapes src/backends/cuda/ uses: 16 × 16 × 16 with
// bf16 operands and 16 × 16 × 8 with tf32 ones (precision::tf32, loaded
// from floats), fp32 accumulators; and __float_to_tf32. On a GPU a fragment's elements are
// spread over the warp's lanes in an unspecified way; here every lane holds the
// whole tile, and each call does the whole operation for the lane that makes
// it, with the same result as the warp's (a store is made by the lane the
// scheduler resumes last, below). Each load and store is warp-collective,
// as on the GPU: it waits until all 32 lanes of the warp have reached it (a
// lane that ended or waits elsewhere is a launch error), so no lane stores a
// tile before every lane has loaded what it overwrites. The products are exact (bf16 × bf16 and tf32 ×
// tf32 fit in fp32) and summed in fp32 in increasing k. A tf32 operand's
// low 13 bits are ignored, as the tensor cores ignore them: a kernel that
// forgot to round its operands gets them truncated, as on a GPU. As CUDA requires, a pointer must be
// 256-bit aligned and the leading dimension a multiple of 16 bytes; a call that
// breaks either is a launch error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda_bf16.h"
#include "device_emulator.hpp"

namespace nvcuda::wmma {

namespace precision {
struct tf32 {};
}  // namespace precision

// Rounds to TF32 as cvt.rna.tf32.f32 does: to nearest, ties away from zero,
// at mantissa bit 10 (the low 13 bits zero).
inline float __float_to_tf32(float in) {
  std::uint32_t u;
  std::memcpy(&u, &in, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;  // not Inf, NaN
  float out;
  std::memcpy(&out, &u, sizeof out);
  return out;
}

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  float x[rows * cols];  // row-major; bf16 operands are held exactly as floats
};

namespace detail {
// The type a fragment of element type T loads from: float for tf32.
template <typename T>
struct stored {
  using type = T;
};
template <>
struct stored<precision::tf32> {
  using type = float;
};
template <typename T>
using stored_t = typename stored<T>::type;

// What the tensor cores read of a tf32 operand: its high 19 bits.
inline float tf32_bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  u &= ~0x1fffu;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

inline float value(float v) { return v; }
inline float value(__nv_bfloat16 v) { return __bfloat162float(v); }

// Returns once every lane of the warp has arrived here.
inline void warp_converge() { ::dptrain_emu::exchange_in_warp(0, ::dptrain_emu::own_value, 0, 32); }

template <typename T>
bool usable(const T* p, unsigned ldm, const char* call) {
  warp_converge();
  const bool aligned = reinterpret_cast<std::uintptr_t>(p) % 32 == 0;
  const bool stride = (static_cast<std::size_t>(ldm) * sizeof(T)) % 16 == 0;
  if (aligned && stride) return true;
  ::dptrain_emu::set_error(cudaErrorLaunchFailure,
                           std::string(call) + (aligned ? ": ldm " + std::to_string(ldm) +
                                                              " is not a multiple of 16 bytes"
                                                        : ": pointer not 256-bit aligned"));
  return false;
}

// f(r, c) = p[r, c] of a rows × cols tile stored row- or column-major.
template <typename F, typename T>
void load(F& f, const T* p, unsigned ldm, bool col_major) {
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = value(col_major ? p[c * ldm + r] : p[r * ldm + c]);
}
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const detail::stored_t<T>* p,
                      unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load names its layout");
  if (detail::usable(p, ldm, "wmma::load_matrix_sync"))
    detail::load(f, p, ldm, std::is_same_v<Layout, col_major>);
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                      layout_t layout) {
  if (detail::usable(p, ldm, "wmma::load_matrix_sync"))
    detail::load(f, p, ldm, layout == mem_col_major);
}

// On a GPU each lane stores its own elements, so another lane reads them
// only after a __syncwarp (or a block barrier). Here the tile lands when
// the last lane the scheduler resumes stores it: the warp's other lanes
// run on first, so a read that misses that synchronization sees the old
// values.
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                       layout_t layout) {
  if (!detail::usable(p, ldm, "wmma::store_matrix_sync")) return;
  if (!::dptrain_emu::runs_last_in_warp()) return;
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * N + c];
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float v) {
  for (float& e : f.x) e = v;
}

// d = a · b + c (d may be c).
template <int M, int N, int K, typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  constexpr bool kTf32 = std::is_same_v<T, precision::tf32>;
  static_assert(std::is_same_v<T, __nv_bfloat16> ? K == 16 : kTf32 && K == 8,
                "the emulation has 16 x 16 x 16 bf16 and 16 x 16 x 8 tf32 products only");
  const auto operand = [](float v) { return kTf32 ? detail::tf32_bits(v) : v; };
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float sum = c.x[i * N + j];
      for (int k = 0; k < K; ++k) sum += operand(a.x[i * K + k]) * operand(b.x[k * N + j]);
      out[i * N + j] = sum;
    }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
