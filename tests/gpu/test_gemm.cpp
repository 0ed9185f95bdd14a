// Implements: the CUDA backend's GEMM against the CPU backend (OpenBLAS) — all
// four transpose combinations, padded leading dimensions, beta 0 with NaN in
// C, k == 0 — in fp32, and in tf32 and bf16 within the error those formats
// allow. The bound scales with |A| |B| so that cancellation is not punished.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "gpu_env.hpp"

namespace {

using dptrain::Backend;
using dptrain::Precision;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

struct Shape {
  int m, n, k;
};
constexpr Shape kShapes[] = {{1, 1, 1},    {3, 5, 7},     {257, 33, 129}, {1000, 37, 64},
                             {64, 10, 1000}, {128, 256, 784}, {37, 1000, 3}};
constexpr int kPad = 3;  // leading dimensions wider than the rows: strides must be honoured

// Runs C = alpha op(A) op(B) + beta C on the GPU and the CPU and checks
// |gpu - cpu| <= tol * (|alpha| |op(A)| |op(B)| + |beta| |C|) + 1e-6 over all of C's
// storage (padding must stay untouched).
::testing::AssertionResult check_gemm(Backend& gpu, Backend& cpu, bool ta, bool tb, Shape s,
                                      float alpha, float beta, double tol, std::uint32_t seed) {
  const int a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
  const int b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
  const int lda = a_cols + kPad, ldb = b_cols + kPad, ldc = s.n + kPad;
  const auto a = random_vector(static_cast<std::size_t>(a_rows) * lda, seed);
  const auto b = random_vector(static_cast<std::size_t>(b_rows) * ldb, seed + 1);
  auto c = random_vector(static_cast<std::size_t>(s.m) * ldc, seed + 2);
  if (beta == 0.0f)  // beta 0 must not read C: NaN there must not leak out
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) c[static_cast<std::size_t>(i) * ldc + j] = std::numeric_limits<float>::quiet_NaN();

  auto want = c;
  cpu.gemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
  auto abs_of = [](std::vector<float> v) {
    for (auto& x : v) x = std::fabs(x);
    return v;
  };
  auto bound = abs_of(c);
  const auto abs_a = abs_of(a), abs_b = abs_of(b);
  cpu.gemm(ta, tb, s.m, s.n, s.k, std::fabs(alpha), abs_a.data(), lda, abs_b.data(), ldb,
           std::fabs(beta), bound.data(), ldc);

  auto da = upload(gpu, a);
  auto db = upload(gpu, b);
  auto dc = upload(gpu, c);
  gpu.gemm(ta, tb, s.m, s.n, s.k, alpha, da.get(), lda, db.get(), ldb, beta, dc.get(), ldc);
  const auto got = download(gpu, dc);

  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool in_c = static_cast<int>(i % ldc) < s.n;
    const double g = got[i], w = want[i];
    const bool ok = in_c ? std::fabs(g - w) <= tol * bound[i] + 1e-6
                         : (g == w || (std::isnan(g) && std::isnan(w)));
    if (!ok)
      return ::testing::AssertionFailure()
             << "ta=" << ta << " tb=" << tb << " m=" << s.m << " n=" << s.n << " k=" << s.k
             << " beta=" << beta << ": C[" << i / ldc << "," << i % ldc << "] = " << g
             << ", want " << w << (in_c ? "" : " (padding was written)");
  }
  return ::testing::AssertionSuccess();
}

void check_all(Precision p, double tol) {
  auto gpu = gpu_test::make_gpu(p);
  auto cpu = gpu_test::make_cpu();
  std::uint32_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Shape s : kShapes)
        for (float beta : {0.0f, 0.3f}) {
          EXPECT_TRUE(check_gemm(*gpu, *cpu, ta, tb, s, 0.7f, beta, tol, seed));
          seed += 3;
        }
}

TEST(CudaGemm, Fp32MatchesCpu) { check_all(Precision::kFp32, 1e-5); }

// tf32 keeps 10 mantissa bits of each input (relative error up to 2^-10
// each when truncated), bf16 keeps 7 (2^-8 when rounded): a product is off by
// about twice that, relative to |a||b|.
TEST(CudaGemm, Tf32WithinTf32Error) { check_all(Precision::kTf32, 4e-3); }
TEST(CudaGemm, Bf16WithinBf16Error) { check_all(Precision::kBf16, 1.6e-2); }

// A = 1 + 2^-9 + 2^-12 everywhere, B = 1: each C = k A exactly in fp32 (23
// bits hold any partial sum). TF32 keeps 10 mantissa bits and loses 2^-12:
// relative error 2^-12 / A = 2.4e-4. bf16 keeps 7 and rounds A to 1: error
// (2^-9 + 2^-12) / A = 2.2e-3. Every element must show its format's error,
// which also tells tf32 from bf16. Large enough that cuBLAS takes its
// tensor-core kernels (a small GEMM may run in fp32 whatever is allowed).
double relative_error_on_fp32_exact_inputs(Precision p, double* worst) {
  constexpr int kSize = 1024;
  const float a_value = 1.0f + std::ldexp(1.0f, -9) + std::ldexp(1.0f, -12);
  const double want = static_cast<double>(kSize) * a_value;
  auto gpu = gpu_test::make_gpu(p);
  const std::size_t n = static_cast<std::size_t>(kSize) * kSize;
  auto da = upload(*gpu, std::vector<float>(n, a_value));
  auto db = upload(*gpu, std::vector<float>(n, 1.0f));
  auto dc = upload(*gpu, std::vector<float>(n, 0.0f));
  gpu->gemm(false, false, kSize, kSize, kSize, 1.0f, da.get(), kSize, db.get(), kSize, 0.0f,
            dc.get(), kSize);
  double least = 1e300, most = 0.0;
  for (float c : download(*gpu, dc)) {
    const double err = std::fabs(c - want) / want;
    least = std::min(least, err);
    most = std::max(most, err);
  }
  *worst = most;
  return least;
}

TEST(CudaGemm, PrecisionIsHonouredOnInputsOnlyFp32HoldsExactly) {
  double worst = 0.0;
  EXPECT_EQ(relative_error_on_fp32_exact_inputs(Precision::kFp32, &worst), 0.0);
  EXPECT_EQ(worst, 0.0) << "fp32 must be exact here";
  const double tf32 = relative_error_on_fp32_exact_inputs(Precision::kTf32, &worst);
  EXPECT_GT(tf32, 1e-4) << "tf32 made no TF32 rounding error: --precision tf32 ignored?";
  EXPECT_LT(worst, 1e-3) << "tf32 erred like bf16";
  const double bf16 = relative_error_on_fp32_exact_inputs(Precision::kBf16, &worst);
  EXPECT_GT(bf16, 1e-3) << "bf16 made no bf16 rounding error: --precision bf16 ignored?";
  EXPECT_LT(worst, 1.6e-2);
}

TEST(CudaGemm, Bf16ScratchGrowsAcrossShapes) {
  // Small, then large, then small again: a grown scratch buffer must still
  // give correct results for every later shape.
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  auto cpu = gpu_test::make_cpu();
  for (Shape s : {Shape{3, 5, 7}, Shape{512, 300, 784}, Shape{3, 5, 7}, Shape{64, 10, 1000}})
    EXPECT_TRUE(check_gemm(*gpu, *cpu, false, true, s, 1.0f, 0.0f, 1.6e-2, 7));
}

// In bf16 each operand is rounded (to nearest even) once, 8 values a
// thread where it and its scratch are 16-byte aligned, else one: C = A · I
// must be exactly bf16(A), for A and I at every alignment (arena offsets
// of 0 to 3 floats) and sizes that leave a tail of 1 to 7 values.
TEST(CudaGemm, Bf16OperandsAreRoundedOnceAtAnyAlignment) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  auto round = [](float x) {  // round to nearest even (no NaN among these)
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &u, sizeof x);
    return x;
  };
  for (Shape s : {Shape{1, 1, 1}, Shape{3, 9, 9}, Shape{37, 17, 17}, Shape{64, 24, 24}})
    for (int a_off : {0, 1, 3})
      for (int b_off : {0, 2}) {
        const std::size_t na = std::size_t(s.m) * s.k, nb = std::size_t(s.k) * s.n;
        std::vector<float> a = random_vector(na + a_off, 31 + a_off, -3.0f, 3.0f);
        std::vector<float> b(nb + b_off, 0.0f);
        for (int i = 0; i < s.k; ++i) b[b_off + std::size_t(i) * s.n + i] = 1.0f;
        auto da = upload(*gpu, a), db = upload(*gpu, b);
        auto dc = upload(*gpu, std::vector<float>(std::size_t(s.m) * s.n, 0.0f));
        gpu->gemm(false, false, s.m, s.n, s.k, 1.0f, da.get() + a_off, s.k, db.get() + b_off, s.n,
                  0.0f, dc.get(), s.n);
        const auto c = download(*gpu, dc);
        for (std::size_t i = 0; i < na; ++i)
          ASSERT_EQ(c[i], round(a[a_off + i])) << "m " << s.m << " k " << s.k << " offsets "
                                               << a_off << "," << b_off << " at " << i;
      }
}

TEST(CudaGemm, ZeroInnerDimensionScalesC) {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    auto gpu = gpu_test::make_gpu(p);
    const int m = 5, n = 7, ldc = n + 2;
    auto c = random_vector(static_cast<std::size_t>(m) * ldc, 11);
    auto dc = upload(*gpu, c);
    gpu->gemm(false, false, m, n, 0, 1.0f, nullptr, 1, nullptr, n, 0.5f, dc.get(), ldc);
    auto got = download(*gpu, dc);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < ldc; ++j) {
        const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
        EXPECT_EQ(got[at], j < n ? c[at] * 0.5f : c[at]) << i << "," << j;
      }
    std::vector<float> nans(c.size(), std::numeric_limits<float>::quiet_NaN());
    dc = upload(*gpu, nans);
    gpu->gemm(true, true, m, n, 0, 1.0f, nullptr, m, nullptr, 1, 0.0f, dc.get(), ldc);
    got = download(*gpu, dc);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) EXPECT_EQ(got[static_cast<std::size_t>(i) * ldc + j], 0.0f);
  }
}

}  // namespace
