// Implements: GEMM operands handed over already rounded to bf16
// (GemmOperand::bf16, BackendCaps::rounds_gemm_operands) on the CUDA
// backend. Under --precision bf16 the GEMM reads the copy it is given in
// place of rounding the fp32 values itself — for either operand, in
// gemm() and in both epilogues of gemm_epilogue() — and a copy that is the
// fp32 values' rounding gives the bits of a call without one. Under fp32
// and tf32 a copy is never read. The copy is made to differ on purpose
// (the rounding of 2·x, which is exactly 2·round(x)): every product then
// doubles exactly, so a backend that ignored the copy, or read it where it
// must not, fails bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "gpu_env.hpp"

namespace {

using dptrain::Backend;
using dptrain::DeviceBuffer;
using dptrain::GemmOperand;
using dptrain::Precision;
using Epilogue = dptrain::Backend::GemmEpilogue;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

constexpr int kRows = 129, kIn = 33, kOut = 65;

// The bf16 rounding of scale · x, uploaded.
DeviceBuffer<std::uint16_t> rounded(Backend& be, const std::vector<float>& x, float scale) {
  return upload(be, gpu_test::bf16_bits_of(x, scale));
}

std::vector<float> times(std::vector<float> v, float s) {
  for (float& x : v) x *= s;
  return v;
}

// A dense layer's three products — y = x wᵀ + b, dw = dyᵀ x with db, and
// dx = dy w — with dy and w (the operands a layer may hand over rounded)
// given as `dy_op` and `w_op`; all outputs, concatenated.
struct DenseProducts {
  DenseProducts(Backend& be, std::uint32_t seed)
      : x(upload(be, random_vector(std::size_t(kRows) * kIn, seed))),
        w_host(random_vector(std::size_t(kOut) * kIn, seed + 1)),
        dy_host(random_vector(std::size_t(kRows) * kOut, seed + 2)),
        w(upload(be, w_host)),
        dy(upload(be, dy_host)),
        b(upload(be, random_vector(kOut, seed + 3))) {}

  std::vector<float> run(Backend& be, GemmOperand dy_op, GemmOperand w_op) {
    DeviceBuffer<float> y(be, std::size_t(kRows) * kOut), dw(be, std::size_t(kOut) * kIn),
        db(be, kOut), dx(be, std::size_t(kRows) * kIn);
    be.gemm_epilogue(false, true, kRows, kOut, kIn, x.get(), kIn, w_op, kIn, y.get(), kOut,
                     Epilogue::kBias, b.get());
    be.gemm_epilogue(true, false, kOut, kIn, kRows, dy_op, kOut, x.get(), kIn, dw.get(), kIn,
                     Epilogue::kBiasGradA, db.get());
    be.gemm(false, false, kRows, kIn, kOut, 1.0f, dy_op, kOut, w_op, kIn, 0.0f, dx.get(), kIn);
    std::vector<float> all;
    for (const DeviceBuffer<float>* out : {&y, &dw, &db, &dx}) {
      const auto v = download(be, *out);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }

  DeviceBuffer<float> x;
  std::vector<float> w_host, dy_host;
  DeviceBuffer<float> w, dy, b;
};

TEST(CudaRoundedOperands, OnlyBf16RoundsOperands) {
  EXPECT_TRUE(gpu_test::make_gpu(Precision::kBf16)->caps().rounds_gemm_operands);
  EXPECT_FALSE(gpu_test::make_gpu(Precision::kFp32)->caps().rounds_gemm_operands);
  EXPECT_FALSE(gpu_test::make_gpu(Precision::kTf32)->caps().rounds_gemm_operands);
  EXPECT_FALSE(gpu_test::make_cpu()->caps().rounds_gemm_operands);
}

// The copy a layer makes (ConvertKernels::to_bf16, as dense and attn do) is
// bit for bit what the GEMM would have rounded.
TEST(CudaRoundedOperands, TheFp32ValuesRoundingGivesTheSameBits) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  DenseProducts d(*gpu, 11);
  const auto plain = d.run(*gpu, d.dy.get(), d.w.get());
  DeviceBuffer<std::uint16_t> dy16(*gpu, d.dy_host.size()), w16(*gpu, d.w_host.size());
  auto& convert = gpu->kernels<dptrain::ConvertKernels>();
  convert.to_bf16(d.dy.get(), dy16.get(), d.dy_host.size());
  convert.to_bf16(d.w.get(), w16.get(), d.w_host.size());
  EXPECT_EQ(d.run(*gpu, {d.dy.get(), dy16.get()}, {d.w.get(), w16.get()}), plain);
  EXPECT_EQ(d.run(*gpu, {d.dy.get(), dy16.get()}, d.w.get()), plain);
}

// With copies of 2·dy and 2·w the products read them: y's product, dw, db
// and dx each double exactly where they read a doubled operand.
TEST(CudaRoundedOperands, Bf16ReadsTheCopyGiven) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  DenseProducts d(*gpu, 21);
  DenseProducts twice(*gpu, 21);  // the same values, then doubled: the expected bits
  gpu->copy_to_device(twice.dy.get(), times(d.dy_host, 2.0f).data(), d.dy_host.size() * 4);
  const auto want_dy = twice.run(*gpu, twice.dy.get(), twice.w.get());
  const auto dy2 = rounded(*gpu, d.dy_host, 2.0f);
  EXPECT_EQ(d.run(*gpu, {d.dy.get(), dy2.get()}, d.w.get()), want_dy)
      << "the weight and input gradients did not read dy's copy";
  gpu->copy_to_device(twice.w.get(), times(d.w_host, 2.0f).data(), d.w_host.size() * 4);
  const auto want_both = twice.run(*gpu, twice.dy.get(), twice.w.get());
  const auto w2 = rounded(*gpu, d.w_host, 2.0f);
  EXPECT_EQ(d.run(*gpu, {d.dy.get(), dy2.get()}, {d.w.get(), w2.get()}), want_both)
      << "the forward and input gradient did not read w's copy (the second operand)";
}

TEST(CudaRoundedOperands, Fp32AndTf32NeverReadACopy) {
  for (Precision p : {Precision::kFp32, Precision::kTf32}) {
    auto gpu = gpu_test::make_gpu(p);
    DenseProducts d(*gpu, 31);
    const auto plain = d.run(*gpu, d.dy.get(), d.w.get());
    const auto dy2 = rounded(*gpu, d.dy_host, 2.0f), w2 = rounded(*gpu, d.w_host, 2.0f);
    EXPECT_EQ(d.run(*gpu, {d.dy.get(), dy2.get()}, {d.w.get(), w2.get()}), plain)
        << (p == Precision::kFp32 ? "fp32" : "tf32");
  }
}

}  // namespace
