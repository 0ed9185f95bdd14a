// Implements: unit tests of --augment: parsing, the draws (a function of
// seed, epoch and position, covering [-P, P] and flipping half the time) and
// what a draw does to an image (shifted copy with zeros where the padding
// shows, then the horizontal flip, every channel alike).
#include <gtest/gtest.h>

#include <map>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/data/augment.hpp"

namespace dptrain {
namespace {

TEST(Augment, ParsesItemsAndRejectsBadOnes) {
  const AugmentSpec s = parse_augment("crop:4,flip");
  EXPECT_EQ(s.crop_padding, 4);
  EXPECT_TRUE(s.flip);
  EXPECT_FALSE(parse_augment("").any());
  for (const char* bad : {"crop:0", "crop:x", "crop", "rotate", "flip,"}) {
    try {
      parse_augment(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << bad;
    }
  }
}

TEST(Augment, RefusesFlatSamplesAndOversizedPadding) {
  auto be = make_cpu_backend(BackendOptions{});
  EXPECT_THROW(Augmenter(parse_augment("flip"), Shape{64}, *be), Error);
  EXPECT_THROW(Augmenter(parse_augment("crop:5"), Shape{1, 5, 5}, *be), Error);
  EXPECT_NO_THROW(Augmenter(parse_augment("crop:4"), Shape{1, 5, 5}, *be));
}

TEST(Augment, DrawsDependOnSeedEpochPositionOnlyAndCoverTheRange) {
  auto be = make_cpu_backend(BackendOptions{});
  const Augmenter a(parse_augment("crop:2,flip"), Shape{1, 8, 8}, *be);
  std::map<int, int> shifts;
  int flips = 0;
  const int n = 20000;
  for (int p = 0; p < n; ++p) {
    const auto d = a.draw(7, 3, p), again = a.draw(7, 3, p);
    EXPECT_EQ(d.dy, again.dy);
    EXPECT_EQ(d.flip, again.flip);
    ++shifts[d.dy];
    ++shifts[10 + d.dx];
    flips += d.flip;
  }
  for (int v = -2; v <= 2; ++v) {  // 5 values, about n/5 each: 5 sigma is about 280
    EXPECT_NEAR(shifts[v], n / 5, 300) << "dy " << v;
    EXPECT_NEAR(shifts[10 + v], n / 5, 300) << "dx " << v;
  }
  EXPECT_EQ(shifts.size(), 10u);
  EXPECT_NEAR(flips, n / 2, 360);  // 5 sigma of a fair coin over 20000
  int same = 0;
  for (int p = 0; p < 100; ++p) same += a.draw(7, 4, p).dy == a.draw(7, 3, p).dy;
  EXPECT_LT(same, 50) << "the epoch does not change the draws";
}

TEST(Augment, CropShiftsWithZeroPaddingThenFlipsEveryChannel) {
  auto be = make_cpu_backend(BackendOptions{});
  Augmenter a(parse_augment("crop:2,flip"), Shape{2, 3, 4}, *be);
  // Find a sample position whose draw shifts and flips, and one that does not flip.
  StepInfo step;
  step.seed = 1;
  for (std::uint64_t p = 0; p < 1000; ++p) {
    const auto d = a.draw(1, 0, p);
    if (d.dy != 1 || d.dx != -1 || !d.flip) continue;
    step.first_row = p;
    std::vector<float> x(24);
    for (int i = 0; i < 24; ++i) x[i] = float(i + 1);
    const std::vector<float> in = x;
    a.apply(x.data(), 1, step);
    for (int c = 0; c < 2; ++c)
      for (int y = 0; y < 3; ++y)
        for (int xo = 0; xo < 4; ++xo) {
          const int sy = y + 1, sx = (3 - xo) - 1;  // flip, then shift (dy 1, dx -1)
          const float want = sy < 3 && sx >= 0 ? in[c * 12 + sy * 4 + sx] : 0.0f;
          EXPECT_EQ(x[c * 12 + y * 4 + xo], want) << c << " " << y << " " << xo;
        }
    return;
  }
  FAIL() << "no draw with dy 1, dx -1 and a flip in 1000 positions";
}

// The kernel family itself: a volume [C, D, H, W] is C·D planes, each moved
// by its sample's draw; rows are global positions first_row + r.
TEST(Augment, KernelsMoveEveryPlaneOfAVolumeBySampleDraw) {
  auto be = make_cpu_backend(BackendOptions{});
  const AugmentGeometry g{.planes = 2 * 3, .height = 4, .width = 5, .crop_padding = 1, .flip = true};
  const int rows = 20, plane = 4 * 5;
  std::vector<float> x(static_cast<std::size_t>(rows) * g.planes * plane);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  const std::vector<float> in = x;
  be->kernels<AugmentKernels>().apply(x.data(), rows, g, 9, 1, 300);
  for (int r = 0; r < rows; ++r) {
    const AugmentDraw d = augment_draw::draw(9, 1, 300 + r, 1, true);
    for (int p = 0; p < g.planes; ++p)
      for (int k = 0; k < plane; ++k) {
        const std::size_t o = (static_cast<std::size_t>(r) * g.planes + p) * plane;
        const std::ptrdiff_t from = augment_draw::source_pixel(k / 5, k % 5, 4, 5, d);
        EXPECT_EQ(x[o + k], from < 0 ? 0.0f : in[o + from]) << r << " " << p << " " << k;
      }
  }
}

}  // namespace
}  // namespace dptrain
