// Implements: --augment (docs/design.md section 2): training-time augmentation of
// image sets, `crop:P` (a random crop after zero padding of P on each side,
// the shift drawn from [-P, P] in both directions) and `flip` (a horizontal
// flip with probability 1/2), over the last two dimensions of each sample
// ([C, H, W]; each H×W plane of a volume [C, D, H, W] alike). Every draw is a
// function of (seed, epoch, global position of the sample in the epoch), so
// 1 and P ranks augment every sample alike. Applied on each rank to its shard
// once it has arrived as float, before forward, by the backend's augment
// kernels (augment_kernels.hpp), so on the device where the shard lives.
#pragma once

#include <cstdint>
#include <string>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/model/layer.hpp"
#include "dptrain/model/tensor.hpp"

namespace dptrain {

struct AugmentSpec {
  int crop_padding = 0;  // 0: no crop
  bool flip = false;
  bool any() const { return crop_padding > 0 || flip; }
};

// Parses "crop:4,flip" ("" = none); Error(kUsage) naming a bad item.
AugmentSpec parse_augment(const std::string& list);

class Augmenter {
 public:
  // Error(kUsage) when the samples are not images (rank below 3: {C, H, W})
  // or the padding is not smaller than the image. The backend's augment
  // kernels do the work on its memory; be must outlive the Augmenter.
  Augmenter(const AugmentSpec& spec, const Shape& sample, Backend& be);

  // The draws for one sample: shift (dy, dx) in [-P, P], and the flip.
  using Draw = AugmentDraw;
  Draw draw(std::uint64_t seed, std::uint64_t epoch, std::uint64_t position) const;

  // Augments rows [0, rows) of x (backend memory) in place; row r is global
  // position step.first_row + r of epoch step.epoch. Queued on the backend
  // like any kernel: on CUDA it returns before the work is done.
  void apply(float* x, int rows, const StepInfo& step);

 private:
  AugmentGeometry geometry_;
  AugmentKernels* kernels_;
};

}  // namespace dptrain
