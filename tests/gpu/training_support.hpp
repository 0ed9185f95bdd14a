// Implements: the training step the GPU training tests share — forward,
// softmax cross-entropy averaged over the rows, backward and an optimizer
// step on one backend — and the random labels of a step, so that the GPU
// run and its CPU reference run the very same code.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "gpu_env.hpp"

namespace gpu_test {

// Class ids in [0, classes), reproducible from the seed.
inline std::vector<std::int32_t> random_labels(int rows, int classes, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::int32_t> y(static_cast<std::size_t>(rows));
  for (auto& l : y) l = static_cast<std::int32_t>(gen() % static_cast<std::uint32_t>(classes));
  return y;
}

// One step on x [rows, input] and labels y in the model's current step
// (Model::set_step); returns the step's mean loss. The gradients must be
// finite.
inline float train_step(dptrain::Backend& be, dptrain::Model& model, dptrain::Optimizer& opt,
                        const std::vector<float>& x, const std::vector<std::int32_t>& y,
                        float lr) {
  const int rows = static_cast<int>(y.size());
  auto dx = upload(be, x);
  auto dy = upload(be, y);
  dptrain::DeviceBuffer<float> stats(be, 2);
  be.fill(stats.get(), 0.0f, 2);
  const float* logits = model.forward(dx.get(), rows);
  be.kernels<dptrain::LossKernels>().softmax_xent(logits, dy.get(), rows, model.output_dim(),
                                                  1.0f / rows, model.output_grad(), stats.get());
  model.backward(dx.get(), model.output_grad(), rows);
  EXPECT_EQ(be.count_nonfinite(model.grads(), model.num_params()), 0u);
  opt.step(model.params(), model.grads(), lr);
  return download(be, stats.get(), 1)[0];
}

}  // namespace gpu_test
