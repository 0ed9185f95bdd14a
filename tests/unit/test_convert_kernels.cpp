// Implements: the CPU bf16 conversions (convert_kernels.hpp) on the values
// where rounding decides: exact bf16 values, halfway cases both ways (ties
// to even), just above and below halfway, the largest finite float
// (rounds to infinity), infinities, NaN (the canonical 0x7fff), subnormals
// and signs; the array kernels equal the scalar rule on every element, and
// bf16 -> float -> bf16 is the identity on every non-NaN bf16.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"

namespace {

using namespace dptrain;

float from_bits(std::uint32_t u) {
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

TEST(Bf16Conversion, RoundsToNearestWithTiesToEven) {
  struct Case {
    std::uint32_t in;
    std::uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80u},  // 1.0, exact
      {0x3f808000u, 0x3f80u},  // halfway, even below: down
      {0x3f818000u, 0x3f82u},  // halfway, odd below: up
      {0x3f808001u, 0x3f81u},  // just above halfway: up
      {0x3f807fffu, 0x3f80u},  // just below halfway: down
      {0xbf818000u, 0xbf82u},  // the same with a sign
      {0x7f7fffffu, 0x7f80u},  // the largest float: infinity
      {0x7f800000u, 0x7f80u},  // infinity
      {0xff800000u, 0xff80u},  // -infinity
      {0x7fc00001u, 0x7fffu},  // a NaN: the canonical one
      {0xffa00000u, 0x7fffu},  // a signalling NaN with a sign: likewise
      {0x00008000u, 0x0000u},  // subnormal halfway, even: down
      {0x00018000u, 0x0002u},  // subnormal halfway, odd: up
      {0x80000000u, 0x8000u},  // -0
  };
  for (const Case& c : cases) EXPECT_EQ(bf16_bits(from_bits(c.in)), c.out) << std::hex << c.in;
}

TEST(Bf16Conversion, BackToFloatIsExactForEveryBf16) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const std::uint16_t h = static_cast<std::uint16_t>(b);
    const float x = bf16_value(h);
    if (x != x) continue;  // NaN payloads become the canonical NaN
    ASSERT_EQ(bf16_bits(x), h) << std::hex << b;
  }
}

TEST(Bf16Conversion, CpuKernelsApplyTheRuleToEveryElement) {
  auto be = make_backend("cpu", BackendOptions{});
  ConvertKernels& k = be->kernels<ConvertKernels>();
  // Every 16-bit pattern of low half for a spread of high halves: all
  // rounding cases, over lengths the vector loop and its tail both see.
  std::vector<float> x;
  for (std::uint32_t hi : {0x3f80u, 0xc2f0u, 0x0001u, 0x7f7fu, 0x7fc0u})
    for (std::uint32_t lo = 0; lo <= 0xffffu; lo += 7) x.push_back(from_bits((hi << 16) | lo));
  x.push_back(std::numeric_limits<float>::infinity());
  std::vector<std::uint16_t> h(x.size());
  k.to_bf16(x.data(), h.data(), x.size());
  std::vector<float> back(x.size());
  k.from_bf16(h.data(), back.data(), h.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], bf16_bits(x[i])) << i;
    const float want = bf16_value(h[i]);
    ASSERT_EQ(std::memcmp(&back[i], &want, sizeof want), 0) << i;
  }
}

}  // namespace
