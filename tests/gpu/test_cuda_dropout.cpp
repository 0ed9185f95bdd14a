// Implements: the CUDA dropout kernels against the CPU backend: for every
// shape (one element, rows wider and narrower than a block, more elements
// than the grid has threads), drop rate, step key and first global row, the
// mask and the output are bitwise the CPU's, and so is the backward.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"
#include "gpu_env.hpp"

namespace {

using namespace dptrain;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

struct Shape2 {
  int rows, width;
};
constexpr Shape2 kShapes[] = {{1, 1}, {3, 40}, {200, 500}, {7, 100003}, {1000, 3}};
constexpr double kRates[] = {0.0, 0.3, 0.5, 0.9};

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

struct DropoutRun {
  std::vector<float> y, dx;
  std::vector<std::uint8_t> keep;
};

DropoutRun run(Backend& be, const std::vector<float>& x, const std::vector<float>& dy,
               const Shape2& s, std::uint64_t key, std::uint64_t first_row, double p) {
  const std::size_t n = x.size();
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  auto dx_in = upload(be, x), ddy = upload(be, dy);
  DeviceBuffer<float> y(be, n), dx(be, n);
  DeviceBuffer<std::uint8_t> keep(be, n);
  DeviceBuffer<std::uint64_t> draw(be, 2);
  be.kernels<DropoutKernels>().set_draw(draw.get(), key, first_row);
  be.kernels<DropoutKernels>().forward(dx_in.get(), y.get(), keep.get(), s.rows, s.width,
                                       draw.get(), dropout_draw::threshold(p), scale);
  be.kernels<DropoutKernels>().backward(ddy.get(), keep.get(), dx.get(), n, scale);
  return {download(be, y), download(be, dx), download(be, keep)};
}

class CudaDropout : public gpu_test::CpuAndGpu {};

TEST_F(CudaDropout, MaskOutputAndBackwardAreBitwiseTheCpus) {
  std::uint32_t seed = 40;
  for (const Shape2& s : kShapes)
    for (const double p : kRates)
      for (const std::uint64_t first_row : {std::uint64_t{0}, std::uint64_t{12345}}) {
        const std::size_t n = static_cast<std::size_t>(s.rows) * s.width;
        const auto x = random_vector(n, ++seed), dy = random_vector(n, ++seed);
        const std::uint64_t key = dropout_draw::step_key(seed, 2, 7);
        const DropoutRun g = run(*gpu_, x, dy, s, key, first_row, p);
        const DropoutRun r = run(*cpu_, x, dy, s, key, first_row, p);
        const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.width) + " p " +
                                 std::to_string(p) + " first row " + std::to_string(first_row);
        EXPECT_EQ(g.keep, r.keep) << what;
        EXPECT_EQ(bits(g.y), bits(r.y)) << what;
        EXPECT_EQ(bits(g.dx), bits(r.dx)) << what;
      }
}

// A shard's rows are global rows first_row + r: the second half of a batch
// run on its own gives the second half of the whole batch's mask.
TEST_F(CudaDropout, ShardsDrawTheirGlobalRows) {
  const Shape2 whole{64, 300}, half{32, 300};
  const std::size_t n = static_cast<std::size_t>(whole.rows) * whole.width;
  const auto x = random_vector(n, 5), dy = random_vector(n, 6);
  const std::uint64_t key = dropout_draw::step_key(1, 0, 0);
  const DropoutRun all = run(*gpu_, x, dy, whole, key, 100, 0.4);
  const std::vector<float> x2(x.begin() + n / 2, x.end()), dy2(dy.begin() + n / 2, dy.end());
  const DropoutRun second = run(*gpu_, x2, dy2, half, key, 100 + half.rows, 0.4);
  EXPECT_EQ(second.keep, std::vector<std::uint8_t>(all.keep.begin() + n / 2, all.keep.end()));
}

}  // namespace
