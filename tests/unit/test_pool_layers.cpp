// Implements: unit tests of maxpool, avgpool, gap and flatten on the CPU
// backend — forward and input gradient against the naive double reference
// (spatial_reference.hpp): max pooling exact in forward (a selection) and
// within the bound of its summed gradients, average pooling within the
// bound of a sum and a scaling; odd sizes, overlapping and dropping
// windows, 2-D and 3-D, rows 1 and 3; the reference's backward against
// central finite differences; no new oneDNN object once warm.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "spatial_test_support.hpp"

namespace dptrain {
namespace {

namespace ref = spatial_reference;

struct PoolCase {
  const char* token;
  Shape input;
  int window, stride;  // 0: the whole input (gap)
};

const PoolCase kCases[] = {
    {"maxpool:2", Shape{3, 7, 5}, 2, 2},      {"maxpool:3:2", Shape{2, 7, 5}, 3, 2},
    {"maxpool:3:1", Shape{1, 5, 6}, 3, 1},    {"avgpool:2", Shape{3, 7, 5}, 2, 2},
    {"avgpool:3:2", Shape{2, 7, 5}, 3, 2},    {"maxpool:2", Shape{2, 3, 4, 5}, 2, 2},
    {"avgpool:2:1", Shape{2, 3, 4, 5}, 2, 1}, {"maxpool:3:2", Shape{1, 5, 4, 7}, 3, 2},
    {"gap", Shape{3, 7, 5}, 0, 0},            {"gap", Shape{2, 3, 4, 5}, 0, 0},
    // From 8 channels on the plan pools channel-blocked copies.
    {"maxpool:3:2", Shape{9, 7, 5}, 3, 2},    {"avgpool:2", Shape{8, 5, 7}, 2, 2},
    {"maxpool:2", Shape{17, 3, 4, 5}, 2, 2},  {"gap", Shape{12, 5, 3}, 0, 0},
};

ref::Geometry geometry_of(const PoolCase& c) {
  ref::Geometry g;
  g.in_channels = g.out_channels = c.input[0];
  const int first = c.input.rank() == 3 ? 1 : 0;
  for (int d = first; d < 3; ++d) {
    g.input[d] = c.input[d - first + 1];
    g.kernel[d] = c.window ? c.window : g.input[d];
    g.stride[d] = c.stride ? c.stride : g.input[d];
  }
  return g;
}

bool is_max(const PoolCase& c) { return std::string(c.token).rfind("maxpool", 0) == 0; }

class PoolLayerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

TEST_F(PoolLayerTest, PassesMatchTheReferenceWithinTheFloatBound) {
  double worst_max = 0, worst_avg[2] = {};
  for (const PoolCase& c : kCases) {
    const ref::Geometry g = geometry_of(c);
    for (int rows : {1, 3}) {
      const std::string what = std::string(c.token) + " on " + c.input.to_string() + ", rows " +
                               std::to_string(rows);
      BoundLayer l(*be_, c.token, c.input, 3);
      ASSERT_EQ(l.layer->output_shape().size(), std::size_t(g.out_size())) << what;
      if (!c.window) EXPECT_EQ(l.layer->output_shape(), Shape{c.input[0]});
      const auto x = distinct_floats(std::size_t(rows) * g.in_size(), 11);
      const auto dy = distinct_floats(std::size_t(rows) * g.out_size(), 12);
      // Outputs start as NaN: every value must be written, not left as found.
      std::vector<float> y(dy.size(), NAN), dx(x.size(), NAN);
      const ConstTensorView xv{x.data(), rows, c.input};
      l.layer->forward(*be_, xv, {y.data(), rows, l.layer->output_shape()}, Mode::kTrain);
      l.layer->backward_input(*be_, xv, {y.data(), rows, l.layer->output_shape()},
                              {dy.data(), rows, l.layer->output_shape()},
                              {dx.data(), rows, c.input});
      const auto xd = to_double(x), dyd = to_double(dy);
      if (is_max(c)) {
        const auto want = ref::max_pool_forward(g, rows, xd);
        for (std::size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], want[i]) << what << " y[" << i << "]";
        worst_max = std::max(worst_max,
                             expect_within_bound(dx, ref::max_pool_backward(g, rows, xd, dyd),
                                                 g.taps(), what + " dx"));
      } else {
        // A sum of taps terms, then one scaling by 1 / taps (two roundings
        // if the reciprocal is rounded first).
        worst_avg[0] = std::max(worst_avg[0],
                                expect_within_bound(y, ref::avg_pool_forward(g, rows, xd),
                                                    g.taps() + 1, what + " y"));
        worst_avg[1] = std::max(worst_avg[1],
                                expect_within_bound(dx, ref::avg_pool_backward(g, rows, dyd),
                                                    g.taps() + 1, what + " dx"));
      }
    }
  }
  std::cout << "pooling largest error / bound: max dx " << worst_max << ", avg y "
            << worst_avg[0] << ", avg dx " << worst_avg[1] << "\n";
}

TEST_F(PoolLayerTest, ReferenceBackwardMatchesFiniteDifferences) {
  for (const PoolCase& c : kCases) {
    const ref::Geometry g = geometry_of(c);
    const int rows = 2;
    // Distinct inputs at least 2 / n apart: a step of h far below that
    // never changes which input is a window's maximum.
    auto x = to_double(distinct_floats(std::size_t(rows) * g.in_size(), 13));
    const auto cw = to_double(distinct_floats(std::size_t(rows) * g.out_size(), 14));
    auto loss = [&] {
      const auto y = is_max(c) ? ref::max_pool_forward(g, rows, x)
                               : ref::avg_pool_forward(g, rows, x).value;
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += cw[i] * y[i];
      return s;
    };
    const auto dx = is_max(c) ? ref::max_pool_backward(g, rows, x, cw).value
                              : ref::avg_pool_backward(g, rows, cw).value;
    const double h = 1e-5;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double keep = x[i];
      x[i] = keep + h;
      const double up = loss();
      x[i] = keep - h;
      const double down = loss();
      x[i] = keep;
      EXPECT_NEAR(dx[i], (up - down) / (2 * h), 1e-8) << c.token << " dx[" << i << "]";
    }
  }
}

TEST_F(PoolLayerTest, AWarmRowCountCreatesNothing) {
  PoolGeometry g;
  g.kind = PoolKind::kMax;
  g.channels = 2;
  g.input = {7, 5, 0};
  g.window = {3, 3, 0};
  g.stride = {2, 2, 0};
  g.output = {3, 2, 0};
  g.max_rows = 4;
  auto plan = be_->kernels<SpatialKernels>().pool_plan(g);
  std::vector<float> x = distinct_floats(4 * 2 * 35, 1), y(4 * 2 * 6), dx(x.size());
  const std::size_t at_start = plan->objects_created();
  plan->forward(x.data(), y.data(), 4);
  plan->backward(y.data(), dx.data(), 4);
  EXPECT_EQ(plan->objects_created(), at_start);
  plan->forward(x.data(), y.data(), 1);
  const std::size_t warm = plan->objects_created();
  for (int rows : {1, 4, 1, 4}) {
    plan->forward(x.data(), y.data(), rows);
    plan->backward(y.data(), dx.data(), rows);
  }
  EXPECT_EQ(plan->objects_created(), warm);
}

TEST_F(PoolLayerTest, FlattenCopiesBothWays) {
  BoundLayer l(*be_, "flatten", Shape{2, 3, 5}, 3);
  EXPECT_EQ(l.layer->output_shape(), Shape{30});
  EXPECT_TRUE(l.layer->params().empty());
  const auto x = distinct_floats(90, 1), dy = distinct_floats(90, 2);
  std::vector<float> y(90), dx(90);
  l.layer->forward(*be_, {x.data(), 3, Shape{2, 3, 5}}, {y.data(), 3, Shape{30}}, Mode::kTrain);
  l.layer->backward_input(*be_, {x.data(), 3, Shape{2, 3, 5}}, {y.data(), 3, Shape{30}},
                          {dy.data(), 3, Shape{30}}, {dx.data(), 3, Shape{2, 3, 5}});
  EXPECT_EQ(y, x);
  EXPECT_EQ(dx, dy);
}

}  // namespace
}  // namespace dptrain
