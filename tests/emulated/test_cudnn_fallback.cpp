// Implements: the cuDNN convolution plan's fallbacks, on an emulated cuDNN
// and device that lack something:
//  - bf16 algorithms for 2-D convolutions only (DPTRAIN_EMULATED_CUDNN_BF16=2d,
//    cudnn_algorithms.cpp): under --precision bf16 a 3-D convolution still
//    runs, in TF32, says so once on stderr, and a 2-D one of the same
//    backend stays bf16. The two are told apart as in
//    test_cudnn_precision.cpp: with inputs 1 + 2^-9 and ones, bf16 (7
//    mantissa bits) rounds the input to 1 and falls short of the fp32 sum by
//    about 2^-9, TF32 (10 bits) keeps it and matches the fp32 sum;
//  - tensor-op kernels for 3-D FLOAT convolutions (the emulated cuDNN has
//    FMA ones only there): under TF32 such a plan names FMA math for every
//    pass (ConvPlan::pass_math) and matches fp32, while a 2-D one names
//    tensor-op math; fp32 plans name FMA, bf16 ones tensor-op;
//  - room on the device (DPTRAIN_EMULATED_DEVICE_BYTES) for less workspace
//    than the preferred algorithms take: the plan takes algorithms that need
//    less, says so, and computes as the CPU does; with room for none, the
//    plan is a usage error that says what to change.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "spatial_support.hpp"

namespace {

using dptrain::ConvGeometry;
using dptrain::Precision;
using namespace gpu_test;

// sum(want - got) / sum(want) of the forward outputs, on inputs 1 + e and ones.
double forward_shortfall(dptrain::Backend& be, dptrain::Backend& cpu, const ConvGeometry& g,
                         double e = std::ldexp(1.0, -9)) {
  const int rows = 2;
  const ConvInputs sizes = random_conv_inputs(g, rows, 1);
  const ConvInputs in{std::vector<float>(sizes.x.size(), static_cast<float>(1.0 + e)),
                      std::vector<float>(sizes.w.size(), 1.0f),
                      std::vector<float>(sizes.b.size(), 0.0f),
                      std::vector<float>(sizes.dy.size(), 1.0f)};
  auto plan = be.kernels<dptrain::SpatialKernels>().conv_plan(g);
  auto cpu_plan = cpu.kernels<dptrain::SpatialKernels>().conv_plan(g);
  const ConvOutputs got = run_conv(be, *plan, g, rows, in);
  const ConvOutputs want = run_conv(cpu, *cpu_plan, g, rows, in);
  double diff = 0.0, total = 0.0;
  for (std::size_t i = 0; i < got.y.size(); ++i) {
    diff += double(want.y[i]) - double(got.y[i]);
    total += double(want.y[i]);
  }
  return diff / total;
}

TEST(CudnnFallback, WithoutABf16AlgorithmAConvolutionRunsInTf32AndSaysSo) {
  ASSERT_EQ(setenv("DPTRAIN_EMULATED_CUDNN_BF16", "2d", 1), 0);
  auto gpu = make_gpu(Precision::kBf16);
  auto cpu = make_cpu();
  const double e = std::ldexp(1.0, -9);
  ::testing::internal::CaptureStderr();
  const double volume =
      forward_shortfall(*gpu, *cpu, conv_geometry(3, 4, 4, {5, 5, 5}, 3, 1, 1, 2));
  const std::string said = ::testing::internal::GetCapturedStderr();
  const double image = forward_shortfall(*gpu, *cpu, conv_geometry(2, 4, 4, {6, 6}, 3, 1, 1, 2));
  unsetenv("DPTRAIN_EMULATED_CUDNN_BF16");
  EXPECT_LT(std::fabs(volume), 1e-3 * e) << "the 3-D convolution did not run in TF32";
  EXPECT_GT(image, 0.5 * e) << "the 2-D convolution did not stay bf16";
  EXPECT_NE(said.find("cuDNN has no bf16 forward algorithm for the 3-D convolution"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("run in TF32 instead"), std::string::npos) << said;
}

TEST(CudnnFallback, EachPassNamesTheMathItsAlgorithmRunsWith) {
  using dptrain::ConvMath;
  using dptrain::ConvPass;
  const ConvGeometry image = conv_geometry(2, 4, 4, {6, 6}, 3, 1, 1, 2);
  const ConvGeometry volume = conv_geometry(3, 4, 4, {5, 5, 5}, 3, 1, 1, 2);
  struct Case {
    Precision p;
    ConvMath image, volume;
  };
  for (const Case c : {Case{Precision::kFp32, ConvMath::kFma, ConvMath::kFma},
                       Case{Precision::kTf32, ConvMath::kTensorOp, ConvMath::kFma},
                       Case{Precision::kBf16, ConvMath::kTensorOp, ConvMath::kTensorOp}}) {
    auto gpu = make_gpu(c.p);
    for (const auto& [g, want] : {std::pair{image, c.image}, std::pair{volume, c.volume}}) {
      auto plan = gpu->kernels<dptrain::SpatialKernels>().conv_plan(g);
      for (ConvPass pass : {ConvPass::kForward, ConvPass::kBackwardData, ConvPass::kBackwardWeights})
        for (int rows : {1, 2})
          EXPECT_EQ(plan->pass_math(pass, rows), want)
              << "precision " << int(c.p) << ", " << g.dims << "-D, pass " << int(pass) << ", "
              << rows << " rows: " << dptrain::conv_math_name(plan->pass_math(pass, rows));
    }
  }
  // TF32 on FMA kernels is fp32: 1 + 2^-12 is kept (TF32 would round it to 1).
  auto tf32 = make_gpu(Precision::kTf32);
  auto cpu = make_cpu();
  const double e = std::ldexp(1.0, -12);
  EXPECT_LT(std::fabs(forward_shortfall(*tf32, *cpu, volume, e)), 1e-3 * e);
  EXPECT_GT(forward_shortfall(*tf32, *cpu, image, e), 0.5 * e);
}

// An emulated device with room for `room` bytes more than it holds now,
// while it lives.
class DeviceRoom {
 public:
  explicit DeviceRoom(std::size_t room) {
    const std::string bytes = std::to_string(dptrain_emu::device_bytes_in_use() + room);
    EXPECT_EQ(setenv("DPTRAIN_EMULATED_DEVICE_BYTES", bytes.c_str(), 1), 0);
  }
  ~DeviceRoom() { unsetenv("DPTRAIN_EMULATED_DEVICE_BYTES"); }
};

// The emulated heuristics prefer the precomputed implicit GEMM for this
// forward (an index table of 4 x 9 taps x 256 positions = 9216 bytes); the
// backward passes need at most 576 bytes (4 x 4 x 4 x 9, the filter
// gradient's partial sums), the implicit GEMM forward none.
const ConvGeometry kSmall = conv_geometry(2, 4, 4, {16, 16}, 3, 1, 1, 2);

TEST(CudnnFallback, WithoutRoomForTheWorkspaceAPlanTakesAlgorithmsThatNeedLess) {
  auto gpu = make_gpu();
  auto cpu = make_cpu();
  std::unique_ptr<dptrain::ConvPlan> plan;
  ::testing::internal::CaptureStderr();
  {
    const DeviceRoom room(4096);  // the 576 bytes and the weight's aligned copy fit
    plan = gpu->kernels<dptrain::SpatialKernels>().conv_plan(kSmall);
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("the GPU has no room for the 9216 bytes of cuDNN workspace"),
            std::string::npos)
      << said;
  const ConvInputs in = random_conv_inputs(kSmall, 2, 31);
  const ConvOutputs got = run_conv(*gpu, *plan, kSmall, 2, in);
  auto cpu_plan = cpu->kernels<dptrain::SpatialKernels>().conv_plan(kSmall);
  const ConvOutputs want = run_conv(*cpu, *cpu_plan, kSmall, 2, in);
  const ref::Geometry r = reference_of(kSmall);
  const auto x = widen(in.x), w = widen(in.w), dy = widen(in.dy);
  EXPECT_TRUE(
      within_bound(got.y, want.y, ref::conv_forward(r, 2, x, w, widen(in.b)).magnitude, 1e-5));
  EXPECT_TRUE(within_bound(got.dx, want.dx, ref::conv_backward_data(r, 2, dy, w).magnitude, 1e-5));
  EXPECT_TRUE(
      within_bound(got.dw, want.dw, ref::conv_backward_weights(r, 2, x, dy)[0].magnitude, 1e-5));
}

TEST(CudnnFallback, WithoutRoomForAnyWorkspaceAPlanIsAUsageErrorThatSaysWhatToChange) {
  auto gpu = make_gpu();
  const DeviceRoom room(100);
  try {
    gpu->kernels<dptrain::SpatialKernels>().conv_plan(kSmall);
    ADD_FAILURE() << "a plan was made without room for its workspace";
  } catch (const dptrain::Error& e) {
    EXPECT_EQ(e.code(), dptrain::ExitCode::kUsage);
    const std::string what = e.what();
    EXPECT_NE(what.find("no deterministic backward filter algorithm"), std::string::npos) << what;
    EXPECT_NE(what.find("--batch-size"), std::string::npos) << what;
  }
}

}  // namespace
