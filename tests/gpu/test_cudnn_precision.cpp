// Implements: the cuDNN convolution under --precision tf32 and bf16. On
// random inputs every pass stays within the precision's bound of the fp32
// CPU backend: each product's operands carry a rounding error of at most
// 2^-10 (TF32, truncating or not) or 2^-8 (bf16), and bf16 rounds its
// result once more, so 4e-3 and 1.6e-2 of the terms' magnitudes hold with
// room for fp32 accumulation. And the precision is really applied: with
// inputs 1 + e and ones, where fp32 sums exactly (e = 2^-12 for TF32, whose
// 10 mantissa bits round 1 + 2^-12 to 1; e = 2^-9 for bf16, whose 7 bits
// round 1 + 2^-9 to 1 and which TF32 would keep), the results fall short of
// fp32's by about e / (1 + e), while the fp32 backend's match it exactly.
// TF32 is a permission, not an order: cuDNN may run a pass on FMA kernels
// (it did so for the forward of a 32-channel 16x16 layer on an H200), so
// under TF32 what a pass must give follows the math type of the algorithm
// the plan chose for it (ConvPlan::pass_math, cuDNN's mathType): tensor-op
// math rounds, FMA math equals fp32, and the default math type (TF32
// permitted, the library decides) does one or the other, nothing between.
// bf16 operands are rounded by the plan itself, so its lower bound holds
// for every pass. On the emulated cuDNN the 2-D case runs tensor-op
// algorithms and the 3-D one FMA ones (tests/emulated/cudnn_algorithms.cpp),
// so both kinds of TF32 pass are seen.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "spatial_support.hpp"

namespace {

using dptrain::ConvGeometry;
using dptrain::Precision;
using namespace gpu_test;

const char* name(Precision p) {
  return p == Precision::kFp32 ? "fp32" : p == Precision::kTf32 ? "tf32" : "bf16";
}

class CudnnPrecision : public CudnnSpatial {};

TEST_F(CudnnPrecision, RandomInputsStayWithinEachPrecisionsBound) {
  const std::vector<ConvGeometry> cases = {conv_geometry(2, 16, 16, {12, 12}, 3, 1, 1, 2),
                                           conv_geometry(2, 3, 5, {7, 9}, 3, 2, 0, 2),
                                           conv_geometry(3, 4, 8, {5, 6, 5}, 3, 1, 1, 2)};
  for (const auto& [p, bound] :
       {std::pair{Precision::kTf32, 4e-3}, std::pair{Precision::kBf16, 1.6e-2}}) {
    auto be = make_gpu(p);
    std::uint32_t seed = 70;
    for (const ConvGeometry& g : cases) {
      auto plan = be->kernels<dptrain::SpatialKernels>().conv_plan(g);
      auto cpu_plan = cpu_->kernels<dptrain::SpatialKernels>().conv_plan(g);
      const ref::Geometry r = reference_of(g);
      const int rows = 2;
      const std::string what = std::string(name(p)) + " " + describe(r, rows);
      const ConvInputs in = random_conv_inputs(g, rows, seed += 4);
      const ConvOutputs got = run_conv(*be, *plan, g, rows, in);
      const ConvOutputs want = run_conv(*cpu_, *cpu_plan, g, rows, in);
      const auto x = widen(in.x), w = widen(in.w), dy = widen(in.dy);
      const auto dwb = ref::conv_backward_weights(r, rows, x, dy);
      EXPECT_TRUE(within_bound(got.y, want.y,
                               ref::conv_forward(r, rows, x, w, widen(in.b)).magnitude, bound))
          << what << ": forward";
      EXPECT_TRUE(
          within_bound(got.dx, want.dx, ref::conv_backward_data(r, rows, dy, w).magnitude, bound))
          << what << ": dx";
      EXPECT_TRUE(within_bound(got.dw, want.dw, dwb[0].magnitude, bound)) << what << ": dw";
      // The bias gradient sums the fp32 dy under every precision.
      EXPECT_TRUE(within_bound(got.db, want.db, dwb[1].magnitude, 1e-5)) << what << ": db";
    }
  }
}

// sum(want - got) / sum(want): how far got falls short of want, relative.
double shortfall(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, total = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += double(want[i]) - double(got[i]);
    total += double(want[i]);
  }
  return diff / total;
}

// How far a pass may fall short of fp32 (relative, see shortfall) under
// precision p, its algorithm's math type m: the rounded result's [0.5 e,
// 1.5 e], fp32's [-1e-3 e, 1e-3 e], or under TF32's default math either.
struct Expected {
  bool may_equal, may_round;
};
Expected expected(Precision p, dptrain::ConvMath m) {
  if (p == Precision::kFp32) return {true, false};
  if (p == Precision::kBf16 || m == dptrain::ConvMath::kTensorOp) return {false, true};
  if (m == dptrain::ConvMath::kFma) return {true, false};
  return {true, true};
}

TEST_F(CudnnPrecision, ThePrecisionIsAppliedToEveryPass) {
  using dptrain::ConvMath;
  using dptrain::ConvPass;
  struct Case {
    ConvGeometry g;
    int rows;
  };
  const std::vector<Case> cases = {{conv_geometry(2, 32, 32, {16, 16}, 3, 1, 1, 8), 8},
                                   {conv_geometry(3, 8, 8, {6, 6, 6}, 3, 1, 1, 2), 2}};
  int tensor_op_passes = 0, fma_passes = 0;
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) {
    auto be = make_gpu(p);
    const double e = p == Precision::kBf16 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -12);
    const float one_plus = static_cast<float>(1.0 + e);
    for (const auto& [g, rows] : cases) {
      const std::string what = std::string(name(p)) + " " + describe(reference_of(g), rows);
      auto plan = be->kernels<dptrain::SpatialKernels>().conv_plan(g);
      auto cpu_plan = cpu_->kernels<dptrain::SpatialKernels>().conv_plan(g);
      const ConvInputs sizes = random_conv_inputs(g, rows, 1);  // values set below
      ConvInputs a{
          std::vector<float>(sizes.x.size(), one_plus), std::vector<float>(sizes.w.size(), 1.0f),
          std::vector<float>(sizes.b.size(), 0.0f), std::vector<float>(sizes.dy.size(), 1.0f)};
      ConvInputs b = a;  // dx = w * dy: the rounded operand is dy
      b.x.assign(b.x.size(), 1.0f);
      b.dy.assign(b.dy.size(), one_plus);
      const ConvOutputs got_a = run_conv(*be, *plan, g, rows, a);
      const ConvOutputs want_a = run_conv(*cpu_, *cpu_plan, g, rows, a);
      const ConvOutputs got_b = run_conv(*be, *plan, g, rows, b);
      const ConvOutputs want_b = run_conv(*cpu_, *cpu_plan, g, rows, b);
      std::string maths;
      for (const auto& [label, pass, s] :
           {std::tuple{"forward", ConvPass::kForward, shortfall(got_a.y, want_a.y)},
            std::tuple{"dx", ConvPass::kBackwardData, shortfall(got_b.dx, want_b.dx)},
            std::tuple{"dw", ConvPass::kBackwardWeights, shortfall(got_a.dw, want_a.dw)}}) {
        const ConvMath m = plan->pass_math(pass, rows);
        EXPECT_NE(m, ConvMath::kNone) << what << ": " << label << ": the plan names no math type";
        if (p == Precision::kFp32) EXPECT_EQ(m, ConvMath::kFma) << what << ": " << label;
        if (p == Precision::kTf32) (m == ConvMath::kTensorOp ? tensor_op_passes : fma_passes) += 1;
        maths += std::string(maths.empty() ? "" : ", ") + label + " " + dptrain::conv_math_name(m);
        const Expected x = expected(p, m);
        const bool equal = s >= -1e-3 * e && s <= 1e-3 * e;
        const bool rounded = s >= 0.5 * e && s <= 1.5 * e;
        EXPECT_TRUE((x.may_equal && equal) || (x.may_round && rounded))
            << what << ": " << label << " with " << dptrain::conv_math_name(m)
            << " math fell short of fp32 by " << s / e << " e; want "
            << (x.may_equal && x.may_round ? "0 or 0.5 to 1.5"
                : x.may_equal              ? "0 (+-1e-3)"
                                           : "0.5 to 1.5");
      }
      // Which math each pass ran with, for the log of a GPU run.
      std::printf("[   MATH   ] %s: %s\n", what.c_str(), maths.c_str());
    }
  }
  std::printf("[   MATH   ] tf32: %d passes on tensor-op math, %d on FMA or default math\n",
              tensor_op_passes, fma_passes);
}

}  // namespace
