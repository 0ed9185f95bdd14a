// Implements: unit tests of the dropout layer family on the CPU backend —
// the drop rate within a binomial bound, the mask as the documented
// SplitMix64 draw of (seed, epoch, global row, element), the same masks
// however the rows are split into shards, backward = mask · scale · dy,
// eval (and P = 0) as the identity, and the --model tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backends/cpu/cpu_backend.hpp"
#include "bn_reference.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/model/model.hpp"
#include "layer_rig.hpp"

namespace dptrain {
namespace {

using testing::LayerRig;

std::vector<float> ramp(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.25f + static_cast<float>(i % 97) * 0.5f;  // never 0
  return v;
}

class DropoutTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

TEST_F(DropoutTest, DropsAtTheRateAndScalesTheRest) {
  const int rows = 200;
  const Shape sample{5, 10, 10};
  LayerRig rig(*be_, "dropout:0.3", sample, rows);
  rig.step.seed = 17;
  const auto x = ramp(rows * sample.size());
  const auto y = rig.forward(x, rows);
  const float scale = static_cast<float>(1.0 / 0.7);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0.0f) ++dropped;
    else ASSERT_EQ(y[i], x[i] * scale) << i;
  }
  const double n = static_cast<double>(x.size());
  const double sigma = std::sqrt(n * 0.3 * 0.7);
  std::printf("dropout:0.3 dropped %zu of %.0f (%.2f sigma from the mean)\n", dropped, n,
              (static_cast<double>(dropped) - 0.3 * n) / sigma);
  EXPECT_LT(std::abs(static_cast<double>(dropped) - 0.3 * n), 5 * sigma);
}

// The draw is output row + 1 of a SplitMix64 stream from the step key, then
// output element + 1 of the stream from that: recomputed here with Rng.
TEST_F(DropoutTest, MaskIsTheDocumentedSplitMix64Draw) {
  const int rows = 3, width = 40;
  const std::uint64_t seed = 5, epoch = 2, first_row = 11;
  LayerRig rig(*be_, "dropout:0.5", Shape{width}, rows, /*index=*/1);
  rig.step = {seed, epoch, first_row, 0, nullptr};
  const auto x = ramp(rows * width);
  const auto y = rig.forward(x, rows);
  const std::uint64_t key = mix_seed(mix_seed(seed, 0x64726f70, 1), epoch);
  const std::uint64_t threshold = 1ULL << 52;  // P = 0.5 of 2^53
  for (int r = 0; r < rows; ++r) {
    Rng rows_stream(key);
    std::uint64_t row_key = 0;
    for (std::uint64_t i = 0; i <= first_row + r; ++i) row_key = rows_stream.next();
    Rng elements(row_key);
    for (int e = 0; e < width; ++e) {
      const bool drop = (elements.next() >> 11) < threshold;
      EXPECT_EQ(y[r * width + e] == 0.0f, drop) << "row " << r << " element " << e;
    }
  }
}

TEST_F(DropoutTest, SameMasksHoweverTheRowsAreSplit) {
  const Shape sample{3, 4};
  const int rows = 7;
  const auto x = ramp(rows * sample.size());
  LayerRig whole(*be_, "dropout:0.4", sample, rows);
  whole.step = {99, 3, 20, rows, nullptr};
  const auto y = whole.forward(x, rows);
  // Shards of 3, 0 and 4 rows, as three ranks (or one, three times) hold them.
  std::vector<float> joined;
  int first = 0;
  for (int shard : {3, 0, 4}) {
    LayerRig part(*be_, "dropout:0.4", sample, rows);
    part.step = {99, 3, 20u + first, rows, nullptr};
    const std::vector<float> xs(x.begin() + first * 12, x.begin() + (first + shard) * 12);
    const auto ys = part.forward(xs, shard);
    joined.insert(joined.end(), ys.begin(), ys.end());
    first += shard;
  }
  EXPECT_EQ(joined, y);

  // Another epoch, seed or layer index draws another mask.
  auto differs = [&](std::uint64_t seed, std::uint64_t epoch, int index) {
    LayerRig other(*be_, "dropout:0.4", sample, rows, index);
    other.step = {seed, epoch, 20, rows, nullptr};
    return other.forward(x, rows) != y;
  };
  EXPECT_TRUE(differs(99, 4, 0));
  EXPECT_TRUE(differs(98, 3, 0));
  EXPECT_TRUE(differs(99, 3, 1));
}

TEST_F(DropoutTest, BackwardIsMaskTimesScaleAndEvalIsTheIdentity) {
  const int rows = 6;
  const Shape sample{2, 3, 5};
  LayerRig rig(*be_, "dropout:0.25", sample, rows);
  rig.step.seed = 4;
  const auto x = ramp(rows * sample.size());
  const auto dy = testing::to_floats(testing::normal_values(x.size(), 8, 0.0, 1.0));
  const auto y = rig.forward(x, rows);
  const auto dx = rig.backward(x, y, dy, rows);
  const float scale = static_cast<float>(1.0 / 0.75);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dx[i], y[i] == 0.0f ? 0.0f : dy[i] * scale);

  EXPECT_TRUE(rig.layer->differs_in_eval());
  EXPECT_EQ(rig.forward(x, rows, Mode::kEval), x);
  LayerRig none(*be_, "dropout:0", sample, rows);
  EXPECT_EQ(none.forward(x, rows), x) << "P = 0 keeps everything";
}

TEST(DropoutSpec, TokensParseAndBadOnesSayWhy) {
  const auto specs = parse_model_spec("dropout:0.50,dense:2,dropout:0,dropout:.1,dense:1");
  EXPECT_EQ(specs[0].args, std::vector<std::string>{"0.5"});
  EXPECT_EQ(specs[2].args, std::vector<std::string>{"0"});
  EXPECT_EQ(specs[3].args, std::vector<std::string>{"0.1"});
  auto be = make_cpu_backend(BackendOptions{});
  Model m(*be, specs, 3, 2);
  EXPECT_EQ(m.spec(), "dropout:0.5,dense:2,dropout:0,dropout:0.1,dense:1");
  EXPECT_EQ(m.layer(3).name(), "dropout2");
  struct Bad {
    const char* spec;
    const char* why;
  };
  const Bad bad[] = {{"dropout,dense:2", "dropout needs its drop probability"},
                     {"dropout:1,dense:2", "must be in [0, 1)"},
                     {"dropout:-0.1,dense:2", "must be in [0, 1)"},
                     {"dropout:nan,dense:2", "must be a number"},
                     {"dropout:0.5x,dense:2", "must be a number"},
                     {"dropout:,dense:2", "must be a number"}};
  for (const Bad& b : bad) {
    try {
      parse_model_spec(b.spec);
      ADD_FAILURE() << "accepted " << b.spec;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find(b.why), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dptrain
