// Implements: the folds with bf16 outputs (Backend::gemm_epilogue_bf16): the
// bf16 MLP's gelu:tanh between two dense layers with its input, its output
// and the first dense's output gradient held in bf16 only, as autocast
// holds them, the head's logits (kBias) and attention's output gradient
// (kNone) in bf16 only.
// Against the fp32 fold of the same backend (gemm_epilogue's kBiasGeluTanh
// and kGeluTanhGrad, the same bf16 operands) given the bias's rounding and
// the bf16 aux expanded: each bf16 output is that fp32 result rounded, bit
// for bit on the host emulation (its cuBLASLt runs the epilogue in fp32 and
// rounds D and aux, as cuBLASLt defines a bf16 D), and on a GPU within one
// bf16 rounding (2^-8 of the value) plus the fp32 fold's own bound against
// another summation order (1.2e-5 of the terms' magnitude, as
// test_gelu_epilogue.cpp derives it). And the fallback where cuBLASLt has
// no algorithm (the emulation's refusal switch): the fp32 fold rounded,
// bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "gpu_env.hpp"
#ifdef DPTRAIN_EMULATED_DEVICE
#include <cublasLt.h>  // the emulation's: lt_refusal(), lt_epilogue_calls()
#endif

namespace {

using dptrain::Backend;
using dptrain::DeviceBuffer;
using dptrain::Precision;
using Epilogue = dptrain::Backend::GemmEpilogue;
using gpu_test::bf16_bits_of;
using gpu_test::download;
using gpu_test::kEmulated;
using gpu_test::random_vector;
using gpu_test::upload;
using gpu_test::values_of_bf16;
using Floats = std::vector<float>;
using Bits = std::vector<std::uint16_t>;

constexpr int kRows = 67, kIn = 24, kOut = 40;  // kOut: a multiple of 8, as cuBLASLt's aux needs

// got is want rounded: the same bits on the emulation, else within one bf16
// rounding and the fp32 bound (`terms`: the magnitude of each value's terms).
::testing::AssertionResult rounded_from(const Bits& got, const Floats& want, const Floats& terms,
                                        const char* what) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    const float g = dptrain::bf16_value(got[i]);
    const bool ok = kEmulated ? got[i] == dptrain::bf16_bits(want[i])
                              : std::fabs(g - want[i]) <=
                                    std::ldexp(std::fabs(want[i]), -8) + 1.2e-5 * terms[i] + 1e-7;
    if (!ok)
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << g << ", want "
                                           << want[i] << " rounded";
  }
  return ::testing::AssertionSuccess();
}

Floats magnitudes(const Floats& a, const Floats& b, int m, int n, int k, bool trans_b) {
  auto cpu = gpu_test::make_cpu();
  Floats aa(a), ab(b), out(std::size_t(m) * n);
  for (float& x : aa) x = std::fabs(x);
  for (float& x : ab) x = std::fabs(x);
  cpu->gemm(false, trans_b, m, n, k, 1.0f, aa.data(), k, ab.data(), trans_b ? k : n, 0.0f,
            out.data(), n);
  return out;
}

// aux16 = bf16(x wᵀ + b16), c16 = bf16(gelu(that)) against the fp32 fold
// with the bias's rounding.
void check_forward(Backend& gpu) {
  const Floats x = random_vector(std::size_t(kRows) * kIn, 5), w = random_vector(std::size_t(kOut) * kIn, 6);
  const Floats b = random_vector(kOut, 7), b_rounded = values_of_bf16(b);
  auto dx = upload(gpu, x), dw = upload(gpu, w), db = upload(gpu, b);
  auto db_rounded = upload(gpu, b_rounded);
  auto b16 = upload(gpu, bf16_bits_of(b));
  const std::size_t n = std::size_t(kRows) * kOut;
  DeviceBuffer<float> pre(gpu, n), act(gpu, n), scratch(gpu, n), scratch2(gpu, n);
  DeviceBuffer<std::uint16_t> aux16(gpu, n), c16(gpu, n);
  gpu.gemm_epilogue(false, true, kRows, kOut, kIn, dx.get(), kIn, dw.get(), kIn, act.get(), kOut,
                    Epilogue::kBiasGeluTanh, db_rounded.get(), pre.get());
  // The fallback adds the fp32 bias it is given: here its rounding.
  gpu.gemm_epilogue_bf16(Epilogue::kBiasGeluTanh, false, true, kRows, kOut, kIn, dx.get(), kIn,
                         dw.get(), kIn, c16.get(), kOut, aux16.get(), db_rounded.get(), b16.get(),
                         scratch.get(), scratch2.get());
  Floats terms = magnitudes(x, w, kRows, kOut, kIn, true);
  for (std::size_t i = 0; i < n; ++i) terms[i] += std::fabs(b[i % kOut]);
  EXPECT_TRUE(rounded_from(download(gpu, aux16), download(gpu, pre), terms, "aux"));
  EXPECT_TRUE(rounded_from(download(gpu, c16), download(gpu, act), terms, "gelu"));
}

// The head's logits: c16 = bf16(x wᵀ + b16) against the fp32 kBias with the
// bias's rounding; the fallback folds in chunks of scratch_rows rows (the
// scratch holds no more, and the rows past it are written all the same).
void check_bias(Backend& gpu, int scratch_rows) {
  const Floats x = random_vector(std::size_t(kRows) * kIn, 11), w = random_vector(std::size_t(kOut) * kIn, 12);
  const Floats b = random_vector(kOut, 13), b_rounded = values_of_bf16(b);
  auto dx = upload(gpu, x), dw = upload(gpu, w), db_rounded = upload(gpu, b_rounded);
  auto b16 = upload(gpu, bf16_bits_of(b));
  const std::size_t n = std::size_t(kRows) * kOut;
  DeviceBuffer<float> want(gpu, n), scratch(gpu, std::size_t(scratch_rows) * kOut);
  DeviceBuffer<std::uint16_t> c16(gpu, n);
  gpu.gemm_epilogue(false, true, kRows, kOut, kIn, dx.get(), kIn, dw.get(), kIn, want.get(), kOut,
                    Epilogue::kBias, db_rounded.get());
  gpu.gemm_epilogue_bf16(Epilogue::kBias, false, true, kRows, kOut, kIn, dx.get(), kIn, dw.get(),
                         kIn, c16.get(), kOut, nullptr, db_rounded.get(), b16.get(), scratch.get(),
                         nullptr, scratch_rows);
  Floats terms = magnitudes(x, w, kRows, kOut, kIn, true);
  for (std::size_t i = 0; i < n; ++i) terms[i] += std::fabs(b[i % kOut]);
  EXPECT_TRUE(rounded_from(download(gpu, c16), download(gpu, want), terms, "logits"));
}

// Attention's output gradient: c16 = bf16(dy w) (kNone) against the fp32
// product, through the backend (cuBLASLt with a bf16 D) and through the
// default that runs where it has no algorithm (the fp32 product in chunks
// of scratch_rows rows, rounded).
void check_product(Backend& gpu, int scratch_rows) {
  const Floats dy = random_vector(std::size_t(kRows) * kOut, 14), w = random_vector(std::size_t(kOut) * kIn, 15);
  auto ddy = upload(gpu, dy), dw = upload(gpu, w);
  const std::size_t n = std::size_t(kRows) * kIn;
  DeviceBuffer<float> want(gpu, n), scratch(gpu, std::size_t(scratch_rows) * kIn);
  DeviceBuffer<std::uint16_t> c16(gpu, n), fallback16(gpu, n);
  gpu.gemm(false, false, kRows, kIn, kOut, 1.0f, ddy.get(), kOut, dw.get(), kIn, 0.0f, want.get(), kIn);
  gpu.gemm_epilogue_bf16(Epilogue::kNone, false, false, kRows, kIn, kOut, ddy.get(), kOut,
                         dw.get(), kIn, c16.get(), kIn, nullptr, nullptr, nullptr, scratch.get(),
                         nullptr, scratch_rows);
  gpu.Backend::gemm_epilogue_bf16(Epilogue::kNone, false, false, kRows, kIn, kOut, ddy.get(),
                                  kOut, dw.get(), kIn, fallback16.get(), kIn, nullptr, nullptr,
                                  nullptr, scratch.get(), nullptr, scratch_rows);
  const Floats terms = magnitudes(dy, w, kRows, kIn, kOut, false);
  EXPECT_TRUE(rounded_from(download(gpu, c16), download(gpu, want), terms, "product"));
  EXPECT_TRUE(rounded_from(download(gpu, fallback16), download(gpu, want), terms, "default"));
}

// c16 = bf16((dy w) ∘ gelu'(aux16)) against the fp32 fold over aux16's values.
void check_backward(Backend& gpu) {
  const Floats dy = random_vector(std::size_t(kRows) * kOut, 8), w = random_vector(std::size_t(kOut) * kIn, 9);
  const Floats pre = values_of_bf16(random_vector(std::size_t(kRows) * kIn, 10, -3.0f, 3.0f));
  auto ddy = upload(gpu, dy), dw = upload(gpu, w), dpre = upload(gpu, pre);
  auto aux16 = upload(gpu, bf16_bits_of(pre));
  const std::size_t n = std::size_t(kRows) * kIn;
  DeviceBuffer<float> want(gpu, n), scratch(gpu, n), scratch2(gpu, n);
  DeviceBuffer<std::uint16_t> c16(gpu, n);
  gpu.gemm_epilogue(false, false, kRows, kIn, kOut, ddy.get(), kOut, dw.get(), kIn, want.get(), kIn,
                    Epilogue::kGeluTanhGrad, nullptr, dpre.get());
  gpu.gemm_epilogue_bf16(Epilogue::kGeluTanhGrad, false, false, kRows, kIn, kOut, ddy.get(),
                         kOut, dw.get(), kIn, c16.get(), kIn, aux16.get(), nullptr, nullptr,
                         scratch.get(), scratch2.get());
  Floats terms = magnitudes(dy, w, kRows, kIn, kOut, false);
  for (float& t : terms) t *= 1.2f;  // GELU's slope is below 1.13
  EXPECT_TRUE(rounded_from(download(gpu, c16), download(gpu, want), terms, "gradient"));
}

TEST(Bf16Mlp, TheFoldsBf16OutputsAreTheFp32FoldRounded) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  check_forward(*gpu);
  check_backward(*gpu);
  check_bias(*gpu, 5);
  check_product(*gpu, 5);
}

#ifdef DPTRAIN_EMULATED_DEVICE
TEST(Bf16Mlp, RunsOnCublasLtAndFallsBackWhereItHasNoAlgorithm) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  const long forward = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  const long backward = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU);
  const long bias = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_BIAS);
  const long product = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DEFAULT);
  check_forward(*gpu);
  check_backward(*gpu);
  check_bias(*gpu, kRows);
  check_product(*gpu, kRows);
  // cuBLASLt's bf16 D, and the default's fp32 product (one chunk).
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DEFAULT), product + 2);
  // The references' fp32 folds and the bf16 ones: two calls each.
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), forward + 2);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU), backward + 2);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_BIAS), bias + 2);
  struct Refusing {  // for this part only, however it ends
    Refusing() { dptrain_emu::lt_refusal() = true; }
    ~Refusing() { dptrain_emu::lt_refusal() = false; }
  } refusing;
  auto refused = gpu_test::make_gpu(Precision::kBf16);  // plans are made per backend
  check_forward(*refused);
  check_backward(*refused);
  check_bias(*refused, 5);  // 67 rows in 14 chunks
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_BIAS), bias + 2);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), forward + 2);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU), backward + 2);
}
#endif

}  // namespace
