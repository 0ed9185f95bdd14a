// Implements: end-to-end agreement of the two backends — the same seed and
// data give the same parameters after K steps of forward, cross-entropy,
// backward and the optimizer, on the GPU and on the CPU reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "gpu_env.hpp"
#include "training_support.hpp"

namespace {

using namespace dptrain;
using gpu_test::all_close;
using gpu_test::download;
using gpu_test::random_labels;
using gpu_test::random_vector;

constexpr int kRows = 128, kInput = 40, kClasses = 10, kSteps = 5;
constexpr char kSpec[] = "dense:64,relu,dense:32,gelu,dense:24,tanh,dense:16,sigmoid,dense:10";

// Runs kSteps full steps on `be` and returns the parameter arena.
std::vector<float> train(Backend& be, const OptimizerConfig& cfg, float lr,
                         std::vector<float>* losses) {
  Model model(be, parse_model_spec(kSpec), kInput, kRows);
  model.init(1234);
  Optimizer opt(be, cfg, model.num_params());
  for (int step = 0; step < kSteps; ++step) {
    const auto x = random_vector(static_cast<std::size_t>(kRows) * kInput, 500 + step);
    losses->push_back(
        gpu_test::train_step(be, model, opt, x, random_labels(kRows, kClasses, 600 + step), lr));
  }
  return download(be, model.params(), model.num_params());
}

void expect_same_training(const OptimizerConfig& cfg, float lr) {
  auto gpu = gpu_test::make_gpu();
  auto cpu = gpu_test::make_cpu();
  std::vector<float> gpu_losses, cpu_losses;
  const auto on_gpu = train(*gpu, cfg, lr, &gpu_losses);
  const auto on_cpu = train(*cpu, cfg, lr, &cpu_losses);
  EXPECT_TRUE(all_close(gpu_losses, cpu_losses, 1e-4, 0.0));
  EXPECT_TRUE(all_close(on_gpu, on_cpu, 1e-4, 1e-6));
}

TEST(CudaTraining, SgdMomentumMatchesCpu) {
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kSgd;
  cfg.momentum = 0.9f;
  cfg.weight_decay = 1e-4f;
  expect_same_training(cfg, 0.1f);
}

TEST(CudaTraining, AdamMatchesCpu) {
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdam;
  expect_same_training(cfg, 1e-3f);
}

TEST(CudaTraining, AdamWMatchesCpu) {
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdamW;
  cfg.weight_decay = 0.01f;
  expect_same_training(cfg, 1e-3f);
}

}  // namespace

// bf16 GEMM inputs (fp32 accumulation, fp32 master weights and optimizer
// state): the loss of every step stays within bf16's error of the fp32 CPU
// reference. (Weights are not compared: Adam turns a tiny gradient whose
// sign bf16 flips into a full step the other way.)
TEST(CudaTraining, Bf16LossStaysCloseToFp32) {
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdam;
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  auto cpu = gpu_test::make_cpu();
  std::vector<float> gpu_losses, cpu_losses;
  train(*gpu, cfg, 1e-3f, &gpu_losses);
  train(*cpu, cfg, 1e-3f, &cpu_losses);
  ASSERT_EQ(gpu_losses.size(), static_cast<std::size_t>(kSteps));
  EXPECT_TRUE(all_close(gpu_losses, cpu_losses, 3e-2, 0.0));
}
