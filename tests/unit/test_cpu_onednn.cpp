// Implements: unit tests of the CPU backend's oneDNN side: the precision
// choices (tf32 refused, bf16 only with bf16 instructions), bf16 rounding,
// bf16 GEMMs against a double reference of the rounded inputs, the OpenMP
// team the backend sets, and bitwise-repeatable GEMMs for a fixed shape and
// thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn/bf16_gemm.hpp"
#include "backends/cpu/onednn/engine.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "gemm_reference.hpp"

namespace dptrain {
namespace {

std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return v;
}

float bf16_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t bf16(float x) {
  std::uint16_t h;
  onednn::to_bf16(&x, &h, 1);
  return h;
}

std::unique_ptr<Backend> backend(Precision p, int threads = 1) {
  BackendOptions opts;
  opts.precision = p;
  opts.threads = threads;
  return make_cpu_backend(opts);
}

TEST(CpuPrecision, Tf32IsAUsageErrorNamingCuda) {
  try {
    backend(Precision::kTf32);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
}

TEST(CpuPrecision, Bf16NeedsBf16InstructionsOrSaysWhichAreMissing) {
  const std::string missing = onednn::bf16_missing();
  if (missing.empty()) {
    EXPECT_NO_THROW(backend(Precision::kBf16));
    return;
  }
  try {
    backend(Precision::kBf16);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("AVX512_BF16 or AMX"), std::string::npos) << e.what();
  }
}

TEST(Bf16Rounding, NearestEvenAndSpecialValues) {
  EXPECT_EQ(bf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(bf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(bf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  // The largest float rounds to infinity, as in every RNE conversion.
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()), 0x7f80);
  const float nan = bf16_to_float(bf16(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_TRUE(std::isnan(nan));
  // A NaN whose payload sits only in the low bits must not become infinity.
  std::uint32_t low_nan_bits = 0x7f800001u;
  float low_nan;
  std::memcpy(&low_nan, &low_nan_bits, sizeof low_nan);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16(low_nan))));
}

// Products of bf16 values are exact in fp32 (8-bit significands), so the
// bf16 GEMM must be within the fp32 GEMM bound of the product of the
// rounded inputs.
TEST(Bf16Gemm, MatchesDoubleReferenceOfRoundedInputs) {
  const std::string missing = onednn::bf16_missing();
  if (!missing.empty()) GTEST_SKIP() << "bf16 GEMMs cannot run here: " << missing;
  auto be = backend(Precision::kBf16);
  std::uint64_t seed = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int m : {1, 17})
        for (int n : {3, 33})
          for (int k : {1, 70}) {
            const int lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
            auto a = uniform_floats(static_cast<std::size_t>(ta ? k : m) * lda, seed++);
            auto b = uniform_floats(static_cast<std::size_t>(tb ? n : k) * ldb, seed++);
            auto c = uniform_floats(static_cast<std::size_t>(m) * ldc, seed++);
            auto a_rounded = a, b_rounded = b, expect = c;
            for (float& x : a_rounded) x = bf16_to_float(bf16(x));
            for (float& x : b_rounded) x = bf16_to_float(bf16(x));
            std::vector<double> bound;
            naive_gemm(ta, tb, m, n, k, 0.75f, a_rounded, lda, b_rounded, ldb, 0.5f, expect, ldc,
                       &bound);
            be->gemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
            for (std::size_t i = 0; i < c.size(); ++i)
              ASSERT_LE(std::abs(double(c[i]) - expect[i]), bound[i])
                  << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k;
          }
}

TEST(CpuThreads, BackendSetsTheOpenMpTeam) {
  for (int threads : {1, 2, 3}) {
    auto be = backend(Precision::kFp32, threads);
    EXPECT_EQ(omp_get_max_threads(), threads);
    EXPECT_NE(be->gemm_library().find(std::to_string(threads) + " OpenMP thread"),
              std::string::npos)
        << be->gemm_library();
  }
}

// Same shape, same thread count, same inputs: the same bits, call after
// call (bitwise resume and rank invariance rest on it).
TEST(CpuGemm, RepeatsBitwiseForAFixedShapeAndThreadCount) {
  const int m = 128, n = 256, k = 784;
  const auto a = uniform_floats(std::size_t(m) * k, 11), b = uniform_floats(std::size_t(n) * k, 12);
  for (int threads : {1, 2}) {
    auto be = backend(Precision::kFp32, threads);
    std::vector<float> first(std::size_t(m) * n), again(first.size());
    be->gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, first.data(), n);
    for (int rep = 0; rep < 5; ++rep) {
      be->gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, again.data(), n);
      ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
          << threads << " thread(s), repeat " << rep;
    }
  }
}

}  // namespace
}  // namespace dptrain
