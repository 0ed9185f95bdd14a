// Implements: unit tests of the conv layer on the CPU backend — forward,
// input gradient and weight/bias gradients against the naive double
// reference (spatial_reference.hpp) within the float error bound, over odd
// sizes and stride/padding combinations, 2-D and 3-D, rows 1 and 3; the
// reference's own backward against central finite differences; no new
// oneDNN object once a row count is warm; conversions reused across the
// passes of a step only; init.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"
#include "spatial_test_support.hpp"

namespace dptrain {
namespace {

namespace ref = spatial_reference;

struct ConvCase {
  const char* token;
  Shape input;
  int filters, kernel, stride, padding;
};

const ConvCase kCases[] = {
    {"conv:3:3:2:0", Shape{2, 7, 5}, 3, 3, 2, 0},
    {"conv:4:1", Shape{3, 6, 5}, 4, 1, 1, 0},
    {"conv:2:5", Shape{2, 5, 7}, 2, 5, 1, 2},
    {"conv:3:3:2", Shape{3, 8, 6}, 3, 3, 2, 1},
    {"conv:2:4:3:2", Shape{1, 9, 7}, 2, 4, 3, 2},
    {"conv:2:3", Shape{2, 3, 4, 5}, 2, 3, 1, 1},
    {"conv:3:2:2:1", Shape{2, 3, 4, 5}, 3, 2, 2, 1},
    // From 8 input channels on the plan runs in oneDNN's blocked layouts.
    {"conv:9:3:2:1", Shape{8, 7, 5}, 9, 3, 2, 1},
    {"conv:16:1", Shape{16, 5, 3}, 16, 1, 1, 0},
    {"conv:8:3", Shape{10, 3, 4, 5}, 8, 3, 1, 1},
};

ref::Geometry geometry_of(const ConvCase& c) {
  ref::Geometry g;
  g.in_channels = c.input[0];
  g.out_channels = c.filters;
  const int first = c.input.rank() == 3 ? 1 : 0;  // images have depth 1
  for (int d = first; d < 3; ++d) {
    g.input[d] = c.input[d - first + 1];
    g.kernel[d] = c.kernel;
    g.stride[d] = c.stride;
    g.padding[d] = c.padding;
  }
  return g;
}

class ConvLayerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

TEST_F(ConvLayerTest, PassesMatchTheReferenceWithinTheFloatBound) {
  double worst[4] = {};  // forward, dx, dweight, dbias: largest error / bound
  for (const ConvCase& c : kCases) {
    const ref::Geometry g = geometry_of(c);
    for (int rows : {1, 3}) {
      const std::string what = std::string(c.token) + " on " + c.input.to_string() + ", rows " +
                               std::to_string(rows);
      BoundLayer l(*be_, c.token, c.input, 3);
      const auto o = g.output();
      const int first = c.input.rank() == 3 ? 1 : 0;
      for (int d = first; d < 3; ++d) ASSERT_EQ(l.layer->output_shape()[d - first + 1], o[d]);
      const std::size_t wn = l.param("weight").size();
      const auto w = distinct_floats(wn, 1), b = distinct_floats(c.filters, 2);
      std::copy(w.begin(), w.end(), l.params.begin());
      std::copy(b.begin(), b.end(), l.params.begin() + static_cast<long>(wn));
      const auto x = distinct_floats(std::size_t(rows) * g.in_size(), 3);
      const auto dy = distinct_floats(std::size_t(rows) * g.out_size(), 4);
      // Outputs start as NaN: every value must be written, not left as found.
      std::vector<float> y(dy.size(), NAN), dx(x.size(), NAN);

      std::fill(l.grads.begin(), l.grads.end(), NAN);
      l.layer->forward(*be_, {x.data(), rows, c.input}, {y.data(), rows, l.layer->output_shape()},
                       Mode::kTrain);
      const ConstTensorView xv{x.data(), rows, c.input};
      const ConstTensorView dyv{dy.data(), rows, l.layer->output_shape()};
      l.layer->backward_params(*be_, xv, dyv);
      l.layer->backward_input(*be_, xv, {y.data(), rows, l.layer->output_shape()}, dyv,
                              {dx.data(), rows, c.input});

      const int taps = g.taps();
      const auto xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
      worst[0] = std::max(worst[0], expect_within_bound(y, ref::conv_forward(g, rows, xd, wd,
                                                                              to_double(b)),
                                                        g.in_channels * taps + 1, what + " y"));
      worst[1] = std::max(
          worst[1], expect_within_bound(dx, ref::conv_backward_data(g, rows, dyd, wd),
                                        g.out_channels * taps, what + " dx"));
      const auto dwb = ref::conv_backward_weights(g, rows, xd, dyd);
      const int sum_terms = rows * g.out_size() / g.out_channels;
      worst[2] = std::max(worst[2], expect_within_bound(l.grad("weight"), dwb[0], sum_terms,
                                                        what + " dweight"));
      worst[3] = std::max(worst[3], expect_within_bound(l.grad("bias"), dwb[1], sum_terms,
                                                        what + " dbias"));
    }
  }
  std::cout << "conv largest error / bound: forward " << worst[0] << ", dx " << worst[1]
            << ", dweight " << worst[2] << ", dbias " << worst[3] << "\n";
}

// L = sum c * y, so dL/dx is the reference backward with dy = c; the
// convolution is linear in each argument, so central differences in double
// are exact up to rounding.
TEST_F(ConvLayerTest, ReferenceBackwardMatchesFiniteDifferences) {
  for (const ConvCase& c : kCases) {
    const ref::Geometry g = geometry_of(c);
    const int rows = 2;
    auto x = to_double(distinct_floats(std::size_t(rows) * g.in_size(), 5));
    auto w = to_double(distinct_floats(std::size_t(g.out_channels) * g.in_channels * g.taps(), 6));
    auto b = to_double(distinct_floats(g.out_channels, 7));
    const auto cw = to_double(distinct_floats(std::size_t(rows) * g.out_size(), 8));
    auto loss = [&] {
      const auto y = ref::conv_forward(g, rows, x, w, b).value;
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += cw[i] * y[i];
      return s;
    };
    const auto dx = ref::conv_backward_data(g, rows, cw, w).value;
    const auto dwb = ref::conv_backward_weights(g, rows, x, cw);
    const double h = 1e-3;
    auto check = [&](std::vector<double>& v, const std::vector<double>& grad, const char* name) {
      // Every coordinate of small tensors, an even sample of large ones.
      const std::size_t step = std::max<std::size_t>(1, v.size() / 64);
      for (std::size_t i = 0; i < v.size(); i += step) {
        const double keep = v[i];
        v[i] = keep + h;
        const double up = loss();
        v[i] = keep - h;
        const double down = loss();
        v[i] = keep;
        EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-9)
            << c.token << " d" << name << "[" << i << "]";
      }
    };
    check(x, dx, "x");
    check(w, dwb[0].value, "weight");
    check(b, dwb[1].value, "bias");
  }
}

TEST_F(ConvLayerTest, AWarmRowCountCreatesNothing) {
  ConvGeometry g;
  g.in_channels = 2;
  g.out_channels = 3;
  g.input = {7, 5, 0};
  g.output = {3, 2, 0};
  g.kernel = {3, 3, 0};
  g.stride = {2, 2, 0};
  g.padding = {0, 0, 0};
  g.max_rows = 4;
  auto plan = be_->kernels<SpatialKernels>().conv_plan(g);
  std::vector<float> x(4 * 2 * 35, 0.5f), w(3 * 2 * 9, 0.25f), b(3, 0.0f), y(4 * 3 * 6),
      dx(x.size()), dw(w.size()), db(3);
  auto step = [&](int rows) {
    plan->forward(x.data(), w.data(), b.data(), y.data(), rows);
    plan->backward_weights(x.data(), y.data(), dw.data(), db.data(), rows);
    plan->backward_data(y.data(), w.data(), dx.data(), rows);
  };
  const std::size_t at_start = plan->objects_created();
  EXPECT_GT(at_start, 0u);  // max_rows is made with the plan
  step(4);
  EXPECT_EQ(plan->objects_created(), at_start);
  step(3);  // warm-up of a new row count (a last, smaller batch)
  const std::size_t warm = plan->objects_created();
  EXPECT_GT(warm, at_start);
  for (int i = 0; i < 3; ++i) {
    step(3);
    step(4);
  }
  EXPECT_EQ(plan->objects_created(), warm);
  EXPECT_THROW(plan->forward(x.data(), w.data(), b.data(), y.data(), 5), Error);
}

// In step order a plan reuses forward's blocked x in backward_weights and
// backward_weights' blocked dy in backward_data; new values at the same
// addresses (the next step), or a pass on its own, must still be converted.
TEST_F(ConvLayerTest, ReusedConversionsNeverOutliveTheirStep) {
  ConvGeometry g;
  g.in_channels = 8;  // blocked layouts
  g.out_channels = 9;
  g.input = {6, 5, 0};
  g.output = {6, 5, 0};
  g.kernel = {3, 3, 0};
  g.stride = {1, 1, 0};
  g.padding = {1, 1, 0};
  g.max_rows = 3;
  const int rows = 3;
  const std::size_t xn = rows * 8 * 30, yn = rows * 9 * 30, wn = 9 * 8 * 9;
  const auto w = distinct_floats(wn, 5), b = distinct_floats(9, 6);
  std::vector<float> x(xn), dy(yn), y(yn), dx(xn), dw(wn), db(9);
  struct Results {
    std::vector<float> y, dx, dw, db;
  };
  auto fresh = [&] {  // each pass on a plan of its own: nothing to reuse
    Results r{std::vector<float>(yn), std::vector<float>(xn), std::vector<float>(wn),
              std::vector<float>(9)};
    be_->kernels<SpatialKernels>().conv_plan(g)->forward(x.data(), w.data(), b.data(), r.y.data(),
                                                         rows);
    be_->kernels<SpatialKernels>().conv_plan(g)->backward_weights(x.data(), dy.data(), r.dw.data(),
                                                                  r.db.data(), rows);
    be_->kernels<SpatialKernels>().conv_plan(g)->backward_data(dy.data(), w.data(), r.dx.data(),
                                                               rows);
    return r;
  };
  auto refill = [](std::vector<float>& v, std::uint64_t seed) {  // in place: same address
    const auto values = distinct_floats(v.size(), seed);
    std::copy(values.begin(), values.end(), v.begin());
  };
  auto plan = be_->kernels<SpatialKernels>().conv_plan(g);
  for (std::uint64_t seed : {1, 2}) {  // two steps, new values at the same addresses
    refill(x, 10 * seed);
    refill(dy, 10 * seed + 1);
    plan->forward(x.data(), w.data(), b.data(), y.data(), rows);
    plan->backward_weights(x.data(), dy.data(), dw.data(), db.data(), rows);
    plan->backward_data(dy.data(), w.data(), dx.data(), rows);
    const Results want = fresh();
    EXPECT_EQ(y, want.y) << "step " << seed;
    EXPECT_EQ(dw, want.dw) << "step " << seed;
    EXPECT_EQ(db, want.db) << "step " << seed;
    EXPECT_EQ(dx, want.dx) << "step " << seed;
  }
  // Passes on their own after a step, with new values at the same addresses.
  refill(x, 30);
  refill(dy, 31);
  plan->backward_data(dy.data(), w.data(), dx.data(), rows);
  plan->backward_weights(x.data(), dy.data(), dw.data(), db.data(), rows);
  const Results want = fresh();
  EXPECT_EQ(dx, want.dx);
  EXPECT_EQ(dw, want.dw);
  EXPECT_EQ(db, want.db);
}

TEST_F(ConvLayerTest, InitIsHeOrGlorotWithZeroBiasAndItsOwnDraws) {
  Model m(*be_, parse_model_spec("conv:4:3,relu,conv:2:3,flatten,dense:3"), Shape{2, 5, 5}, 1);
  m.init(9);
  const auto& layout = m.param_layout();
  ASSERT_EQ(layout[0].shape, (std::vector<std::size_t>{4, 2, 3, 3}));
  ASSERT_EQ(layout[2].shape, (std::vector<std::size_t>{2, 4, 3, 3}));
  auto max_abs = [&](const ParamInfo& p) {
    float v = 0;
    for (std::size_t i = 0; i < p.count; ++i) v = std::max(v, std::abs(m.params()[p.offset + i]));
    return v;
  };
  const double he = std::sqrt(6.0 / 18), glorot = std::sqrt(6.0 / (36 + 18));
  EXPECT_LE(max_abs(layout[0]), he);
  EXPECT_GT(max_abs(layout[0]), 0.8 * he);
  EXPECT_LE(max_abs(layout[2]), glorot);
  EXPECT_GT(max_abs(layout[2]), 0.8 * glorot);
  EXPECT_EQ(max_abs(layout[1]), 0.0f);
  EXPECT_EQ(max_abs(layout[3]), 0.0f);
  // conv0 and dense0 draw from different streams: their first values differ
  // even after scaling away the limits.
  const float c0 = m.params()[layout[0].offset] / static_cast<float>(he);
  const float d0 = m.params()[layout[4].offset] / static_cast<float>(std::sqrt(6.0 / (50 + 3)));
  EXPECT_NE(c0, d0);
}

}  // namespace
}  // namespace dptrain
