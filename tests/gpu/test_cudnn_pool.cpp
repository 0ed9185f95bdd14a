// Implements: the cuDNN pooling plan against the CPU backend's plan on the
// same random inputs — max and average, 2-D and 3-D, odd sizes, windows
// that overlap (stride < window), that drop the input's tail (floor) and
// that cover the whole input (gap); forward then backward over two row
// counts on one plan. Max pooling's forward is exact; sums (its backward
// where windows overlap, every average) are held to 1e-5 of their terms'
// magnitudes. A row count seen before makes no new object and repeats bit
// for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "spatial_support.hpp"

namespace {

using dptrain::PoolGeometry;
using dptrain::PoolKind;
using namespace gpu_test;

constexpr double kFp32Bound = 1e-5;

std::vector<PoolGeometry> pool_cases(PoolKind kind, int max_rows) {
  return {
      pool_geometry(kind, 2, 3, {7, 9}, 2, 2, max_rows),
      pool_geometry(kind, 2, 2, {8, 7}, 3, 2, max_rows),
      pool_geometry(kind, 2, 9, {5, 5}, 5, 5, max_rows),
      pool_geometry(kind, 2, 16, {6, 6}, 2, 1, max_rows),
      pool_geometry(kind, 3, 2, {5, 4, 6}, 2, 2, max_rows),
      pool_geometry(kind, 3, 3, {4, 5, 5}, 3, 1, max_rows),
      pool_geometry(kind, 3, 4, {3, 3, 3}, 3, 3, max_rows),
  };
}

std::string describe_pool(const PoolGeometry& g, int rows) {
  return std::string(g.kind == PoolKind::kMax ? "max" : "avg") + " " + std::to_string(g.dims) +
         "-D " + describe(reference_of(g), rows);
}

class CudnnPool : public CudnnSpatial {};

TEST_F(CudnnPool, MaxAndAveragePoolingMatchTheCpuBackend) {
  std::uint32_t seed = 40;
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    for (const PoolGeometry& g : pool_cases(kind, 3)) {
      auto gpu_plan = gpu_->kernels<dptrain::SpatialKernels>().pool_plan(g);
      auto cpu_plan = cpu_->kernels<dptrain::SpatialKernels>().pool_plan(g);
      const ref::Geometry r = reference_of(g);
      for (int rows : {3, 2}) {
        const std::string what = describe_pool(g, rows);
        // Distinct values (ties are the implementation's choice).
        const auto x = random_vector(elements(rows, g.channels, g.input, g.dims), seed += 2);
        const auto dy = random_vector(elements(rows, g.channels, g.output, g.dims), seed + 1);
        const PoolOutputs got = run_pool(*gpu_, *gpu_plan, rows, x, dy);
        const PoolOutputs want = run_pool(*cpu_, *cpu_plan, rows, x, dy);
        if (kind == PoolKind::kMax) {
          EXPECT_EQ(got.y, want.y) << what << ": forward";
          const ref::Values dx = ref::max_pool_backward(r, rows, widen(x), widen(dy));
          EXPECT_TRUE(within_bound(got.dx, want.dx, dx.magnitude, kFp32Bound)) << what << ": dx";
        } else {
          const ref::Values y = ref::avg_pool_forward(r, rows, widen(x));
          const ref::Values dx = ref::avg_pool_backward(r, rows, widen(dy));
          EXPECT_TRUE(within_bound(got.y, want.y, y.magnitude, kFp32Bound)) << what << ": y";
          EXPECT_TRUE(within_bound(got.dx, want.dx, dx.magnitude, kFp32Bound)) << what << ": dx";
        }
      }
    }
  }
}

TEST_F(CudnnPool, ASeenRowCountCreatesNothingAndRepeatsBitwise) {
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    const PoolGeometry g = pool_geometry(kind, 2, 4, {9, 7}, 3, 2, 4);
    auto plan = gpu_->kernels<dptrain::SpatialKernels>().pool_plan(g);
    const std::size_t at_allocate = plan->objects_created();
    EXPECT_GT(at_allocate, 0u);
    std::vector<PoolOutputs> first, again;
    for (int pass = 0; pass < 2; ++pass)
      for (int rows : {4, 1}) {
        const auto x = random_vector(elements(rows, g.channels, g.input, g.dims), 7 + rows);
        const auto dy = random_vector(elements(rows, g.channels, g.output, g.dims), 9 + rows);
        (pass ? again : first).push_back(run_pool(*gpu_, *plan, rows, x, dy));
        if (pass == 0 && rows == 4) EXPECT_EQ(plan->objects_created(), at_allocate);
      }
    const std::size_t warm = plan->objects_created();
    EXPECT_GT(warm, at_allocate);  // the 1-row descriptors were new
    for (std::size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(std::memcmp(first[i].y.data(), again[i].y.data(), first[i].y.size() * 4), 0);
      EXPECT_EQ(std::memcmp(first[i].dx.data(), again[i].dx.data(), first[i].dx.size() * 4), 0);
    }
    const auto x = random_vector(elements(4, g.channels, g.input, g.dims), 3);
    const auto dy = random_vector(elements(4, g.channels, g.output, g.dims), 4);
    run_pool(*gpu_, *plan, 4, x, dy);
    EXPECT_EQ(plan->objects_created(), warm);
  }
}

TEST_F(CudnnPool, BackwardNeedsTheForwardOfItsRows) {
  const PoolGeometry g = pool_geometry(PoolKind::kMax, 2, 1, {4, 4}, 2, 2, 2);
  auto plan = gpu_->kernels<dptrain::SpatialKernels>().pool_plan(g);
  dptrain::DeviceBuffer<float> x(*gpu_, 32), y(*gpu_, 8);
  EXPECT_THROW(plan->backward(y.get(), x.get(), 1), dptrain::Error);  // no forward yet
  plan->forward(x.get(), y.get(), 2);
  EXPECT_THROW(plan->backward(y.get(), x.get(), 1), dptrain::Error);
}

}  // namespace
