// Implements: unit tests of the optimizers (against hand-computed values and
// independent double-precision reference loops following torch.optim) and of
// the learning-rate schedules at chosen steps.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/optimizer.hpp"

namespace dptrain {
namespace {

class OptimizerTest : public ::testing::Test {
 protected:
  // Runs steps of opt on w with the gradient of each step, on the backend.
  std::vector<float> run(const OptimizerConfig& cfg, std::vector<float> w,
                         const std::vector<std::vector<float>>& grads, float lr) {
    DeviceBuffer<float> dw(*be_, w.size()), dg(*be_, w.size());
    be_->copy_to_device(dw.get(), w.data(), w.size() * sizeof(float));
    Optimizer opt(*be_, cfg, w.size());
    for (const auto& g : grads) {
      be_->copy_to_device(dg.get(), g.data(), g.size() * sizeof(float));
      opt.step(dw.get(), dg.get(), lr);
    }
    EXPECT_EQ(opt.step_count(), static_cast<std::int64_t>(grads.size()));
    be_->copy_to_host(w.data(), dw.get(), w.size() * sizeof(float));
    return w;
  }
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

OptimizerConfig sgd(float momentum = 0.0f, bool nesterov = false, float wd = 0.0f) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

TEST(OptimizerNames, ParseGoodAndBad) {
  EXPECT_EQ(parse_optimizer("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(parse_optimizer("adam"), OptimizerKind::kAdam);
  EXPECT_EQ(parse_optimizer("adamw"), OptimizerKind::kAdamW);
  EXPECT_EQ(parse_lr_schedule("constant"), LrScheduleKind::kConstant);
  EXPECT_EQ(parse_lr_schedule("cosine"), LrScheduleKind::kCosine);
  EXPECT_EQ(parse_lr_schedule("step"), LrScheduleKind::kStep);
  for (const char* bad : {"", "SGD", "rmsprop"}) {
    try {
      parse_optimizer(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find("adamw"), std::string::npos);  // lists valid names
    }
  }
  EXPECT_THROW(parse_lr_schedule("linear"), Error);
}

// w = 1, g = 0.5 each step, lr = 0.1.
TEST_F(OptimizerTest, SgdPlain) {
  // w1 = 1 - 0.1*0.5 = 0.95; w2 = 0.9
  EXPECT_NEAR(run(sgd(), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.9f, 1e-6f);
}

TEST_F(OptimizerTest, SgdMomentum) {
  // v1 = 0.5, w1 = 0.95; v2 = 0.9*0.5 + 0.5 = 0.95, w2 = 0.95 - 0.095 = 0.855
  EXPECT_NEAR(run(sgd(0.9f), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.855f, 1e-6f);
}

TEST_F(OptimizerTest, SgdNesterov) {
  // v1 = 0.5, step = 0.5 + 0.9*0.5 = 0.95, w1 = 0.905
  // v2 = 0.95, step = 0.5 + 0.9*0.95 = 1.355, w2 = 0.905 - 0.1355 = 0.7695
  EXPECT_NEAR(run(sgd(0.9f, true), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.7695f, 1e-6f);
}

TEST_F(OptimizerTest, SgdWeightDecay) {
  // g1 = 0.5 + 0.1*1 = 0.6, w1 = 0.94; g2 = 0.5 + 0.094 = 0.594, w2 = 0.8806
  EXPECT_NEAR(run(sgd(0.0f, false, 0.1f), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.8806f, 1e-6f);
  // With momentum 0.9: v1 = 0.6, w1 = 0.94; g2 = 0.594, v2 = 0.54 + 0.594 = 1.134,
  // w2 = 0.94 - 0.1134 = 0.8266
  EXPECT_NEAR(run(sgd(0.9f, false, 0.1f), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.8266f, 1e-6f);
}

TEST_F(OptimizerTest, SgdStateNamesAndValidation) {
  EXPECT_TRUE(Optimizer(*be_, sgd(), 4).state().empty());
  Optimizer with_momentum(*be_, sgd(0.9f), 4);
  ASSERT_EQ(with_momentum.state().size(), 1u);
  EXPECT_EQ(with_momentum.state()[0].name, "velocity");
  EXPECT_THROW(Optimizer(*be_, sgd(0.0f, true), 4), Error);  // Nesterov needs momentum
}

// Independent reference: torch.optim.Adam/AdamW step, in double.
std::vector<double> adam_reference(bool decoupled, double wd, std::vector<double> w,
                                   const std::vector<std::vector<float>>& grads, double lr) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<double> m(w.size(), 0.0), v(w.size(), 0.0);
  for (std::size_t t = 1; t <= grads.size(); ++t) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      double g = grads[t - 1][i];
      if (decoupled)
        w[i] *= 1.0 - lr * wd;
      else
        g += wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  return w;
}

OptimizerConfig adam(bool decoupled, float wd) {
  OptimizerConfig c;
  c.kind = decoupled ? OptimizerKind::kAdamW : OptimizerKind::kAdam;
  c.weight_decay = wd;
  return c;
}

TEST_F(OptimizerTest, AdamHandComputed) {
  // Constant g: bias correction makes mhat = g and vhat = g^2 exactly, so
  // each step moves w by lr (w: 1 -> 0.9 -> 0.8). Without bias correction
  // step 1 would move 0.1 * 0.05 / sqrt(0.00025) = 0.316.
  EXPECT_NEAR(run(adam(false, 0.0f), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.8f, 1e-6f);
  // Adam with L2 0.1: g1 = 0.6 -> w1 = 0.9; g2 = 0.5 + 0.09 = 0.59,
  // m2 = 0.054 + 0.059 = 0.113, mhat = 0.113/0.19 = 0.594737,
  // v2 = 0.999*0.00036 + 0.001*0.3481 = 0.00070774, vhat = 0.354047,
  // w2 = 0.9 - 0.1 * 0.594737/0.595018 = 0.8000473
  EXPECT_NEAR(run(adam(false, 0.1f), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.8000473f, 2e-6f);
  // AdamW 0.1: w1 = 1*(1 - 0.01) - 0.1 = 0.89; w2 = 0.89*0.99 - 0.1 = 0.7811
  EXPECT_NEAR(run(adam(true, 0.1f), {1.0f}, {{0.5f}, {0.5f}}, 0.1f)[0], 0.7811f, 1e-6f);
}

TEST_F(OptimizerTest, AdamAndAdamWMatchReference) {
  const std::vector<float> w0 = {1.0f, -2.0f, 0.5f, 0.0f};
  const std::vector<std::vector<float>> grads = {
      {0.3f, -1.0f, 0.0f, 2.0f}, {-0.2f, 0.5f, 0.1f, 1.5f}, {0.4f, 0.25f, -0.3f, -1.0f}};
  for (bool decoupled : {false, true}) {
    const auto got = run(adam(decoupled, 0.05f), w0, grads, 0.01f);
    const auto want = adam_reference(decoupled, 0.05, {w0.begin(), w0.end()}, grads, 0.01);
    for (std::size_t i = 0; i < w0.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6) << "decoupled=" << decoupled << " i=" << i;
  }
}

TEST_F(OptimizerTest, AdamStateAndStepCount) {
  Optimizer opt(*be_, adam(false, 0.0f), 3);
  const auto s = opt.state();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "m");
  EXPECT_EQ(s[1].name, "v");
  // Resuming sets the step count used for bias correction: at step 1000
  // with zero moments, g = 0.5 gives m = 0.05, mhat = 0.05/(1-0.9^1001) ~ 0.05.
  DeviceBuffer<float> w(*be_, 3), g(*be_, 3);
  be_->fill(w.get(), 1.0f, 3);
  be_->fill(g.get(), 0.5f, 3);
  opt.set_step_count(1000);
  opt.step(w.get(), g.get(), 0.1f);
  EXPECT_EQ(opt.step_count(), 1001);
  float host[3];
  be_->copy_to_host(host, w.get(), sizeof host);
  const double vhat = 0.00025 / (1 - std::pow(0.999, 1001));
  EXPECT_NEAR(host[0], 1.0 - 0.1 * 0.05 / (std::sqrt(vhat) + 1e-8), 1e-6);
}

LrScheduleConfig schedule(LrScheduleKind kind, std::int64_t warmup) {
  LrScheduleConfig c;
  c.kind = kind;
  c.base_lr = 0.1f;
  c.warmup_steps = warmup;
  c.total_steps = 110;
  c.step_size = 30;
  c.gamma = 0.1f;
  return c;
}

TEST(LrSchedule, ConstantWithWarmup) {
  const auto c = schedule(LrScheduleKind::kConstant, 10);
  EXPECT_FLOAT_EQ(learning_rate(c, 0), 0.01f);  // 0.1 * 1/10
  EXPECT_FLOAT_EQ(learning_rate(c, 4), 0.05f);  // 0.1 * 5/10
  EXPECT_FLOAT_EQ(learning_rate(c, 9), 0.1f);   // last warmup step reaches base
  EXPECT_FLOAT_EQ(learning_rate(c, 10), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(c, 100000), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(schedule(LrScheduleKind::kConstant, 0), 0), 0.1f);
}

TEST(LrSchedule, Cosine) {
  auto c = schedule(LrScheduleKind::kCosine, 10);  // T = 100 after warmup
  EXPECT_FLOAT_EQ(learning_rate(c, 0), 0.01f);
  EXPECT_FLOAT_EQ(learning_rate(c, 10), 0.1f);         // t = 0: cos 0 = 1
  EXPECT_NEAR(learning_rate(c, 35), 0.0853553, 1e-7);  // t/T = 1/4: 0.05 * (1 + cos(pi/4))
  EXPECT_NEAR(learning_rate(c, 60), 0.05f, 1e-8f);     // half way
  EXPECT_NEAR(learning_rate(c, 110), 0.0f, 1e-8f);
  EXPECT_NEAR(learning_rate(c, 500), 0.0f, 1e-8f);  // stays at min_lr
  c.min_lr = 0.01f;
  EXPECT_NEAR(learning_rate(c, 60), 0.055f, 1e-8f);  // 0.01 + 0.09 * 0.5
  EXPECT_NEAR(learning_rate(c, 200), 0.01f, 1e-8f);
  c.total_steps = 10;  // nothing after warmup: stay at base
  EXPECT_FLOAT_EQ(learning_rate(c, 50), 0.1f);
}

TEST(LrSchedule, StepDecay) {
  auto c = schedule(LrScheduleKind::kStep, 0);
  EXPECT_FLOAT_EQ(learning_rate(c, 0), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(c, 29), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(c, 30), 0.01f);
  EXPECT_FLOAT_EQ(learning_rate(c, 59), 0.01f);
  EXPECT_FLOAT_EQ(learning_rate(c, 60), 0.001f);
  c.warmup_steps = 5;                           // decay counts from the end of warmup
  EXPECT_FLOAT_EQ(learning_rate(c, 2), 0.06f);  // 0.1 * 3/5
  EXPECT_FLOAT_EQ(learning_rate(c, 5), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(c, 34), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(c, 35), 0.01f);
}

// --clip-grad-norm: the norm is torch's (float of the root of the sum of
// squares), the gradient is scaled by clip / (norm + 1e-6) only when that is
// below 1, and the step uses the scaled gradient.
TEST_F(OptimizerTest, ClipGradNormScalesTheGradientAsTorchDoes) {
  const std::vector<float> w = {1.0f, -2.0f, 0.5f}, g = {3.0f, 4.0f, 0.0f};  // norm 5
  OptimizerConfig c = sgd();
  c.clip_grad_norm = 1.0f;
  DeviceBuffer<float> dw(*be_, 3), dg(*be_, 3);
  be_->copy_to_device(dw.get(), w.data(), sizeof(float) * 3);
  be_->copy_to_device(dg.get(), g.data(), sizeof(float) * 3);
  Optimizer opt(*be_, c, 3);
  opt.step(dw.get(), dg.get(), 0.1f);
  EXPECT_FLOAT_EQ(opt.last_grad_norm(), 5.0f);
  const float coef = 1.0f / (5.0f + 1e-6f);
  std::vector<float> got(3), clipped(3);
  be_->copy_to_host(got.data(), dw.get(), sizeof(float) * 3);
  be_->copy_to_host(clipped.data(), dg.get(), sizeof(float) * 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(clipped[i], g[i] * coef) << i;
    EXPECT_EQ(got[i], w[i] - 0.1f * (g[i] * coef)) << i;
  }
  // A norm below the clip leaves the gradient as it was.
  c.clip_grad_norm = 10.0f;
  EXPECT_EQ(run(c, w, {g}, 0.1f), run(sgd(), w, {g}, 0.1f));
}

// --weight-decay-params matrices: the ranges of the rank >= 2 tensors,
// adjacent ones merged, decay there and nowhere else.
TEST_F(OptimizerTest, WeightDecayOnMatricesOnly) {
  std::vector<ParamInfo> layout = {{"dense0", "weight", {2, 2}, 0, 4},
                                   {"dense0", "bias", {2}, 4, 2},
                                   {"conv0", "weight", {1, 1, 1, 1}, 6, 1},
                                   {"dense1", "weight", {1, 2}, 7, 2},
                                   {"dense1", "bias", {1}, 9, 1}};
  const auto ranges = matrices_decay_ranges(layout);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].offset, 0u);
  EXPECT_EQ(ranges[0].count, 4u);
  EXPECT_EQ(ranges[1].offset, 6u);
  EXPECT_EQ(ranges[1].count, 3u);
  OptimizerConfig decay = sgd(0.9f, false, 0.1f);
  decay.decay_all = false;
  decay.decay_ranges = ranges;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<std::vector<float>> grads = {std::vector<float>(10, 0.5f),
                                                 std::vector<float>(10, -0.25f)};
  const auto got = run(decay, w, grads, 0.1f);
  const auto with = run(sgd(0.9f, false, 0.1f), w, grads, 0.1f);
  const auto without = run(sgd(0.9f), w, grads, 0.1f);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const bool matrix = i < 4 || (i >= 6 && i < 9);
    EXPECT_EQ(got[i], matrix ? with[i] : without[i]) << i;
  }
  EXPECT_TRUE(parse_decay_all("all"));
  EXPECT_FALSE(parse_decay_all("matrices"));
  EXPECT_THROW(parse_decay_all("biases"), Error);
}

}  // namespace
}  // namespace dptrain

namespace dptrain {
namespace {

// --shard-optimizer's cut: balanced, in rank order, any n on any count.
TEST(SliceBounds, BalancedContiguousSlices) {
  for (std::size_t n : {0, 1, 3, 173, 1000}) {
    for (int p : {1, 2, 3, 4, 7}) {
      const std::vector<std::size_t> b = slice_bounds(n, p);
      ASSERT_EQ(b.size(), static_cast<std::size_t>(p) + 1);
      EXPECT_EQ(b.front(), 0u);
      EXPECT_EQ(b.back(), n);
      for (int r = 0; r < p; ++r) {
        const std::size_t size = b[r + 1] - b[r];
        EXPECT_TRUE(size == n / p || size == n / p + 1) << n << " " << p << " " << r;
        if (r > 0) EXPECT_LE(size, b[r] - b[r - 1]);  // the larger slices first
      }
    }
  }
  EXPECT_THROW(slice_bounds(5, 0), Error);
}

// P optimizers, each owning one slice, update the arena exactly as one
// optimizer of the whole arena does, decay ranges cut across slices and the
// clipping norm given as the sum of the slices' sums included.
TEST(SlicedOptimizerState, SlicesUpdateLikeTheWholeArena) {
  auto be = make_cpu_backend(BackendOptions{});
  const std::size_t n = 37;
  OptimizerConfig adamw;
  adamw.kind = OptimizerKind::kAdamW;
  adamw.weight_decay = 0.1f;
  adamw.clip_grad_norm = 0.05f;  // clips every step
  adamw.decay_all = false;
  adamw.decay_ranges = {{3, 10}, {20, 9}};
  OptimizerConfig momentum = sgd(0.9f, true, 0.01f);
  for (const OptimizerConfig& cfg : {adamw, momentum}) {
    for (int p : {1, 3, 4}) {
      std::vector<float> w0(n), whole_w, sliced_w;
      for (std::size_t i = 0; i < n; ++i) w0[i] = std::sin(0.7f * static_cast<float>(i));
      DeviceBuffer<float> w(*be, n), g(*be, n), w2(*be, n), g2(*be, n);
      be->copy_to_device(w.get(), w0.data(), n * sizeof(float));
      be->copy_to_device(w2.get(), w0.data(), n * sizeof(float));
      Optimizer whole(*be, cfg, n);
      const std::vector<std::size_t> b = slice_bounds(n, p);
      std::vector<std::unique_ptr<Optimizer>> slices;
      for (int r = 0; r < p; ++r)
        slices.push_back(std::make_unique<Optimizer>(*be, cfg, n, ArenaRange{b[r], b[r + 1] - b[r]}));
      for (int step = 0; step < 5; ++step) {
        std::vector<float> grad(n);
        for (std::size_t i = 0; i < n; ++i) grad[i] = std::cos(0.3f * static_cast<float>(i * (step + 2)));
        be->copy_to_device(g.get(), grad.data(), n * sizeof(float));
        be->copy_to_device(g2.get(), grad.data(), n * sizeof(float));
        whole.step(w.get(), g.get(), 0.01f);
        double total = 0;
        for (auto& s : slices) total += s->local_sum_squares(g2.get());
        for (auto& s : slices) s->step(w2.get(), g2.get(), 0.01f, &total);
        if (cfg.clip_grad_norm > 0)
          EXPECT_NEAR(slices[0]->last_grad_norm(), whole.last_grad_norm(), 1e-6f * whole.last_grad_norm());
      }
      whole_w.resize(n);
      sliced_w.resize(n);
      be->copy_to_host(whole_w.data(), w.get(), n * sizeof(float));
      be->copy_to_host(sliced_w.data(), w2.get(), n * sizeof(float));
      for (std::size_t i = 0; i < n; ++i)
        EXPECT_NEAR(sliced_w[i], whole_w[i], 2e-7f * (1.0f + std::fabs(whole_w[i])))
            << optimizer_name(cfg.kind) << " on " << p << " slices, element " << i;
      std::size_t state = 0;
      for (auto& s : slices) state += s->state_bytes();
      EXPECT_EQ(state, whole.state_bytes());
    }
  }
}

}  // namespace
}  // namespace dptrain
