// Implements: the number-format conversion kernel family of a Backend
// (docs/design.md section 1): float to bf16 and back, for what moves or is
// kept in bf16 (--shard-params' gathers under --precision bf16). bf16 is
// the top half of an IEEE float, held as its 16 bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// float -> bf16, rounding to nearest with ties to even, as CUDA's
// __float2bfloat16_rn: a NaN becomes its canonical NaN 0x7fff, infinities
// stay, a finite value past the largest bf16 rounds to infinity.
inline std::uint16_t bf16_bits(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// bf16 -> float: exact.
inline float bf16_value(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

class ConvertKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "convert";
  // y[i] = bf16_bits(x[i]) for i < n (device memory; y 16-bit values).
  virtual void to_bf16(const float* x, std::uint16_t* y, std::size_t n) = 0;
  // y[i] = bf16_value(x[i]) for i < n.
  virtual void from_bf16(const std::uint16_t* x, float* y, std::size_t n) = 0;
};

}  // namespace dptrain
