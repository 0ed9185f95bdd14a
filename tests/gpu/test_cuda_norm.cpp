// Implements: the CUDA batch-norm kernels against the CPU backend on random
// inputs, over shapes that hit one value per channel, flat [N, F], partial
// blocks, many chunks per channel and the chunk cap, an empty shard, and a
// mean far from zero, each also with a relu in bn's passes. The chain of a
// training step (sums, statistics with the running update, normalize, gradient
// sums, input gradient) agrees within the rounding of float outputs of double
// sums; fed the CPU's statistics, the per-channel and elementwise kernels give
// the CPU's bits; the GPU gives the same bits on every run; and the sums and
// statistics in one call give the bits of the two calls. A relu in bn's
// passes gives the bits of bn's passes and a relu layer's, on both backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"
#include "gpu_env.hpp"

namespace {

using namespace dptrain;
using gpu_test::all_close;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

constexpr float kEps = 1e-5f, kMomentum = 0.1f;

struct Case {
  int rows, channels, spatial;
  float offset;  // added to x and to the running mean: large means, small variances
};

constexpr Case kCases[] = {
    {1, 4, 1, 0.0f},      {7, 3, 1, 0.0f},       {64, 300, 1, 0.0f},   {5, 3, 49, 0.0f},
    {32, 8, 1024, 0.0f},  {256, 3, 300, 0.0f},   {2, 2, 100000, 0.0f}, {3, 1, 3000000, 0.0f},
    {128, 16, 64, 1000.0f}, {33, 5, 7, 0.0f},
};

struct BnInputs {
  NormShape s;
  std::vector<float> x, dy, running_mean, running_var, weight, bias;
  std::size_t values() const { return x.size(); }
  double count() const { return static_cast<double>(s.rows) * s.spatial; }
};

BnInputs make_inputs(const Case& c, std::uint32_t seed) {
  BnInputs in;
  in.s = {c.rows, c.channels, c.spatial};
  const std::size_t n = static_cast<std::size_t>(c.rows) * c.channels * c.spatial;
  const auto C = static_cast<std::size_t>(c.channels);
  in.x = random_vector(n, seed, c.offset - 1.0f, c.offset + 1.0f);
  in.dy = random_vector(n, seed + 1);
  in.running_mean = random_vector(C, seed + 2, c.offset - 0.5f, c.offset + 0.5f);
  in.running_var = random_vector(C, seed + 3, 0.5f, 2.0f);
  in.weight = random_vector(C, seed + 4, 0.5f, 1.5f);
  in.bias = random_vector(C, seed + 5);
  return in;
}

struct BnOutputs {
  std::vector<float> sums, mean, invstd, running_mean, running_var, y, grad_sums, dx;
};

// One training step of a bn layer on be, as src/model/layers/norm.cpp calls the
// kernels: the running mean is the shift of the sums and is updated in place.
// With `relu`, the bn and a relu after it in one pass each way: y is the
// relu's output and in.dy the gradient w.r.t. it.
BnOutputs run_step(Backend& be, const BnInputs& in, bool relu = false) {
  const auto C = static_cast<std::size_t>(in.s.channels);
  NormKernels& k = be.kernels<NormKernels>();
  auto x = upload(be, in.x), dy = upload(be, in.dy);
  auto running_mean = upload(be, in.running_mean), running_var = upload(be, in.running_var);
  auto weight = upload(be, in.weight), bias = upload(be, in.bias);
  DeviceBuffer<float> sums(be, 2 * C), mean(be, C), invstd(be, C), grad_sums(be, 2 * C);
  DeviceBuffer<float> y(be, in.values()), dx(be, in.values());
  k.batch_sums(x.get(), in.s, running_mean.get(), sums.get());
  BnOutputs out;
  out.sums = download(be, sums);
  k.batch_stats(sums.get(), running_mean.get(), in.s.channels, in.count(), kEps, kMomentum,
                mean.get(), invstd.get(), running_mean.get(), running_var.get());
  k.normalize(x.get(), in.s, mean.get(), invstd.get(), weight.get(), bias.get(), relu, y.get());
  const float* gate = relu ? y.get() : nullptr;
  k.grad_sums(x.get(), gate, dy.get(), in.s, mean.get(), invstd.get(), grad_sums.get());
  k.input_grad(x.get(), gate, dy.get(), in.s, mean.get(), invstd.get(), weight.get(),
               grad_sums.get(), in.count(), dx.get());
  out.mean = download(be, mean);
  out.invstd = download(be, invstd);
  out.running_mean = download(be, running_mean);
  out.running_var = download(be, running_var);
  out.y = download(be, y);
  out.grad_sums = download(be, grad_sums);
  out.dx = download(be, dx);
  return out;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

std::string name(const Case& c) {
  return "[" + std::to_string(c.rows) + ", " + std::to_string(c.channels) + ", " +
         std::to_string(c.spatial) + "] offset " + std::to_string(c.offset);
}

class CudaNorm : public gpu_test::CpuAndGpu {};

// Sums in double on both sides, rounded to float once: within a few float
// ulps (the absolute term covers totals that cancel to near zero).
TEST_F(CudaNorm, TrainingStepMatchesCpu) {
  std::uint32_t seed = 10;
  for (const Case& c : kCases) {
    const BnInputs in = make_inputs(c, seed += 10);
    const BnOutputs g = run_step(*gpu_, in), r = run_step(*cpu_, in);
    const double n = in.count(), scale = 1.0 + std::fabs(c.offset);
    EXPECT_TRUE(all_close(g.sums, r.sums, 1e-6, 1e-9 * n)) << name(c);
    EXPECT_TRUE(all_close(g.mean, r.mean, 1e-6, 1e-7 * scale)) << name(c);
    EXPECT_TRUE(all_close(g.invstd, r.invstd, 1e-6, 0.0)) << name(c);
    EXPECT_TRUE(all_close(g.running_mean, r.running_mean, 1e-6, 1e-7 * scale)) << name(c);
    EXPECT_TRUE(all_close(g.running_var, r.running_var, 1e-6, 0.0)) << name(c);
    EXPECT_TRUE(all_close(g.y, r.y, 1e-5, 1e-5 * scale)) << name(c);
    EXPECT_TRUE(all_close(g.grad_sums, r.grad_sums, 1e-5, 1e-5 * std::sqrt(n) * scale)) << name(c);
    EXPECT_TRUE(all_close(g.dx, r.dx, 1e-5, 1e-5 * scale)) << name(c);
  }
}

// The bn and relu of the same step as two layers: normalize, the relu
// activation kernels forward and backward (from y), then the gradients.
BnOutputs run_step_then_relu(Backend& be, const BnInputs& in) {
  const auto C = static_cast<std::size_t>(in.s.channels);
  NormKernels& k = be.kernels<NormKernels>();
  ActivationKernels& a = be.kernels<ActivationKernels>();
  auto x = upload(be, in.x), dz = upload(be, in.dy);
  auto running_mean = upload(be, in.running_mean), running_var = upload(be, in.running_var);
  auto weight = upload(be, in.weight), bias = upload(be, in.bias);
  DeviceBuffer<float> sums(be, 2 * C), mean(be, C), invstd(be, C), grad_sums(be, 2 * C);
  DeviceBuffer<float> y(be, in.values()), z(be, in.values()), dy(be, in.values());
  DeviceBuffer<float> dx(be, in.values());
  k.batch_sums(x.get(), in.s, running_mean.get(), sums.get());
  k.batch_stats(sums.get(), running_mean.get(), in.s.channels, in.count(), kEps, kMomentum,
                mean.get(), invstd.get(), running_mean.get(), running_var.get());
  k.normalize(x.get(), in.s, mean.get(), invstd.get(), weight.get(), bias.get(), false, y.get());
  a.forward(Activation::kRelu, y.get(), z.get(), in.values());
  a.backward(Activation::kRelu, y.get(), z.get(), dz.get(), dy.get(), in.values());
  k.grad_sums(x.get(), nullptr, dy.get(), in.s, mean.get(), invstd.get(), grad_sums.get());
  k.input_grad(x.get(), nullptr, dy.get(), in.s, mean.get(), invstd.get(), weight.get(),
               grad_sums.get(), in.count(), dx.get());
  BnOutputs out;
  out.y = download(be, z);
  out.grad_sums = download(be, grad_sums);
  out.dx = download(be, dx);
  return out;
}

// bn with a relu in its passes (Layer::absorbs_next) against the two
// layers: the same bits on each backend, about half of the outputs zero,
// and the GPU's within TrainingStepMatchesCpu's bounds of the CPU's.
TEST_F(CudaNorm, ReluInBnsPassesGivesTheBitsOfTheTwoLayers) {
  std::uint32_t seed = 500;
  for (const Case& c : {kCases[1], kCases[3], kCases[4], kCases[8], kCases[9]}) {
    const BnInputs in = make_inputs(c, seed += 10);
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      const char* where = be == cpu_.get() ? "cpu" : "gpu";
      const BnOutputs fused = run_step(*be, in, true), split = run_step_then_relu(*be, in);
      EXPECT_EQ(bits(fused.y), bits(split.y)) << where << " " << name(c);
      EXPECT_EQ(bits(fused.grad_sums), bits(split.grad_sums)) << where << " " << name(c);
      EXPECT_EQ(bits(fused.dx), bits(split.dx)) << where << " " << name(c);
      const auto zeros = std::count(fused.y.begin(), fused.y.end(), 0.0f);
      EXPECT_GT(zeros, 0) << where << " " << name(c);
      EXPECT_LT(zeros, static_cast<std::ptrdiff_t>(fused.y.size())) << where << " " << name(c);
    }
    const BnOutputs g = run_step(*gpu_, in, true), r = run_step(*cpu_, in, true);
    const double n = in.count(), scale = 1.0 + std::fabs(c.offset);
    EXPECT_TRUE(all_close(g.y, r.y, 1e-5, 1e-5 * scale)) << name(c);
    EXPECT_TRUE(all_close(g.grad_sums, r.grad_sums, 1e-5, 1e-5 * std::sqrt(n) * scale)) << name(c);
    EXPECT_TRUE(all_close(g.dx, r.dx, 1e-5, 1e-5 * scale)) << name(c);
  }
}

// Fixed-order reductions and a chunk count fixed by the shape: bit for bit.
TEST_F(CudaNorm, RepeatedRunsGiveTheSameBits) {
  for (const Case& c : {kCases[2], kCases[5], kCases[7], kCases[8]}) {
    const BnInputs in = make_inputs(c, 77);
    const BnOutputs a = run_step(*gpu_, in), b = run_step(*gpu_, in);
    EXPECT_EQ(bits(a.sums), bits(b.sums)) << name(c);
    EXPECT_EQ(bits(a.running_var), bits(b.running_var)) << name(c);
    EXPECT_EQ(bits(a.y), bits(b.y)) << name(c);
    EXPECT_EQ(bits(a.grad_sums), bits(b.grad_sums)) << name(c);
    EXPECT_EQ(bits(a.dx), bits(b.dx)) << name(c);
  }
}

// batch_sums_and_stats (one launch on CUDA: the channel's last block adds
// the chunks and computes the statistics) against batch_sums and then
// batch_stats: the same bits, from one chunk a channel to the chunk cap,
// for more channels than the arrival counts first hold (they grow), and
// again after a call with another chunk count (each launch leaves them
// zero). The CPU's is the two calls.
TEST_F(CudaNorm, SumsAndStatisticsInOneCallGiveTheBitsOfTheTwoCalls) {
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({3, 5000, 2, 0.0f});
  cases.push_back({64, 300, 1, 0.0f});
  std::uint32_t seed = 700;
  for (Backend* be : {gpu_.get(), cpu_.get()}) {
    for (const Case& c : cases) {
      const BnInputs in = make_inputs(c, seed += 10);
      const auto C = static_cast<std::size_t>(c.channels);
      NormKernels& k = be->kernels<NormKernels>();
      auto x = upload(*be, in.x);
      std::vector<BnOutputs> out(2);
      for (int fused = 0; fused < 2; ++fused) {
        auto running_mean = upload(*be, in.running_mean), running_var = upload(*be, in.running_var);
        DeviceBuffer<float> sums(*be, 2 * C), mean(*be, C), invstd(*be, C);
        if (fused) {
          k.batch_sums_and_stats(x.get(), in.s, running_mean.get(), in.count(), kEps, kMomentum,
                                 sums.get(), mean.get(), invstd.get(), running_mean.get(),
                                 running_var.get());
        } else {
          k.batch_sums(x.get(), in.s, running_mean.get(), sums.get());
          k.batch_stats(sums.get(), running_mean.get(), c.channels, in.count(), kEps, kMomentum,
                        mean.get(), invstd.get(), running_mean.get(), running_var.get());
        }
        out[fused] = {download(*be, sums),         download(*be, mean),
                      download(*be, invstd),       download(*be, running_mean),
                      download(*be, running_var),  {}, {}, {}};
      }
      const std::string where = std::string(be == gpu_.get() ? "gpu " : "cpu ") + name(c);
      EXPECT_EQ(bits(out[1].sums), bits(out[0].sums)) << where;
      EXPECT_EQ(bits(out[1].mean), bits(out[0].mean)) << where;
      EXPECT_EQ(bits(out[1].invstd), bits(out[0].invstd)) << where;
      EXPECT_EQ(bits(out[1].running_mean), bits(out[0].running_mean)) << where;
      EXPECT_EQ(bits(out[1].running_var), bits(out[0].running_var)) << where;
      // Not a stale buffer: the running mean moved toward the batch's.
      EXPECT_NE(bits(out[1].running_mean), bits(in.running_mean)) << where;
    }
  }
}

// Given the CPU's sums and statistics, the kernels that do no reduction
// round every operation as the CPU does (no FMA contraction): equal bits.
TEST_F(CudaNorm, PerChannelAndElementwiseKernelsGiveTheCpusBits) {
  for (const Case& c : {kCases[1], kCases[3], kCases[6], kCases[8], kCases[9]}) {
    const BnInputs in = make_inputs(c, 99);
    const BnOutputs r = run_step(*cpu_, in);
    const auto C = static_cast<std::size_t>(c.channels);
    NormKernels& k = gpu_->kernels<NormKernels>();
    auto x = upload(*gpu_, in.x), dy = upload(*gpu_, in.dy);
    auto sums = upload(*gpu_, r.sums), shift = upload(*gpu_, in.running_mean);
    auto running_mean = upload(*gpu_, in.running_mean), running_var = upload(*gpu_, in.running_var);
    auto weight = upload(*gpu_, in.weight), bias = upload(*gpu_, in.bias);
    DeviceBuffer<float> mean(*gpu_, C), invstd(*gpu_, C);
    DeviceBuffer<float> y(*gpu_, in.values()), dx(*gpu_, in.values());
    k.batch_stats(sums.get(), shift.get(), c.channels, in.count(), kEps, kMomentum, mean.get(),
                  invstd.get(), running_mean.get(), running_var.get());
    EXPECT_EQ(bits(download(*gpu_, mean)), bits(r.mean)) << name(c);
    EXPECT_EQ(bits(download(*gpu_, invstd)), bits(r.invstd)) << name(c);
    EXPECT_EQ(bits(download(*gpu_, running_mean)), bits(r.running_mean)) << name(c);
    EXPECT_EQ(bits(download(*gpu_, running_var)), bits(r.running_var)) << name(c);

    auto cpu_mean = upload(*gpu_, r.mean), cpu_invstd = upload(*gpu_, r.invstd);
    auto cpu_grad_sums = upload(*gpu_, r.grad_sums);
    k.normalize(x.get(), in.s, cpu_mean.get(), cpu_invstd.get(), weight.get(), bias.get(), false,
                y.get());
    EXPECT_EQ(bits(download(*gpu_, y)), bits(r.y)) << name(c);
    k.input_grad(x.get(), nullptr, dy.get(), in.s, cpu_mean.get(), cpu_invstd.get(),
                 weight.get(), cpu_grad_sums.get(), in.count(), dx.get());
    EXPECT_EQ(bits(download(*gpu_, dx)), bits(r.dx)) << name(c);

    // Evaluation's 1 / sqrt(running_var + eps).
    std::vector<float> want(C);
    cpu_->kernels<NormKernels>().inverse_std(in.running_var.data(), c.channels, kEps, want.data());
    auto var = upload(*gpu_, in.running_var);
    DeviceBuffer<float> eval_invstd(*gpu_, C);
    k.inverse_std(var.get(), c.channels, kEps, eval_invstd.get());
    EXPECT_EQ(bits(download(*gpu_, eval_invstd)), bits(want)) << name(c);
  }
}

// An empty shard (a rank with no rows, x null) gives zero sums, whatever
// the output held; normalize and input_grad touch nothing.
TEST_F(CudaNorm, EmptyShardGivesZeroSums) {
  const NormShape s{0, 5, 9};
  auto shift = upload(*gpu_, random_vector(5, 3));
  DeviceBuffer<float> sums(*gpu_, 10);
  gpu_->fill(sums.get(), 7.0f, 10);
  gpu_->kernels<NormKernels>().batch_sums(nullptr, s, shift.get(), sums.get());
  EXPECT_EQ(download(*gpu_, sums), std::vector<float>(10, 0.0f));
  gpu_->fill(sums.get(), 7.0f, 10);
  gpu_->kernels<NormKernels>().grad_sums(nullptr, nullptr, nullptr, s, shift.get(), shift.get(),
                                         sums.get());
  EXPECT_EQ(download(*gpu_, sums), std::vector<float>(10, 0.0f));
}

}  // namespace
