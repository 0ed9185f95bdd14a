// Implements: checks of the loss gradient written over the model's output —
// the CPU loss kernels give bit for bit the same gradient and stats in place
// as into a buffer of their own (the bf16 classifier too, which is the fp32
// one on the logits' values), and a model whose last layer does not read
// its output in backward (dense) trains from that one buffer exactly as a
// model with a separate gradient buffer would.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

std::vector<float> uniform(std::size_t n, std::uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * (2.0 * rng.uniform() - 1.0));
  return v;
}

// The classifier over bf16 logits is the fp32 one over their values, the
// gradient rounded: the same stats and bits, in place or apart. A kernel
// that read the logits as fp32, skipped the rounding or dropped a row's
// loss fails it.
TEST(LossInPlace, TheBf16ClassifierIsTheFp32OneOnTheSameValues) {
  auto be = make_backend("cpu", {});
  LossKernels& loss = be->kernels<LossKernels>();
  const int rows = 5, cols = 41;
  std::vector<float> z = uniform(std::size_t(rows) * cols, 8, 6.0);
  std::vector<std::uint16_t> z16(z.size());
  for (std::size_t i = 0; i < z.size(); ++i) {
    z16[i] = bf16_bits(z[i]);
    z[i] = bf16_value(z16[i]);
  }
  const std::vector<std::int32_t> labels{3, 40, 0, 3, 22};
  std::vector<float> d(z.size()), stats{0, 0};
  loss.softmax_xent(z.data(), labels.data(), rows, cols, 0.25f, d.data(), stats.data());
  std::vector<std::uint16_t> apart(z.size()), in_place = z16;
  std::vector<float> stats_apart{0, 0}, stats_in_place{0, 0};
  loss.softmax_xent_bf16(z16.data(), labels.data(), rows, cols, 0.25f, apart.data(),
                         stats_apart.data());
  loss.softmax_xent_bf16(in_place.data(), labels.data(), rows, cols, 0.25f, in_place.data(),
                         stats_in_place.data());
  EXPECT_EQ(stats_apart, stats);
  EXPECT_EQ(stats_in_place, stats);
  for (std::size_t i = 0; i < d.size(); ++i) ASSERT_EQ(apart[i], bf16_bits(d[i])) << i;
  EXPECT_EQ(in_place, apart);
  std::vector<float> stats_eval{0, 0};  // no gradient: the stats alone, logits untouched
  const std::vector<std::uint16_t> before = z16;
  loss.softmax_xent_bf16(z16.data(), labels.data(), rows, cols, 0.25f, nullptr, stats_eval.data());
  EXPECT_EQ(stats_eval, stats);
  EXPECT_EQ(z16, before);
}

TEST(LossInPlace, CpuKernelsGiveTheSameBitsInPlace) {
  auto be = make_backend("cpu", {});
  LossKernels& loss = be->kernels<LossKernels>();
  const int rows = 6, cols = 37;
  const std::vector<float> z = uniform(std::size_t(rows) * cols, 3, 8.0);
  const std::vector<std::int32_t> labels{0, 36, 5, 5, 17, 2};
  std::vector<float> apart(z.size()), stats_apart{0, 0}, in_place = z, stats_in_place{0, 0};
  loss.softmax_xent(z.data(), labels.data(), rows, cols, 0.5f, apart.data(), stats_apart.data());
  loss.softmax_xent(in_place.data(), labels.data(), rows, cols, 0.5f, in_place.data(),
                    stats_in_place.data());
  EXPECT_EQ(in_place, apart);
  EXPECT_EQ(stats_in_place, stats_apart);
  const std::vector<float> target = uniform(z.size(), 4, 1.0);
  std::vector<float> mse_apart(z.size()), mse_in_place = z, m1{0, 0}, m2{0, 0};
  loss.mse(z.data(), target.data(), rows, cols, 0.5f, mse_apart.data(), m1.data());
  loss.mse(mse_in_place.data(), target.data(), rows, cols, 0.5f, mse_in_place.data(), m2.data());
  EXPECT_EQ(mse_in_place, mse_apart);
  EXPECT_EQ(m2, m1);
}

TEST(LossInPlace, ADenseOutputHoldsItsOwnGradient) {
  auto be = make_backend("cpu", {});
  Model dense_last(*be, parse_model_spec("dense:6,tanh,dense:4"), Shape{5}, 3);
  EXPECT_EQ(dense_last.output_grad(), dense_last.forward(nullptr, 0));
  // A --model ends in dense:N; a model of layers that ends in tanh, whose
  // backward reads its output, keeps the gradient in a buffer of its own.
  std::vector<std::unique_ptr<Layer>> layers;
  LayerBuilder builder;
  layers.push_back(builder.build({"dense", {"6"}, "dense:6"}, Shape{5}));
  layers.push_back(builder.build({"tanh", {}, "tanh"}, Shape{6}));
  Model tanh_last(*be, std::move(layers), Shape{5}, 3);
  EXPECT_NE(tanh_last.output_grad(), tanh_last.forward(nullptr, 0))
      << "tanh's backward reads its output: the gradient needs a buffer of its own";
}

// The same model trained from the aliased buffer and from a copy of the
// gradient in a buffer of its own: the same weight gradients, bit for bit.
TEST(LossInPlace, BackwardFromTheAliasedBufferEqualsBackwardFromACopy) {
  auto be = make_backend("cpu", {});
  const int rows = 4;
  Model m(*be, parse_model_spec("dense:8,relu,dense:3"), Shape{5}, rows);
  m.init(9);
  const std::vector<float> x = uniform(std::size_t(rows) * 5, 5, 1.0);
  const std::vector<std::int32_t> labels{0, 2, 1, 2};
  std::vector<float> stats{0, 0};
  const float* out = m.forward(x.data(), rows);
  ASSERT_EQ(out, m.output_grad());
  be->kernels<LossKernels>().softmax_xent(out, labels.data(), rows, 3, 0.25f, m.output_grad(),
                                          stats.data());
  const std::vector<float> dout(m.output_grad(), m.output_grad() + rows * 3);
  m.backward(x.data(), m.output_grad(), rows);
  const std::vector<float> aliased(m.grads(), m.grads() + m.num_params());
  m.forward(x.data(), rows);
  m.backward(x.data(), dout.data(), rows);
  EXPECT_EQ(std::vector<float>(m.grads(), m.grads() + m.num_params()), aliased);
}

}  // namespace
}  // namespace dptrain
