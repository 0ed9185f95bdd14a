// Implements: the CUDA backend's losses (softmax cross-entropy with first-max
// accuracy, MSE; stats accumulated on the device) and fused optimizer steps
// (SGD, Nesterov, Adam, AdamW over several iterations) against the CPU backend.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"
#include "gpu_env.hpp"

namespace {

using dptrain::AdamParams;
using dptrain::DeviceBuffer;
using dptrain::SgdParams;
using gpu_test::all_close;
using gpu_test::download;
using gpu_test::is_bf16_rounding;
using gpu_test::kNotWritten;
using gpu_test::random_vector;
using gpu_test::upload;

class CudaLossOptim : public gpu_test::CpuAndGpu {};

const std::pair<int, int> kLossShapes[] = {{1, 1},   {1, 10},  {3, 3},   {257, 10},
                                           {1000, 37}, {64, 100}, {5000, 2}, {9000, 10}};

// Logits with ties planted: equal rows (argmax must be column 0) and rows
// whose maximum appears twice (the first one counts).
std::vector<float> logits_with_ties(int rows, int cols, std::uint32_t seed) {
  auto z = random_vector(static_cast<std::size_t>(rows) * cols, seed, -20.0f, 20.0f);
  for (int r = 0; r < rows; ++r) {
    float* row = z.data() + static_cast<std::size_t>(r) * cols;
    if (r % 5 == 1)
      for (int c = 0; c < cols; ++c) row[c] = 0.25f;
    if (r % 7 == 2 && cols >= 3) row[cols - 1] = row[1] = 30.0f;
  }
  return z;
}

TEST_F(CudaLossOptim, SoftmaxXent) {
  for (auto [rows, cols] : kLossShapes) {
    const auto z = logits_with_ties(rows, cols, 21);
    std::mt19937 gen(22);
    std::vector<std::int32_t> labels(rows);
    for (auto& l : labels) l = static_cast<std::int32_t>(gen() % cols);
    for (int r = 2; r < rows; r += 7) labels[r] = 1 % cols;  // tie rows: first max is correct
    const float scale = 1.0f / static_cast<float>(rows);

    std::vector<float> want_d(z.size()), want_stats = {1.5f, 2.0f};
    cpu_->kernels<dptrain::LossKernels>().softmax_xent(z.data(), labels.data(), rows, cols, scale,
                                                       want_d.data(), want_stats.data());
    auto dz = upload(*gpu_, z);
    auto dl = upload(*gpu_, labels);
    DeviceBuffer<float> dd(*gpu_, z.size());
    auto stats = upload(*gpu_, std::vector<float>{1.5f, 2.0f});
    gpu_->kernels<dptrain::LossKernels>().softmax_xent(dz.get(), dl.get(), rows, cols, scale,
                                                       dd.get(), stats.get());
    const auto got_stats = download(*gpu_, stats);
    EXPECT_TRUE(all_close(download(*gpu_, dd), want_d, 1e-5, 1e-7)) << rows << "x" << cols;
    EXPECT_TRUE(all_close({got_stats[0]}, {want_stats[0]}, 1e-5, 1e-5)) << rows << "x" << cols;
    EXPECT_EQ(got_stats[1], want_stats[1]) << rows << "x" << cols;

    // Evaluation passes no gradient buffer; stats keep accumulating.
    gpu_->kernels<dptrain::LossKernels>().softmax_xent(dz.get(), dl.get(), rows, cols, 0.0f,
                                                       nullptr, stats.get());
    cpu_->kernels<dptrain::LossKernels>().softmax_xent(z.data(), labels.data(), rows, cols, 0.0f,
                                                       nullptr, want_stats.data());
    const auto again = download(*gpu_, stats);
    EXPECT_TRUE(all_close({again[0]}, {want_stats[0]}, 1e-5, 1e-5));
    EXPECT_EQ(again[1], want_stats[1]);
  }
}

// The fused classifier's three widths (a warp, 128 and 512 threads a row)
// against the CPU, and in place: the gradient written over the logits is
// bit for bit the one written to a buffer of its own.
TEST_F(CudaLossOptim, SoftmaxXentWideRowsAndInPlace) {
  for (auto [rows, cols] : {std::pair{9, 300}, std::pair{5, 5000}, std::pair{3, 20000}}) {
    const auto z = logits_with_ties(rows, cols, 41);
    std::vector<std::int32_t> labels(rows);
    for (int r = 0; r < rows; ++r) labels[r] = (r * 7919) % cols;
    const float scale = 0.25f;
    std::vector<float> want_d(z.size()), want_stats = {0.0f, 0.0f};
    cpu_->kernels<dptrain::LossKernels>().softmax_xent(z.data(), labels.data(), rows, cols, scale,
                                                       want_d.data(), want_stats.data());
    auto dz = upload(*gpu_, z);
    auto dl = upload(*gpu_, labels);
    DeviceBuffer<float> dd(*gpu_, z.size());
    auto stats = upload(*gpu_, std::vector<float>{0.0f, 0.0f});
    auto& loss = gpu_->kernels<dptrain::LossKernels>();
    loss.softmax_xent(dz.get(), dl.get(), rows, cols, scale, dd.get(), stats.get());
    const auto apart = download(*gpu_, dd);
    EXPECT_TRUE(all_close(apart, want_d, 1e-5, 1e-7)) << rows << "x" << cols;
    const auto got_stats = download(*gpu_, stats);
    EXPECT_TRUE(all_close({got_stats[0]}, {want_stats[0]}, 1e-5, 1e-5)) << rows << "x" << cols;
    EXPECT_EQ(got_stats[1], want_stats[1]) << rows << "x" << cols;
    auto in_place_stats = upload(*gpu_, std::vector<float>{0.0f, 0.0f});
    loss.softmax_xent(dz.get(), dl.get(), rows, cols, scale, dz.get(), in_place_stats.get());
    EXPECT_EQ(download(*gpu_, dz), apart) << rows << "x" << cols << " in place";
    EXPECT_EQ(download(*gpu_, in_place_stats), got_stats);
  }
}

TEST_F(CudaLossOptim, LossSumIsDeterministic) {
  const int rows = 20000, cols = 10;
  auto dz = upload(*gpu_, logits_with_ties(rows, cols, 23));
  auto dl = upload(*gpu_, std::vector<std::int32_t>(rows, 3));
  auto a = upload(*gpu_, std::vector<float>{0.0f, 0.0f});
  auto b = upload(*gpu_, std::vector<float>{0.0f, 0.0f});
  gpu_->kernels<dptrain::LossKernels>().softmax_xent(dz.get(), dl.get(), rows, cols, 1.0f, nullptr,
                                                     a.get());
  gpu_->kernels<dptrain::LossKernels>().softmax_xent(dz.get(), dl.get(), rows, cols, 1.0f, nullptr,
                                                     b.get());
  EXPECT_EQ(download(*gpu_, a), download(*gpu_, b));
}

TEST_F(CudaLossOptim, Mse) {
  for (auto [rows, cols] : kLossShapes) {
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    const auto p = random_vector(n, 31, -3.0f, 3.0f), t = random_vector(n, 32, -3.0f, 3.0f);
    const float scale = 1.0f / static_cast<float>(rows);
    std::vector<float> want_d(n), want_stats = {0.5f, 4.0f};
    cpu_->kernels<dptrain::LossKernels>().mse(p.data(), t.data(), rows, cols, scale, want_d.data(),
                                              want_stats.data());
    auto dp = upload(*gpu_, p);
    auto dt = upload(*gpu_, t);
    DeviceBuffer<float> dd(*gpu_, n);
    auto stats = upload(*gpu_, std::vector<float>{0.5f, 4.0f});
    gpu_->kernels<dptrain::LossKernels>().mse(dp.get(), dt.get(), rows, cols, scale, dd.get(),
                                              stats.get());
    gpu_->kernels<dptrain::LossKernels>().mse(dp.get(), dt.get(), rows, cols, scale, nullptr,
                                              stats.get());
    cpu_->kernels<dptrain::LossKernels>().mse(p.data(), t.data(), rows, cols, scale, nullptr,
                                              want_stats.data());
    const auto got_stats = download(*gpu_, stats);
    EXPECT_TRUE(all_close(download(*gpu_, dd), want_d, 1e-6, 0.0)) << rows << "x" << cols;
    EXPECT_TRUE(all_close({got_stats[0]}, {want_stats[0]}, 1e-5, 1e-5)) << rows << "x" << cols;
    EXPECT_EQ(got_stats[1], 4.0f);  // MSE leaves the count alone
  }
}

constexpr std::size_t kArenaSizes[] = {1, 3, 257, 100003};
constexpr int kIterations = 5;

TEST_F(CudaLossOptim, SgdSteps) {
  SgdParams configs[3];
  configs[0].lr = 0.1f;
  configs[1] = {0.05f, 0.9f, false, 0.01f};
  configs[2] = {0.05f, 0.9f, true, 1e-3f};
  for (const SgdParams& p : configs)
    for (std::size_t n : kArenaSizes) {
      auto w = random_vector(n, 41), vel = std::vector<float>(n, 0.0f);
      std::vector<std::uint16_t> w16(n, kNotWritten);
      auto gw = upload(*gpu_, w);
      auto gv = upload(*gpu_, vel);
      auto gw16 = upload(*gpu_, w16);
      for (int it = 0; it < kIterations; ++it) {
        const auto g = random_vector(n, 42 + it);
        // The bf16 copy is asked for in the last step only.
        std::uint16_t* copy = it + 1 == kIterations ? w16.data() : nullptr;
        std::uint16_t* gcopy = it + 1 == kIterations ? gw16.get() : nullptr;
        cpu_->kernels<dptrain::OptimizerKernels>().sgd_step(w.data(), copy, g.data(), vel.data(),
                                                            n, p);
        auto gg = upload(*gpu_, g);
        gpu_->kernels<dptrain::OptimizerKernels>().sgd_step(gw.get(), gcopy, gg.get(), gv.get(),
                                                            n, p);
      }
      const auto what = ::testing::Message() << "mu=" << p.momentum << " nesterov=" << p.nesterov << " n=" << n;
      const auto got_w = download(*gpu_, gw);
      EXPECT_TRUE(all_close(got_w, w, 1e-5, 1e-6)) << what;
      EXPECT_TRUE(all_close(download(*gpu_, gv), vel, 1e-5, 1e-6)) << what;
      // Each backend's copy is the rounding of the weights it wrote.
      EXPECT_TRUE(is_bf16_rounding(w16, w)) << what;
      EXPECT_TRUE(is_bf16_rounding(download(*gpu_, gw16), got_w)) << what;
    }
}

TEST_F(CudaLossOptim, AdamAndAdamWSteps) {
  AdamParams configs[3];
  configs[0].lr = 1e-2f;
  configs[1].lr = 1e-2f;
  configs[1].beta2 = 0.99f;
  configs[1].weight_decay = 0.01f;
  configs[2].lr = 1e-2f;
  configs[2].weight_decay = 0.05f;
  configs[2].decoupled = true;
  for (AdamParams p : configs)
    for (std::size_t n : kArenaSizes) {
      auto w = random_vector(n, 51);
      std::vector<float> m(n, 0.0f), v(n, 0.0f);
      std::vector<std::uint16_t> w16(n, kNotWritten);
      auto gw = upload(*gpu_, w);
      auto gm = upload(*gpu_, m);
      auto gv = upload(*gpu_, v);
      auto gw16 = upload(*gpu_, w16);
      for (int it = 0; it < kIterations; ++it) {
        p.step = it + 1;
        const auto g = random_vector(n, 52 + it);
        // The bf16 copy is written in every step; the last one's is checked.
        cpu_->kernels<dptrain::OptimizerKernels>().adam_step(w.data(), w16.data(), g.data(),
                                                             m.data(), v.data(), n, p);
        auto gg = upload(*gpu_, g);
        gpu_->kernels<dptrain::OptimizerKernels>().adam_step(gw.get(), gw16.get(), gg.get(),
                                                             gm.get(), gv.get(), n, p);
      }
      const auto what = ::testing::Message() << "wd=" << p.weight_decay << " decoupled=" << p.decoupled << " n=" << n;
      const auto got_w = download(*gpu_, gw);
      EXPECT_TRUE(all_close(got_w, w, 1e-5, 1e-6)) << what;
      EXPECT_TRUE(is_bf16_rounding(w16, w)) << what;
      EXPECT_TRUE(is_bf16_rounding(download(*gpu_, gw16), got_w)) << what;
      EXPECT_TRUE(all_close(download(*gpu_, gm), m, 1e-5, 1e-7)) << what;
      EXPECT_TRUE(all_close(download(*gpu_, gv), v, 1e-5, 1e-8)) << what;
    }
}

// The CUDA Adam pass moves four values a load where its arrays start on 16
// bytes and one at a time elsewhere: the same values one float further on
// (every array misaligned) come out the same, bit for bit, weights, moments
// and bf16 copy, as in aligned arrays (four at a time, then a tail).
TEST_F(CudaLossOptim, AdamGivesTheSameBitsWhereverItsArraysStart) {
  AdamParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.05f;
  p.decoupled = true;
  for (std::size_t n : {std::size_t{7}, std::size_t{1003}}) {
    // [0] of the shifted arrays is left alone; [1, n] holds the values.
    auto shifted = [](std::vector<float> v) {
      v.insert(v.begin(), 0.0f);
      return v;
    };
    const auto w = random_vector(n, 71);
    const std::vector<float> zeros(n, 0.0f);
    auto aw = upload(*gpu_, w), am = upload(*gpu_, zeros), av = upload(*gpu_, zeros);
    auto sw = upload(*gpu_, shifted(w)), sm = upload(*gpu_, shifted(zeros)),
         sv = upload(*gpu_, shifted(zeros));
    auto a16 = upload(*gpu_, std::vector<std::uint16_t>(n, kNotWritten));
    auto s16 = upload(*gpu_, std::vector<std::uint16_t>(n + 1, kNotWritten));
    for (int it = 0; it < 3; ++it) {
      p.step = it + 1;
      const auto g = random_vector(n, 72 + it);
      auto ag = upload(*gpu_, g), sg = upload(*gpu_, shifted(g));
      auto& opt = gpu_->kernels<dptrain::OptimizerKernels>();
      opt.adam_step(aw.get(), a16.get(), ag.get(), am.get(), av.get(), n, p);
      opt.adam_step(sw.get() + 1, s16.get() + 1, sg.get() + 1, sm.get() + 1, sv.get() + 1, n, p);
    }
    auto tail = [](auto v) {
      v.erase(v.begin());
      return v;
    };
    EXPECT_EQ(tail(download(*gpu_, sw)), download(*gpu_, aw)) << "n=" << n;
    EXPECT_EQ(tail(download(*gpu_, sm)), download(*gpu_, am)) << "n=" << n;
    EXPECT_EQ(tail(download(*gpu_, sv)), download(*gpu_, av)) << "n=" << n;
    EXPECT_EQ(tail(download(*gpu_, s16)), download(*gpu_, a16)) << "n=" << n;
    EXPECT_TRUE(is_bf16_rounding(download(*gpu_, a16), download(*gpu_, aw))) << "n=" << n;
  }
}

// Clipping's norm: the CUDA sum of squares (per-block partials, then one
// block) against the CPU's, both in double: the orders differ, so they agree
// to double rounding over n terms, far below float's; and the same bits on
// a second run. The scale is one float product each, bitwise the CPU's.
TEST_F(CudaLossOptim, ClippingNormAndScale) {
  for (std::size_t n : kArenaSizes) {
    const auto g = random_vector(n, 61);
    auto gg = upload(*gpu_, g);
    const double want = cpu_->kernels<dptrain::OptimizerKernels>().sum_squares(g.data(), n);
    const double got = gpu_->kernels<dptrain::OptimizerKernels>().sum_squares(gg.get(), n);
    EXPECT_NEAR(got, want, 1e-12 * want * static_cast<double>(n)) << "n=" << n;
    EXPECT_EQ(gpu_->kernels<dptrain::OptimizerKernels>().sum_squares(gg.get(), n), got)
        << "n=" << n;
    auto x = g;
    cpu_->kernels<dptrain::OptimizerKernels>().scale(x.data(), 0.37f, n);
    gpu_->kernels<dptrain::OptimizerKernels>().scale(gg.get(), 0.37f, n);
    EXPECT_EQ(download(*gpu_, gg), x) << "n=" << n;
  }
}

}  // namespace
