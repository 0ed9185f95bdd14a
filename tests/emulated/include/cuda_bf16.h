// Implements: __nv_bfloat16 and its two conversions for the host emulation:
// fp32 -> bf16 rounds to nearest even (any NaN becomes the canonical 0x7fff),
// bf16 -> fp32 is exact, as cuda_bf16.hpp's __float2bfloat16_rn /
// __bfloat162float define them.
#pragma once

#include <bit>
#include <cstdint>

struct __nv_bfloat16 {
  std::uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fffu};
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<std::uint16_t>(rounded >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h.bits) << 16);
}
