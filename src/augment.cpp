// Implements: crop and flip augmentation (see augment.hpp).
#include "augment.hpp"

#include <algorithm>
#include <charconv>

#include "dptrain/error.hpp"
#include "dptrain/random.hpp"

namespace dptrain {
namespace {

constexpr std::uint64_t kAugmentPurpose = 0x6175676d;  // "augm"

}  // namespace

AugmentSpec parse_augment(const std::string& list) {
  AugmentSpec spec;
  if (list.empty()) return spec;
  for (std::size_t pos = 0; pos <= list.size();) {
    const std::size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    pos = comma + 1;
    if (item == "flip") {
      spec.flip = true;
    } else if (item.rfind("crop:", 0) == 0) {
      const std::string num = item.substr(5);
      int p = 0;
      const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), p);
      if (num.empty() || ec != std::errc() || end != num.data() + num.size() || p < 1)
        throw Error(ExitCode::kUsage, "--augment: '" + item + "': crop:P needs an integer P >= 1");
      spec.crop_padding = p;
    } else {
      throw Error(ExitCode::kUsage, "--augment: unknown item '" + item +
                                        "' (valid: crop:P, flip; e.g. --augment crop:4,flip)");
    }
  }
  return spec;
}

Augmenter::Augmenter(const AugmentSpec& spec, const Shape& sample, const Backend& be) : spec_(spec) {
  DPT_REQUIRE(sample.rank() >= 3, ExitCode::kUsage,
              "--augment needs image samples [C, H, W] (or volumes [C, D, H, W]); the data has " +
                  sample.to_string());
  DPT_REQUIRE(be.caps().host_addressable_memory, ExitCode::kUsage,
              "--augment runs on --device cpu only in this build");
  height_ = sample[sample.rank() - 2];
  width_ = sample[sample.rank() - 1];
  planes_ = static_cast<int>(sample.size() / (static_cast<std::size_t>(height_) * width_));
  DPT_REQUIRE(spec.crop_padding < std::max(height_, width_), ExitCode::kUsage,
              "--augment crop:" + std::to_string(spec.crop_padding) + " pads by as much as the " +
                  std::to_string(height_) + "x" + std::to_string(width_) + " image itself");
  plane_.resize(static_cast<std::size_t>(height_) * width_);
}

Augmenter::Draw Augmenter::draw(std::uint64_t seed, std::uint64_t epoch,
                                std::uint64_t position) const {
  // One splitmix64 stream per sample: its first outputs are the draws.
  std::uint64_t state = mix_seed(mix_seed(seed, kAugmentPurpose, epoch), position);
  Draw d;
  const std::uint64_t span = 2 * static_cast<std::uint64_t>(spec_.crop_padding) + 1;
  if (spec_.crop_padding > 0) {
    d.dy = static_cast<int>(splitmix64(state) % span) - spec_.crop_padding;
    d.dx = static_cast<int>(splitmix64(state) % span) - spec_.crop_padding;
  }
  if (spec_.flip) d.flip = (splitmix64(state) >> 63) != 0;
  return d;
}

void Augmenter::apply_one(float* sample, const Draw& d) {
  const std::size_t plane = plane_.size();
  for (int p = 0; p < planes_; ++p) {
    float* x = sample + p * plane;
    std::copy(x, x + plane, plane_.begin());
    for (int y = 0; y < height_; ++y) {
      const int sy = y + d.dy;
      for (int xo = 0; xo < width_; ++xo) {
        const int cx = d.flip ? width_ - 1 - xo : xo;  // flip after the crop
        const int sx = cx + d.dx;
        const bool inside = sy >= 0 && sy < height_ && sx >= 0 && sx < width_;
        x[static_cast<std::size_t>(y) * width_ + xo] =
            inside ? plane_[static_cast<std::size_t>(sy) * width_ + sx] : 0.0f;
      }
    }
  }
}

void Augmenter::apply(float* x, int rows, const StepInfo& step) {
  const std::size_t per_sample = plane_.size() * static_cast<std::size_t>(planes_);
  for (int r = 0; r < rows; ++r)
    apply_one(x + per_sample * r, draw(step.seed, step.epoch, step.first_row + r));
}

}  // namespace dptrain
