// Implements: WarpStrip (src/backends/cuda/warp_strip.hpp) on the device,
// against exact sums: its products, its scaling by row and a second
// product into the same accumulator, in bf16 and TF32 (wmma on the tensor
// cores) and fp32, with the right operand row- and column-major. The
// operands are multiples of 1/8 and 1/4 (exact in bf16 and TF32) whose
// products and sums of 32 are exact in fp32 in any order, so every result
// must be the exact one bit for bit.
// Which lane holds which element of a wmma fragment is not specified;
// scale_rows finds each element's row through the row map, which only a
// GPU can check: on the host emulation every lane holds the whole tile.
#include <gtest/gtest.h>

#include <cstddef>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gpu_env.hpp"
#include "warp_strip_probe.hpp"

namespace {

using gpu_test::kStripDepth;
using gpu_test::kStripRows;
using gpu_test::kStripWidth;

// Values that no simple pattern of rows or columns repeats: a multiple of
// 1/scale in [-8/scale, 8/scale].
float operand(std::size_t i, std::size_t j, unsigned salt, float scale) {
  unsigned h = static_cast<unsigned>(i * 7919u + j * 104729u) ^ salt;
  h = (h ^ (h >> 13)) * 0x5bd1e995u;
  return static_cast<float>(static_cast<int>((h ^ (h >> 15)) % 17u) - 8) / scale;
}

// "" where got equals want element for element, else the first difference.
std::string first_difference(const std::vector<float>& got, const std::vector<double>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (static_cast<double>(got[i]) != want[i]) {
      std::ostringstream o;
      o << "row " << i / kStripWidth << ", column " << i % kStripWidth << ": " << got[i] << ", want "
        << want[i];
      return o.str();
    }
  return "";
}

TEST(WarpStrip, ProductsRowScalingAndAccumulationAreExact) {
  std::vector<float> a(kStripRows * kStripDepth), b(kStripDepth * kStripWidth), factor(kStripRows);
  for (int i = 0; i < kStripRows; ++i)
    for (int k = 0; k < kStripDepth; ++k) a[i * kStripDepth + k] = operand(i, k, 0x1234u, 8.0f);
  for (int k = 0; k < kStripDepth; ++k)
    for (int j = 0; j < kStripWidth; ++j) b[k * kStripWidth + j] = operand(k, j, 0xbeefu, 4.0f);
  for (int r = 0; r < kStripRows; ++r) factor[r] = 1.0f + static_cast<float>((r * 5) % 16) / 16.0f;
  std::vector<double> plain(kStripRows * kStripWidth), scaled(plain.size()), twice(plain.size());
  for (int i = 0; i < kStripRows; ++i)
    for (int j = 0; j < kStripWidth; ++j) {
      double sum = 0;
      for (int k = 0; k < kStripDepth; ++k) sum += double(a[i * kStripDepth + k]) * b[k * kStripWidth + j];
      const std::size_t at = i * kStripWidth + j;
      plain[at] = sum;
      scaled[at] = sum * factor[i];
      twice[at] = sum * factor[i] + sum;
    }
  using gpu_test::StripElement;
  const std::pair<StripElement, const char*> elements[] = {
      {StripElement::kBf16, "bf16 (wmma)"}, {StripElement::kTf32, "tf32 (wmma)"},
      {StripElement::kFp32, "fp32"}};
  for (const auto& [element, name] : elements)
    for (const bool col : {false, true}) {
      const auto got =
          gpu_test::warp_strip_products(gpu_test::env().device, element, col, a, b, factor);
      const std::string how = std::string(name) + ", b " + (col ? "column" : "row") + "-major: ";
      EXPECT_EQ(first_difference(got.plain, plain), "") << how << "the product";
      EXPECT_EQ(first_difference(got.scaled, scaled), "") << how << "the product scaled by row";
      EXPECT_EQ(first_difference(got.twice, twice), "") << how << "scaled, then the product added";
    }
}

}  // namespace
