// Implements: the CUDA backend's identity and capabilities, its memory, fill
// and NaN count, and its dense and activation kernel tables, checked against
// the CPU backend on random inputs, with sizes that hit partial blocks and
// warps (1, 3, 257, ...).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "gpu_env.hpp"

namespace {

using dptrain::Activation;
using dptrain::DeviceBuffer;
using gpu_test::all_close;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

constexpr std::size_t kSizes[] = {1, 3, 31, 257, 1000 * 37, 1000003};

class CudaKernels : public gpu_test::CpuAndGpu {};

TEST_F(CudaKernels, IdentityAndCaps) {
  EXPECT_EQ(gpu_->name(), "cuda");
  EXPECT_EQ(gpu_->placement(), "cuda:" + std::to_string(gpu_test::env().device));
  const dptrain::BackendCaps caps = gpu_->caps();
  EXPECT_TRUE(caps.staged_uploads);
  EXPECT_TRUE(caps.device_clock);
  EXPECT_FALSE(caps.host_addressable_memory);
  const std::string uuid = dptrain::cuda_device_uuid(gpu_test::env().device);
  EXPECT_EQ(uuid.rfind("GPU-", 0), 0u) << uuid;
  EXPECT_EQ(uuid.size(), 40u) << uuid;
}

TEST_F(CudaKernels, BadDeviceIndexIsUsageError) {
  dptrain::BackendOptions o;
  o.device_index = dptrain::visible_devices("cuda");
  try {
    dptrain::make_backend("cuda", o);
    FAIL() << "expected an error";
  } catch (const dptrain::Error& e) {
    EXPECT_EQ(e.code(), dptrain::ExitCode::kUsage);
  }
}

TEST_F(CudaKernels, AllocateIsZeroFilledAndCopiesRoundTrip) {
  for (std::size_t n : kSizes) {
    DeviceBuffer<float> buf(*gpu_, n);
    EXPECT_EQ(download(*gpu_, buf), std::vector<float>(n, 0.0f)) << n;
    const auto x = random_vector(n, 1);
    gpu_->copy_to_device(buf.get(), x.data(), n * sizeof(float));
    DeviceBuffer<float> copy(*gpu_, n);
    gpu_->copy_device(copy.get(), buf.get(), n * sizeof(float));
    EXPECT_EQ(download(*gpu_, copy), x) << n;
  }
  void* empty = gpu_->allocate(0);
  EXPECT_NE(empty, nullptr);
  gpu_->deallocate(empty);
  gpu_->deallocate(nullptr);
}

TEST_F(CudaKernels, OverlappingCopyDeviceActsLikeMemmove) {
  const std::size_t n = 1000;
  const auto x = random_vector(n, 2);
  for (std::ptrdiff_t shift : {-300, -1, 1, 300}) {
    auto want = x;
    auto buf = upload(*gpu_, x);
    const std::size_t count = n - 300;
    const std::size_t src = shift < 0 ? 300 : 0, dst = src + shift;
    std::memmove(want.data() + dst, want.data() + src, count * sizeof(float));
    gpu_->copy_device(buf.get() + dst, buf.get() + src, count * sizeof(float));
    EXPECT_EQ(download(*gpu_, buf), want) << "shift " << shift;
  }
}

TEST_F(CudaKernels, Fill) {
  for (std::size_t n : kSizes) {
    DeviceBuffer<float> buf(*gpu_, n);
    gpu_->fill(buf.get(), 2.5f, n);
    EXPECT_EQ(download(*gpu_, buf), std::vector<float>(n, 2.5f)) << n;
  }
}

TEST_F(CudaKernels, AddBiasAndBiasGrad) {
  const std::pair<int, int> shapes[] = {{1, 1}, {3, 5}, {257, 33}, {1000, 37}, {128, 1000}, {4099, 10}};
  for (auto [rows, cols] : shapes) {
    const std::size_t total = static_cast<std::size_t>(rows) * cols;
    const auto y = random_vector(total, 4), bias = random_vector(cols, 5);
    auto want = y;
    cpu_->kernels<dptrain::DenseKernels>().add_bias(want.data(), bias.data(), rows, cols);
    auto dy = upload(*gpu_, y);
    auto db = upload(*gpu_, bias);
    gpu_->kernels<dptrain::DenseKernels>().add_bias(dy.get(), db.get(), rows, cols);
    EXPECT_EQ(download(*gpu_, dy), want) << rows << "x" << cols;

    std::vector<float> want_db(cols, 7.0f);
    cpu_->kernels<dptrain::DenseKernels>().bias_grad(y.data(), want_db.data(), rows, cols);
    auto g = upload(*gpu_, y);
    DeviceBuffer<float> got_db(*gpu_, cols);
    gpu_->fill(got_db.get(), 7.0f, cols);  // must be overwritten, not added to
    gpu_->kernels<dptrain::DenseKernels>().bias_grad(g.get(), got_db.get(), rows, cols);
    EXPECT_TRUE(all_close(download(*gpu_, got_db), want_db, 1e-5, 1e-5 * std::sqrt(rows)))
        << rows << "x" << cols;
  }
  DeviceBuffer<float> db(*gpu_, 7);
  gpu_->fill(db.get(), 1.0f, 7);
  gpu_->kernels<dptrain::DenseKernels>().bias_grad(db.get(), db.get(), 0, 7);  // no rows: zeros
  EXPECT_EQ(download(*gpu_, db), std::vector<float>(7, 0.0f));
}

TEST_F(CudaKernels, BiasGradIsDeterministic) {
  const int rows = 3001, cols = 77;
  auto dy = upload(*gpu_, random_vector(static_cast<std::size_t>(rows) * cols, 6));
  DeviceBuffer<float> a(*gpu_, cols), b(*gpu_, cols);
  gpu_->kernels<dptrain::DenseKernels>().bias_grad(dy.get(), a.get(), rows, cols);
  gpu_->kernels<dptrain::DenseKernels>().bias_grad(dy.get(), b.get(), rows, cols);
  EXPECT_EQ(download(*gpu_, a), download(*gpu_, b));
}

TEST_F(CudaKernels, Activations) {
  for (Activation f : {Activation::kRelu, Activation::kTanh, Activation::kGelu, Activation::kSigmoid,
                       Activation::kGeluTanh}) {
    for (std::size_t n : kSizes) {
      auto x = random_vector(n, 7, -6.0f, 6.0f);
      if (n > 2) x[1] = 0.0f;  // relu's kink: both sides must agree on it
      const auto dy = random_vector(n, 8);
      std::vector<float> y(n), dx(n);
      cpu_->kernels<dptrain::ActivationKernels>().forward(f, x.data(), y.data(), n);
      cpu_->kernels<dptrain::ActivationKernels>().backward(f, x.data(), y.data(), dy.data(),
                                                           dx.data(), n);

      auto gx = upload(*gpu_, x);
      auto gdy = upload(*gpu_, dy);
      DeviceBuffer<float> gy(*gpu_, n), gdx(*gpu_, n);
      gpu_->kernels<dptrain::ActivationKernels>().forward(f, gx.get(), gy.get(), n);
      // Backward from the CPU's y, so a forward difference does not leak in.
      auto cy = upload(*gpu_, y);
      gpu_->kernels<dptrain::ActivationKernels>().backward(f, gx.get(), cy.get(), gdy.get(),
                                                           gdx.get(), n);
      const int fi = static_cast<int>(f);
      EXPECT_TRUE(all_close(download(*gpu_, gy), y, 2e-6, 1e-6)) << "forward f=" << fi << " n=" << n;
      EXPECT_TRUE(all_close(download(*gpu_, gdx), dx, 2e-6, 1e-6)) << "backward f=" << fi << " n=" << n;
    }
  }
}

TEST_F(CudaKernels, CountNonfinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (std::size_t n : kSizes) {
    auto x = random_vector(n, 9);
    auto dev = upload(*gpu_, x);
    EXPECT_EQ(gpu_->count_nonfinite(dev.get(), n), 0u) << n;
    std::size_t want = 1;
    if (n > 4) {
      x[1] = std::numeric_limits<float>::max();         // finite
      x[2] = std::numeric_limits<float>::denorm_min();  // finite
      x[0] = inf;
      x[n / 2] = -inf;
      want = 3;
    }
    x[n - 1] = nan;
    dev = upload(*gpu_, x);
    EXPECT_EQ(gpu_->count_nonfinite(dev.get(), n), want) << n;
    EXPECT_EQ(cpu_->count_nonfinite(x.data(), n), want) << n;
  }
  DeviceBuffer<float> one(*gpu_, 1);
  EXPECT_EQ(gpu_->count_nonfinite(one.get(), 0), 0u);
}

}  // namespace
