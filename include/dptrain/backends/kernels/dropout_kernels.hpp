// Implements: the dropout kernel family of a Backend (docs/design.md section 1)
// and the counter-based draw both backends implement, so a mask is a pure
// function of (seed, epoch, global row, element) and a run on P ranks drops
// what a run on 1 rank drops, wherever each row lands.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dptrain/backends/kernel_family.hpp"
#include "dptrain/common/random.hpp"

namespace dptrain {

// The draw, in integer arithmetic a GPU kernel repeats as written. With
// fmix the output function of SplitMix64 and kGolden its increment:
//   row_key  = fmix(step_key + (row + 1) · kGolden)
//   bits     = fmix(row_key + (element + 1) · kGolden)
//   dropped  = (bits >> 11) < threshold,  threshold = floor(P · 2^53)
// that is, output row + 1 of a SplitMix64 stream seeded with step_key gives
// the row's key, and output element + 1 of the stream seeded with that key
// gives the element's bits. step_key (below) is made on the host once per
// forward.
namespace dropout_draw {

inline constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
// Purpose word for mix_seed, so dropout draws never coincide with init or
// shuffle draws made from the same --seed.
inline constexpr std::uint64_t kDropoutPurpose = 0x64726f70;  // "drop"

// The key of one forward of the dropout layer with this index (dropout<i>).
inline std::uint64_t step_key(std::uint64_t seed, std::uint64_t layer_index, std::uint64_t epoch) {
  return mix_seed(mix_seed(seed, kDropoutPurpose, layer_index), epoch);
}

constexpr std::uint64_t fmix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
constexpr std::uint64_t row_key(std::uint64_t step_key, std::uint64_t row) {
  return fmix(step_key + (row + 1) * kGolden);
}
constexpr bool dropped(std::uint64_t row_key, std::uint64_t element, std::uint64_t threshold) {
  return (fmix(row_key + (element + 1) * kGolden) >> 11) < threshold;
}
// floor(p · 2^53) for 0 <= p < 1: exactly representable, so the drop rate
// is threshold / 2^53, within 2^-53 of p.
constexpr std::uint64_t threshold(double p) {
  return static_cast<std::uint64_t>(p * 9007199254740992.0);
}

}  // namespace dropout_draw

// Row-major [rows, width] tensors in the device memory of the owning
// backend; keep holds one byte per element (1 kept, 0 dropped).
class DropoutKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "dropout";

  // Stores the draw of the forwards queued after it, {step_key, first_row},
  // at `draw` (two words of device memory), in stream order. A forward
  // reads them when it runs, not when it is queued, so that a recorded
  // forward (Backend::record) draws the mask of the step set last.
  virtual void set_draw(std::uint64_t* draw, std::uint64_t step_key, std::uint64_t first_row) = 0;
  // Row r of the shard is global row first_row + r (draw[1]), of the
  // forward whose key is draw[0]. keep = the draw above; y = keep ? x · scale : 0.
  virtual void forward(const float* x, float* y, std::uint8_t* keep, int rows, int width,
                       const std::uint64_t* draw, std::uint64_t threshold, float scale) = 0;
  // dx = keep ? dy · scale : 0, over n elements.
  virtual void backward(const float* dy, const std::uint8_t* keep, float* dx, std::size_t n,
                        float scale) = 0;
};

}  // namespace dptrain
