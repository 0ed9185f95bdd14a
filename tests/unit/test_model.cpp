// Implements: unit tests of --model parsing, the parameter arena layout,
// seeded initialization, the forward pass against host loops, and the
// empty-shard case.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

TEST(ModelSpec, ParsesGoodSpecs) {
  const auto layers = parse_model_spec("dense:256,relu,dense:10");
  using Args = std::vector<std::string>;
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].kind, "dense");
  EXPECT_EQ(layers[0].args, Args{"256"});
  EXPECT_EQ(layers[1].kind, "relu");
  EXPECT_TRUE(layers[1].args.empty());
  EXPECT_EQ(layers[2].args, Args{"10"});

  const auto all = parse_model_spec(" dense:8 ,tanh,dense:7,gelu,dense:6,sigmoid,dense:1");
  ASSERT_EQ(all.size(), 7u);
  EXPECT_EQ(all[0].args, Args{"8"});
  EXPECT_EQ(all[0].token, "dense:8");
  EXPECT_EQ(all[1].kind, "tanh");
  EXPECT_EQ(all[3].kind, "gelu");
  EXPECT_EQ(all[5].kind, "sigmoid");
  EXPECT_EQ(parse_model_spec("dense:1").size(), 1u);
}

TEST(ModelSpec, ActivationNames) {
  EXPECT_EQ(activation_name(Activation::kRelu), "relu");
  EXPECT_EQ(activation_name(Activation::kTanh), "tanh");
  EXPECT_EQ(activation_name(Activation::kGelu), "gelu");
  EXPECT_EQ(activation_name(Activation::kSigmoid), "sigmoid");
}

TEST(ModelSpec, BadSpecsAreUsageErrorsNamingTheToken) {
  struct Case {
    const char* spec;
    const char* token;  // must appear in the message
  };
  const Case cases[] = {
      {"", ""},
      {"dense:0", "dense:0"},
      {"dense:-3", "dense:-3"},
      {"dense:abc", "dense:abc"},
      {"dense:5x", "dense:5x"},
      {"dense:", "dense:"},
      {"dense", "dense"},
      {"conv:3,dense:2", "conv:3"},
      {"dense:4,swish,dense:2", "swish"},
      {"dense:4,,dense:2", ""},
      {"dense:4,RELU,dense:2", "RELU"},
      {"dense:4,relu", "dense"},  // the last layer must be dense
      {"relu", "dense"},
  };
  for (const Case& c : cases) {
    try {
      parse_model_spec(c.spec);
      ADD_FAILURE() << "accepted '" << c.spec << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << c.spec;
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.token), std::string::npos) << c.spec << ": " << msg;
    }
  }
  // A bad token's message lists the valid layers.
  try {
    parse_model_spec("dense:4,swish,dense:2");
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* valid : {"dense:N", "relu", "tanh", "gelu", "sigmoid"})
      EXPECT_NE(msg.find(valid), std::string::npos) << msg;
  }
}

class ModelTest : public ::testing::Test {
 protected:
  std::vector<float> host_params(Model& m) {
    std::vector<float> p(m.num_params());
    be_->copy_to_host(p.data(), m.params(), p.size() * sizeof(float));
    return p;
  }
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

TEST_F(ModelTest, ArenaLayoutAndSpec) {
  Model m(*be_, parse_model_spec("dense:5, relu,dense:3"), 4, 8);
  EXPECT_EQ(m.spec(), "dense:5,relu,dense:3");
  EXPECT_EQ(m.input_dim(), 4);
  EXPECT_EQ(m.output_dim(), 3);
  EXPECT_EQ(m.max_rows(), 8);
  // dense<i>/weight [out, in] then dense<i>/bias [out], in layer order.
  const std::vector<ParamInfo> want = {{"dense0", "weight", {5, 4}, 0, 20},
                                       {"dense0", "bias", {5}, 20, 5},
                                       {"dense1", "weight", {3, 5}, 25, 15},
                                       {"dense1", "bias", {3}, 40, 3}};
  EXPECT_EQ(m.param_layout(), want);
  EXPECT_TRUE(m.buffer_layout().empty());
  EXPECT_EQ(m.num_params(), 43u);
  EXPECT_EQ(m.num_buffers(), 0u);
}

TEST_F(ModelTest, InitIsSeededHeOrGlorotWithZeroBiases) {
  const auto layers = parse_model_spec("dense:40,relu,dense:30,tanh,dense:20,gelu,dense:10");
  Model a(*be_, layers, 50, 1), b(*be_, layers, 50, 1), c(*be_, layers, 50, 1);
  a.init(7);
  b.init(7);
  c.init(8);
  const auto pa = host_params(a), pb = host_params(b), pc = host_params(c);
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);

  // dense0 -> relu: He; dense1 -> tanh: Glorot; dense2 -> gelu: He; dense3 last: Glorot.
  const double limits[] = {std::sqrt(6.0 / 50), std::sqrt(6.0 / (40 + 30)), std::sqrt(6.0 / 30),
                           std::sqrt(6.0 / (20 + 10))};
  const std::vector<ParamInfo>& layout = a.param_layout();
  ASSERT_EQ(layout.size(), 8u);
  for (std::size_t i = 0; i < 4; ++i) {
    const ParamInfo& w = layout[2 * i];
    const ParamInfo& b = layout[2 * i + 1];
    ASSERT_EQ(w.name, "weight");
    ASSERT_EQ(b.name, "bias");
    double max_abs = 0.0, sum = 0.0;
    for (std::size_t j = 0; j < w.count; ++j) {
      const double v = pa[w.offset + j];
      max_abs = std::max(max_abs, std::abs(v));
      sum += v;
    }
    EXPECT_LE(max_abs, limits[i] * (1 + 1e-6)) << w.layer;
    EXPECT_GT(max_abs, 0.9 * limits[i]) << w.layer;                  // fills the range
    EXPECT_LT(std::abs(sum / w.count), 0.1 * limits[i]) << w.layer;  // centred
    for (std::size_t j = 0; j < b.count; ++j) EXPECT_EQ(pa[b.offset + j], 0.0f) << b.layer;
  }
  // Layers draw from different streams, so dense1 does not repeat dense0.
  EXPECT_NE(pa[layout[0].offset] / limits[0], pa[layout[2].offset] / limits[1]);
}

TEST_F(ModelTest, ForwardMatchesHostLoops) {
  const int in = 3, hidden = 4, out = 2, rows = 2;
  Model m(*be_, parse_model_spec("dense:4,tanh,dense:2"), in, rows);
  m.init(3);
  auto p = host_params(m);
  // dense0/weight, dense0/bias, dense1/weight, dense1/bias
  const std::vector<ParamInfo>& t = m.param_layout();
  ASSERT_EQ(t.size(), 4u);
  // Non-zero biases so that add_bias is exercised.
  for (std::size_t i = 0; i < p.size(); ++i)
    if (i >= t[1].offset && i < t[2].offset) p[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  p[t[3].offset + 1] = 0.7f;
  be_->copy_to_device(m.params(), p.data(), p.size() * sizeof(float));

  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.0f, 0.25f, -0.75f};
  std::vector<float> y(rows * out);
  be_->copy_to_host(y.data(), m.forward(x.data(), rows), y.size() * sizeof(float));

  const std::size_t w0 = t[0].offset, b0 = t[1].offset, w1 = t[2].offset, b1 = t[3].offset;
  for (int r = 0; r < rows; ++r) {
    double h[hidden];
    for (int j = 0; j < hidden; ++j) {
      double acc = p[b0 + j];
      for (int k = 0; k < in; ++k) acc += p[w0 + j * in + k] * x[r * in + k];
      h[j] = std::tanh(acc);
    }
    for (int j = 0; j < out; ++j) {
      double acc = p[b1 + j];
      for (int k = 0; k < hidden; ++k) acc += p[w1 + j * hidden + k] * h[k];
      EXPECT_NEAR(y[r * out + j], acc, 1e-5) << "r=" << r << " j=" << j;
    }
  }
}

TEST_F(ModelTest, EmptyShardGivesZeroGradients) {
  Model m(*be_, parse_model_spec("dense:6,relu,dense:4,gelu,dense:3"), 5, 4);
  m.init(11);
  std::vector<float> x(4 * 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 1.0f;
  // A real step first, so stale non-zero gradients would show.
  m.forward(x.data(), 4);
  be_->fill(m.output_grad(), 0.25f, 4 * 3);
  m.backward(x.data(), m.output_grad(), 4);
  std::vector<float> g(m.num_params());
  be_->copy_to_host(g.data(), m.grads(), g.size() * sizeof(float));
  double norm = 0.0;
  for (float v : g) norm += std::abs(v);
  ASSERT_GT(norm, 0.0);

  m.forward(x.data(), 0);
  m.backward(x.data(), m.output_grad(), 0);
  be_->copy_to_host(g.data(), m.grads(), g.size() * sizeof(float));
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], 0.0f) << i;

  // A model built for zero rows works too.
  Model empty(*be_, parse_model_spec("dense:2"), 3, 0);
  empty.init(1);
  empty.forward(nullptr, 0);
  empty.backward(nullptr, empty.output_grad(), 0);
  std::vector<float> ge(empty.num_params(), 1.0f);
  be_->copy_to_host(ge.data(), empty.grads(), ge.size() * sizeof(float));
  for (float v : ge) EXPECT_EQ(v, 0.0f);
}

TEST_F(ModelTest, TooManyRowsIsAnError) {
  Model m(*be_, parse_model_spec("dense:2"), 3, 2);
  std::vector<float> x(9);
  EXPECT_THROW(m.forward(x.data(), 3), Error);
}

}  // namespace
}  // namespace dptrain
