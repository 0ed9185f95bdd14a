// Implements: --augment parsing and the Augmenter (see augment.hpp); the
// pixels are the backend's augment kernels' work.
#include "dptrain/data/augment.hpp"

#include <algorithm>
#include <charconv>

#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {

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

Augmenter::Augmenter(const AugmentSpec& spec, const Shape& sample, Backend& be)
    : kernels_(&be.kernels<AugmentKernels>()) {
  DPT_REQUIRE(sample.rank() >= 3, ExitCode::kUsage,
              "--augment needs image samples [C, H, W] (or volumes [C, D, H, W]); the data has " +
                  sample.to_string());
  const int height = sample[sample.rank() - 2];
  const int width = sample[sample.rank() - 1];
  DPT_REQUIRE(spec.crop_padding < std::max(height, width), ExitCode::kUsage,
              "--augment crop:" + std::to_string(spec.crop_padding) + " pads by as much as the " +
                  std::to_string(height) + "x" + std::to_string(width) + " image itself");
  geometry_.planes = static_cast<int>(sample.size() / (static_cast<std::size_t>(height) * width));
  geometry_.height = height;
  geometry_.width = width;
  geometry_.crop_padding = spec.crop_padding;
  geometry_.flip = spec.flip;
}

Augmenter::Draw Augmenter::draw(std::uint64_t seed, std::uint64_t epoch,
                                std::uint64_t position) const {
  return augment_draw::draw(seed, epoch, position, geometry_.crop_padding, geometry_.flip);
}

void Augmenter::apply(float* x, int rows, const StepInfo& step) {
  if (rows <= 0) return;
  kernels_->apply(x, rows, geometry_, step.seed, step.epoch, step.first_row);
}

}  // namespace dptrain
