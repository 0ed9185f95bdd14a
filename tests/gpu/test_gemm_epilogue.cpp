// Implements: the CUDA backend's GEMM epilogues (cuBLASLt) against the CPU
// backend — a dense layer's forward with its bias (and with a block's
// shortcut added), and its weight gradient with the bias gradient — in
// fp32, tf32 and bf16 within the error those formats allow (the bound
// scales with |A| |B|, |bias| and |shortcut|, so cancellation is not
// punished); operands and vectors at every alignment a parameter
// arena gives them (one float apart), the same problem at two alignments,
// repeated calls bit for bit, no rows, and (on the host emulation) the
// fallback where cuBLASLt offers no algorithm.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "gpu_env.hpp"
#ifdef DPTRAIN_EMULATED_DEVICE
#include <cublasLt.h>  // the emulation's: dptrain_emu::lt_refusal()
#endif

namespace {

using dptrain::Backend;
using dptrain::Precision;
using Epilogue = dptrain::Backend::GemmEpilogue;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

struct Dense {
  int rows, in, out;
};
constexpr Dense kShapes[] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 40}, {129, 33, 65}, {256, 64, 192}};

std::vector<float> abs_of(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

// got within tol * bound + 1e-6 of want, element by element.
::testing::AssertionResult within(const std::vector<float>& got, const std::vector<float>& want,
                                  const std::vector<float>& bound, double tol, const char* what) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <= tol * bound[i] + 1e-6))
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " (bound "
             << tol * bound[i] + 1e-6 << ")";
  return ::testing::AssertionSuccess();
}

// Device copies of host vectors `offset` floats into their buffers, so that
// operands and vectors sit at 4, 8 or 16-byte alignment, as arena offsets do.
struct Placed {
  Placed(Backend& be, const std::vector<float>& host, int offset)
      : offset(offset), buf(be, host.size() + 4) {
    be.copy_to_device(buf.get() + offset, host.data(), host.size() * sizeof(float));
  }
  float* get() { return buf.get() + offset; }
  std::vector<float> read(Backend& be, std::size_t n) { return download(be, get(), n); }
  int offset;
  dptrain::DeviceBuffer<float> buf;
};

// y = x wᵀ + b on both backends, plus a block's shortcut r with kBiasAdd
// (cuBLASLt adds r as C, and in its own order: the bound has |r|); checks y.
::testing::AssertionResult check_forward(Backend& gpu, Backend& cpu, Dense s, double tol,
                                         int offset, std::uint32_t seed,
                                         Epilogue e = Epilogue::kBias) {
  const auto x = random_vector(std::size_t(s.rows) * s.in, seed);
  const auto w = random_vector(std::size_t(s.out) * s.in, seed + 1);
  const auto b = random_vector(std::size_t(s.out), seed + 2);
  const auto r = random_vector(std::size_t(s.rows) * s.out, seed + 3);
  const bool adds = e == Epilogue::kBiasAdd;
  std::vector<float> want(std::size_t(s.rows) * s.out), bound(want.size());
  auto cr = r, ar = abs_of(r);
  cpu.gemm_epilogue(false, true, s.rows, s.out, s.in, x.data(), s.in, w.data(), s.in, want.data(),
                    s.out, e, const_cast<float*>(b.data()), adds ? cr.data() : nullptr);
  const auto ax = abs_of(x), aw = abs_of(w), ab = abs_of(b);
  cpu.gemm_epilogue(false, true, s.rows, s.out, s.in, ax.data(), s.in, aw.data(), s.in,
                    bound.data(), s.out, e, const_cast<float*>(ab.data()),
                    adds ? ar.data() : nullptr);
  Placed dx(gpu, x, offset), dw(gpu, w, (offset + 1) % 4), db(gpu, b, (offset + 2) % 4);
  Placed dy(gpu, std::vector<float>(want.size(), std::numeric_limits<float>::quiet_NaN()),
            (offset + 3) % 4);
  Placed dr(gpu, r, (offset + 2) % 4);
  gpu.gemm_epilogue(false, true, s.rows, s.out, s.in, dx.get(), s.in, dw.get(), s.in, dy.get(),
                    s.out, e, db.get(), adds ? dr.get() : nullptr);
  auto result = within(dy.read(gpu, want.size()), want, bound, tol, "y");
  if (result && adds && dr.read(gpu, r.size()) != r)
    return ::testing::AssertionFailure() << "the shortcut r was written";
  return result;
}

// dw = dyᵀ x and db = dy's column sums on both backends; checks both.
::testing::AssertionResult check_weight_grad(Backend& gpu, Backend& cpu, Dense s, double tol,
                                             int offset, std::uint32_t seed) {
  const auto dy = random_vector(std::size_t(s.rows) * s.out, seed);
  const auto x = random_vector(std::size_t(s.rows) * s.in, seed + 1);
  std::vector<float> dw(std::size_t(s.out) * s.in), db(std::size_t(s.out));
  std::vector<float> dw_bound(dw.size()), db_bound(db.size());
  cpu.gemm_epilogue(true, false, s.out, s.in, s.rows, dy.data(), s.out, x.data(), s.in, dw.data(),
                    s.in, Epilogue::kBiasGradA, db.data());
  const auto ady = abs_of(dy), ax = abs_of(x);
  cpu.gemm_epilogue(true, false, s.out, s.in, s.rows, ady.data(), s.out, ax.data(), s.in,
                    dw_bound.data(), s.in, Epilogue::kBiasGradA, db_bound.data());
  const std::vector<float> nans(dw.size(), std::numeric_limits<float>::quiet_NaN());
  Placed ddy(gpu, dy, offset), dx(gpu, x, (offset + 1) % 4), ddw(gpu, nans, (offset + 2) % 4);
  Placed ddb(gpu, std::vector<float>(db.size(), std::numeric_limits<float>::quiet_NaN()),
             (offset + 3) % 4);
  gpu.gemm_epilogue(true, false, s.out, s.in, s.rows, ddy.get(), s.out, dx.get(), s.in, ddw.get(),
                    s.in, Epilogue::kBiasGradA, ddb.get());
  auto r = within(ddw.read(gpu, dw.size()), dw, dw_bound, tol, "dw");
  if (!r) return r;
  return within(ddb.read(gpu, db.size()), db, db_bound, tol, "db");
}

// cuBLASLt calls so far on the host emulation (-1 on a GPU, where no one counts).
long lt_calls() {
#ifdef DPTRAIN_EMULATED_DEVICE
  return dptrain_emu::lt_calls();
#else
  return -1;
#endif
}

void check_all(Precision p, double tol) {
  auto gpu = gpu_test::make_gpu(p);
  auto cpu = gpu_test::make_cpu();
  const long calls_before = lt_calls();
  std::uint32_t seed = 40;
  for (Dense s : kShapes)
    for (int offset : {0, 1, 2}) {  // 16, 4 and 8-byte aligned first operands
      EXPECT_TRUE(check_forward(*gpu, *cpu, s, tol, offset, seed))
          << s.rows << "x" << s.in << "->" << s.out << " offset " << offset;
      EXPECT_TRUE(check_weight_grad(*gpu, *cpu, s, tol, offset, seed + 7))
          << s.rows << "x" << s.in << "->" << s.out << " offset " << offset;
      EXPECT_TRUE(check_forward(*gpu, *cpu, s, tol, offset, seed + 13, Epilogue::kBiasAdd))
          << s.rows << "x" << s.in << "->" << s.out << " offset " << offset << ", adding";
      seed += 17;
    }
  // Every problem ran on cuBLASLt, none fell back.
  if (calls_before >= 0)
    EXPECT_EQ(lt_calls() - calls_before, 3 * 3 * static_cast<long>(std::size(kShapes)));
}

// The tolerances of CudaGemm (test_gemm.cpp): fp32 rounding; tf32 and bf16
// inputs off by up to 2^-10 and 2^-8 each, a product by about twice that.
// The bias gradient in bf16 sums bf16-rounded dy: 2^-8 of sum |dy| at most.
TEST(CudaGemmEpilogue, Fp32MatchesCpu) { check_all(Precision::kFp32, 1e-5); }
TEST(CudaGemmEpilogue, Tf32WithinTf32Error) { check_all(Precision::kTf32, 4e-3); }
TEST(CudaGemmEpilogue, Bf16WithinBf16Error) { check_all(Precision::kBf16, 1.6e-2); }

// On a GPU also at a weight gradient of GPT-2 small's shape (K = 8,192
// rows), where cuBLASLt's heuristics may split K: its reductions, the bias
// gradient's among them, must still give the same bits every run.
TEST(CudaGemmEpilogue, RepeatsBitForBit) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  std::vector<Dense> shapes{{96, 40, 24}};
  if (!gpu_test::kEmulated) shapes.push_back({8192, 768, 768});
  for (const Dense& s : shapes) {
    SCOPED_TRACE(std::to_string(s.rows) + " rows");
    auto dy = upload(*gpu, random_vector(std::size_t(s.rows) * s.out, 5));
    auto x = upload(*gpu, random_vector(std::size_t(s.rows) * s.in, 6));
    dptrain::DeviceBuffer<float> dw(*gpu, std::size_t(s.out) * s.in), db(*gpu, s.out);
    std::vector<std::vector<float>> runs;
    for (int r = 0; r < 2; ++r) {
      gpu->gemm_epilogue(true, false, s.out, s.in, s.rows, dy.get(), s.out, x.get(), s.in,
                         dw.get(), s.in, Epilogue::kBiasGradA, db.get());
      auto both = download(*gpu, dw);
      const auto bias = download(*gpu, db);
      both.insert(both.end(), bias.begin(), bias.end());
      runs.push_back(both);
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

TEST(CudaGemmEpilogue, NoRowsGiveZeroGradients) {
  auto gpu = gpu_test::make_gpu();
  const int in = 5, out = 3;
  const std::vector<float> nans(std::size_t(in) * out, std::numeric_limits<float>::quiet_NaN());
  auto dw = upload(*gpu, nans);
  auto db = upload(*gpu, std::vector<float>(out, std::numeric_limits<float>::quiet_NaN()));
  dptrain::DeviceBuffer<float> dy(*gpu, 1), x(*gpu, 1);
  gpu->gemm_epilogue(true, false, out, in, 0, dy.get(), out, x.get(), in, dw.get(), in,
                     Epilogue::kBiasGradA, db.get());
  EXPECT_EQ(download(*gpu, dw), std::vector<float>(nans.size(), 0.0f));
  EXPECT_EQ(download(*gpu, db), std::vector<float>(out, 0.0f));
}

#ifdef DPTRAIN_EMULATED_DEVICE
// Where cuBLASLt has no algorithm for an epilogue, the GEMM and the dense
// kernels give the same results.
TEST(CudaGemmEpilogue, FallsBackWhereCublasLtHasNoAlgorithm) {
  struct Refusing {  // for this test only, however it ends
    Refusing() { dptrain_emu::lt_refusal() = true; }
    ~Refusing() { dptrain_emu::lt_refusal() = false; }
  } refusing;
  auto gpu = gpu_test::make_gpu(Precision::kTf32);
  auto cpu = gpu_test::make_cpu();
  const Dense s{33, 17, 9};
  const long calls_before = lt_calls();
  EXPECT_TRUE(check_forward(*gpu, *cpu, s, 4e-3, 1, 3));
  EXPECT_TRUE(check_weight_grad(*gpu, *cpu, s, 4e-3, 2, 4));
  EXPECT_TRUE(check_forward(*gpu, *cpu, s, 4e-3, 3, 5, Epilogue::kBiasAdd));
  EXPECT_EQ(lt_calls(), calls_before) << "cuBLASLt ran an epilogue it had no algorithm for";
}
#endif

}  // namespace
