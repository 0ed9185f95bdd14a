// Implements: the augmentation kernel family of a Backend (docs/design.md
// sections 1 and 2, --augment) and the draw both backends implement: a
// sample's crop shift and flip are a pure function of (seed, epoch, global
// position), in constexpr integer arithmetic that a GPU kernel repeats as
// written, so every backend and every rank count augment a sample alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dptrain/backends/kernel_family.hpp"
#include "dptrain/common/random.hpp"

namespace dptrain {

// What --augment does to every H×W plane of a sample of `planes` planes
// ([C, H, W]; a volume [C, D, H, W] has C·D planes).
struct AugmentGeometry {
  int planes = 1;
  int height = 1;
  int width = 1;
  int crop_padding = 0;  // 0: no crop
  bool flip = false;
};

// One sample's draws: the shift (dy, dx) in [-P, P] and the flip.
struct AugmentDraw {
  int dy = 0, dx = 0;
  bool flip = false;
};

namespace augment_draw {

// Purpose word for mix_seed, so these draws never coincide with init,
// shuffle or dropout draws made from the same --seed.
inline constexpr std::uint64_t kAugmentPurpose = 0x6175676d;  // "augm"

// One SplitMix64 stream per sample, seeded from (seed, epoch, position):
// its first outputs are dy, dx (when cropping), then the flip (top bit).
constexpr AugmentDraw draw(std::uint64_t seed, std::uint64_t epoch, std::uint64_t position,
                           int crop_padding, bool flip) {
  std::uint64_t state = mix_seed(mix_seed(seed, kAugmentPurpose, epoch), position);
  AugmentDraw d;
  const std::uint64_t span = 2 * static_cast<std::uint64_t>(crop_padding) + 1;
  if (crop_padding > 0) {
    d.dy = static_cast<int>(splitmix64(state) % span) - crop_padding;
    d.dx = static_cast<int>(splitmix64(state) % span) - crop_padding;
  }
  if (flip) d.flip = (splitmix64(state) >> 63) != 0;
  return d;
}

// Where output pixel (y, xo) of a height×width plane reads from under draw
// d: the flip mirrors the output column first, then the crop shifts; -1
// where the zero padding shows.
constexpr std::ptrdiff_t source_pixel(int y, int xo, int height, int width, const AugmentDraw& d) {
  const int sy = y + d.dy;
  const int sx = (d.flip ? width - 1 - xo : xo) + d.dx;
  if (sy < 0 || sy >= height || sx < 0 || sx >= width) return -1;
  return static_cast<std::ptrdiff_t>(sy) * width + sx;
}

}  // namespace augment_draw

// x is [rows, planes, height, width] in the device memory of the owning
// backend, augmented in place.
class AugmentKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "augment";

  // Row r is global position first_row + r of the epoch: it gets
  // draw(seed, epoch, first_row + r, g.crop_padding, g.flip), and every one
  // of its planes the same.
  virtual void apply(float* x, int rows, const AugmentGeometry& g, std::uint64_t seed,
                     std::uint64_t epoch, std::uint64_t first_row) = 0;
};

}  // namespace dptrain
