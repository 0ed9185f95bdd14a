// Implements: unit tests of the residual block family: parsing (nesting,
// bad parentheses), naming and layout of the parts in spec order, forward
// as f(x) + x, backward against central finite differences of the loss
// sum(y * w) through the whole model, and the projection's usage errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

TEST(Residual, ParsesNestedBlocksAndNamesPartsInSpecOrder) {
  const auto specs = parse_model_spec("dense:4,res(dense:4,relu,res(dense:4,tanh)),dense:2");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[1].kind, "res");
  ASSERT_EQ(specs[1].inner.size(), 3u);
  EXPECT_EQ(specs[1].inner[2].kind, "res");
  EXPECT_EQ(specs[1].inner[2].inner[1].kind, "tanh");
  const ModelLayout layout = model_layout(specs, Shape{3});
  std::vector<std::string> names;
  for (const ParamInfo& p : layout.params) names.push_back(p.path());
  EXPECT_EQ(names, (std::vector<std::string>{"dense0/weight", "dense0/bias", "dense1/weight",
                                             "dense1/bias", "dense2/weight", "dense2/bias",
                                             "dense3/weight", "dense3/bias"}));
  auto be = make_cpu_backend(BackendOptions{});
  Model m(*be, specs, Shape{3}, 2);
  EXPECT_EQ(m.spec(), "dense:4,res(dense:4,relu,res(dense:4,tanh)),dense:2");
}

TEST(Residual, BadParenthesesAndShapesAreUsageErrorsNamingTheLayer) {
  struct Case {
    const char* spec;
    const char* part;
  };
  const Case cases[] = {
      {"res(dense:4,dense:2", "'(' with no ')'"},
      {"dense:4),dense:2", "')' without '('"},
      {"res(),dense:2", "empty block"},
      {"res(dense:4)x,dense:2", "a block is res(L,...)"},
  };
  for (const Case& c : cases) {
    try {
      parse_model_spec(c.spec);
      ADD_FAILURE() << "accepted " << c.spec;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find(c.part), std::string::npos) << e.what();
    }
  }
  // A flat block that changes the width has no projection.
  try {
    model_layout(parse_model_spec("res(dense:5),dense:2"), Shape{3});
    ADD_FAILURE() << "accepted a width-changing flat block";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("res0"), std::string::npos) << e.what();
  }
}

// loss = sum_i y_i * w_i over the model output, for fixed random w.
double loss_of(Model& m, const std::vector<float>& x, int rows, const std::vector<float>& w) {
  const float* y = m.forward(x.data(), rows);
  double loss = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) loss += double(y[i]) * w[i];
  return loss;
}

// Every third parameter's gradient of sum(y * w) against central finite
// differences.
void check_finite_differences(const char* spec) {
  SCOPED_TRACE(spec);
  auto be = make_cpu_backend(BackendOptions{});
  const int rows = 3;
  Model m(*be, parse_model_spec(spec), Shape{3}, rows);
  m.init(7);
  Rng rng(3);
  std::vector<float> x(rows * 3), w(rows * 2);
  for (float& v : x) v = float(2 * rng.uniform() - 1);
  for (float& v : w) v = float(2 * rng.uniform() - 1);
  std::vector<float> params(m.params(), m.params() + m.num_params());
  m.forward(x.data(), rows);

  // Backward of sum(y * w): dout = w.
  std::copy(w.begin(), w.end(), m.output_grad());
  m.backward(x.data(), m.output_grad(), rows);
  std::vector<float> grads(m.grads(), m.grads() + m.num_params());
  int checked = 0;
  for (std::size_t i = 0; i < params.size(); i += 3) {
    const float h = 1e-2f;
    m.params()[i] = params[i] + h;
    const double up = loss_of(m, x, rows, w);
    m.params()[i] = params[i] - h;
    const double down = loss_of(m, x, rows, w);
    m.params()[i] = params[i];
    const double numeric = (up - down) / (2.0 * h);
    // Central differences in float: O(h^2) truncation plus rounding of
    // about 1e-6 / h; a missing branch is off by O(1).
    EXPECT_NEAR(grads[i], numeric, 2e-3 + 2e-3 * std::abs(numeric)) << " i=" << i;
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(Residual, ForwardAddsTheInputAndBackwardMatchesFiniteDifferences) {
  check_finite_differences("dense:4,res(dense:4,tanh,dense:4),tanh,dense:2");
}

// A block without parameters gets no backward_params call from the model:
// its input gradient (tanh's and the identity's) must still reach dense0.
TEST(Residual, ABlockWithoutParametersPassesItsGradientOn) {
  check_finite_differences("dense:4,res(tanh),res(dense:4,tanh,dense:4),dense:2");
}

TEST(Residual, IdentityBlockWithZeroBodyPassesItsInputThrough) {
  auto be = make_cpu_backend(BackendOptions{});
  Model m(*be, parse_model_spec("res(dense:3),dense:3"), Shape{3}, 2);
  m.init(1);
  std::fill(m.params(), m.params() + 12, 0.0f);  // the block's dense: weight 9 + bias 3
  // The last dense as the identity.
  float* last = m.params() + 12;
  std::fill(last, last + 12, 0.0f);
  for (int i = 0; i < 3; ++i) last[i * 3 + i] = 1.0f;
  const std::vector<float> x = {1, -2, 3, 0.5f, 0.25f, -4};
  const float* y = m.forward(x.data(), 2);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], x[i]);
}

}  // namespace
}  // namespace dptrain
