// Implements: the CUDA bf16 conversions (convert_kernels.hpp) against the
// CPU backend's: bitwise equal bf16 values and floats back, on lengths of
// one, odd, past a block and past the grid, and at unaligned addresses.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "gpu_env.hpp"

namespace {

using namespace dptrain;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

struct Converted {
  std::vector<std::uint16_t> bf16;
  std::vector<float> back;
};

// Converts x[offset, ...) there and back on be, at that offset into the
// buffers (not 16-byte aligned unless offset is a multiple of 8).
Converted convert(Backend& be, const std::vector<float>& x, std::size_t offset) {
  const std::size_t n = x.size() - offset;
  auto dx = upload(be, x);
  DeviceBuffer<std::uint16_t> h(be, x.size());
  DeviceBuffer<float> back(be, x.size());
  ConvertKernels& k = be.kernels<ConvertKernels>();
  k.to_bf16(dx.get() + offset, h.get() + offset, n);
  k.from_bf16(h.get() + offset, back.get() + offset, n);
  return {download(be, h.get() + offset, n), download(be, back.get() + offset, n)};
}

class CudaConvert : public gpu_test::CpuAndGpu {};

TEST_F(CudaConvert, Bf16BothWaysIsBitwiseTheCpus) {
  std::uint32_t seed = 70;
  for (const std::size_t n : {1u, 7u, 1000u, 262147u})
    for (const std::size_t offset : {0u, 3u}) {
      std::vector<float> x = random_vector(n + offset, ++seed, -3e4f, 3e4f);
      if (x.size() > 4) {  // halfway cases: ties go to even
        const std::uint32_t ties[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00018000u};
        for (int i = 0; i < 4; ++i) std::memcpy(&x[offset + i], &ties[i], sizeof(float));
      }
      const Converted g = convert(*gpu_, x, offset), c = convert(*cpu_, x, offset);
      EXPECT_EQ(g.bf16, c.bf16) << n << " values at offset " << offset;
      EXPECT_EQ(0, std::memcmp(g.back.data(), c.back.data(), g.back.size() * sizeof(float)))
          << n << " values at offset " << offset;
    }
}

}  // namespace
