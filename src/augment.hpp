// Implements: --augment (DESIGN.md section 2): training-time augmentation of
// image sets, `crop:P` (a random crop after zero padding of P on each side,
// the shift drawn from [-P, P] in both directions) and `flip` (a horizontal
// flip with probability 1/2), over the last two dimensions of each sample
// ([C, H, W]; each H×W plane of a volume [C, D, H, W] alike). Every draw is a
// function of (seed, epoch, global position of the sample in the epoch), so
// 1 and P ranks augment every sample alike. Applied on each rank to its shard
// once it has arrived as float, before forward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/backend.hpp"
#include "dptrain/layer.hpp"
#include "dptrain/tensor.hpp"

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
  // or the padding is not smaller than the image, or the backend's memory is
  // not host-addressable (the CUDA kernel is still to come).
  Augmenter(const AugmentSpec& spec, const Shape& sample, const Backend& be);

  // The draws for one sample: shift (dy, dx) in [-P, P], and the flip.
  struct Draw {
    int dy = 0, dx = 0;
    bool flip = false;
  };
  Draw draw(std::uint64_t seed, std::uint64_t epoch, std::uint64_t position) const;

  // Augments rows [0, rows) of x in place; row r is global position
  // step.first_row + r of epoch step.epoch.
  void apply(float* x, int rows, const StepInfo& step);

 private:
  void apply_one(float* sample, const Draw& d);

  AugmentSpec spec_;
  int planes_ = 0, height_ = 0, width_ = 0;
  std::vector<float> plane_;  // one H×W plane, the source of a shifted copy
};

}  // namespace dptrain
