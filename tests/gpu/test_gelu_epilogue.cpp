// Implements: the gelu:tanh folded into the dense products around it on the
// CUDA backend (Backend::gemm_epilogue's kBiasGeluTanh and kGeluTanhGrad:
// cuBLASLt's GELU_AUX_BIAS and DGELU), against the same products made the
// unfolded way on the same backend — the bias epilogue and the activation
// kernel's forward; the GEMM and the activation kernel's backward — in
// fp32, tf32 and bf16: on the host emulation bit for bit (its cuBLASLt
// computes GELU with the activation kernel's operations), on a GPU within
// fp32 rounding of the terms' magnitudes (cuBLASLt's GELU is its own code,
// and its algorithm may sum in another order), 1e-5 of
// (|x| |w| + |b|) · 1.2 (GELU's slope is below 1.13 everywhere). Besides:
// the fallback where cuBLASLt offers no algorithm (the emulation), and a
// block res(ln, dense, gelu:tanh, dense) whose training step runs both
// folds (counted on the emulation) with the CPU's gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "gpu_env.hpp"
#include "training_support.hpp"
#ifdef DPTRAIN_EMULATED_DEVICE
#include <cublasLt.h>  // the emulation's: lt_refusal(), lt_epilogue_calls()
#endif

namespace {

using dptrain::Activation;
using dptrain::Backend;
using dptrain::DeviceBuffer;
using dptrain::Precision;
using Epilogue = dptrain::Backend::GemmEpilogue;
using gpu_test::download;
using gpu_test::kEmulated;
using gpu_test::random_vector;
using gpu_test::upload;
using Floats = std::vector<float>;

constexpr int kRows = 67, kIn = 24, kOut = 40;  // aux's leading dimension kOut: a multiple of 8


// |a - b| within tol · bound elementwise (equal bits on the emulation).
::testing::AssertionResult close(const Floats& got, const Floats& want, const Floats& bound,
                                 const char* what) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool ok = kEmulated ? std::memcmp(&got[i], &want[i], sizeof(float)) == 0
                              : std::fabs(got[i] - want[i]) <= 1e-5 * 1.2 * bound[i] + 1e-7;
    if (!ok)
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << got[i] << ", want "
                                           << want[i];
  }
  return ::testing::AssertionSuccess();
}

Floats abs_of(Floats v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

struct Operands {
  Operands(Backend& be, std::uint32_t seed)
      : x_host(random_vector(std::size_t(kRows) * kIn, seed)),
        w_host(random_vector(std::size_t(kOut) * kIn, seed + 1)),
        b_host(random_vector(kOut, seed + 2)),
        x(upload(be, x_host)),
        w(upload(be, w_host)),
        b(upload(be, b_host)) {}
  // |x| |w|ᵀ + |b| on the CPU backend: the magnitude of each output's terms.
  Floats bound() const {
    auto cpu = gpu_test::make_cpu();
    const Floats ax = abs_of(x_host), aw = abs_of(w_host), ab = abs_of(b_host);
    Floats out(std::size_t(kRows) * kOut);
    cpu->gemm_epilogue(false, true, kRows, kOut, kIn, ax.data(), kIn, aw.data(), kIn, out.data(),
                       kOut, Epilogue::kBias, const_cast<float*>(ab.data()));
    return out;
  }
  Floats x_host, w_host, b_host;
  DeviceBuffer<float> x, w, b;
};

void check_forward(Precision p) {
  auto gpu = gpu_test::make_gpu(p);
  Operands o(*gpu, 5);
  const std::size_t n = std::size_t(kRows) * kOut;
  DeviceBuffer<float> pre(*gpu, n), act(*gpu, n), want_pre(*gpu, n), want_act(*gpu, n);
  gpu->gemm_epilogue(false, true, kRows, kOut, kIn, o.x.get(), kIn, o.w.get(), kIn, act.get(), kOut,
                     Epilogue::kBiasGeluTanh, o.b.get(), pre.get());
  gpu->gemm_epilogue(false, true, kRows, kOut, kIn, o.x.get(), kIn, o.w.get(), kIn,
                     want_pre.get(), kOut, Epilogue::kBias, o.b.get());
  gpu->kernels<dptrain::ActivationKernels>().forward(Activation::kGeluTanh, want_pre.get(),
                                                      want_act.get(), n);
  const Floats bound = o.bound();
  EXPECT_TRUE(close(download(*gpu, pre), download(*gpu, want_pre), bound, "pre-activation"));
  EXPECT_TRUE(close(download(*gpu, act), download(*gpu, want_act), bound, "gelu"));
}

// prev_dx = (dy w) ∘ gelu'(pre): dy [rows, out], w [out, in], pre [rows, in].
void check_backward(Precision p) {
  auto gpu = gpu_test::make_gpu(p);
  const Floats dy_host = random_vector(std::size_t(kRows) * kOut, 7);
  const Floats w_host = random_vector(std::size_t(kOut) * kIn, 8);
  const Floats pre_host = random_vector(std::size_t(kRows) * kIn, 9, -3.0f, 3.0f);
  auto dy = upload(*gpu, dy_host), w = upload(*gpu, w_host), pre = upload(*gpu, pre_host);
  const std::size_t n = std::size_t(kRows) * kIn;
  DeviceBuffer<float> got(*gpu, n), product(*gpu, n), want(*gpu, n);
  gpu->gemm_epilogue(false, false, kRows, kIn, kOut, dy.get(), kOut, w.get(), kIn, got.get(), kIn,
                     Epilogue::kGeluTanhGrad, nullptr, pre.get());
  gpu->gemm(false, false, kRows, kIn, kOut, 1.0f, dy.get(), kOut, w.get(), kIn, 0.0f,
            product.get(), kIn);
  gpu->kernels<dptrain::ActivationKernels>().backward(Activation::kGeluTanh, pre.get(), nullptr,
                                                       product.get(), want.get(), n);
  Floats bound(n);
  auto cpu = gpu_test::make_cpu();
  const Floats ady = abs_of(dy_host), aw = abs_of(w_host);
  cpu->gemm(false, false, kRows, kIn, kOut, 1.0f, ady.data(), kOut, aw.data(), kIn, 0.0f,
            bound.data(), kIn);
  EXPECT_TRUE(close(download(*gpu, got), download(*gpu, want), bound, "gradient"));
}

TEST(CudaGeluEpilogue, ForwardIsTheBiasEpilogueThenTheActivation) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) check_forward(p);
}

TEST(CudaGeluEpilogue, BackwardIsTheProductThenTheActivationGradient) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) check_backward(p);
}

#ifdef DPTRAIN_EMULATED_DEVICE
TEST(CudaGeluEpilogue, RunsOnCublasLtAndFallsBackWhereItHasNoAlgorithm) {
  const long forward = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  const long backward = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU);
  check_forward(Precision::kFp32);
  check_backward(Precision::kFp32);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), forward + 1);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU), backward + 1);
  struct Refusing {  // for this part only, however it ends
    Refusing() { dptrain_emu::lt_refusal() = true; }
    ~Refusing() { dptrain_emu::lt_refusal() = false; }
  } refusing;
  check_forward(Precision::kBf16);
  check_backward(Precision::kBf16);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), forward + 1);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU), backward + 1);
}

// A block with the MLP of a GPT: one training step folds the gelu:tanh into
// the first dense product's forward and the second's input gradient, once
// each, and its gradients are the CPU's (which folds nothing) within fp32
// rounding.
TEST(CudaGeluEpilogue, ABlockFoldsTheGeluIntoItsDenseProducts) {
  using dptrain::Model;
  const auto specs = dptrain::parse_model_spec("res(ln,dense:16,gelu:tanh,dense:8),gap,dense:3");
  const dptrain::Shape input{5, 8};
  const int rows = 6;
  auto gpu = gpu_test::make_gpu(Precision::kFp32);
  auto cpu = gpu_test::make_cpu();
  Model on_gpu(*gpu, specs, input, rows), on_cpu(*cpu, specs, input, rows);
  on_gpu.init(3);
  on_cpu.init(3);
  const Floats x = random_vector(std::size_t(rows) * 40, 21);
  const auto labels = gpu_test::random_labels(rows, 3, 22);
  const long forward = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  const long backward = dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU);
  auto gradients = [&](Backend& be, Model& m) {
    auto dx = upload(be, x);
    auto y = upload(be, labels);
    DeviceBuffer<float> stats(be, 2);
    be.fill(stats.get(), 0.0f, 2);
    be.kernels<dptrain::LossKernels>().softmax_xent(m.forward(dx.get(), rows), y.get(), rows, 3,
                                                    1.0f / rows, m.output_grad(), stats.get());
    m.backward(dx.get(), m.output_grad(), rows);
    return download(be, m.grads(), m.num_params());
  };
  const Floats got = gradients(*gpu, on_gpu), want = gradients(*cpu, on_cpu);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), forward + 1);
  EXPECT_EQ(dptrain_emu::lt_epilogue_calls(CUBLASLT_EPILOGUE_DGELU), backward + 1);
  float largest = 0.0f;
  for (float g : want) largest = std::max(largest, std::fabs(g));
  ASSERT_GT(largest, 0.0f);
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * largest) << "gradient " << i;
}
#endif

}  // namespace
