// Implements: bn, bn:local and dropout layers end to end on the CUDA backend
// (they used to be refused when the model was built): K training steps of a
// model with all three, on the GPU and on the CPU reference, give the same
// losses, parameters and running statistics within float rounding, and the
// evaluation forward (running statistics, dropout off) agrees too.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "dptrain/model/layer.hpp"
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
using gpu_test::upload;

constexpr int kRows = 96, kInput = 40, kClasses = 10, kSteps = 5;
constexpr char kSpec[] = "dense:64,bn,relu,dropout:0.3,dense:32,bn:local,tanh,dropout:0.1,dense:10";

struct Trained {
  std::vector<float> losses, params, buffers, eval_logits;
};

Trained train(Backend& be) {
  Model model(be, parse_model_spec(kSpec), kInput, kRows);
  model.init(99);
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kSgd;
  cfg.momentum = 0.9f;
  Optimizer opt(be, cfg, model.num_params());
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    StepInfo info;
    info.seed = 5;
    info.epoch = 1;
    info.first_row = static_cast<std::uint64_t>(step) * kRows;
    model.set_step(info);
    const auto x = random_vector(static_cast<std::size_t>(kRows) * kInput, 700 + step, -2.0f, 3.0f);
    out.losses.push_back(
        gpu_test::train_step(be, model, opt, x, random_labels(kRows, kClasses, 800 + step), 0.05f));
  }
  auto x = upload(be, random_vector(static_cast<std::size_t>(kRows) * kInput, 900));
  const float* logits = model.forward(x.get(), kRows, nullptr, Mode::kEval);
  out.eval_logits = download(be, logits, static_cast<std::size_t>(kRows) * kClasses);
  out.params = download(be, model.params(), model.num_params());
  out.buffers = download(be, model.buffers(), model.num_buffers());
  return out;
}

TEST(CudaBnDropout, TrainingMatchesCpu) {
  auto gpu = gpu_test::make_gpu();
  auto cpu = gpu_test::make_cpu();
  const Trained g = train(*gpu), c = train(*cpu);
  EXPECT_TRUE(all_close(g.losses, c.losses, 1e-4, 0.0));
  EXPECT_TRUE(all_close(g.params, c.params, 1e-4, 1e-6));
  EXPECT_TRUE(all_close(g.buffers, c.buffers, 1e-4, 1e-6));
  EXPECT_TRUE(all_close(g.eval_logits, c.eval_logits, 1e-4, 1e-5));
}

// A run on the GPU repeats itself bit for bit (no atomics in any sum).
TEST(CudaBnDropout, TrainingRepeatsBitwise) {
  auto gpu = gpu_test::make_gpu();
  const Trained a = train(*gpu), b = train(*gpu);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.buffers, b.buffers);
}

}  // namespace
