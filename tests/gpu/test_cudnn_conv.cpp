// Implements: the cuDNN convolution plan in fp32 against the CPU backend's
// plan on the same random inputs — forward, backward_data and
// backward_weights (with the bias gradient), 2-D and 3-D, odd sizes, stride
// and padding combinations, two row counts on one plan — within 1e-5 of the
// sum of the terms' magnitudes (each side's fp32 rounding error is far
// below it for these sums of at most a few hundred terms); and that a row
// count seen before makes no new cuDNN object and repeats bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "spatial_support.hpp"

namespace {

using dptrain::ConvGeometry;
using namespace gpu_test;

constexpr double kFp32Bound = 1e-5;

std::vector<ConvGeometry> conv_cases(int max_rows) {
  return {
      conv_geometry(2, 3, 5, {7, 9}, 3, 2, 0, max_rows),
      conv_geometry(2, 2, 4, {6, 5}, 1, 1, 0, max_rows),
      conv_geometry(2, 3, 2, {5, 7}, 5, 1, 2, max_rows),
      conv_geometry(2, 8, 9, {7, 5}, 3, 2, 1, max_rows),
      conv_geometry(2, 16, 16, {9, 11}, 3, 1, 1, max_rows),
      conv_geometry(2, 1, 3, {9, 7}, 4, 3, 2, max_rows),
      conv_geometry(3, 2, 3, {4, 5, 6}, 3, 1, 1, max_rows),
      conv_geometry(3, 3, 2, {5, 4, 7}, 2, 2, 1, max_rows),
      conv_geometry(3, 4, 8, {3, 5, 5}, 3, 2, 0, max_rows),
  };
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudnnConv : public CudnnSpatial {};

TEST_F(CudnnConv, PassesMatchTheCpuBackendWithinTheFloatBound) {
  std::uint32_t seed = 10;
  for (const ConvGeometry& g : conv_cases(3)) {
    auto gpu_plan = gpu_->kernels<dptrain::SpatialKernels>().conv_plan(g);
    auto cpu_plan = cpu_->kernels<dptrain::SpatialKernels>().conv_plan(g);
    const ref::Geometry r = reference_of(g);
    for (int rows : {3, 1}) {
      const std::string what = std::to_string(g.dims) + "-D " + describe(r, rows);
      const ConvInputs in = random_conv_inputs(g, rows, seed += 4);
      const ConvOutputs got = run_conv(*gpu_, *gpu_plan, g, rows, in);
      const ConvOutputs want = run_conv(*cpu_, *cpu_plan, g, rows, in);
      const auto x = widen(in.x), w = widen(in.w), b = widen(in.b), dy = widen(in.dy);
      const ref::Values y = ref::conv_forward(r, rows, x, w, b);
      const ref::Values dx = ref::conv_backward_data(r, rows, dy, w);
      const auto dwb = ref::conv_backward_weights(r, rows, x, dy);
      EXPECT_TRUE(within_bound(got.y, want.y, y.magnitude, kFp32Bound)) << what << ": forward";
      EXPECT_TRUE(within_bound(got.dx, want.dx, dx.magnitude, kFp32Bound)) << what << ": dx";
      EXPECT_TRUE(within_bound(got.dw, want.dw, dwb[0].magnitude, kFp32Bound)) << what << ": dw";
      EXPECT_TRUE(within_bound(got.db, want.db, dwb[1].magnitude, kFp32Bound)) << what << ": db";
    }
  }
}

TEST_F(CudnnConv, ASeenRowCountCreatesNothingAndRepeatsBitwise) {
  for (const ConvGeometry& g : {conv_geometry(2, 8, 8, {9, 7}, 3, 1, 1, 4),
                                conv_geometry(3, 3, 4, {5, 6, 4}, 3, 2, 1, 4)}) {
    auto plan = gpu_->kernels<dptrain::SpatialKernels>().conv_plan(g);
    const std::size_t at_allocate = plan->objects_created();
    EXPECT_GT(at_allocate, 0u);  // max_rows' descriptors and algorithms exist already
    const ConvInputs four = random_conv_inputs(g, 4, 1), two = random_conv_inputs(g, 2, 5);
    const ConvOutputs first4 = run_conv(*gpu_, *plan, g, 4, four);
    EXPECT_EQ(plan->objects_created(), at_allocate);
    const ConvOutputs first2 = run_conv(*gpu_, *plan, g, 2, two);
    const std::size_t warm = plan->objects_created();
    EXPECT_GT(warm, at_allocate);  // 2 rows were new
    const ConvOutputs again4 = run_conv(*gpu_, *plan, g, 4, four);
    const ConvOutputs again2 = run_conv(*gpu_, *plan, g, 2, two);
    EXPECT_EQ(plan->objects_created(), warm);
    for (const auto& [a, b] : {std::pair{&first4, &again4}, std::pair{&first2, &again2}}) {
      EXPECT_TRUE(same_bits(a->y, b->y));
      EXPECT_TRUE(same_bits(a->dx, b->dx));
      EXPECT_TRUE(same_bits(a->dw, b->dw));
      EXPECT_TRUE(same_bits(a->db, b->db));
    }
  }
}

TEST_F(CudnnConv, RowsOutsideThePlanAreRefused) {
  auto plan = gpu_->kernels<dptrain::SpatialKernels>().conv_plan(
      conv_geometry(2, 1, 1, {4, 4}, 3, 1, 1, 2));
  dptrain::DeviceBuffer<float> buf(*gpu_, 3 * 16);
  EXPECT_THROW(plan->forward(buf.get(), buf.get(), buf.get(), buf.get(), 3), dptrain::Error);
  EXPECT_THROW(plan->backward_data(buf.get(), buf.get(), buf.get(), 0), dptrain::Error);
}

}  // namespace
