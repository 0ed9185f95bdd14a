// Implements: unit tests of the CPU backend's core (identity, capabilities,
// memory, GEMM, NaN count) and of its dense, activation and loss kernel tables
// against naive host loops and std:: formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "gemm_reference.hpp"

namespace dptrain {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, double lo = -1.0,
                                 double hi = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

TEST_F(CpuBackendTest, IdentityAndCaps) {
  EXPECT_EQ(be_->name(), "cpu");
  EXPECT_EQ(be_->placement(), "cpu");
  // Shards are scattered straight into backend memory, and host clocks
  // time the phases.
  const BackendCaps caps = be_->caps();
  EXPECT_FALSE(caps.staged_uploads);
  EXPECT_FALSE(caps.device_clock);
  EXPECT_TRUE(caps.host_addressable_memory);
}

TEST_F(CpuBackendTest, AllocateIsZeroedAndAligned) {
  for (std::size_t bytes : {std::size_t(0), std::size_t(4), std::size_t(100), std::size_t(4096)}) {
    void* p = be_->allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
    const auto* bytes_p = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(bytes_p[i], 0);
    be_->deallocate(p);
  }
}

TEST_F(CpuBackendTest, GemmAllTransposesAndOddSizes) {
  const int sizes[] = {1, 3, 17};
  std::uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int m : sizes)
        for (int n : sizes)
          for (int k : sizes) {
            // Padded leading dimensions catch lda/ldb/ldc mix-ups.
            const int lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
            const auto a = random_floats(static_cast<std::size_t>(ta ? k : m) * lda, seed++);
            const auto b = random_floats(static_cast<std::size_t>(tb ? n : k) * ldb, seed++);
            auto c = random_floats(static_cast<std::size_t>(m) * ldc, seed++);
            auto expect = c;
            std::vector<double> bound;
            naive_gemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, 0.5f, expect, ldc, &bound);
            be_->gemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
            // Outside the m x n block (the padding) C must stay as it was: bound 0.
            for (std::size_t i = 0; i < c.size(); ++i)
              ASSERT_LE(std::abs(double(c[i]) - expect[i]), bound[i])
                  << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                  << " i=" << i;
          }
}

TEST_F(CpuBackendTest, GemmWithZeroKScalesC) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  const float dummy = 42.0f;
  be_->gemm(false, true, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 1, 0.5f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
  // beta == 0 must give exact zeros even over NaN garbage.
  std::vector<float> d(6, std::numeric_limits<float>::quiet_NaN());
  be_->gemm(true, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 1, 0.0f, d.data(), 3);
  for (float x : d) EXPECT_EQ(x, 0.0f);
}

TEST_F(CpuBackendTest, GemmWithEmptyOutputDoesNothing) {
  std::vector<float> c = {7.0f};
  be_->gemm(false, false, 0, 1, 5, 1.0f, nullptr, 5, nullptr, 1, 0.0f, c.data(), 1);
  be_->gemm(false, false, 1, 0, 5, 1.0f, nullptr, 5, nullptr, 1, 0.0f, c.data(), 1);
  EXPECT_EQ(c[0], 7.0f);
}

TEST_F(CpuBackendTest, BiasOps) {
  std::vector<float> y = {1, 2, 3, 4, 5, 6};  // [2, 3]
  const std::vector<float> bias = {10, 20, 30};
  be_->kernels<DenseKernels>().add_bias(y.data(), bias.data(), 2, 3);
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33, 14, 25, 36}));

  std::vector<float> db = {9, 9, 9};
  be_->kernels<DenseKernels>().bias_grad(y.data(), db.data(), 2, 3);
  EXPECT_EQ(db, (std::vector<float>{25, 47, 69}));
  be_->kernels<DenseKernels>().bias_grad(y.data(), db.data(), 0, 3);
  EXPECT_EQ(db, (std::vector<float>{0, 0, 0}));
}

// A block's last part: y = x wᵀ + b + r in one call has the bits of the
// bias epilogue and then the block's sum; r may not be y.
TEST_F(CpuBackendTest, BiasAddEpilogueIsTheBiasProductThenTheSum) {
  const int rows = 5, in = 7, out = 6;
  const auto x = random_floats(std::size_t(rows) * in, 1);
  const auto w = random_floats(std::size_t(out) * in, 2);
  const auto b = random_floats(out, 3), r = random_floats(std::size_t(rows) * out, 4);
  std::vector<float> want(r.size()), got(r.size(), std::numeric_limits<float>::quiet_NaN());
  be_->gemm_epilogue(false, true, rows, out, in, x.data(), in, w.data(), in, want.data(), out,
                     Backend::GemmEpilogue::kBias, const_cast<float*>(b.data()));
  be_->sum(want.data(), r.data(), want.data(), want.size());
  be_->gemm_epilogue(false, true, rows, out, in, x.data(), in, w.data(), in, got.data(), out,
                     Backend::GemmEpilogue::kBiasAdd, const_cast<float*>(b.data()),
                     const_cast<float*>(r.data()));
  EXPECT_EQ(got, want);
  try {
    be_->gemm_epilogue(false, true, rows, out, in, x.data(), in, w.data(), in, got.data(), out,
                       Backend::GemmEpilogue::kBiasAdd, const_cast<float*>(b.data()), got.data());
    ADD_FAILURE() << "accepted an addend that is the output";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kOther);
  }
}

TEST_F(CpuBackendTest, ActivationForwardMatchesFormulas) {
  const auto x = random_floats(257, 7, -6.0, 6.0);
  std::vector<float> y(x.size());
  for (Activation f :
       {Activation::kRelu, Activation::kTanh, Activation::kGelu, Activation::kSigmoid,
        Activation::kGeluTanh}) {
    be_->kernels<ActivationKernels>().forward(f, x.data(), y.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      double want = 0.0;
      switch (f) {
        case Activation::kRelu:
          want = v > 0 ? v : 0;
          break;
        case Activation::kTanh:
          want = std::tanh(v);
          break;
        case Activation::kGelu:
          want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
          break;
        case Activation::kSigmoid:
          want = 1.0 / (1.0 + std::exp(-v));
          break;
        case Activation::kGeluTanh:
          want = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
          break;
      }
      ASSERT_NEAR(y[i], want, 1e-6 + 1e-6 * std::abs(want)) << "f=" << int(f) << " x=" << v;
    }
  }
  // GELU is the exact erf form, not the tanh approximation (they differ ~1e-4 here).
  const float x1 = 1.5f;
  float y1 = 0.0f;
  be_->kernels<ActivationKernels>().forward(Activation::kGelu, &x1, &y1, 1);
  EXPECT_NEAR(y1, 1.3997892f, 1e-6f);
  // ... and gelu:tanh is the approximation (torch: gelu(1.5, approximate='tanh')).
  be_->kernels<ActivationKernels>().forward(Activation::kGeluTanh, &x1, &y1, 1);
  EXPECT_NEAR(y1, 1.3995716f, 1e-6f);
}

TEST_F(CpuBackendTest, SoftmaxXentValuesAndStats) {
  // Row 0: logits (1, 2, 3), label 2: loss = log(e^1+e^2+e^3) - 3 = 0.40760596.
  // Row 1: ties (5, 5, 0) with label 1: the first max (0) wins, so wrong.
  // Row 2: huge logits must not overflow: (1000, 0, 0), label 0 -> loss ~ 0, correct.
  const std::vector<float> logits = {1, 2, 3, 5, 5, 0, 1000, 0, 0};
  const std::vector<std::int32_t> labels = {2, 1, 0};
  std::vector<float> d(9);
  float stats[2] = {1.0f, 10.0f};  // accumulates
  be_->kernels<LossKernels>().softmax_xent(logits.data(), labels.data(), 3, 3, 0.5f, d.data(),
                                           stats);
  const double row1 = std::log(2.0 + std::exp(-5.0));
  EXPECT_NEAR(stats[0], 1.0 + 0.40760596 + row1, 1e-5);
  EXPECT_EQ(stats[1], 12.0f);  // rows 0 and 2 correct
  const double s0 = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(d[0], 0.5 * std::exp(1.0) / s0, 1e-6);
  EXPECT_NEAR(d[2], 0.5 * (std::exp(3.0) / s0 - 1.0), 1e-6);
  EXPECT_NEAR(d[6], 0.0f, 1e-6);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
  // Each row of the gradient sums to zero.
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(d[3 * r] + d[3 * r + 1] + d[3 * r + 2], 0.0f, 1e-6);
}

TEST_F(CpuBackendTest, MseValuesAndStats) {
  const std::vector<float> pred = {1, 2, 3, 4};
  const std::vector<float> target = {0, 2, 1, 1};  // diffs (1,0) and (2,3)
  std::vector<float> d(4);
  float stats[2] = {0.0f, 5.0f};
  be_->kernels<LossKernels>().mse(pred.data(), target.data(), 2, 2, 0.25f, d.data(), stats);
  EXPECT_NEAR(stats[0], 0.5 + 6.5, 1e-6);  // (1+0)/2 + (4+9)/2
  EXPECT_EQ(stats[1], 5.0f);
  // 0.25 * 2 * diff / 2
  EXPECT_EQ(d, (std::vector<float>{0.25f, 0.0f, 0.5f, 0.75f}));
}

TEST_F(CpuBackendTest, FillCopyAndNonfinite) {
  std::vector<float> x = {0.5f, -1, 2};
  be_->fill(x.data(), 3.0f, 2);
  EXPECT_EQ(x, (std::vector<float>{3, 3, 2}));
  std::vector<float> y(3);
  be_->copy_device(y.data(), x.data(), 3 * sizeof(float));
  EXPECT_EQ(y, x);
  EXPECT_EQ(be_->count_nonfinite(x.data(), 3), 0u);
  x[0] = std::numeric_limits<float>::infinity();
  x[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(be_->count_nonfinite(x.data(), 3), 2u);
  // Every class of value: only NaN and +-Inf count; the largest finite
  // values, denormals and -0 do not. Long enough for the vector loop.
  std::vector<float> v(1000, 1.0f);
  v[3] = std::numeric_limits<float>::max();
  v[4] = -std::numeric_limits<float>::max();
  v[5] = std::numeric_limits<float>::denorm_min();
  v[6] = -0.0f;
  v[500] = -std::numeric_limits<float>::infinity();
  v[999] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(be_->count_nonfinite(v.data(), v.size()), 2u);
}

// The CPU has no device clock: PhaseTimer keeps host times with it attached.
TEST_F(CpuBackendTest, NoDeviceClockSoPhaseTimesStayHostTimes) {
  EXPECT_LT(be_->marker_ms(0, 1), 0.0);
  PhaseTimer timer;
  timer.attach_device(be_.get());
  timer.start();
  timer.lap(Phase::kData);
  volatile double sink = 0;
  for (int i = 0; i < 200000; ++i) sink = sink + i;
  timer.lap(Phase::kForward);
  const double host = timer.ms(Phase::kForward);
  timer.end_step();
  EXPECT_GT(host, 0.0);
  EXPECT_EQ(timer.ms(Phase::kForward), host);
}

}  // namespace
}  // namespace dptrain
