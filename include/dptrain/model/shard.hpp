// Implements: the shard one rank trains on, as the model and the loss see
// it: rows of features and their labels (class ids or float targets).
#pragma once

#include <cstdint>

namespace dptrain {

// What a set's labels are (docs/design.md section 3): int32/int64 class ids
// [N] (loss xent) or float32 targets [N, K] (loss mse). The values travel
// between ranks: append new ones, never renumber.
enum class LabelType { kClass, kTarget };

// One rank's rows of a global batch; buffers are sized for the largest shard
// once, so `rows` may be smaller (or 0: an empty shard adds nothing).
struct Shard {
  int rows = 0;
  float* features = nullptr;      // [rows, dim]
  std::uint8_t* raw = nullptr;    // [rows, dim] features in their stored type, when not float32
  std::int32_t* labels = nullptr; // [rows] (class labels) or null
  float* targets = nullptr;       // [rows, label_width] (targets) or null
};

}  // namespace dptrain
