// Implements: central finite-difference checks of every activation and loss
// backward on the CPU backend, and of whole-model backward passes (MLPs and
// small convolutional networks). The loss comes from the backend's own loss
// stats, so forward and backward are checked against each other through the
// public interfaces only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed, double lo, double hi) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// Float finite differences carry ~1e-4 noise at these step sizes, so the
// tolerance has an absolute floor; a wrong gradient is off by far more.
void expect_grad_near(double analytic, double numeric, const std::string& what) {
  const double tol = 1e-2 * std::max(std::abs(analytic), std::abs(numeric)) + 5e-4;
  EXPECT_NEAR(analytic, numeric, tol) << what;
}

const Activation kAllActivations[] = {Activation::kRelu, Activation::kTanh, Activation::kGelu,
                                      Activation::kSigmoid, Activation::kGeluTanh};

class GradientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

TEST_F(GradientTest, ActivationBackwardMatchesFiniteDifferences) {
  const std::size_t n = 64;
  auto x = uniform_floats(n, 11, -3.0, 3.0);
  for (auto& v : x)
    if (std::abs(v) < 0.05f) v = 0.3f;              // keep ReLU's kink out of reach of eps
  const auto c = uniform_floats(n, 12, -1.0, 1.0);  // L = sum c_i f(x_i)
  const float eps = 1e-3f;
  for (Activation f : kAllActivations) {
    std::vector<float> y(n), dx(n), xp(n), xm(n), yp(n), ym(n);
    be_->kernels<ActivationKernels>().forward(f, x.data(), y.data(), n);
    be_->kernels<ActivationKernels>().backward(f, x.data(), y.data(), c.data(), dx.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      xp[i] = x[i] + eps;
      xm[i] = x[i] - eps;
    }
    // Elementwise, so all coordinates can be perturbed at once.
    be_->kernels<ActivationKernels>().forward(f, xp.data(), yp.data(), n);
    be_->kernels<ActivationKernels>().forward(f, xm.data(), ym.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const double numeric =
          c[i] * (static_cast<double>(yp[i]) - ym[i]) / (static_cast<double>(xp[i]) - xm[i]);
      expect_grad_near(dx[i], numeric, activation_name(f) + " at x=" + std::to_string(x[i]));
    }
  }
}

TEST_F(GradientTest, SoftmaxXentBackwardMatchesFiniteDifferences) {
  const int rows = 3, cols = 5;
  auto logits = uniform_floats(rows * cols, 21, -2.0, 2.0);
  const std::vector<std::int32_t> labels = {4, 0, 2};
  const float scale = 0.5f;
  std::vector<float> d(logits.size()), scratch(logits.size());
  float stats[2] = {0, 0};
  be_->kernels<LossKernels>().softmax_xent(logits.data(), labels.data(), rows, cols, scale,
                                           d.data(), stats);
  const float eps = 1e-2f;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float orig = logits[i];
    float sp[2] = {0, 0}, sm[2] = {0, 0};
    logits[i] = orig + eps;
    be_->kernels<LossKernels>().softmax_xent(logits.data(), labels.data(), rows, cols, scale,
                                             scratch.data(), sp);
    logits[i] = orig - eps;
    be_->kernels<LossKernels>().softmax_xent(logits.data(), labels.data(), rows, cols, scale,
                                             scratch.data(), sm);
    logits[i] = orig;
    const double numeric = scale * (static_cast<double>(sp[0]) - sm[0]) / (2.0 * eps);
    expect_grad_near(d[i], numeric, "xent logit " + std::to_string(i));
  }
}

TEST_F(GradientTest, MseBackwardMatchesFiniteDifferences) {
  const int rows = 3, cols = 4;
  auto pred = uniform_floats(rows * cols, 31, -2.0, 2.0);
  const auto target = uniform_floats(rows * cols, 32, -1.0, 1.0);
  const float scale = 0.25f;
  std::vector<float> d(pred.size()), scratch(pred.size());
  float stats[2] = {0, 0};
  be_->kernels<LossKernels>().mse(pred.data(), target.data(), rows, cols, scale, d.data(), stats);
  const float eps = 1e-2f;
  for (std::size_t i = 0; i < pred.size(); ++i) {
    const float orig = pred[i];
    float sp[2] = {0, 0}, sm[2] = {0, 0};
    pred[i] = orig + eps;
    be_->kernels<LossKernels>().mse(pred.data(), target.data(), rows, cols, scale, scratch.data(),
                                    sp);
    pred[i] = orig - eps;
    be_->kernels<LossKernels>().mse(pred.data(), target.data(), rows, cols, scale, scratch.data(),
                                    sm);
    pred[i] = orig;
    const double numeric = scale * (static_cast<double>(sp[0]) - sm[0]) / (2.0 * eps);
    expect_grad_near(d[i], numeric, "mse pred " + std::to_string(i));
  }
}

enum class LossKind { kXent, kMse };

// Mean loss over rows from the backend's stats; also writes the loss
// gradient (scaled by 1/rows) into the model's output_grad().
double model_loss(Backend& be, Model& model, const std::vector<float>& x, int rows, LossKind loss,
                  const std::vector<std::int32_t>& labels, const std::vector<float>& targets) {
  const float* out = model.forward(x.data(), rows);
  float stats[2] = {0, 0};
  const float scale = 1.0f / static_cast<float>(rows);
  if (loss == LossKind::kXent)
    be.kernels<LossKernels>().softmax_xent(out, labels.data(), rows, model.output_dim(), scale,
                                           model.output_grad(), stats);
  else
    be.kernels<LossKernels>().mse(out, targets.data(), rows, model.output_dim(), scale,
                                  model.output_grad(), stats);
  return static_cast<double>(stats[0]) / rows;
}

// eps: the finite-difference step on each parameter (and half of it, to
// spot kinks).
void check_model_gradients(Backend& be, const std::string& spec, LossKind loss,
                           const Shape& input = Shape{4}, float eps = 4e-3f) {
  SCOPED_TRACE(spec + " on " + input.to_string());
  const int input_dim = static_cast<int>(input.size()), rows = 5;
  Model model(be, parse_model_spec(spec), input, rows);
  model.init(2024);
  const auto x = uniform_floats(static_cast<std::size_t>(rows) * input_dim, 41, -1.5, 1.5);
  std::vector<std::int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = r % model.output_dim();
  const auto targets =
      uniform_floats(static_cast<std::size_t>(rows) * model.output_dim(), 42, -1.0, 1.0);

  model_loss(be, model, x, rows, loss, labels, targets);
  model.backward(x.data(), model.output_grad(), rows);
  const std::size_t n = model.num_params();
  std::vector<float> grads(n), params(n);
  be.copy_to_host(grads.data(), model.grads(), n * sizeof(float));
  be.copy_to_host(params.data(), model.params(), n * sizeof(float));

  auto loss_at = [&](std::size_t i, float value) {
    std::vector<float> p = params;
    p[i] = value;
    be.copy_to_device(model.params(), p.data(), n * sizeof(float));
    return model_loss(be, model, x, rows, loss, labels, targets);
  };
  auto central = [&](std::size_t i, float eps) {
    const float up = params[i] + eps, down = params[i] - eps;
    return (loss_at(i, up) - loss_at(i, down)) / (static_cast<double>(up) - down);
  };

  std::size_t kinks = 0;
  double max_grad = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double numeric = central(i, eps);
    // A ReLU kink inside the step makes the difference quotient meaningless;
    // it shows up as disagreement with a half-size step. Skip those few.
    const double half = central(i, eps / 2);
    if (std::abs(numeric - half) > 0.05 * std::abs(numeric) + 1e-3) {
      ++kinks;
      continue;
    }
    max_grad = std::max(max_grad, std::abs(static_cast<double>(grads[i])));
    expect_grad_near(grads[i], numeric, "param " + std::to_string(i));
  }
  EXPECT_LE(kinks, n / 10) << "too many non-smooth coordinates to trust the check";
  EXPECT_GT(max_grad, 1e-2) << "gradients are suspiciously small";
}

TEST_F(GradientTest, XentModelBackwardForEachActivation) {
  for (Activation f : kAllActivations) {
    const std::string a = activation_name(f);
    check_model_gradients(*be_, "dense:6," + a + ",dense:5," + a + ",dense:3", LossKind::kXent);
  }
}

TEST_F(GradientTest, SingleDenseXentModel) {
  check_model_gradients(*be_, "dense:3", LossKind::kXent);
}

TEST_F(GradientTest, MseModelBackward) {
  check_model_gradients(*be_, "dense:5,tanh,dense:4,sigmoid,dense:2", LossKind::kMse);
}

// Batch statistics couple the rows: each row's loss depends on every
// other row's input, which the model-level check sees.
TEST_F(GradientTest, BatchNormModelBackward) {
  check_model_gradients(*be_, "dense:6,bn,tanh,dense:5,bn:local,gelu,dense:3", LossKind::kXent);
  check_model_gradients(*be_, "bn,dense:4,bn,dense:2", LossKind::kMse);
}

// Dropout's mask is the same at every forward of a step, so the loss is
// differentiable in the weights and its gradient goes through the mask.
TEST_F(GradientTest, DropoutModelBackward) {
  check_model_gradients(*be_, "dense:8,dropout:0.3,tanh,dense:3", LossKind::kXent);
}

TEST_F(GradientTest, LeadingActivationIsDifferentiatedThrough) {
  check_model_gradients(*be_, "tanh,dense:4,gelu,dense:2", LossKind::kMse);
}

// Spatial layers inside a model: conv (plain and, from 8 input channels,
// blocked layouts), pooling, gap and flatten, 2-D and 3-D. A first-layer
// weight moves every pre-activation of its channel, so some ReLU or
// max-pool switch lies within a 4e-3 step, too close for the half-step
// test to see it (the quotient converges to the analytic value as the step
// shrinks): these take a step of 5e-4.
TEST_F(GradientTest, ConvolutionalModelBackward) {
  const float eps = 5e-4f;
  check_model_gradients(*be_, "conv:3:3,relu,maxpool:2,conv:4:3:2:1,tanh,gap,dense:3",
                        LossKind::kXent, Shape{2, 7, 6}, eps);
  check_model_gradients(*be_, "conv:8:3,tanh,conv:8:3:2,gelu,avgpool:2:1,flatten,dense:2",
                        LossKind::kMse, Shape{1, 6, 5}, eps);
  check_model_gradients(*be_, "conv:2:3,tanh,maxpool:2,flatten,dense:2", LossKind::kMse,
                        Shape{1, 4, 4, 5}, eps);
}

}  // namespace
}  // namespace dptrain
