// Implements: unit tests of the bn layer family on the CPU backend — forward
// and backward against a naive double reference (itself checked against
// central finite differences) on flat, [C, H, W] and [C, D, H, W] samples of
// odd sizes; torch's running statistics over several steps; eval from the
// running statistics; exactly one replica sum per pass for `bn`, none for
// `bn:local` nor in eval; the --model tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "bn_reference.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"
#include "layer_rig.hpp"

namespace dptrain {
namespace {

using testing::BnRef;
using testing::error_ratio;
using testing::LayerRig;
using testing::normal_values;
using testing::to_floats;

constexpr double kEps = 1e-5;

struct Case {
  Shape sample;
  int rows;
};

// Channels and positions per channel of a bn input.
int channels_of(const Shape& s) { return s[0]; }
int spatial_of(const Shape& s) { return static_cast<int>(s.size()) / s[0]; }

class BatchNormTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

// Weight and bias away from 1 and 0, so that both enter every check.
void randomize_affine(LayerRig& rig, int channels, std::uint64_t seed) {
  const auto w = normal_values(channels, seed, 1.0, 0.5);
  const auto b = normal_values(channels, seed + 1, 0.0, 0.5);
  for (int c = 0; c < channels; ++c) {
    rig.params[c] = static_cast<float>(w[c]);  // in place: the layer points here
    rig.params[channels + c] = static_cast<float>(b[c]);
  }
}

std::vector<double> affine(const LayerRig& rig, int channels, int offset) {
  return std::vector<double>(rig.params.begin() + offset, rig.params.begin() + offset + channels);
}

TEST_F(BatchNormTest, MatchesTheDoubleReference) {
  const Case cases[] = {{Shape{5}, 7}, {Shape{3, 5, 3}, 3}, {Shape{2, 3, 2, 3}, 3}, {Shape{3, 1, 1}, 2}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.sample.to_string() + " x " + std::to_string(k.rows));
    const int C = channels_of(k.sample), S = spatial_of(k.sample);
    LayerRig rig(*be_, "bn", k.sample, k.rows);
    randomize_affine(rig, C, 3);
    const std::size_t n = static_cast<std::size_t>(k.rows) * k.sample.size();
    const auto x = normal_values(n, 5, 1.5, 2.0);  // a mean the shift must handle
    const auto dy = normal_values(n, 6, 0.0, 1.0);
    const BnRef ref = testing::bn_reference(x, k.rows, C, S, affine(rig, C, 0), affine(rig, C, C), dy, kEps);

    const auto xf = to_floats(x);
    const auto y = rig.forward(xf, k.rows);
    const auto dx = rig.backward(xf, y, to_floats(dy), k.rows);
    // Float results against double: a few roundings of values of order 1,
    // and sums of at most 45 terms. dx is a difference of terms of size
    // |w · invstd · dy| that cancel (exactly, up to eps, with 2 values per
    // channel), so its bound also has a floor of those terms' size.
    double terms = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const int c = static_cast<int>(i / S) % C;
      terms = std::max(terms, std::abs(dy[i] * rig.params[c] / std::sqrt(ref.var[c] + kEps)));
    }
    const double ry = error_ratio(y.data(), ref.y, 1e-6);
    const double rdx = error_ratio(dx.data(), ref.dx, 1e-5, 1e-6 * terms);
    const double rdw = error_ratio(rig.grads.data(), ref.dweight, 1e-6);
    const double rdb = error_ratio(rig.grads.data() + C, ref.dbias, 1e-6);
    std::printf("bn %s x %d: error/bound y %.3f dx %.3f dweight %.3f dbias %.3f\n",
                k.sample.to_string().c_str(), k.rows, ry, rdx, rdw, rdb);
    EXPECT_LT(ry, 1.0);
    EXPECT_LT(rdx, 1.0);
    EXPECT_LT(rdw, 1.0);
    EXPECT_LT(rdb, 1.0);
  }
}

// The reference's backward is what the others are checked against, so it is
// checked itself: L = Σ dy · y(x, w, b), central differences in double.
TEST(BatchNormReference, BackwardMatchesFiniteDifferences) {
  const int rows = 3, C = 2, S = 5;
  const std::size_t n = static_cast<std::size_t>(rows) * C * S;
  auto x = normal_values(n, 11, 0.5, 1.5);
  auto w = normal_values(C, 12, 1.0, 0.5);
  auto b = normal_values(C, 13, 0.0, 0.5);
  const auto dy = normal_values(n, 14, 0.0, 1.0);
  const BnRef ref = testing::bn_reference(x, rows, C, S, w, b, dy, kEps);
  auto loss = [&] {
    const BnRef r = testing::bn_reference(x, rows, C, S, w, b, dy, kEps);
    double l = 0;
    for (std::size_t i = 0; i < n; ++i) l += dy[i] * r.y[i];
    return l;
  };
  auto central = [&](double& v) {
    const double h = 1e-5, keep = v;
    v = keep + h;
    const double up = loss();
    v = keep - h;
    const double down = loss();
    v = keep;
    return (up - down) / (2 * h);
  };
  std::vector<double> num_dx(n), num_dw(C), num_db(C);
  for (std::size_t i = 0; i < n; ++i) num_dx[i] = central(x[i]);
  for (int c = 0; c < C; ++c) {
    num_dw[c] = central(w[c]);
    num_db[c] = central(b[c]);
  }
  // Central differences of a smooth function at h = 1e-5: truncation ~h²,
  // cancellation ~1e-16 / h; 1e-7 of the largest gradient is far above both.
  const double rdx = error_ratio(ref.dx.data(), num_dx, 1e-7);
  const double rdw = error_ratio(ref.dweight.data(), num_dw, 1e-7);
  const double rdb = error_ratio(ref.dbias.data(), num_db, 1e-7);
  std::printf("bn reference vs finite differences: error/bound dx %.3g dweight %.3g dbias %.3g\n",
              rdx, rdw, rdb);
  EXPECT_LT(rdx, 1.0);
  EXPECT_LT(rdw, 1.0);
  EXPECT_LT(rdb, 1.0);
}

TEST_F(BatchNormTest, InitAndTensorsAreTorchs) {
  LayerRig rig(*be_, "bn", Shape{3, 2, 2}, 1);
  const std::vector<ParamInfo> params = {{"bn0", "weight", {3}, 0, 3}, {"bn0", "bias", {3}, 3, 3}};
  const std::vector<ParamInfo> buffers = {{"bn0", "running_mean", {3}, 0, 3},
                                          {"bn0", "running_var", {3}, 3, 3}};
  EXPECT_EQ(rig.layer->params(), params);
  EXPECT_EQ(rig.layer->buffers(), buffers);
  EXPECT_EQ(rig.params, (std::vector<float>{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(rig.buffers, (std::vector<float>{0, 0, 0, 1, 1, 1}));
  EXPECT_TRUE(rig.layer->differs_in_eval());
  EXPECT_TRUE(rig.layer->communicates());
  LayerRig local(*be_, "bn:local", Shape{4}, 1);
  EXPECT_FALSE(local.layer->communicates());
  EXPECT_EQ(local.layer->spec(), "bn:local");
  EXPECT_EQ(local.layer->params()[0].shape, std::vector<std::size_t>{4});
}

TEST_F(BatchNormTest, RunningStatisticsFollowTorchAndEvalUsesThem) {
  const Shape sample{3, 2, 3};
  const int rows = 5, C = 3, S = 6;
  const std::size_t n = rows * sample.size();
  LayerRig rig(*be_, "bn", sample, rows);
  randomize_affine(rig, C, 21);
  std::vector<double> rm(C, 0.0), rv(C, 1.0);
  for (int step = 0; step < 6; ++step) {
    // Means and spreads that move from step to step, one far from zero.
    const auto x = normal_values(n, 100 + step, 3.0 - step, 0.5 + 0.3 * step);
    const BnRef ref = testing::bn_reference(x, rows, C, S, affine(rig, C, 0), affine(rig, C, C),
                                            std::vector<double>(n, 0.0), kEps);
    testing::torch_running_update(rm, rv, ref, rows * S);
    rig.forward(to_floats(x), rows);
    const double rmean = error_ratio(rig.buffers.data(), rm, 1e-6);
    const double rvar = error_ratio(rig.buffers.data() + C, rv, 1e-6);
    EXPECT_LT(rmean, 1.0) << "step " << step;
    EXPECT_LT(rvar, 1.0) << "step " << step;
    if (step == 5) std::printf("bn running stats after 6 steps: error/bound mean %.3f var %.3f\n", rmean, rvar);
  }

  // Eval: (x - running_mean) / sqrt(running_var + eps) · w + b, and the
  // running statistics stay as they are.
  const std::vector<float> before = rig.buffers;
  const auto x = normal_values(2 * sample.size(), 300, 0.0, 1.0);
  const auto y = rig.forward(to_floats(x), 2, Mode::kEval);
  std::vector<double> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = (i / S) % C;
    want[i] = (x[i] - rig.buffers[c]) / std::sqrt(rig.buffers[C + c] + kEps) * rig.params[c] +
              rig.params[C + c];
  }
  EXPECT_LT(error_ratio(y.data(), want, 1e-6), 1.0);
  EXPECT_EQ(rig.buffers, before);
}

TEST_F(BatchNormTest, OneReplicaSumPerPassForGlobalNoneForLocal) {
  const Shape sample{2, 3, 3};
  const int rows = 4;
  const auto x = to_floats(normal_values(rows * sample.size(), 31, 0.0, 1.0));
  const auto dy = to_floats(normal_values(rows * sample.size(), 32, 0.0, 1.0));
  LayerRig alone(*be_, "bn", sample, rows);  // replicas == nullptr: the shard is the batch
  const auto y0 = alone.forward(x, rows);
  const auto dx0 = alone.backward(x, y0, dy, rows);
  for (const char* token : {"bn", "bn:local"}) {
    SCOPED_TRACE(token);
    testing::CountingReplicaSum one;  // a single replica: sums leave values as they are
    LayerRig rig(*be_, token, sample, rows);
    rig.step.replicas = &one;
    rig.step.batch_rows = rows;
    const auto y = rig.forward(x, rows);
    EXPECT_EQ(one.calls, token == std::string("bn") ? 1 : 0);
    const auto dx = rig.backward(x, y, dy, rows);
    EXPECT_EQ(one.calls, token == std::string("bn") ? 2 : 0);
    rig.forward(x, rows, Mode::kEval);
    EXPECT_EQ(one.calls, token == std::string("bn") ? 2 : 0) << "eval makes no collective";
    EXPECT_EQ(y, y0);
    EXPECT_EQ(dx, dx0);
    EXPECT_EQ(rig.grads, alone.grads);
  }
}

// Through a Model: one call per global bn per pass, also on an empty
// shard (whose running statistics still move with the global batch).
TEST_F(BatchNormTest, ModelMakesTheSameCallsOnAnEmptyShard) {
  const int rows = 3;
  Model m(*be_, parse_model_spec("dense:4,bn,tanh,bn:local,dense:5,bn,dense:2"), 3, rows);
  m.init(5);
  testing::CountingReplicaSum sum;
  StepInfo step;
  step.replicas = &sum;
  step.batch_rows = rows;
  m.set_step(step);
  const auto x = to_floats(normal_values(rows * 3, 41, 0.0, 1.0));
  m.forward(x.data(), rows);
  EXPECT_EQ(sum.calls, 2);
  be_->fill(m.output_grad(), 0.1f, rows * 2);
  m.backward(x.data(), m.output_grad(), rows);
  EXPECT_EQ(sum.calls, 4);
  m.forward(x.data(), rows, nullptr, Mode::kEval);
  EXPECT_EQ(sum.calls, 4);
  m.forward(x.data(), 0);
  EXPECT_EQ(sum.calls, 6);
  m.backward(x.data(), m.output_grad(), 0);
  EXPECT_EQ(sum.calls, 8);
  for (std::size_t i = 0; i < m.num_params(); ++i) EXPECT_EQ(m.grads()[i], 0.0f);
}

// Threads split channels or rows, never one sum: the same bits on 1 and 2
// threads, on a tensor large enough for the kernels to go parallel.
TEST(BatchNormThreads, SameBitsOnOneAndTwoThreads) {
  const Shape sample{4, 16, 16};
  const int rows = 40;  // 40960 values, above the parallel threshold
  const auto x = to_floats(normal_values(rows * sample.size(), 51, 0.3, 1.0));
  const auto dy = to_floats(normal_values(rows * sample.size(), 52, 0.0, 1.0));
  std::vector<float> y[2], dx[2], grads[2], buffers[2];
  for (int t = 0; t < 2; ++t) {
    BackendOptions opts;
    opts.threads = t + 1;  // sets this thread's OpenMP team, so one backend at a time
    auto be = make_cpu_backend(opts);
    LayerRig rig(*be, "bn", sample, rows);
    y[t] = rig.forward(x, rows);
    dx[t] = rig.backward(x, y[t], dy, rows);
    grads[t] = rig.grads;
    buffers[t] = rig.buffers;
  }
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(buffers[0], buffers[1]);
}

TEST(BatchNormSpec, TokensParseAndBadOnesSayWhy) {
  const auto specs = parse_model_spec("bn,bn:local,dense:2");
  EXPECT_EQ(specs[0].kind, "bn");
  EXPECT_TRUE(specs[0].args.empty());
  EXPECT_EQ(specs[1].kind, "bn");  // checkpoint names count both as bn<i>
  EXPECT_EQ(specs[1].args, std::vector<std::string>{"local"});
  auto be = make_cpu_backend(BackendOptions{});
  Model m(*be, specs, Shape{3, 4, 4}, 1);
  EXPECT_EQ(m.spec(), "bn,bn:local,dense:2");
  EXPECT_EQ(m.layer(1).name(), "bn1");
  EXPECT_EQ(m.buffer_layout().size(), 4u);
  for (const char* bad : {"bn:global,dense:2", "bn:,dense:2", "bn:local:2,dense:2"}) {
    try {
      parse_model_spec(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find("takes no argument but 'local'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace dptrain
